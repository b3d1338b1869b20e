"""A process as the kernel tells it (/proc): when it started and its command line, so a pid reused
by another process does not pass for the one recorded; and the record of the lab's own process that
a run's owner.json holds (runowner.owner_of checks it), which the reaper's record of a group uses
the same way; and whether a process catches a signal, so the lab's stack request reaches only a
process that would not die of it.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timezone


def process_start(pid: int) -> str | None:
    """When a process started, as the kernel counts it (/proc/<pid>/stat's starttime), so a pid
    reused by another process does not pass for the owner; None where there is no /proc, and
    "ended" for a process that has exited and is not yet reaped (a zombie)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as file:
            stat_line = file.read(4096).decode(errors="replace")
    except OSError:
        return None
    fields = stat_line.rpartition(")")[2].split()  # the command name before it may hold spaces
    return "ended" if fields[0] in ("Z", "X") else fields[19]  # state, and starttime (field 22)


def process_command(pid: int) -> list[str] | None:
    """A process's command line, argument by argument (/proc/<pid>/cmdline); None where it cannot be read."""
    try:
        with open(f"/proc/{int(pid)}/cmdline", "rb") as file:
            data = file.read(65536)
    except OSError:
        return None
    return [part.decode(errors="replace") for part in data.split(b"\0")[:-1]]


def owner_record(pid: int, run: str = "") -> dict:
    return {"pid": pid, "host": socket.gethostname(), "process_start": process_start(pid),
            "command": process_command(pid), "run": run,
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def resident_bytes() -> int | None:
    """This process's resident set now (/proc/self/statm's second field, in pages): what an
    `epoch` event carries as `rss_bytes`, so the audit can tell memory that grows epoch after epoch
    (supervisor/memory.py) from the peak alone. None where there is no /proc (not Linux)."""
    try:
        with open("/proc/self/statm", "rb") as file:
            pages = int(file.read(256).split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


def shared_sizes() -> dict[str, int]:
    """This process's proportional and unique set sizes (/proc/self/smaps_rollup, Linux 4.14 on):
    what it costs where it shares pages (TensorFlow's libraries, images/libraries.py), as
    `pss_bytes` and `uss_bytes`; nothing where they cannot be read."""
    fields: dict[str, int] = {}
    try:
        with open("/proc/self/smaps_rollup", "rb") as file:
            for line in file.read(65536).decode(errors="replace").splitlines():
                name, _, value = line.partition(":")
                if name in ("Pss", "Private_Clean", "Private_Dirty") and value.strip().endswith(" kB"):
                    fields[name] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        return {}
    if len(fields) != 3:
        return {}
    return {"pss_bytes": fields["Pss"], "uss_bytes": fields["Private_Clean"] + fields["Private_Dirty"]}


def rss_field() -> dict[str, int]:
    """An `epoch` event's `rss_bytes` (resident_bytes) and, where they can be read, `pss_bytes` and
    `uss_bytes` (shared_sizes); nothing where none can."""
    found = resident_bytes()
    return ({} if found is None else {"rss_bytes": found, **shared_sizes()})


def catches(pid: int, signum: int) -> bool | None:
    """Whether a process has a handler of its own for a signal (/proc/<pid>/status's SigCgt, a
    mask whose bit signum-1 is set for each caught signal); None where it cannot be read (no /proc,
    the process gone)."""
    try:
        with open(f"/proc/{int(pid)}/status", "rb") as file:
            status = file.read(16384).decode(errors="replace")
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            try:
                return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
            except (IndexError, ValueError):
                return None
    return None
