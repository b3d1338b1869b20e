"""Where every task is, as the tasks themselves write it: the lab asks each live task for its Python
stacks (Backend.dump_stacks: STACKS_SIGNAL, answered by faulthandler into tasks/<task>.stacks,
core/stacks.py) and reads back what each appended; and the other files of the tasks' space the
lab reads as foreign (a SCRIPT's `<task>.out`). The stall watch (stall.py) and the restart decision
(labrun.py) read them; nothing here judges what they say."""

from __future__ import annotations

import time
from pathlib import Path

from tflab.core import beneath, runfolder, stacks
from tflab.core.foreign import ForeignFile

STACKS_BYTES = 1024 * 1024  # what the lab reads of one task's dump


def capture(backend, tasks: list[str], run_dir: Path,
            wait: float) -> dict[str, list[stacks.Thread]]:
    """Asks each task for its stacks (Backend.dump_stacks) and reads back what each appended to its
    tasks/<task>.stacks, waiting at most `wait` (stall.STACKS_WAIT_SECONDS, less where a deadline is near);
    a task that did not answer is left out."""
    # A task whose program registered for the signal opened its stacks file when it started: one
    # without (an image or a program the lab's hooks did not reach) cannot answer, and is not waited for.
    tasks = [task for task in tasks if _kind(run_dir, stacks.stacks_file(task)) == "file"]
    if not tasks or not hasattr(backend, "dump_stacks"):
        return {}
    clock, sleep = time.monotonic, time.sleep
    before = {task: _size(run_dir, task) for task in tasks}
    backend.dump_stacks(tasks)
    deadline = clock() + wait
    found: dict[str, list[stacks.Thread]] = {}
    while True:
        for task in tasks:
            if task not in found:
                threads = stacks.parse(_read(run_dir, task, before[task]))
                if threads and any(thread.current for thread in threads):  # its dump is whole
                    found[task] = threads
        if len(found) == len(tasks) or clock() > deadline:
            return found
        sleep(0.2)


def _read(run_dir: Path, task: str, offset: int) -> str:
    try:
        data = runfolder.read_task_file(run_dir, stacks.stacks_file(task), STACKS_BYTES, offset=offset, whole=False)
    except (OSError, ForeignFile):
        return ""
    return data.decode(errors="replace")


def _size(run_dir: Path, task: str) -> int:
    return size_of(run_dir, stacks.stacks_file(task))


def _kind(run_dir: Path, name: str) -> str | None:
    try:
        with beneath.Beneath(run_dir) as folder:
            return folder.kind(runfolder.in_tasks(run_dir, name))
    except (OSError, ForeignFile):
        return None


def size_of(run_dir: Path, name: str) -> int:
    """The size of a file of the tasks' space, 0 where there is none (or none the lab can read)."""
    try:
        with beneath.Beneath(run_dir) as folder:
            return folder.lstat(runfolder.in_tasks(run_dir, name)).st_size
    except (OSError, ForeignFile):
        return 0


def tail_of(run_dir: Path, name: str, limit: int) -> str:
    """The last `limit` bytes of a file of the tasks' space (a SCRIPT's `<task>.out`), read as foreign."""
    start = max(0, size_of(run_dir, name) - limit)
    try:
        return runfolder.read_task_file(run_dir, name, limit, offset=start, whole=False).decode(errors="replace")
    except (OSError, ForeignFile):
        return ""
