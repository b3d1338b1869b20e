"""Set-ID bits (issue 41) taken away from a tree, never following a link: the walk the set-ID check
at a run's end (supervisor/setid.py) makes of each tree a run's tasks could write.

    result = strip_setid(run_dir, "tasks")   # every S_ISUID and S_ISGID under runs/<RUN>/tasks/ gone
    result.found, result.unentered, result.cut, result.complete

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
STRIP_DEPTH = 64  # folders down from the tree's top; deeper ones are not walked (and said)
STRIP_MOST = 200_000  # entries looked at in one tree; a tree with more is cut short (and said)


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
    enter (another user's, a non-root lab), and where a bound cut the walk short."""

    found: list[SetId] = dataclasses.field(default_factory=list)
    unentered: list[str] = dataclasses.field(default_factory=list)
    cut: str = ""
    looked_at: int = 0

    @property
    def left(self) -> list[SetId]:
        return [entry for entry in self.found if not entry.stripped]

    @property
    def complete(self) -> bool:
        """Whether every entry was seen and every bit taken away."""
        return not self.left and not self.unentered and not self.cut


def _chmod_handle(fd: int, mode: int) -> None:
    try:
        os.fchmod(fd, mode)
    except OSError as error:
        if error.errno != errno.EBADF or not _PATH:
            raise
        os.chmod(f"/proc/self/fd/{fd}", mode)  # an O_PATH handle: the magic link names its own inode


def strip_setid(root: Path, relative: str = "", depth: int = STRIP_DEPTH, most: int = STRIP_MOST) -> Stripping:
    """Takes S_ISUID and S_ISGID away from every file and folder (not a link) under `root/relative`
    (`root` itself when empty), never following a link; records each one, and what it could not
    do (EPERM on another user's file where the lab is not root, a folder it cannot enter). A
    missing tree is an empty Stripping. Bounded: `depth` folders down, `most` entries."""
    result = Stripping()
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
    _strip_folder(start, relative or ".", 0, depth, most, result)
    return result


def _strip_entry(fd: int, path: str, result: Stripping) -> None:
    found = os.fstat(fd)
    if not found.st_mode & SETID or stat.S_ISLNK(found.st_mode):
        return  # (a FIFO's or device's bit runs nothing, but none is left: "no set-ID bit" is simpler to hold)
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


def _strip_folder(fd: int, path: str, level: int, depth: int, most: int, result: Stripping) -> None:
    """The folder behind `fd` (closed here) and what lies beneath it, depth first, one handle open
    per level."""
    try:
        _strip_entry(fd, path, result)
        try:
            names = os.listdir(fd)
        except OSError as error:
            result.unentered.append(f"{path} ({error.strerror or error})")
            return
        for name in names:
            if result.cut:
                return
            result.looked_at += 1
            if result.looked_at > most:
                result.cut = f"more than {most} entries (the walk stopped at {path}/{name})"
                return
            child_path = name if path == "." else f"{path}/{name}"
            try:  # a folder, relative to its parent's handle, no link followed (ELOOP for a link)
                folder = os.open(name, DIRECTORY, dir_fd=fd)
            except OSError as error:
                if error.errno == errno.ENOTDIR:
                    _strip_other(fd, name, child_path, result)
                elif error.errno not in (errno.ENOENT, errno.ELOOP):  # removed meanwhile; a link
                    result.unentered.append(f"{child_path} ({error.strerror or error})")
                continue
            if level + 1 > depth:
                os.close(folder)
                result.cut = f"folders deeper than {depth} (the walk stopped at {child_path})"
                return
            _strip_folder(folder, child_path, level + 1, depth, most, result)
    finally:
        os.close(fd)
