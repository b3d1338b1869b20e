"""A run's lab as `down` sees it: who claimed the run (owner.json, proven before anything is
signalled) and the mark `down FORCE=1` leaves when it ends a run that still runs.

    owner_of(run_dir)            # Owner: the pid of the run's own lab, proven (or on another host); else doubt
    live_owner(run_dir)          # that pid while it lives, or None
    mark_ended_by_down(run_dir)  # before down's SIGTERM; the supervisor reads ended_by_down(run_dir)

runfolder.py names both files and writes owner.json when it claims the run (runfolder.make); this
module only reads it, through the run folder's handle (beneath.py), and leaves the mark in the
lab's space. Imports only core/ and the standard library: no TensorFlow, no Docker code.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from pathlib import Path

from tflab.core import beneath, foreign
from tflab.core.foreign import ForeignFile
from tflab.core.processes import process_command, process_start
from tflab.core.runfolder import ENDED, OWNER, lab_space, two_spaces


def ended_by_down(run_dir: Path) -> bool:
    try:
        return beneath.Beneath(run_dir).kind(ENDED) is not None
    except OSError:
        return False


def mark_ended_by_down(run_dir: Path) -> None:
    """`down FORCE=1`'s mark in the lab's space, made only where nothing is at the name (never written through)."""
    with lab_space(run_dir) as folder:
        folder.create(ENDED, f"{os.getpid()}\n")


@dataclasses.dataclass(frozen=True)
class Owner:
    """What `down` may do with a run's lab. `pid` is set only where it is proven to be the run's own
    lab (its start time and command line match the record), or on another host (not asked, left
    alone); `doubt` says why a record that was found is not trusted, and then nothing is sent."""

    pid: int | None = None
    here: bool = True
    doubt: str = ""


def owner_of(run_dir: Path) -> Owner:
    """The lab that claimed this run, while it still runs and can be proven to be it. A task runs a
    pull request's code, and `down` may run as root: a signal goes only to the process that
    owner.json (in the lab's space, which no task can write) names, whose start time the record
    holds and matches, and whose command line is the one recorded when it claimed the run."""
    name = foreign.named(run_dir / OWNER)
    try:
        with beneath.Beneath(run_dir) as folder:
            status = folder.lstat(OWNER)
            record = foreign.parse_json(folder.read(OWNER, 64 * 1024))
            folder_status = os.fstat(folder.fd)
    except FileNotFoundError:
        return Owner()  # a run from before owner.json, or a claim that wrote none
    except (OSError, ValueError) as error:
        return Owner(doubt=f"{name} cannot be read as the lab's ({foreign.shown(error, 200)})")
    if not two_spaces(run_dir):
        return Owner(doubt=f"{name} is in a run folder from before the lab kept its records apart from its tasks, "
                           "where a task could have written it")
    me = os.geteuid()
    for what, found in (("owner.json", status), ("the run folder", folder_status)):
        if found.st_uid not in (me, 0) or found.st_mode & 0o022:
            return Owner(doubt=f"{name}: {what} is owned by uid {found.st_uid} or writable by others, so it may "
                               "not be the lab's record")
    if not isinstance(record, dict):
        return Owner(doubt=f"{name} is not an object the lab writes")
    pid, started, command = record.get("pid"), record.get("process_start"), record.get("command")
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < 2**31:
        return Owner(doubt=f"{name} names no process id the lab writes ({foreign.shown(json.dumps(pid), 40)})")
    if record.get("host") != socket.gethostname():
        return Owner(pid=pid, here=False)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return Owner()
    except PermissionError:
        pass  # alive, another user's
    except OSError:
        return Owner()
    now = process_start(pid)
    if now == "ended":
        return Owner()
    if not isinstance(started, str) or not started.isdigit() or now is None:
        return Owner(doubt=f"{name} names pid {pid} with no start time to check it by, so it cannot be proven "
                           "to be this run's lab")
    if now != started:
        return Owner()  # the lab ended; its pid is another process's now
    if not (isinstance(command, list) and all(isinstance(part, str) for part in command)
            and process_command(pid) == command):
        return Owner(doubt=f"{name} names pid {pid}, but that process's command line is not the one its lab "
                           "recorded when it claimed the run")
    return Owner(pid=pid)


def unproven(run_dir: Path) -> str:
    """Why the lab cannot prove it claimed this run folder, for `down`, which changes modes only in
    a folder it can (empty where it can): owner.json is there, a file, not a link. The lab writes it
    when it claims a run (runfolder.make) and before any task starts, so a run folder without one
    never had a task of the lab's in it: it was made by hand, or by a lab from before owner.json.
    (In a run from before the two spaces a task could have written owner.json too, but only in a
    folder the lab made; and no other user may write RUNS_DIR to plant one.)"""
    try:
        with beneath.Beneath(run_dir) as folder:
            kind = folder.kind(OWNER)
    except (OSError, ForeignFile) as error:
        return f"it cannot be looked at ({foreign.shown(error, 200)})"
    if kind is None:
        return f"it holds no {OWNER}, which the lab writes when it claims a run"
    if kind != "file":
        return f"its {OWNER} is a {kind}, not the file the lab writes"
    return ""


def live_owner(run_dir: Path) -> int | None:
    """The pid of the lab that claimed this run, while it still runs and is proven to be it (owner_of)."""
    return owner_of(run_dir).pid
