"""Make's signal forwarding: which make runs this lab (read from /proc), and a thread that, for as
long as a command runs, sends the lab the SIGINT or SIGHUP make is handling, which GNU make does not
pass on to its recipe."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path


def make_above() -> int | None:
    """The pid of the make that runs this lab (through the shells between them), or None: not
    under make, or no /proc to tell."""
    pid = os.getppid()
    for _ in range(4):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        name, fields = stat[stat.find("(") + 1:stat.rfind(")")], stat[stat.rfind(")") + 2:].split()
        if name in ("make", "gmake"):
            return pid
        if name not in ("sh", "bash", "dash", "zsh") or len(fields) < 2:
            return None
        pid = int(fields[1])
    return None


def in_handler(pid: int) -> int | None:
    """The signal (SIGINT or SIGHUP) a process is handling now, read from its blocked signals: a
    handler runs with its own signal blocked. None if it handles neither, or is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    blocked = next((int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigBlk:")), 0)
    return next((number for number in (signal.SIGINT, signal.SIGHUP) if blocked & (1 << (number - 1))), None)


def forward_from_make() -> Callable[[], None]:
    """GNU make passes SIGTERM on to the recipe it runs, but not SIGINT or SIGHUP: it takes those
    for a terminal's, which reach the whole process group anyway, and waits in its handler for its
    children to end. `kill -INT <make's pid>` (a CI cancel, a supervisor) then left the run
    training until TIMEOUT. So, under make, a thread watches make: while make sits in its handler
    for SIGINT or SIGHUP (its blocked signals say so, two reads in a row), the lab sends the same
    signal to itself and ends the run as Ctrl-C does; make then exits as it meant to.

    Returns what stops the watcher, which the command calls as it ends: the watcher ends with the
    command, not with make. A process that called the lab in-process many times under make (the
    unit suite, run as `make test-unit`) once kept a watcher a call, 795 threads polling /proc."""
    make_pid = make_above()
    if make_pid is None:
        return lambda: None
    done = threading.Event()
    # Held while the watcher decides to signal: once stopped, it never does.
    deciding = threading.Lock()

    def watch() -> None:
        seen = None
        while not done.wait(MAKE_POLL_SECONDS):
            if not Path(f"/proc/{make_pid}").exists():
                return
            number = in_handler(make_pid)
            if number is not None and number == seen:
                with deciding:
                    if not done.is_set():
                        os.kill(os.getpid(), number)
                return
            seen = number

    watcher = threading.Thread(target=watch, daemon=True, name="make-signals")
    watcher.start()

    def stop() -> None:
        with deciding:
            done.set()
        watcher.join()

    return stop


MAKE_POLL_SECONDS = 0.25
