"""AUDIT's worker-leftover finding: what a non-chief task saved inside the folder where the chief
saved its model or checkpoints, and left there when the run ended.

Under MultiWorkerMirroredStrategy every worker must take part in a save, so each non-chief saves
somewhere of its own: tf-keras's distributed_file_utils (ModelCheckpoint, BackupAndRestore) writes
it to `<dir>/workertemp_<id>` and deletes it after the save (remove_temp_dirpath), as TensorFlow's
multi-worker tutorial does with tf.io.gfile.rmtree. The training operator's distribution_strategy
example saves worker-1's model to `<saved_model_dir>/worker_tmp_1` and never deletes it: the
exported SavedModel then holds a second, stray SavedModel inside it, whatever serves or copies it.

The chief's model and checkpoint folders are where its audited saves went (`audit_write`: a
Model.save or save_weights, a tf.train checkpoint; not a tf.io.gfile file), on the run's shared
storage the lab can see: the tasks' space (`/lab/run`, $TFLAB_OUTPUT) or a replay's volumes. In
each (the saved path's folder, and the path itself where it is a SavedModel folder) an entry is a
leftover where its name is a non-chief's temporary (`workertemp_<n>`, `worker_tmp_<n>`), or where a
non-chief's own audited save went into it (the entry, or a folder the save's file is in), and the
chief never saved there. Every folder is foreign (a task wrote it): read through beneath.Beneath
from the run folder's handle, no link followed, at most MOST_ENTRIES names a folder and
MOST_FOLDERS folders; a link where a folder was is passed over, never read through.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

from tflab.core import beneath, runfolder
from tflab.core.errors import ForeignFile
from tflab.core.schema import by_event
from tflab.core.task import RUN_MOUNT

KIND = "worker-leftover"
MODEL_WRITERS = ("Model.save", "Model.save_weights", "Checkpoint.save", "Checkpoint.write", "CheckpointManager.save")
# tf-keras's distributed_file_utils._get_temp_dir and TensorFlow's tutorial: workertemp_<task id>;
# the training operator's examples/tensorflow/distribution_strategy: worker_tmp_<task index>.
TEMPORARY = re.compile(r"(?:workertemp|worker_tmp)_(\d{1,9})")
MOST_ENTRIES = 10_000  # names read in one folder
MOST_FOLDERS = 64  # the chief's folders looked in
SHOWN = 5  # leftovers named in the message

FIX = ("save on every non-chief task to a temporary path of its own and delete it after the save, as tf-keras's "
       "distributed_file_utils does (write_filepath, then remove_temp_dirpath) and TensorFlow's multi-worker "
       "tutorial does (tf.io.gfile.rmtree of its workertemp_<task id>), or outside the chief's folder "
       "(the task's own /tmp); then remove what is left in the chief's folder before exporting it")


@dataclass(frozen=True)
class Space:
    """A folder the tasks write that the lab can read: `prefix` as a task sees it (/lab/run, a
    mount's target), `relative` the same folder under the run folder ("tasks", "volumes/<name>";
    "" for a run folder of one space)."""

    prefix: str
    relative: str


@dataclass(frozen=True)
class Leftover:
    path: str  # as the chief's task sees it
    kind: str  # a folder, a file, a link
    folder: str  # the chief's folder it lies in
    task: str  # who left it, "" where only its name says it is a non-chief's
    how: str  # the save that wrote it, where the task's audit saw one


def run_spaces(run_dir: Path, tasks: list[str]) -> dict[str, list[Space]]:
    """A lab run's: its tasks' space, as a container sees it (RUN_MOUNT) and as BACKEND=local's
    processes do (its path, and that path resolved: a task's audit records paths resolved)."""
    relative = runfolder.TASKS if runfolder.two_spaces(run_dir) else ""
    space = runfolder.task_space(run_dir)
    prefixes = sorted({RUN_MOUNT, str(space), posixpath.realpath(space)})
    return {task: [Space(prefix, relative) for prefix in prefixes] for task in tasks}


def located(path, spaces: list[Space]) -> tuple[str, str] | None:
    """(the path under the run folder, the path as the task saw it) for a task's path inside one
    of its spaces (the longest prefix); None outside them, or for a path that is no plain one."""
    if not isinstance(path, str) or not path.startswith("/"):
        return None
    for space in sorted(spaces, key=lambda s: len(s.prefix), reverse=True):
        prefix = space.prefix.rstrip("/")
        if not prefix or (path != prefix and not path.startswith(prefix + "/")):
            continue
        inside = path[len(prefix):].strip("/")
        relative = "/".join(part for part in (space.relative, inside) if part)
        try:
            if relative:
                beneath.parts_of(relative)
        except beneath.Refused:
            return None
        return relative, path
    return None


def saves(records: list[dict]) -> list[dict]:
    return [r for r in by_event(records, "audit_write") if r.get("writer") in MODEL_WRITERS
            and r.get("storage") == "shared" and isinstance(r.get("path"), str)]


def chief_folders(folder: beneath.Beneath, records: list[dict], spaces: list[Space]) -> dict[str, str]:
    """The chief's model and checkpoint folders: under the run folder -> as the chief saw them."""
    found: dict[str, str] = {}
    roots = {space.relative for space in spaces}
    for path in dict.fromkeys(r["path"] for r in saves(records)):  # a checkpoint a step: one look a path
        where = located(path, spaces)
        if where is None:
            continue
        relative, path = where
        if relative not in roots:  # the saved path's folder, where it is still one of the spaces
            found.setdefault(posixpath.dirname(relative), posixpath.dirname(path))
        if relative and folder.kind(relative) == "folder":  # a SavedModel is a folder
            found.setdefault(relative, path)
        if len(found) >= MOST_FOLDERS:
            break
    return found


def leftovers(run_dir: Path, records: dict[str, list[dict]], chief: str,
              spaces: dict[str, list[Space]]) -> list[Leftover]:
    """What non-chief tasks left in the chief's folders, as it lies at the end of the run."""
    if chief not in records or not spaces.get(chief):
        return []
    chief_paths = {r["path"] for r in saves(records[chief])}
    found: dict[tuple[str, str], Leftover] = {}
    try:
        folder = beneath.Beneath(run_dir)
    except (OSError, ForeignFile):
        return []
    with folder:
        for relative, shown in chief_folders(folder, records[chief], spaces[chief]).items():
            try:
                entries = dict(folder.entries(relative, MOST_ENTRIES)[0])
            except (OSError, ForeignFile):  # gone, or a link or file where the folder was: never read through
                continue
            # the entries the chief saved in or as itself: never a leftover, whatever their names
            mine = {posixpath.join(shown, p[len(shown):].lstrip("/").split("/")[0])
                    for p in chief_paths if p.startswith(shown.rstrip("/") + "/")}
            for name, kind in entries.items():
                number = TEMPORARY.fullmatch(name)
                if number and posixpath.join(shown, name) not in mine:
                    task = f"worker-{int(number.group(1))}"
                    found[(relative, name)] = Leftover(posixpath.join(shown, name), kind, shown,
                                                       task if task in records and task != chief else "",
                                                       "named as a non-chief's temporary save")
            for task, task_records in records.items():
                if task == chief:
                    continue
                for record in saves(task_records):
                    where = located(record["path"], spaces.get(task, []))
                    if where is None or record["path"] in chief_paths:
                        continue
                    parts = where[0][len(relative):].lstrip("/").split("/") if relative else where[0].split("/")
                    inside = where[0].startswith(relative + "/") if relative else bool(where[0])
                    if not inside or len(parts) > 2 or parts[0] not in entries:
                        continue
                    path = posixpath.join(shown, parts[0])
                    if path in mine:
                        continue
                    how = record["writer"] + (f" at {record['caller']}" if record.get("caller") else "")
                    found[(relative, parts[0])] = Leftover(path, entries[parts[0]], shown, task, how)
    return list(found.values())


def leftover_finding(run_dir: Path, records: dict[str, list[dict]], chief: str,
                     spaces: dict[str, list[Space]]) -> tuple[list[str], str] | None:
    """The tasks that left something and the finding's message; None where nothing was left
    (audit.py makes it a Finding, with FIX)."""
    found = leftovers(run_dir, records, chief, spaces)
    if not found:
        return None
    tasks = sorted({left.task for left in found if left.task}, key=list(records).index)
    words = []
    for left in found[:SHOWN]:
        who = left.task or "a non-chief task (by its name)"
        how = f", {left.how}" if left.how.startswith("named") else f", by {left.how}"
        kind = {"folder": "a folder", "file": "a file", "link": "a link"}.get(left.kind, "an entry")
        words.append(f"{who} left {left.path} ({kind}{how}) in {left.folder}")
    more = f" (and {len(found) - SHOWN} more)" if len(found) > SHOWN else ""
    return tasks, (f"{'; '.join(words)}{more}: the folder where the chief ({chief}) saved its model or checkpoints "
                   "still holds a non-chief's own save at the end of the run, so whatever exports, serves or "
                   "restores that folder carries a second, stray model inside the chief's")
