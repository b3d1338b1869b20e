"""SCRIPT=: a user's own training script, run unmodified by the launcher (launch.py) in every task.

Its folder is mounted read-only into every task, where the trainers run as the host's user, or as
uid 1000 when the lab runs as root. A root's folder that uid 1000 cannot read (mode 0700, as
pytest's tmp_path and many home folders are) would fail inside the task ("Permission denied"), so
such a folder is copied into the run folder, which the trainers own, and the copy is mounted
instead: bounded in size, and refused before anything starts where it is bigger. The copy takes
what the script may need and nothing the folder's mode kept from uid 1000 for its own sake: no
`.git`, `.env` or key, no file or folder uid 1000 could not read in place; the lab says what it
left out."""

from __future__ import annotations

import ast
import os
import shlex
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from tflab.console import display_path, say
from tflab.core import explain
from tflab.core.errors import LabError
from tflab.core.foreign import shown
from tflab.core.grammars import DATA_DIR, script_env_pairs
from tflab.core.runfolder import container_user, runs_dir
from tflab.core.settings import Settings

SCRIPT_DIR = "/lab/script"  # where a user's script folder is mounted, read-only; the tasks run in work/<task>/
COPY = "script"  # the run folder's copy of a script folder the trainers cannot read
COPY_LIMIT_BYTES = 64 * 2**20  # a script, its modules and a little data; a data set belongs elsewhere
COPY_LIMIT_FILES = 2000


def script_command(settings: Settings, script_path: str, python: str = "python") -> list[str]:
    """The command of every task under SCRIPT: the launcher, which runs the script unmodified, in
    a process where the lab's hooks are installed first (trainer/inscript.py)."""
    return [python, "-m", "tflab.launch", "--", python, "-m", "tflab.trainer.inscript", script_path,
            *shlex.split(settings.args)]


def script_environment(settings: Settings, data_dir: str = DATA_DIR) -> dict[str, str]:
    """What every task of SCRIPT gets besides the lab's own: SCRIPT_ENV, and TFLAB_DATA where DATA
    is given (`data_dir`: where the task sees it)."""
    env = dict(script_env_pairs(settings.script_env))
    if settings.data:
        env["TFLAB_DATA"] = data_dir
    return env


def script_service(settings: Settings, folder: Path | None = None) -> dict:
    """SCRIPT in a container: the script's folder (or `folder`, its copy: `stage`) and DATA
    mounted read-only, the launcher as the command, and the script's environment (`environment`,
    for the caller to merge into the task's own)."""
    script = Path(settings.script)
    volumes = [f"{folder or script.parent}:{SCRIPT_DIR}:ro"]
    if settings.data:
        volumes.append(f"{settings.data}:{DATA_DIR}:ro")
    return {"volumes": volumes, "command": script_command(settings, f"{SCRIPT_DIR}/{script.name}"),
            "working_dir": SCRIPT_DIR, "environment": script_environment(settings)}


def readable(status: os.stat_result, uid: int, gid: int, bits: int) -> bool:
    """Whether uid:gid (no supplementary groups: a container's user has none) has `bits` (4: read,
    5: read and enter) on a file of this status, by its mode alone."""
    if uid == 0:
        return True
    shift = 6 if status.st_uid == uid else 3 if status.st_gid == gid else 0
    return (status.st_mode >> shift) & bits == bits


def needs_copy(script: Path, user: tuple[int, int] | None = None) -> bool:
    """Whether the trainers' user cannot read the script's folder or the script where they are."""
    uid, gid = user or container_user()
    return not (readable(os.stat(script.parent), uid, gid, 5) and readable(os.stat(script), uid, gid, 4))


# What a copy never takes, whatever its mode: a repository's history and credentials, and secrets
# by the names tools give them. A script needs none of them, and the copy hands what it takes to
# the trainers' user, to whom the folder was closed.
SECRET_FOLDERS = {".git", ".hg", ".svn", ".ssh", ".gnupg", ".aws", ".azure", ".kube", ".docker"}
SECRET_FILES = {".env", ".netrc", ".pypirc", ".git-credentials", ".npmrc", "id_rsa", "id_dsa", "id_ecdsa",
                "id_ed25519", "credentials.json", "service-account.json"}
SECRET_SUFFIXES = (".pem", ".key", ".p12", ".pfx", ".jks", ".keystore")


def secret(name: str, folder: bool) -> bool:
    if folder:
        return name in SECRET_FOLDERS
    return name in SECRET_FILES or name.startswith(".env.") or name.endswith(SECRET_SUFFIXES)


@dataclass
class Copy:
    """What a copy of a script's folder takes (folders first), and what it leaves out and why."""

    taken: list[Path] = field(default_factory=list)
    secrets: list[str] = field(default_factory=list)  # by name: SECRET_FOLDERS and the rest
    closed: list[str] = field(default_factory=list)  # the trainers' user could not read them in place

    def left_out(self, uid: int, most: int = 8) -> str:
        """One line's part: what was left out, a few names of each kind and how many more."""
        def some(names: list[str]) -> str:
            more = f" and {len(names) - most} more" if len(names) > most else ""
            return ", ".join(shown(name, 100) for name in names[:most]) + more

        parts = ([f"secrets by their names ({some(self.secrets)})"] if self.secrets else []) + \
            ([f"what uid {uid} could not read in place either ({some(self.closed)})"] if self.closed else [])
        return "; ".join(parts)


def copied(folder: Path, skip: Path | None = None, script: Path | None = None,
           user: tuple[int, int] | None = None) -> Copy:
    """What a copy of `folder` takes, folders first: folders, regular files and links (a fifo or
    a device is no part of a script); `skip` (the runs folder, where it lies inside) left out, and
    said: secrets by name (`secret`), and files and folders that `user` (the trainers') could not
    read where they are, the folder's own mode aside (a root's 0600 file would be theirs in the
    copy); `script` itself is always taken. LabError past COPY_LIMIT_FILES or COPY_LIMIT_BYTES,
    found without walking further."""
    uid, gid = user or container_user()
    found, size = Copy(), 0
    for parent, folders, files in os.walk(folder):
        here = Path(parent)
        kept = []
        for name in sorted(folders) + sorted(files):
            path = here / name
            if path == skip:
                continue
            status = path.lstat()
            is_folder = stat.S_ISDIR(status.st_mode)
            if not (is_folder or stat.S_ISREG(status.st_mode) or stat.S_ISLNK(status.st_mode)):
                continue
            shown_as = f"{path.relative_to(folder)}{'/' if is_folder else ''}"
            if path != script and secret(name, is_folder):
                found.secrets.append(shown_as)
                continue
            if path != script and not stat.S_ISLNK(status.st_mode) and not readable(status, uid, gid,
                                                                                   5 if is_folder else 4):
                found.closed.append(f"{shown_as} (mode {stat.S_IMODE(status.st_mode):04o})")
                continue
            if is_folder:
                kept.append(name)
            found.taken.append(path)
            size += status.st_size if stat.S_ISREG(status.st_mode) else 0
            if len(found.taken) > COPY_LIMIT_FILES or size > COPY_LIMIT_BYTES:
                raise LabError(f"more than {COPY_LIMIT_FILES} files or {COPY_LIMIT_BYTES // 2**20} MiB")
        folders[:] = kept
    return found


def refusal(settings: Settings, why: str) -> LabError:
    folder = Path(settings.script).parent
    uid, _ = container_user()
    mode = os.stat(folder).st_mode & 0o7777
    return LabError(f"SCRIPT={settings.script} is not allowed: its folder {folder} (mode {mode:04o}) is not "
                    f"readable by uid {uid}, as whom the tasks run, and it is too big to copy into the run folder "
                    f"({why}); expected a folder uid {uid} can read: chmod -R o+rX {folder}, or the script in a "
                    "folder of its own")


def owner_can(status: os.stat_result) -> int:
    """A copy's mode: the original's, and for its owner (the trainers) read or enter where anyone had it."""
    mode = stat.S_IMODE(status.st_mode)
    for anyone, owner in ((0o444, 0o400), (0o111, 0o100)):
        if mode & anyone:
            mode |= owner
    return mode


def to_copy(settings: Settings) -> Copy | None:
    """None where the tasks can read the script's folder; else what its copy takes (copied), or
    LabError, one line naming the folder and the fix, where that is too much."""
    script = Path(settings.script)
    if not needs_copy(script):
        return None
    try:
        return copied(script.parent, runs_dir(settings).resolve(), script)
    except LabError as error:
        raise refusal(settings, str(error)) from None


def check(settings: Settings) -> None:
    """Before anything is written or started: a script folder the tasks cannot read must be small
    enough to copy (stage)."""
    if settings.script:
        to_copy(settings)


def stage(settings: Settings, run_dir: Path) -> Path | None:
    """The folder to mount for SCRIPT: None for the script's own, or its copy in the run folder
    where the trainers' user cannot read that one. The copy is owned by that user and keeps the
    modes, but for read (and enter) where anyone had it; it leaves out secrets by their names and
    what that user could not read in place (copied), and says what it left out."""
    found = to_copy(settings)
    if found is None:
        return None
    script = Path(settings.script)
    copy = run_dir / COPY
    try:
        copy_folder(script.parent, found.taken, copy)
    except OSError as error:  # a full disk, a file gone meanwhile
        raise LabError(f"could not copy SCRIPT's folder {script.parent} into {display_path(copy)}/ "
                       f"({error.strerror or error})") from None
    uid = container_user()[0]
    left_out = found.left_out(uid)
    say(f"SCRIPT's folder {script.parent} is not readable by uid {uid}, as whom the tasks run: "
        f"mounting its copy, {display_path(copy)}/" + (f"; left out: {left_out}" if left_out else ""))
    return copy


def copy_folder(folder: Path, taken: list[Path], copy: Path) -> None:
    """`taken` (copied()'s, under `folder`, each folder before what it holds) into `copy`, owned by
    the trainers' user."""
    uid, gid = container_user()
    copy.mkdir()
    folders = []
    for source in [folder, *taken]:
        target = copy / source.relative_to(folder)
        status = source.lstat()
        if stat.S_ISLNK(status.st_mode):
            target.symlink_to(os.readlink(source))
        elif stat.S_ISDIR(status.st_mode):
            target.mkdir(exist_ok=True)
            folders.append((target, status))
        else:
            shutil.copyfile(source, target, follow_symlinks=False)
            os.chmod(target, owner_can(status))
        if os.getuid() == 0:
            os.lchown(target, uid, gid)
    for target, status in reversed(folders):  # last, so that a folder's mode cannot stop its own copy
        os.chmod(target, owner_can(status))


# -- before the run: a script's imports --------------------------------------------------------


def script_warnings(path: Path, strategy: str) -> list[str]:
    """Known traps a SCRIPT's own source shows, read with ast (never imported): Keras 3 under
    MultiWorkerMirroredStrategy or ParameterServerStrategy. [] where the file does not parse (Python will say why)."""
    try:
        tree = ast.parse(Path(path).read_text(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return []
    found = []
    keras_3 = [node.lineno for node in ast.walk(tree)
               if isinstance(node, (ast.Import, ast.ImportFrom)) and _imports_keras_3(node)]
    if keras_3 and strategy == "multiworker":
        fix = explain.BY_NAME["keras3-multiworker"].fix
        found.append(f"{Path(path).name}:{keras_3[0]} imports keras (Keras 3), whose model.fit fails under "
                     f"MultiWorkerMirroredStrategy ({explain.KERAS_ISSUE}); fix: {fix}")
    if keras_3 and strategy == "parameter_server":
        found.append(f"{Path(path).name}:{keras_3[0]} imports keras (Keras 3), which has no ParameterServerStrategy "
                     f"support ({explain.PS_TUTORIAL}); fix: {explain.BY_NAME['keras3-parameter-server'].fix}")
    return found


def _imports_keras_3(node: ast.AST) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name == "keras" or alias.name.startswith("keras.") for alias in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module == "keras" or (node.module or "").startswith("keras."))
    return False
