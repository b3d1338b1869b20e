"""What only the host can check of a setting's value: the files and folders it names exist, are
what they should be (a Python file, a folder) and are readable by the tasks, resolved to the paths
the lab mounts.

Settings.from_env runs these after the value's grammar (core/grammars.py); Settings.from_dict does
not, as the trainer reads config.json where the host's files are not. Kept apart from the grammars
because these alone touch the file system.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from pathlib import Path
from typing import Callable

from tflab.core.grammars import DATA_DIR, SettingsError, claim_folders, text


def folder_on_host(name: str, value: str) -> str:
    """The folder a user names: no spaces in what they type (the lab's own absolute paths may
    have them), and not a file."""
    text(name, value)
    path = Path(value).absolute()
    if ":" in str(path):
        raise SettingsError(f"{name}={value} is not allowed: its path {path} has a ':', and Docker's volume "
                            "syntax splits at ':'; expected a folder whose path has none")
    try:
        is_file = path.exists() and not path.is_dir()
    except OSError as error:  # a name too long, say
        raise SettingsError(f"{name}={value} is not allowed ({error.strerror}): expected a folder") from None
    if is_file:
        raise SettingsError(f"{name}={value} is not allowed: {path} is a file; expected a folder (or a path "
                            "that does not exist yet)")
    return value


def existing_file(raw: str, suffixes: tuple[str, ...] = ()) -> str:
    """The file's resolved path, or "" where there is no such file (with one of `suffixes`)."""
    try:
        path = Path(raw).expanduser()
        found = path.is_file() and (not suffixes or path.suffix in suffixes)
        return str(path.resolve()) if found else ""
    except (OSError, RuntimeError):  # a name too long; ~user of no such user
        return ""


def script_on_host(name: str, raw: str) -> str:
    resolved = existing_file(raw, (".py",))
    if not resolved:
        raise SettingsError(f"{name}={raw} is not allowed: expected the path of an existing Python file (*.py)")
    if ":" in resolved:
        raise SettingsError(f"{name}={raw} is not allowed: its path {resolved} has a ':', and Docker's volume "
                            "syntax splits at ':'; expected a script whose path has none")
    try:
        mode = os.stat(resolved).st_mode & 0o7777
    except OSError:
        mode = 0
    # Root reads any file, so root's os.access says yes to a mode-000 script; the tasks (uid 1000
    # when the lab runs as root, backends/userscript.py) could not, even in a copy, and would fail inside.
    if not os.access(resolved, os.R_OK) or (os.getuid() == 0 and not mode & 0o444):
        reader = "no one but root" if os.getuid() == 0 else f"not you (uid {os.getuid()}), as whom the tasks run"
        raise SettingsError(f"{name}={raw} is not allowed: {resolved} has mode {mode:04o}, readable by {reader}; "
                            f"expected a script the tasks can read: chmod a+r {resolved}")
    return resolved


def tfjob_on_host(name: str, raw: str) -> str:
    resolved = existing_file(raw)
    if not resolved:
        raise SettingsError(f"{name}={raw} is not allowed: expected the path of an existing TFJob manifest")
    return resolved


def manifest_on_host(what: str) -> Callable[[str, str], str]:
    def check(name: str, raw: str) -> str:
        resolved = existing_file(raw)
        if not resolved:
            raise SettingsError(f"{name}={raw} is not allowed: expected the path of an existing {what}")
        return resolved

    return check


def existing_folder(value: str) -> Path | None:
    """A host folder a setting names, resolved; None where it is no existing folder (or cannot be resolved)."""
    try:
        path = Path(value).expanduser().resolve()
        return path if path.is_dir() else None
    except (OSError, RuntimeError):
        return None


def data_on_host(name: str, value: str) -> str:
    """An existing folder the tasks can read, resolved; mounted read-only at DATA_DIR."""
    path = existing_folder(value)
    if path is None:
        raise SettingsError(f"{name}={value} is not allowed: expected an existing folder (mounted read-only at "
                            f"{DATA_DIR} in every task)")
    if ":" in str(path):
        raise SettingsError(f"{name}={value} is not allowed: its path {path} has a ':', and Docker's volume "
                            "syntax splits at ':'; expected a folder whose path has none")
    if not readable_by_tasks(path):
        raise SettingsError(f"{name}={value} is not allowed: {path} is not readable by everyone, and the tasks run "
                            f"as another user in a container; expected a folder they can read: chmod -R o+rX {path}")
    return str(path)


def readable_by_tasks(path: Path) -> bool:
    """Whether the tasks can list and read the folder: as root the lab runs them as uid 1000
    (backends/userscript.py), and a replay as its image's user, who read only what everyone may; else as you."""
    try:
        return os.access(path, os.R_OK | os.X_OK) and (os.getuid() != 0 or os.stat(path).st_mode & 0o005 == 0o005)
    except OSError:
        return False


def claims_on_host(name: str, raw: str) -> str:
    """Each folder exists, is one and the replicas can read it (as DATA's), resolved: the replay
    binds it where the manifest mounts its claim."""
    resolved = []
    for claim, (folder, read_only) in claim_folders(raw).items():
        path = existing_folder(folder)
        if path is None:
            raise SettingsError(f"{name}={raw} is not allowed: {folder}, given to the claim {claim}, is not an "
                                "existing folder; expected a folder of this host (make it first)")
        if ":" in str(path) or "," in str(path):
            raise SettingsError(f"{name}={raw} is not allowed: {claim}'s folder resolves to {path}, which has a ':' "
                                "or ',' (Docker's volume syntax and this setting's split there); expected another")
        if not readable_by_tasks(path):  # as DATA's: refused here, not found out by a replica inside
            raise SettingsError(f"{name}={raw} is not allowed: {path}, given to the claim {claim}, is not readable by "
                                "everyone, and the replicas run as their image's user in a container; expected a "
                                f"folder they can read: chmod -R o+rX {path}")
        if not read_only and open_to_others(path):
            raise SettingsError(f"{name} {claim}={path} is not allowed: other users of this host can reach it (no "
                                "folder on its path is closed to them), and a replica that writes there could leave "
                                "a set-ID program for them; expected a writable claim inside a folder only you can "
                                "enter (mkdir -m 700 ~/claims, then the claim inside it), or :ro")
        resolved.append(f"{claim}={path}:{'ro' if read_only else 'rw'}")
    return ",".join(resolved)


def open_to_others(folder: Path) -> bool:
    """Whether another user of this host can reach `folder` (resolved): true unless some folder on
    its path, itself included, grants no search (x) to group and others and is the lab's user's or
    root's (issue 41: a writable claim is where a root replica could leave a set-ID program, and it
    lies outside the run folder, which is closed to them). A folder that cannot be looked at counts
    as open."""
    return closed_by(folder) is None


def closed_by(folder: Path) -> tuple[Path, int] | None:
    """The nearest folder on `folder`'s path (itself included) that keeps every other user of this
    host out, and its mode (open_to_others's rule); None where none does."""
    for step in (folder, *folder.parents):
        try:
            found = os.stat(step)
        except OSError:
            return None
        if found.st_mode & 0o011 == 0 and found.st_uid in (os.geteuid(), 0):
            return step, found.st_mode & 0o7777
    return None


def others_may_write(folder: Path, sticky_here: bool = False) -> str:
    """Where another user of this host could rename or replace what the lab makes in `folder` (an
    existing folder: RUNS_DIR, or with `sticky_here` the nearest folder above a RUNS_DIR the lab
    will make, 0700, which may be sticky as /tmp is): the first folder on its path, itself
    first and then each above it, as its resolved path and as given, that is not the lab's user's or
    root's, or that another may write. Empty where none is. The rule is OpenSSH's StrictModes
    (auth.c, auth_secure_path: owner root or the user, no group or other write, every folder up to
    the root), with Debian's user-group-modes patch (a group holding its owner alone may write, for
    umask 002) and, above RUNS_DIR only, the sticky bit's exception systemd-tmpfiles and the kernel's
    protected_symlinks make for /tmp: in a sticky folder only an entry's owner may rename it."""
    me = os.geteuid()
    steps = dict.fromkeys([folder, *folder.parents, folder.resolve(), *folder.resolve().parents])
    for step in steps:
        try:
            found = os.stat(step)
        except OSError as error:
            return f"{step} cannot be looked at ({error.strerror or error})"
        mode = stat.S_IMODE(found.st_mode)
        said = f"{step} (uid {found.st_uid}, mode {mode:o})"
        if found.st_uid not in (me, 0):
            return f"{said} is another user's"
        sticky = mode & stat.S_ISVTX and (sticky_here or step not in (folder, folder.resolve()))
        if mode & 0o002 and not sticky:
            return f"{said} is writable by every user"
        if mode & 0o020 and not sticky and not group_of_one(found.st_gid, found.st_uid):
            return f"{said} is writable by its group (gid {found.st_gid}), which holds other users"
    return ""


def group_of_one(gid: int, uid: int) -> bool:
    """Whether a group's only member is `uid` (a user private group): Debian's user-group-modes patch
    to OpenSSH counts primary and supplementary members alike."""
    try:
        group, owner = grp.getgrgid(gid), pwd.getpwuid(uid)
    except KeyError:
        return False
    if any(member != owner.pw_name for member in group.gr_mem):
        return False
    if owner.pw_gid != gid and owner.pw_name not in group.gr_mem:
        return False  # a group without its owner: no user's private group
    return all(user.pw_uid == uid for user in pwd.getpwall() if user.pw_gid == gid)
