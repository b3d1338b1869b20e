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

import re
from dataclasses import dataclass, field

STACKS_SIGNAL = "SIGUSR1"  # the name `docker kill --signal` takes; signal.Signals[STACKS_SIGNAL] in Python
STACKS_SUFFIX = ".stacks"


def stacks_file(task: str) -> str:
    """The file in the task's space (runs/<RUN>/tasks/) a task appends its stack dumps to."""
    return f"{task}{STACKS_SUFFIX}"


# -- reading a dump back ------------------------------------------------------------------------
# faulthandler's format (Python/traceback.c, dump_traceback and write_thread_id), one block a thread:
#     Current thread 0x00007f2a1b7fe640 (most recent call first):
#       File "/lab/script/stall.py", line 19 in on_epoch_end
#       File "/opt/venv/.../callbacks.py", line 453 in on_epoch_end
#     <blank line>
#     Thread 0x00007f2a2c1f1740 (most recent call first):
#       <no Python frame>
# "Stack (most recent call first):" heads a dump of one thread, and "  ..." ends a stack cut at
# 100 frames. Anything else (a task's own writes to the file, a half-written last line) is skipped:
# the file is the task's, read as foreign input.

THREAD_HEAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)(?: \[(?P<name>[^\]]{0,200})\])? "
                         r"\(most recent call first\):\s*$|^Stack \(most recent call first\):\s*$")
FRAME_LINE = re.compile(r'^\s+File "(?P<file>[^"\n]{1,1000})", line (?P<line>\d{1,9}),? in '
                        r"(?P<function>\S{1,300})\s*$")
MAX_THREADS = 1000  # a dump with more is cut there: the lab reads a bounded amount whatever the task wrote
MAX_FRAMES = 200


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    function: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function}"


@dataclass
class Thread:
    ident: str  # faulthandler's 0x... id; "" for a one-thread dump
    current: bool  # the thread that ran the signal handler (the main thread, in Python)
    frames: list[Frame] = field(default_factory=list)  # most recent call first
    cut: bool = False  # faulthandler stopped at its depth limit ("  ...")

    @property
    def outermost(self) -> Frame | None:
        return self.frames[-1] if self.frames else None


def parse(text: str) -> list[Thread]:
    """The threads of the LAST dump in `text` (a file appended to by each dump: a dump starts at a
    "Current thread" line, or at the first thread of a run of "Thread" blocks), each with its
    frames, most recent first. Lines that are none of faulthandler's are skipped."""
    dumps: list[list[Thread]] = []
    thread: Thread | None = None
    for line in text.splitlines():
        head = THREAD_HEAD.match(line)
        if head:
            current = line.startswith(("Current thread", "Stack"))
            # faulthandler writes the other threads first and the current one last; a thread after
            # a current one begins the next dump
            if not dumps or (dumps[-1] and dumps[-1][-1].current):
                dumps.append([])
            if len(dumps[-1]) >= MAX_THREADS:
                thread = None
                continue
            thread = Thread(ident=head.group(2) or "", current=current)
            dumps[-1].append(thread)
            continue
        if thread is None:
            continue
        frame = FRAME_LINE.match(line)
        if frame and len(thread.frames) < MAX_FRAMES:
            thread.frames.append(Frame(frame["file"], int(frame["line"]), frame["function"]))
        elif line.strip() == "...":
            thread.cut = True
        elif not line.strip():
            thread = None  # a block ends at a blank line
    return dumps[-1] if dumps else []
