"""What a task answers when the lab signals it: its stacks (core/stacks.py's STACKS_SIGNAL) and a
hang on purpose (core/task.py's HANG_SIGNAL, released by RELEASE_SIGNAL).

Installed in every process the lab trains in: the lab's trainer (train.py), a SCRIPT's own process
(inscript's hook: the launcher hands these signals on to it, as it does SIGTERM) and a replayed
replica's (replayhooks, through the same hook). The lab sends the signal to the container's PID 1,
Compose's init (`init: true`), which hands it to its child; locally, to the task's process.

Stacks: Python's faulthandler, registered for STACKS_SIGNAL with every thread and chain=True (a
handler of the program's own still runs), appending to `stacks_file(task)` in the task's space.
It writes from the signal handler in C, so a task whose every Python thread is inside TensorFlow's
C++ (an all-reduce, a save) answers too. Native frames are not written: faulthandler on this
Python has none, and a reader from outside (py-spy --native, gdb) needs ptrace, which the
containers' hardening (no capabilities, no-new-privileges) rightly withholds.

Hang: HANG_SIGNAL's handler runs in the main thread, where Python runs every signal handler, at
the next line of Python it reaches (in Keras's fit, the next step's callbacks), and waits there
until RELEASE_SIGNAL: the training stops while the process, TensorFlow's own threads (the
coordination service's heartbeats) and the network go on, which `docker pause` cannot show. A
stack dump of a hung task shows this module's `_hang` on top of where the training stood.

Stdlib only; nothing here may stop the program: install() says on stderr what it could not do.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time
from typing import NoReturn

from tflab.core.stacks import STACKS_SIGNAL, stacks_file
from tflab.core.task import HANG_SIGNAL, RELEASE_SIGNAL

POLL_SECONDS = 0.1  # how often a hung main thread looks whether it was released
_stacks = None  # the open stacks file: faulthandler writes to its descriptor, which must stay open
_hung = threading.Event()


def install_stacks(space: str, task: str) -> str:
    """Registers the stack dump to `stacks_file(task)` in `space` (appended, never followed
    through a link); returns its path. OSError where the file cannot be opened."""
    global _stacks
    path = os.path.join(space, stacks_file(task))
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
                         | getattr(os, "O_NOFOLLOW", 0), 0o644)
    stacks = os.fdopen(descriptor, "ab", buffering=0)
    signum = signal.Signals[STACKS_SIGNAL]
    if signal.getsignal(signum) in (signal.SIG_DFL, None):
        # chain=True raises the signal again under the handler before faulthandler's: under the
        # default (terminate) the dump would end the task. A handler that does nothing is chained.
        signal.signal(signum, _nothing)
    faulthandler.register(signum, file=stacks, all_threads=True, chain=True)
    if _stacks is not None and _stacks is not stacks:
        _stacks.close()
    _stacks = stacks
    return path


def _nothing(signum, frame) -> None:
    pass


def _hang(signum, frame) -> None:
    """HANG_SIGNAL: the main thread waits here until released (a second HANG_SIGNAL does nothing)."""
    if _hung.is_set():
        return
    _hung.set()
    print("tflab: training hung on purpose (make chaos SCENARIO=hang); the process goes on",
          file=sys.stderr, flush=True)
    while _hung.is_set():
        time.sleep(POLL_SECONDS)  # a signal wakes it: _release runs in this same thread, nested
    print("tflab: training released, going on", file=sys.stderr, flush=True)


def _release(signum, frame) -> None:
    _hung.clear()


def hung() -> bool:
    return _hung.is_set()


def install_hang() -> None:
    """The handlers of HANG_SIGNAL and RELEASE_SIGNAL; only from the main thread (Python's rule)."""
    signal.signal(signal.Signals[HANG_SIGNAL], _hang)
    signal.signal(signal.Signals[RELEASE_SIGNAL], _release)


def install_in(space: str, task: str) -> None:
    """Both, for `task` whose space is `space`; never raises: what failed is said on stderr."""
    for what, step in (("stack dumps", lambda: install_stacks(space, task)), ("the hang", install_hang)):
        try:
            step()
        except (OSError, ValueError, RuntimeError) as error:
            print(f"tflab: {what} could not be set up, and the program runs on without: "
                  f"{type(error).__name__}: {error}", file=sys.stderr, flush=True)


def install() -> None:
    """inscript's hook (a SCRIPT's process, a replayed replica's): the task's space is its log's
    folder (TFLAB_LOG), set by the launcher or the replay's hooks; outside the lab, nothing."""
    path, task = os.environ.get("TFLAB_LOG"), os.environ.get("TFLAB_TASK")
    if path and task:
        install_in(os.path.dirname(path), task)


def exit_now(code: int) -> NoReturn:
    """Ends the lab's trainer once its work is written (its end logged, its log closed), without
    TensorFlow's teardown. Under MultiWorkerMirroredStrategy that teardown shuts the coordination
    service's agent down through a barrier held by task 0: a worker that gets there after task 0
    has gone retries the dead leader and never ends (make chaos SCENARIO=slow-node SLOW_CPUS=0.1,
    2026-12-06: worker-1 logged its end 1.3 s after worker-0, then spun at 0.1 CPU for ten minutes,
    past Python's reach, until the stall watch stopped it). No collective is left by then."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
