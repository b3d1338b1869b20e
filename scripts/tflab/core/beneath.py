"""The one way the lab opens a path inside a run folder: from a handle on the folder, never through a link.

    with Beneath(run_dir) as folder:                 # the folder itself opened with O_NOFOLLOW
        data = folder.read("tasks/worker-0.jsonl", limit=64 << 20)   # each step O_NOFOLLOW
        folder.write_whole("summary.json", text)     # a temporary beside it, then one rename
        with folder.append("chaos.jsonl") as log: ...

A run's tasks run a pull request's code, and the lab runs as root in CI. Tasks write the run's
task space (runs/<RUN>/tasks/, mounted into every container), and anything there may be a link
to a root-only host file, a FIFO, or a folder where a file was, swapped at any moment. Kubernetes'
subPath (CVE-2017-1002101), `docker cp` (CVE-2018-15664, CVE-2019-14271) and runc (CVE-2021-30465)
each learned that the privileged side must never resolve such a path by name: it opens the folder
once and every component relative to the one before, refusing links at every step (what
`openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` does in one call; Python has no openat2, so each
component is an `os.open(name, O_NOFOLLOW, dir_fd=...)`). A name is one plain component: no `..`,
no `/`, no empty part. Only regular files are read, a bounded amount, and only the lab's own space
is ever written: a write goes to an exclusive temporary file (O_EXCL | O_NOFOLLOW) and is renamed
into place relative to the same handle, so a link left at the name is replaced, never written through.

Every host module reads and writes a run folder through here and runfolder.py (setidbits.py changes
modes beneath it, from its handles); tests/unit/test_run_folder_door.py holds the others to it.
Stdlib only, shared by both sides.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from tflab.core.errors import ForeignFile

DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
# O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOCTTY: nor adopt a terminal.
READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class Refused(ForeignFile):
    """A path under a run folder that the lab will not open (a link, a FIFO, a folder where a file
    should be, a name that climbs out); str() is one line naming it."""


def parts_of(relative: str | PurePosixPath) -> list[str]:
    """The components of a relative path, each a plain name; Refused for `..`, an absolute path or
    an empty component."""
    text = str(relative)
    parts = text.split("/") if text else []
    if not parts or text.startswith("/") or any(part in ("", ".", "..") or "\0" in part for part in parts):
        raise Refused(f"{text!r} is not a plain path inside the run folder")
    return parts


def kind_of(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a link, which the lab never follows"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISREG(mode):
        return "a file"
    return "not a regular file (a FIFO, socket or device)"


class Beneath:
    """A folder opened once, with O_NOFOLLOW on its last component (the path above it is the
    lab's own: RUNS_DIR is the user's setting); every path below it opened from this handle."""

    def __init__(self, root: Path):
        self.root = Path(root)
        try:
            self.fd = os.open(self.root, DIRECTORY)
        except OSError as error:
            raise self._error(error, self.root) from None

    def __enter__(self) -> "Beneath":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _error(self, error: OSError, where) -> OSError | Refused:
        """FileNotFoundError stays what it is (a reader may take it as "not yet"); a link, a file
        where a folder should be and the like become Refused, naming the path."""
        if error.errno == errno.ENOENT:
            return FileNotFoundError(errno.ENOENT, "no such file", str(where))
        if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK, errno.ENXIO):
            return Refused(f"{where} is {self._what(where)}, not what the lab wrote there")
        return error

    def _what(self, where) -> str:
        try:
            relative = Path(where).relative_to(self.root)
            mode = self.lstat(str(relative)).st_mode if str(relative) != "." else os.lstat(self.root).st_mode
        except (ValueError, OSError):
            return "a link or not a folder"
        return kind_of(mode)

    def open_parent(self, relative: str, create: bool = False, mode: int = 0o755) -> tuple[int, str]:
        """A handle on the folder holding `relative` (the caller closes it) and its last name;
        with `create`, missing folders on the way are made."""
        parts = parts_of(relative)
        fd = os.dup(self.fd)
        try:
            for index, part in enumerate(parts[:-1]):
                try:
                    child = os.open(part, DIRECTORY, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(part, mode, dir_fd=fd)
                    except FileExistsError:
                        pass
                    child = os.open(part, DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = child
        except OSError as error:
            os.close(fd)
            raise self._error(error, self.root.joinpath(*parts[:index + 1])) from None
        return fd, parts[-1]

    def lstat(self, relative: str) -> os.stat_result:
        fd, name = self.open_parent(relative)
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError as error:
            raise self._error(error, self.root / relative) from None
        finally:
            os.close(fd)

    def kind(self, relative: str) -> str | None:
        """"file", "folder", "link", "other", or None where nothing is there."""
        try:
            mode = self.lstat(relative).st_mode
        except (FileNotFoundError, Refused):
            return None
        return ("link" if stat.S_ISLNK(mode) else "folder" if stat.S_ISDIR(mode)
                else "file" if stat.S_ISREG(mode) else "other")

    def open_fd(self, relative: str, flags: int = READ, mode: int = 0o644) -> int:
        """A descriptor of a regular file under the folder (Refused for anything else)."""
        fd, name = self.open_parent(relative, create=bool(flags & os.O_CREAT))
        try:
            opened = os.open(name, flags, mode, dir_fd=fd)
        except OSError as error:
            if error.errno == errno.EISDIR:
                raise Refused(f"{self.root / relative} is a folder, not a file the lab wrote") from None
            raise self._error(error, self.root / relative) from None
        finally:
            os.close(fd)
        found = os.fstat(opened)
        if not stat.S_ISREG(found.st_mode):
            os.close(opened)
            raise Refused(f"{self.root / relative} is {kind_of(found.st_mode)}, not a file the lab wrote")
        if flags & os.O_WRONLY and found.st_nlink > 1:  # a hard link's other name may be anyone's file
            os.close(opened)
            raise Refused(f"{self.root / relative} has {found.st_nlink} names (hard links); the lab writes "
                          "only a file of its own")
        return opened

    def read(self, relative: str, limit: int, offset: int = 0, whole: bool = True) -> bytes:
        """A regular file's bytes, at most `limit` of them: Refused if it is larger (with `whole`);
        `whole=False`: the bytes from `offset` on, at most `limit`, however many more there are."""
        fd = self.open_fd(relative)
        try:
            os.lseek(fd, offset, os.SEEK_SET)
            chunks, wanted = [], limit + whole
            while wanted > 0:
                chunk = os.read(fd, min(wanted, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                wanted -= len(chunk)
        except OSError as error:
            raise Refused(f"{self.root / relative} cannot be read ({error.strerror or error})") from None
        finally:
            os.close(fd)
        data = b"".join(chunks)
        if whole and len(data) > limit:
            raise Refused(f"{self.root / relative} is larger than {limit // 1024 // 1024} MiB, which no file the "
                          "lab writes there is")
        return data

    def write_whole(self, relative: str, data: bytes | str, mode: int = 0o644) -> None:
        """Whole or not at all, and never through a link: an exclusive temporary beside it, synced,
        then renamed over the name relative to the same handle (a link there is replaced)."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        fd, name = self.open_parent(relative, create=True)
        temporary = f".{name}-{os.getpid()}.tmp"
        try:
            try:
                out = os.open(temporary, CREATE, mode, dir_fd=fd)
            except FileExistsError:  # one left by a lab of this pid that died: ours to replace
                os.unlink(temporary, dir_fd=fd)
                out = os.open(temporary, CREATE, mode, dir_fd=fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view):]
                os.fsync(out)  # on the disk before the rename makes it the file
            finally:
                os.close(out)
            os.replace(temporary, name, src_dir_fd=fd, dst_dir_fd=fd)
        except OSError as error:
            try:
                os.unlink(temporary, dir_fd=fd)
            except OSError:
                pass
            raise OSError(error.errno, error.strerror, str(self.root / relative)) from None
        finally:
            os.close(fd)

    def append(self, relative: str, mode: int = 0o644):
        """A regular file opened for appending (made if missing), never through a link; a binary file object."""
        descriptor = self.open_fd(relative, APPEND, mode)
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "ab")

    def create(self, relative: str, data: bytes | str = b"", mode: int = 0o644) -> bool:
        """A new file, only if nothing is at the name (O_EXCL): False where something was."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        try:
            descriptor = self.open_fd(relative, CREATE, mode)
        except FileExistsError:
            return False
        except OSError as error:
            if error.errno == errno.EEXIST:
                return False
            raise
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        return True

    def mkdir(self, relative: str, mode: int = 0o755) -> None:
        """A folder, and those above it; an existing one must be a folder, not a link to one."""
        fd, name = self.open_parent(relative, create=True, mode=mode)
        try:
            try:
                os.mkdir(name, mode, dir_fd=fd)
            except FileExistsError:
                found = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
                if not stat.S_ISDIR(found):
                    raise Refused(f"{self.root / relative} is {kind_of(found)}, not a folder") from None
        finally:
            os.close(fd)

    def chown(self, relative: str, uid: int, gid: int) -> None:
        fd, name = self.open_parent(relative)
        try:
            os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)

    def unlink(self, relative: str) -> None:
        """Removes a file or link (never what a link points to); nothing where none is."""
        try:
            fd, name = self.open_parent(relative)
        except FileNotFoundError:
            return
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)

    def listdir(self, relative: str = "") -> list[str]:
        """The names in a folder under this one (the folder itself for ""), sorted."""
        if not relative:
            return sorted(os.listdir(self.fd))
        child = self._open_folder(relative)
        try:
            return sorted(os.listdir(child))
        finally:
            os.close(child)

    def _open_folder(self, relative: str) -> int:
        """A folder under this one, opened (never through a link); its descriptor is the caller's to close."""
        fd, name = self.open_parent(relative)
        try:
            return os.open(name, DIRECTORY, dir_fd=fd)
        except OSError as error:
            raise self._error(error, self.root / relative) from None
        finally:
            os.close(fd)


    def entries(self, relative: str, most: int) -> tuple[list[tuple[str, str]], bool]:
        """A folder's entries (the folder itself for ""), each (name, kind) with kind as kind()'s,
        never following a link, and whether there were more than `most` (the rest unread: a task
        may leave millions of names, and the lab reads only so many)."""
        child = self._open_folder(relative) if relative else os.dup(self.fd)
        found: list[tuple[str, str]] = []
        try:
            with os.scandir(child) as listing:
                for entry in listing:
                    if len(found) == most:
                        return sorted(found), True
                    try:
                        mode = entry.stat(follow_symlinks=False).st_mode
                    except OSError:  # gone between the listing and its stat
                        continue
                    found.append((entry.name, "link" if stat.S_ISLNK(mode) else "folder" if stat.S_ISDIR(mode)
                                  else "file" if stat.S_ISREG(mode) else "other"))
        finally:
            os.close(child)
        return sorted(found), False

    def walk(self, relative: str, suffix: str, depth: int = 8, most: int = 10000) -> list[str]:
        """The regular files under a folder whose names end in `suffix`, as paths relative to this
        folder: no link followed, at most `depth` folders down and `most` entries looked at."""
        found: list[str] = []
        stack, seen = [(relative, 0)], 0
        while stack:
            folder, level = stack.pop()
            try:
                names = self.listdir(folder)
            except (OSError, ForeignFile):
                continue
            for name in names:
                seen += 1
                if seen > most:
                    return sorted(found)
                path = f"{folder}/{name}" if folder else name
                kind = self.kind(path)
                if kind == "folder" and level < depth:
                    stack.append((path, level + 1))
                elif kind == "file" and name.endswith(suffix):
                    found.append(path)
        return sorted(found)


def chunks(root: Path, relative: str, size: int = 1 << 20) -> Iterator[bytes]:
    """A regular file under `root`, opened once now (FileNotFoundError, Refused as Beneath.open_fd)
    and read `size` bytes at a time up to the length it had when opened: a file of gigabytes read
    with flat memory, never reopened by name between chunks."""
    with Beneath(root) as folder:
        fd = folder.open_fd(relative)

    def read_all() -> Iterator[bytes]:
        try:
            left = os.fstat(fd).st_size
            while left > 0:
                chunk = os.read(fd, min(size, left))
                if not chunk:
                    return
                left -= len(chunk)
                yield chunk
        finally:
            os.close(fd)

    return read_all()


def read(root: Path, relative: str, limit: int, offset: int = 0, whole: bool = True) -> bytes:
    """Beneath(root).read(...) for one read."""
    with Beneath(root) as folder:
        return folder.read(relative, limit, offset, whole)
