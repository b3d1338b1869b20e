"""The run folder, `runs/<RUN>/`: its file names, claiming it (owner.json), and config.json.

    run_dir = planned(settings)            # runs/<RUN>, refused if it exists
    make(run_dir, link_latest=True, owner=True)  # claimed (os.mkdir), owner.json; runs/latest -> it
    write_config(run_dir, settings, the_cluster)
    events(run_dir, "worker-0")            # the task's JSONL log, parsed

Every module that names a file of a run goes through here, so a reader finds the folder's whole
layout in one place (docs/run-folder.md describes it for users). summary.json is a typed record
(runsummary.py): one writer, `Summary.write`, and every reader (the CLI's summary, the report,
bench, soak, the pytest fixture) reads it through `Summary.read`, which refuses a file the lab did
not write in one line; both go through this module's write_lab_json and read_lab_json. Whether a
run's lab still lives, proven from owner.json, and `down`'s mark are runowner.py's.

Shared by the host side and the trainer: imports neither TensorFlow nor any Docker code.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import stat
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from tflab.core import beneath, foreign, hostfiles
from tflab.core import task as task_contract
from tflab.core.cluster import Cluster
from tflab.core.commands import lab_command
from tflab.core.errors import LabError
from tflab.core.foreign import ForeignFile
from tflab.core.processes import owner_record
from tflab.core.schema import Events, loss_field, parse_events, problems
from tflab.core.settings import Settings, SettingsError

CONFIG = "config.json"  # what the trainers read: settings, cluster spec, every TF_CONFIG
SUMMARY = "summary.json"  # the run's result (Summary), written once when the run ends
OUTPUT = "output.log"  # every task's merged, timestamped output
COMPARE = "compare.json"  # a compare folder's list of runs
CHAOS_LOG = "chaos.jsonl"  # what make chaos did, and when
LINKS = "links"  # LINK and slow-link: one delay profile per proxied task, polled by its proxy
METADATA = "metadata"  # SCENARIO=preempt NOTICE=gce: each task's notice, read by the metadata stand-in
BACKUP = "backup"  # BackupAndRestore's folder, shared by every task (in the tasks' space)
LATEST = "latest"  # the link to the newest run
OWNER = "owner.json"  # who claimed the run: pid, host, command, and the process's start, for `down`
ENDED = "ended-by-down"  # `down FORCE=1` was asked to end the run while it ran: its outcome is interrupted
SETID = "setid.json"  # what the set-ID check at a run's end found in what its tasks wrote (supervisor/setid.py)
WORK = "work"  # SCRIPT: work/<task>/, each task's working directory (trainer/launch.py), in the tasks' space
# The tasks' space: the one folder of a run that its containers may write (mounted at
# task.RUN_MOUNT, $TFLAB_OUTPUT): their logs, output, backups, model and working folders. Everything
# else in runs/<RUN>/ is the lab's, mounted into no task (config.json read-only, as one file), so a
# task's code can neither change nor see the lab's records, and the host reads this folder only as
# foreign input (beneath.py: from a handle, no link followed, regular files, bounded).
TASKS = "tasks"
# A run folder's mode (and that of every folder the lab makes to hold runs): only the lab's user
# may enter. A task or replica can write files a host user could run (a set-ID copy of a shell,
# issue 41); the tasks reach their spaces through bind mounts the root daemon makes, so this closed
# parent does not stop them, but it keeps every other user of the host out, during the run and after.
PRIVATE = 0o700
LAYOUT = 2  # config.json's `layout`: 2, the lab's records apart from the tasks' space; none: one folder for both


# A task's name as a file name may hold it: the lab's (worker-0, chief-0, a TFJob's replicas) all
# are; a name read from a foreign config.json could otherwise climb out of the run folder.
TASK_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


def checked_task(task) -> str:
    if not isinstance(task, str) or not TASK_NAME.fullmatch(task):
        raise ForeignFile(f"task name {foreign.shown(repr(task), 100)} is not one the lab gives: expected letters, "
                          "digits and . _ - (a config.json or summary.json the lab did not write?)")
    return task


def log_name(task: str) -> str:
    """A task's JSONL log (schema.py), `<task>.jsonl`, in the tasks' space."""
    return f"{checked_task(task)}.jsonl"


def output_name(task: str) -> str:
    """A SCRIPT task's output as a terminal would show it, line by line (`<task>.out`), which the
    launcher writes and the lab prints as it comes."""
    return f"{checked_task(task)}.out"


def log_path(space: Path, task: str) -> Path:
    """A task's log in a tasks' space: what a task opens ($TFLAB_OUTPUT's), and what a message names
    (task_space(run_dir)'s). The host never opens it by this path: read_task_file, events."""
    return Path(space) / log_name(task)


def work_path(space: Path, task: str) -> Path:
    """A SCRIPT task's working directory in its tasks' space, `work/<task>/`: writable, kept with the run."""
    return Path(space) / WORK / checked_task(task)


def script_output_path(space: Path, task: str) -> Path:
    return Path(space) / output_name(task)


def two_spaces(run_dir: Path) -> bool:
    """Whether a run folder keeps its tasks apart (`tasks/`); a run from before LAYOUT 2 has one folder."""
    try:
        return stat.S_ISDIR(os.lstat(Path(run_dir) / TASKS).st_mode)
    except OSError:
        return False


def task_space(run_dir: Path) -> Path:
    """Where a run's tasks wrote: `tasks/`, or the run folder itself for a run from before the two spaces."""
    return Path(run_dir) / TASKS if two_spaces(run_dir) else Path(run_dir)


def in_tasks(run_dir: Path, name: str) -> str:
    """A name of the tasks' space as a path relative to the run folder (for beneath.Beneath)."""
    return f"{TASKS}/{name}" if two_spaces(run_dir) else name


def read_task_file(run_dir: Path, name: str, limit: int, offset: int = 0, whole: bool = True) -> bytes:
    """A file of the tasks' space, read as foreign input: from the run folder's handle, no link
    followed at any step, a regular file only, at most `limit` bytes (beneath.Beneath.read)."""
    return beneath.read(run_dir, in_tasks(run_dir, name), limit, offset, whole)


def read_lab_file(run_dir: Path, name: str, limit: int, offset: int = 0, whole: bool = True) -> bytes:
    """A file of the lab's own space, read the same careful way (a run folder from before the two
    spaces, or one a host user changed, may hold anything)."""
    return beneath.read(run_dir, name, limit, offset, whole)


def events(run_dir: Path, task: str) -> Events:
    """A task's log, read as foreign: only records of the lab's events whose fields are of their
    types (schema.problems, partial), the others counted in `skipped`. A reader that indexes a
    field an event must have takes only the complete ones (schema.complete)."""
    try:
        data = read_task_file(run_dir, log_name(task), foreign.MAX_LOG_BYTES)
    except FileNotFoundError:
        data = b""
    records = parse_events(data)
    valid = Events(skipped=records.skipped)
    for record in records:
        found = problems(record, partial=True)
        if found:
            valid.skipped.append(f"a record that is not the lab's event ({found[0]})")
        else:
            valid.append(record)
    return valid


def link_path(run_dir: Path, task: str) -> Path:
    return run_dir / LINKS / f"{checked_task(task)}.json"


def set_link(run_dir: Path, task: str, link: str) -> None:
    """A task's link profile (LINK, make chaos's slow-link), whole, where its delay proxy polls for
    it: the lab's space, mounted read-only into the proxies alone."""
    with lab_space(run_dir) as folder:
        folder.mkdir(LINKS)
        profile = task_contract.LinkProfile.parse(link)
        folder.write_whole(f"{LINKS}/{checked_task(task)}.json", json.dumps(profile.to_dict()))


def set_notice(run_dir: Path, task: str, preempted: bool) -> None:
    """A task's GCE notice (SCENARIO=preempt NOTICE=gce), whole, where the metadata stand-in
    (trainer/metadata.py) reads it at every request (the lab's space, mounted read-only into the
    stand-in alone); False removes it: the VM that replaces a preempted one is told nothing."""
    name = f"{METADATA}/{checked_task(task)}.json"
    with lab_space(run_dir) as folder:
        if not preempted:
            folder.unlink(name)
            return
        folder.mkdir(METADATA)
        folder.write_whole(name, json.dumps({"preempted": True}))


def lab_space(run_dir: Path) -> beneath.Beneath:
    """The run folder opened for the lab to write its own records (each write whole, through the
    folder's handle, never through a link); LabError where the folder is not the lab's user's: a
    run from before the two spaces, which a root lab handed to the trainers' user, whose tasks could
    write every file in it."""
    folder = beneath.Beneath(run_dir)
    owner = os.fstat(folder.fd).st_uid
    if owner != os.geteuid():
        folder.close()
        raise LabError(f"{foreign.named(run_dir)} belongs to uid {owner}, not to the lab's user (uid {os.geteuid()}): "
                       "a run folder from before the lab kept its records apart from its tasks' files, which "
                       "its tasks could write; the lab reads it but writes nothing into it")
    return folder


def write_json(path: Path, data) -> None:
    """Whole or not at all: a reader (or a full disk) never sees half a file, only the old one or
    the new one; and never through a link left at the name (beneath.Beneath.write_whole)."""
    write_whole(path, strict_json(data))


def write_whole(path: Path, text: str | bytes) -> None:
    path = Path(path)
    with beneath.Beneath(path.parent) as folder:
        folder.write_whole(path.name, text)


def replace_whole(path: Path, write) -> bool:
    """`write(temporary)` beside `path`, then renamed onto it: never half a file, and never through
    a link someone left at `path` (it is replaced, not written into). For writers that take a file
    name (matplotlib): the temporary is made first, exclusively and with no link followed, in the
    lab's own folder; it keeps `path`'s suffix, for writers that choose a format by it. Returns
    whether `write` wrote (False: it chose not to, and nothing is renamed); an OSError names `path`."""
    path = Path(path)
    # The writer opens its file by name, so it writes in a private folder of the lab's (0700, made
    # fresh), never in the run folder; the bytes then go in whole, through the folder's handle.
    with tempfile.TemporaryDirectory(prefix="tflab-") as private:
        temporary = Path(private) / f"{path.stem}{path.suffix}"
        try:
            if write(temporary) is False:
                return False
            with open(temporary, "rb") as file:
                data = file.read()
            write_whole(path, data)
        except OSError as error:
            raise OSError(error.errno, error.strerror, str(path)) from None
    return True


def container_user() -> tuple[int, int]:
    """The uid:gid trainers run as: the host user's, so the run folder stays theirs; never root."""
    uid, gid = os.getuid(), os.getgid()
    return (uid, gid) if uid != 0 else (1000, 1000)


def runs_dir(settings: Settings) -> Path:
    """RUNS_DIR, relative to the folder the lab was started from (the checkout, under make)."""
    return Path(settings.runs_dir).absolute()


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def planned(settings: Settings) -> Path:
    """The folder a new run will write: RUN, or a fresh id; refused if it exists, or where RUNS_DIR
    cannot take it (writable), before anything starts."""
    run_dir = runs_dir(settings) / (settings.run or new_run_id())
    if run_dir.exists() or run_dir.is_symlink():
        raise LabError(f"RUN={run_dir.name} already exists ({run_dir}); a run's outputs are never "
                       "overwritten: choose another RUN, or leave it empty for a fresh id")
    writable(run_dir.parent)
    return run_dir


RUNS_DIR_ALLOWED = "expected a folder the lab can write, whose latest (if any) is the lab's link to the newest run"


def runs_dir_safe() -> str:
    return (f"expected a folder on a path whose every folder is yours (uid {os.geteuid()}) or root's and writable by "
            "no other user (a group of yours alone may write; above RUNS_DIR, everyone only with the sticky bit, as "
            "/tmp)")


def writable(runs: Path) -> None:
    """LabError, one line, where a run cannot be made in `runs` (RUNS_DIR): `latest` is not the
    lab's link (a folder or file there would stop the link's update, after the run folder and
    owner.json were written), or the nearest folder that exists cannot hold a folder (read-only,
    another user's, /proc), found by making one there and removing it at once."""
    latest = runs / LATEST
    if latest.exists() or latest.is_symlink():
        if not latest.is_symlink():
            kind = "a folder" if latest.is_dir() else "a file"
            raise LabError(f"RUNS_DIR={runs} is not allowed: its {LATEST} is {kind}, not the lab's link to the newest "
                           f"run; {RUNS_DIR_ALLOWED} (move {latest} away)")
    existing = next((folder for folder in (runs, *runs.parents) if folder.exists()), Path("/"))
    if not existing.is_dir():
        raise LabError(f"RUNS_DIR={runs} is not allowed: {existing} is a file; {RUNS_DIR_ALLOWED}")
    # Another user who may write RUNS_DIR (or a folder above it) could rename a live run's folder
    # away (the lab then lost its run: exit 2, its containers left, no summary, no set-ID check) or
    # plant `latest`: refused before anything starts (issue 56).
    unsafe = hostfiles.others_may_write(existing, sticky_here=existing != runs)
    if unsafe:
        raise LabError(f"RUNS_DIR={runs} is not allowed: {unsafe}, so another user could rename or replace a run's "
                       f"folder while it runs; {runs_dir_safe()}")
    try:  # only trying tells: root passes every permission check, yet /proc and /sys refuse a folder
        os.rmdir(tempfile.mkdtemp(prefix=".tflab-probe-", dir=existing))
    except OSError as error:
        raise LabError(f"RUNS_DIR={runs} is not allowed: {existing} cannot hold a folder ({error.strerror or error}); "
                       f"{RUNS_DIR_ALLOWED}") from None


def existing(settings: Settings) -> Path:
    """The run a command refers to: RUN, else the newest (runs/latest)."""
    run_dir = runs_dir(settings) / (settings.run or LATEST)
    if not (run_dir / CONFIG).exists() and not (run_dir / COMPARE).exists():
        if settings.run:
            raise LabError(f"RUN={settings.run} does not exist in {runs_dir(settings)}")
        raise LabError(f"no runs yet in {runs_dir(settings)}; start one with `{lab_command('up')}`")
    return run_dir.resolve()


def make(path: Path, link_latest: bool, owner: bool = False) -> None:
    """Claims the run id: the folder is made with os.mkdir, which fails if it exists, so of two
    `up RUN=same` started together exactly one gets it, and the other is refused here before it
    has written or started anything (and so has nothing of the first run's to clean up). The
    folder is the lab's (its user's, 0700: PRIVATE) and holds the tasks' space, `tasks/`, the one
    folder the trainers' user may write. With `owner` (a run, not a compare's or k8s's folder) the claimant
    writes owner.json, which `down` reads to tell a live run from one left behind, and makes the
    tasks' space."""
    writable(path.parent)
    try:
        if not path.parent.is_dir():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.parent.chmod(PRIVATE)  # a RUNS_DIR the lab makes is only its user's; one the user made is theirs
    except OSError as error:  # a dangling link where RUNS_DIR is, a disk full meanwhile
        raise LabError(f"RUNS_DIR={path.parent} is not allowed: it cannot be made ({error.strerror or error}); "
                       f"{RUNS_DIR_ALLOWED}") from None
    try:
        os.mkdir(path, PRIVATE)
        os.chmod(path, PRIVATE)  # whatever the umask: only the lab's user may enter
    except FileExistsError:
        raise LabError(f"RUN={path.name} already exists ({path}): another run claimed it first; a run's "
                       "outputs are never overwritten: choose another RUN, or leave it empty for a fresh id") from None
    except OSError as error:  # a disk full or gone read-only since writable() looked
        raise LabError(f"RUNS_DIR={path.parent} is not allowed: {path} cannot be made "
                       f"({error.strerror or error}); {RUNS_DIR_ALLOWED}") from None
    temporary = path.parent / f".{LATEST}-{path.name}-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        if owner:  # a run: its tasks' space, and who claimed it
            with beneath.Beneath(path) as folder:
                folder.mkdir(TASKS)
                uid, gid = container_user()
                if os.getuid() == 0:
                    folder.chown(TASKS, uid, gid)  # the trainers run as a non-root user and write there, only there
                folder.write_whole(OWNER, json.dumps(owner_record(os.getpid(), path.name), indent=2) + "\n")
        if link_latest:
            # A name no other lab uses at the same moment, then one rename over the old link: two labs
            # updating `latest` together each leave a whole link, never none.
            temporary.symlink_to(path.name)
            os.replace(temporary, path.parent / LATEST)
    except OSError as error:  # latest made a folder since writable() looked, a full disk: the claim is undone
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)
            with beneath.Beneath(path) as folder:
                folder.unlink(OWNER)
            os.rmdir(path / TASKS)
            os.rmdir(path)
        raise LabError(f"RUNS_DIR={path.parent} is not allowed: the run {path.name} could not be set up there "
                       f"({error.strerror or error}); {RUNS_DIR_ALLOWED}") from None


def run_config(settings: "Settings | Mapping[str, Any]", run: str, cluster: Cluster, **more) -> dict:
    """config.json: the settings, the cluster spec, every task and its TF_CONFIG (cluster.Cluster's
    names: spec, tasks, tf_configs). The one writer of it, for the lab's runs and a replay's, whose
    settings are what its manifest says (a mapping, tfjob.replay_settings) and whose cluster is its
    plan's (tfjob.Plan.as_cluster); `more`: a replay's own keys (tfjob, hosts)."""
    return {
        "run": run,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": settings.replace(run=run).to_dict() if isinstance(settings, Settings) else dict(settings),
        "cluster": cluster.spec,
        "tasks": list(cluster.tasks),
        "tf_config": cluster.tf_configs(),
        "layout": LAYOUT,
        **more,
    }


def write_config(run_dir: Path, settings: "Settings | Mapping[str, Any]", cluster: Cluster, **more) -> None:
    write_lab_json(run_dir, CONFIG, run_config(settings, run_dir.name, cluster, **more))


def write_lab_json(run_dir: Path, name: str, data) -> None:
    """One of the lab's records, whole, in the run folder's own space (never into a tasks' space)."""
    with lab_space(run_dir) as folder:
        folder.write_whole(name, strict_json(data))


def strict_json(data) -> str:
    """JSON that every reader takes (jq included): JSON has no NaN or infinity, so a loss that went
    NaN is written as the word the task logs use for it (schema.loss_field: "nan", "inf", "-inf"),
    and read back as the float (Summary.from_dict)."""
    def words(value):
        if isinstance(value, float) and not math.isfinite(value):
            return loss_field(value)
        if isinstance(value, dict):
            return {key: words(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [words(item) for item in value]
        return value

    return json.dumps(words(data), indent=2, allow_nan=False) + "\n"


def read_lab_json(run_dir: Path, name: str) -> Any:
    """A JSON record of the run folder, read as foreign: FileNotFoundError where there is none,
    ForeignFile (one line) for anything else the lab did not write."""
    data = read_lab_file(run_dir, name, foreign.MAX_JSON_BYTES)
    try:
        return foreign.parse_json(data)
    except ValueError as error:
        raise ForeignFile(f"{foreign.named(run_dir / name)} {error}") from None


def read_config(run_dir: Path) -> dict:
    """config.json, read as foreign: ForeignFile unless it is an object (FileNotFoundError if none)."""
    data = read_lab_json(run_dir, CONFIG)
    if not isinstance(data, dict):
        raise ForeignFile(f"{foreign.named(run_dir / CONFIG)} is a JSON {type(data).__name__}, not the object the "
                          "lab writes")
    return data


def read_run_config(path: str | Path) -> tuple[dict, Settings]:
    """A run's config.json and its settings, checked as the host checks them (from_dict), for
    the trainer and the script launcher; SettingsError (one line naming the file and the field)
    for anything else."""
    try:
        config = json.loads(Path(path).read_text())
    except OSError as error:
        raise SettingsError(f"{path} cannot be read: {error.strerror or error}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise SettingsError(f"{path} is not JSON: {error}") from None
    if not isinstance(config, dict):
        raise SettingsError(f"{path} holds {type(config).__name__}, not the object the lab writes")
    for key, kind in (("settings", dict), ("cluster", dict)):
        if not isinstance(config.get(key), kind):
            raise SettingsError(f"{path}: {key} is {json.dumps(config.get(key))}, not an object")  # json.loads made it
    try:
        return config, Settings.from_dict(config["settings"])
    except SettingsError as error:
        raise SettingsError(f"{path}: {error}") from None
