"""A run's orphans under BACKEND=local: what a task started and left behind, caught and ended.

A script may start a process that leaves its task: `setsid` then fork (a daemon's double fork)
takes it out of the task's process group and session, so the lab's `killpg` of the task misses it,
and its parent's exit hands it to init. As the lab's user (root, where the lab is root) it then
outlives the run, and may write into the run folder after the set-ID check has looked.

How it is caught, and why this way: the lab's process becomes a child subreaper
(prctl(PR_SET_CHILD_SUBREAPER), Linux 3.4, no privilege needed), so every process orphaned below it,
however it detached, is re-parented to the lab instead of init; after the tasks are stopped the
lab kills its children that are not its own and reaps them, round after round (killing one hands
its children to the lab), until none is left. This is what systemd (for its services) and tini or
Docker's init (for a container) do. The alternatives fall short: a process group or session is
left by setsid; a marker in the environment (/proc/<pid>/environ) is the environment at exec,
which a script clears with `env -i`; a cgroup needs root or a systemd delegation, and this host's
cgroups are v1. The limit: a subreaper holds only while the lab lives. Where the lab is killed
with SIGKILL, its orphans go on to init; the reaper (engine/reaper.py) then kills the tasks'
process groups, and, as a last resort, every process whose environment names the run's
config.json (`marked`): a daemon that cleared its environment escapes that one.

Which children are the lab's own: those in the lab's session (a process can leave a session but
never join another one, and every task starts in a session of its own), and the ones named in
`keep` (the reaper, which has a session of its own). Stdlib only, no import of the host side.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from dataclasses import dataclass

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
ROUNDS = 100  # kill rounds before giving up: each round kills the children that the last one handed on


@dataclass(frozen=True)
class Child:
    pid: int
    group: int  # its process group
    session: int
    state: str  # /proc's one letter: Z for a zombie, which only needs reaping
    name: str  # the kernel's command name (comm), at most 15 characters


def subreaper(on: bool = True) -> bool:
    """Makes this process a child subreaper (or stops it): whether it is one now. False where it
    cannot be (not Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0 and on
    except (OSError, AttributeError):
        return False


def children(parent: int) -> list[Child]:
    """The processes whose parent is `parent`, from /proc/<pid>/stat; none where there is no /proc."""
    found = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                line = file.read(4096).decode(errors="replace")
        except OSError:
            continue  # ended meanwhile
        head, _, rest = line.rpartition(")")
        fields = rest.split()  # state, ppid, pgrp, session, ...
        if len(fields) > 3 and fields[1] == str(parent):
            found.append(Child(int(name), int(fields[2]), int(fields[3]), fields[0], head.partition("(")[2]))
    return found


def end_orphans(keep: frozenset[int] = frozenset(), killed_groups: frozenset[int] = frozenset()) -> list[Child]:
    """Kills (SIGKILL) and reaps every child of this process that is not its own: outside its
    session and not in `keep`; zombies among them are reaped only. Round after round, until a
    round finds none or ROUNDS have passed. The processes it had to kill, in the order killed,
    less those of `killed_groups`: a task's script, whose group the lab has just killed with its
    launcher, comes here to die, and was left running by no one."""
    me, session = os.getpid(), os.getsid(0)
    killed: list[Child] = []
    for _ in range(ROUNDS):
        strays = [c for c in children(me) if c.session != session and c.pid not in keep]
        if not strays:
            break
        for child in strays:
            if child.state != "Z":
                try:
                    os.kill(child.pid, signal.SIGKILL)  # our child, not yet reaped: the pid is still its own
                except ProcessLookupError:
                    continue
                if child.group not in killed_groups:
                    killed.append(child)
        for child in strays:
            try:
                os.waitpid(child.pid, 0)
            except ChildProcessError:
                pass
    return killed


ENVIRON_LIMIT = 1 << 20  # bytes read of one process's environment


def marked(entry: str) -> list[int]:
    """The processes (not this one) whose environment at exec held `entry` (NAME=value) exactly,
    from /proc/<pid>/environ: readable for this user's own processes (every one, as root). None
    where there is no /proc."""
    wanted, found = entry.encode(), []
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as file:
                environ = file.read(ENVIRON_LIMIT)
        except OSError:
            continue
        if wanted in environ.split(b"\0"):
            found.append(int(name))
    return found


def said(killed: list[Child], most: int = 5) -> str:
    """One line's words for what end_orphans had to kill."""
    named = ", ".join(f"{child.pid} ({child.name})" for child in killed[:most])
    more = f" and {len(killed) - most} more" if len(killed) > most else ""
    count = f"{len(killed)} process{'es' if len(killed) != 1 else ''}"
    return (f"killed {count} the tasks had left running on their own (setsid, a double fork): {named}{more}; "
            "nothing a run started outlives it")
