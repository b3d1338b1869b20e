"""Set-ID bits (issue 41) taken away from a tree, never following a link: the walk the set-ID check
at a run's end (supervisor/setid.py) makes of each tree a run's tasks could write.

    result = strip_setid(run_dir, "tasks")   # every S_ISUID and S_ISGID under runs/<RUN>/tasks/ gone
    result.found, result.unentered, result.skipped, result.complete

A task or a replica (root, where its image's user or its pod says so) can leave a set-user-ID copy
of a shell in whatever it may write; the bit is on the inode, so nosuid on the container's bind
mount does nothing for the host's path. Before a run is handed back the lab takes the bits away
from everything its tasks could write, opening each entry as beneath.py does: a folder relative to
its parent's handle (O_DIRECTORY | O_NOFOLLOW), anything else with O_PATH | O_NOFOLLOW (never
opened for reading: a device node a root replica made with mknod, which Docker's default
capabilities allow, is never opened), fstat on the handle, and the mode changed through that same
handle (fchmod, or /proc/self/fd/N for an O_PATH handle), so a name swapped for a link meanwhile is
never followed. The walk starts from a beneath.Beneath handle on the tree's top. Stdlib only.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import os
import stat
from pathlib import Path

from tflab.core.beneath import DIRECTORY, Beneath
from tflab.core.errors import ForeignFile

SETID = stat.S_ISUID | stat.S_ISGID
_PATH = getattr(os, "O_PATH", 0)
ENTRY = (_PATH or (os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))) | os.O_NOFOLLOW | os.O_NONBLOCK \
    | getattr(os, "O_CLOEXEC", 0)
STRIP_DEPTH = 64  # folders down from the tree's top; a deeper one is not entered, and is named
STRIP_MOST = 200_000  # entries looked at in one tree; past it no further folder is entered, and each is named
NAMED_MOST = 1_000  # subtrees not looked at that a Stripping names; the others are counted


@dataclasses.dataclass(frozen=True)
class SetId:
    """One file or folder that had a set-ID bit: its path relative to the walked tree's parent
    (`volumes/data/rootsh`), owner, mode before, and whether the bit is gone (`stripped`)."""

    path: str
    uid: int
    mode: int
    stripped: bool
    why: str = ""  # where not stripped: the error

    def to_dict(self) -> dict:
        return {"path": self.path, "uid": self.uid, "mode": f"{stat.S_IMODE(self.mode):o}",
                "stripped": self.stripped, **({"why": self.why} if self.why else {})}


@dataclasses.dataclass
class Stripping:
    """What strip_setid found in one tree: every entry that had a bit, the folders it could not
    enter (another user's, a non-root lab), and the subtrees a bound kept it from looking into,
    each named (`skipped`, "path (why)"; past NAMED_MOST only counted, in `skipped_more`)."""

    found: list[SetId] = dataclasses.field(default_factory=list)
    unentered: list[str] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    skipped_more: int = 0
    looked_at: int = 0
    look_only: bool = False  # bits only looked for, none taken away (a folder the lab cannot prove is its run)

    @property
    def left(self) -> list[SetId]:
        return [entry for entry in self.found if not entry.stripped]

    @property
    def complete(self) -> bool:
        """Whether every entry was seen and every bit taken away."""
        return not self.left and not self.unentered and not self.skipped and not self.skipped_more

    def skip(self, path: str, why: str) -> None:
        if len(self.skipped) < NAMED_MOST:
            self.skipped.append(f"{path} ({why})")
        else:
            self.skipped_more += 1


def _chmod_handle(fd: int, mode: int) -> None:
    try:
        os.fchmod(fd, mode)
    except OSError as error:
        if error.errno != errno.EBADF or not _PATH:
            raise
        os.chmod(f"/proc/self/fd/{fd}", mode)  # an O_PATH handle: the magic link names its own inode


def strip_setid(root: Path, relative: str = "", depth: int = STRIP_DEPTH, most: int = STRIP_MOST,
                look_only: bool = False) -> Stripping:
    """Takes S_ISUID and S_ISGID away from every file and folder (not a link) under `root/relative`
    (`root` itself when empty), never following a link; records each one, and what it could not
    do (EPERM on another user's file where the lab is not root, a folder it cannot enter). A
    missing tree is an empty Stripping. Bounded, `depth` folders down and `most` entries, and a
    bound never ends the walk unsaid: each subtree it kept the walk out of is named (`skipped`),
    and being breadth first, the walk has stripped every shallower entry by then. With `look_only`
    the same walk changes nothing: each entry with a bit is recorded, not stripped."""
    result = Stripping(look_only=look_only)
    try:
        top = Beneath(root)
    except FileNotFoundError:
        return result
    except (OSError, ForeignFile) as error:
        result.unentered.append(f"{relative or '.'} ({error})")
        return result
    with top:
        if relative:
            try:
                fd, name = top.open_parent(relative)
            except FileNotFoundError:
                return result
            except (OSError, ForeignFile) as error:
                result.unentered.append(f"{relative} ({error})")
                return result
            try:
                start = os.open(name, DIRECTORY, dir_fd=fd)
            except FileNotFoundError:
                return result
            except OSError as error:
                result.unentered.append(f"{relative} ({error.strerror or error})")
                return result
            finally:
                os.close(fd)
        else:
            start = os.dup(top.fd)
    _walk(start, relative or ".", depth, most, result)
    return result


def _strip_entry(fd: int, path: str, result: Stripping) -> None:
    found = os.fstat(fd)
    if not found.st_mode & SETID or stat.S_ISLNK(found.st_mode):
        return  # (a FIFO's or device's bit runs nothing, but none is left: "no set-ID bit" is simpler to hold)
    if result.look_only:
        result.found.append(SetId(path, found.st_uid, found.st_mode, False, "left as it is"))
        return
    try:
        _chmod_handle(fd, stat.S_IMODE(found.st_mode) & ~SETID)
    except OSError as error:
        result.found.append(SetId(path, found.st_uid, found.st_mode, False, error.strerror or str(error)))
    else:
        result.found.append(SetId(path, found.st_uid, found.st_mode, True))


def _strip_other(parent: int, name: str, path: str, result: Stripping) -> None:
    """A file, FIFO, socket or device (anything not a folder) relative to its folder's handle."""
    try:
        fd = os.open(name, ENTRY, dir_fd=parent)
    except OSError as error:
        if error.errno not in (errno.ENOENT, errno.ELOOP):  # removed meanwhile; a link (without O_PATH)
            result.unentered.append(f"{path} ({error.strerror or error})")
        return
    try:
        if not stat.S_ISLNK(os.fstat(fd).st_mode):  # O_PATH | O_NOFOLLOW holds a link itself: nothing runs it
            _strip_entry(fd, path, result)
    finally:
        os.close(fd)


def _walk(start: int, top: str, depth: int, most: int, result: Stripping) -> None:
    """The folder behind `start` (closed here) and what lies beneath it, breadth first: every entry
    of one level before any of the next, so a bound reached leaves only deeper or later folders
    unlooked-at, and each of those is named (result.skip), never passed over in silence. A folder
    waiting its turn is kept as its names from the top and opened again step by step from `start`
    (no link followed at any step), so one handle per step is open, however wide the tree."""
    waiting: collections.deque[tuple[str, ...]] = collections.deque([()])
    try:
        _strip_entry(start, top, result)
        while waiting:
            parts = waiting.popleft()
            path = _joined(top, parts)
            if result.looked_at >= most:
                result.skip(path, f"not looked into: the walk looks at {most} entries of a tree at most")
                continue
            fd = _reopen(start, parts, path, result)
            if fd is None:
                continue
            try:
                for child in _folder(fd, path, len(parts), depth, most, result):
                    waiting.append((*parts, child))
            finally:
                os.close(fd)
    finally:
        os.close(start)


def _joined(top: str, parts: tuple[str, ...]) -> str:
    return "/".join(parts) if top == "." and parts else "/".join((top, *parts))


def _reopen(start: int, parts: tuple[str, ...], path: str, result: Stripping) -> int | None:
    """A folder waiting its turn, opened from the top's handle one name at a time (O_NOFOLLOW |
    O_DIRECTORY at each step); None where it is gone, or is no longer a folder (said)."""
    fd = os.dup(start)
    for part in parts:
        try:
            child = os.open(part, DIRECTORY, dir_fd=fd)
        except OSError as error:
            os.close(fd)
            if error.errno in (errno.ENOTDIR, errno.ELOOP):
                result.unentered.append(f"{path} (no longer a folder: a link or file since it was listed, "
                                        "not followed)")
            elif error.errno != errno.ENOENT:  # removed meanwhile: nothing there to strip
                result.unentered.append(f"{path} ({error.strerror or error})")
            return None
        os.close(fd)
        fd = child
    return fd


def _folder(fd: int, path: str, level: int, depth: int, most: int, result: Stripping) -> list[str]:
    """Strips the entries of the folder behind `fd` (at `level` below the top), each folder's own
    bit included; returns the names of its folders to walk next. A folder deeper than `depth` is
    not entered, and named; past `most` entries the rest of this folder is named."""
    folders: list[str] = []
    try:
        listing = os.scandir(fd)
    except OSError as error:
        result.unentered.append(f"{path} ({error.strerror or error})")
        return folders
    with listing as entries:
        for entry in entries:
            if result.looked_at >= most:
                result.skip(path, f"only partly looked at: the walk looks at {most} entries of a tree at most")
                break
            result.looked_at += 1
            name = entry.name
            child_path = name if path == "." else f"{path}/{name}"
            try:  # a folder, relative to its parent's handle, no link followed (ELOOP for a link)
                folder = os.open(name, DIRECTORY, dir_fd=fd)
            except OSError as error:
                if error.errno == errno.ENOTDIR:
                    _strip_other(fd, name, child_path, result)
                elif error.errno not in (errno.ENOENT, errno.ELOOP):  # removed meanwhile; a link
                    result.unentered.append(f"{child_path} ({error.strerror or error})")
                continue
            try:
                _strip_entry(folder, child_path, result)
            finally:
                os.close(folder)
            if level + 1 > depth:  # its own bit is gone; what it holds is named, and the walk goes on
                result.skip(child_path, f"not looked into: deeper than {depth} folders below the top")
            else:
                folders.append(name)
    return folders
