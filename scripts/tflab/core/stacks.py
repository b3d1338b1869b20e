"""Where every task is: the contract between a task that dumps its Python stacks and the lab that
asks for them and reads them back.

The lab asks by sending STACKS_SIGNAL to the task's process (through its Backend: `docker kill
--signal` to a container, whose PID 1 is Compose's init and forwards it; os.kill for a local
process). Inside the task, Python's faulthandler is registered for that signal with every thread
and chain=True (a user's own handler still runs), writing to the file `stacks_file(task)` in the
task's space. faulthandler writes from the signal handler in C, so a task whose every Python
thread is stuck in TensorFlow's C++ (an all-reduce, a save) still answers. Each dump appends one
block of threads ("Current thread 0x... (most recent call first):" / "Thread 0x..."), so the lab
notes the file's size before it asks and reads what follows. The file is the task's: the lab reads
it as foreign input, bounded, through the one door (core/beneath.py).

It imports nothing of the host's or of TensorFlow: both sides use it.
"""

from __future__ import annotations

STACKS_SIGNAL = "SIGUSR1"  # the name `docker kill --signal` takes; signal.Signals[STACKS_SIGNAL] in Python
STACKS_SUFFIX = ".stacks"


def stacks_file(task: str) -> str:
    """The file in the task's space (runs/<RUN>/tasks/) a task appends its stack dumps to."""
    return f"{task}{STACKS_SUFFIX}"
