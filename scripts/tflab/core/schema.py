"""The timing log contract: one JSON object per line in runs/<RUN>/<task>.jsonl.

Every line has `event`, `task` and `time` (unix seconds); each event adds the fields below. The
trainer writes through `EventLog`, which refuses an event that does not match, so a log that
exists is a log that validates. Tests, the summary and reports read logs with `read_events`.

Shared by the host side and the trainer: imports neither TensorFlow nor any Docker code.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Iterable

from tflab.core import foreign
from tflab.core.task import LEGACY_KERAS

NUMBER = (int, float)
# JSON has no NaN or infinity (Python's json writes `NaN`, which jq, Go and JavaScript refuse), so a
# loss that is not finite is logged as one of these strings: a run whose loss went NaN still logs
# its epochs, and says so (loss_value reads either back as a float).
NONFINITE = ("nan", "inf", "-inf")
LOSS = (int, float, str)
Kinds = dict[str, "type | tuple[type, ...]"]  # field -> the JSON types it may hold
COMMON: Kinds = {"event": str, "task": str, "time": NUMBER}
# trainer: the lab's training script; server: parameter_server's workers and ps, which only
# serve; script: a user's own script (SCRIPT=...), watched from outside by tflab/trainer/launch.py;
# evaluator: EVALUATOR=1's evaluator-0, which evaluates the chief's checkpoints.
ROLES = ("trainer", "server", "script", "evaluator")
# The audit logs an audit_batch for each of the first this many steps of a pass (trainer/audit.py);
# the stall watch reads a step number below it as a step whose next one is due (supervisor/stall.py).
AUDIT_SAMPLED_STEPS = 16
EVENTS: dict[str, dict[str, type | tuple[type, ...]]] = {
    # What the task is and with what it runs.
    "start": {"role": str, "strategy": str, "cluster": dict, "versions": dict, "settings": dict},
    # Seconds from the task's start until its strategy (a server: its gRPC server) was up,
    # imports and rendezvous included.
    "cluster_ready": {"seconds": NUMBER, "replicas": int, "devices": list},
    # After a restart: training resumed from the backup at this epoch (1-based) and step in it.
    "restored": {"epoch": int, "step": int},
    # A user's script only (trainer/observe.py): a Keras fit began its first step, at this epoch
    # (1-based) and step in it, of `epochs`; its BackupAndRestore's folder where it has one.
    "fit": {"epoch": int, "step": int, "epochs": int},
    # A user's script only: a tf.train checkpoint restored (`path`), or none found in `path`.
    "checkpoint": {"found": bool, "path": str},
    # make chaos AT=step:N's target only, once: the training step it reached (the first at or past
    # N that its hooks saw), in epoch `epoch` (1-based), where it holds for the fault (trainer/chaosstep.py).
    "step": {"step": int, "epoch": int},
    # make chaos AT=save:N's target only, once: TensorFlow is about to merge its `save`th checkpoint,
    # whose shard files (`written`) are on disk and whose index (`file`) is not (`index_exists`: an
    # older one under that name); paths relative to the run's folder where they lie there. It
    # holds there for the fault (trainer/chaossave.py).
    "saving": {"save": int, "file": str, "written": list, "index_exists": bool},
    # make chaos AT=restore's or AT=eval:N's target only, once: it is about to read the checkpoint
    # `file`, the `restore`th this process reads (`files`: that checkpoint's files), and holds there.
    "restoring": {"restore": int, "file": str, "files": list},
    # One per epoch, 1-based. `loss` is Keras's mean training loss over the epoch.
    "epoch": {"epoch": int, "loss": LOSS, "seconds": NUMBER, "steps": int},
    # The evaluator: a checkpoint the chief wrote after `epoch` (at global step `step`), evaluated
    # on the whole data set; the checkpoints it skipped (it takes the newest) have none.
    "eval": {"epoch": int, "step": int, "loss": LOSS, "seconds": NUMBER},
    # Only with ALLREDUCE_PROBE: bare all-reduces of `floats` float32s, timed after training.
    "allreduce": {"floats": int, "calls": int, "median_seconds": NUMBER},
    # The task's result; a trainer adds TRAINER_END, a script SCRIPT_END.
    "end": {"role": str, "total_seconds": NUMBER, "peak_rss_bytes": int},
    # Any failure; the task exits non-zero after writing it.
    "error": {"message": str},
    # AUDIT=on|strict (trainer/audit.py; compared by tflab/supervisor/audit.py). `pass`: the task's distributed
    # iterators counted from 1 (a fresh one each epoch in fit and the usual loops). One per sampled
    # step (the first AUDIT_SAMPLED_STEPS of each pass): sha256 of the worker's whole
    # batch, and a short digest per example, never the data.
    "audit_batch": {"pass": int, "step": int, "examples": int, "digest": str, "example_digests": list},
    # Per pass: the steps and examples this worker consumed, and the dataset's AutoShardPolicy
    # (OFF, AUTO, DATA, FILE, HINT; "function" for distribute_datasets_from_function).
    "audit_pass": {"pass": int, "steps": int, "examples": int, "policy": str},
    # A write through TF's or Keras's writers (`writer`: Model.save, Checkpoint.write, tf.io.gfile,
    # ...): the path as the task saw it, its bytes after the call, `storage` shared (the run folder,
    # a mounted volume, a bucket; any path of BACKEND=local) or own (the container's own files),
    # `during` fit (a callback's) or script, and the script's line that called it.
    "audit_write": {"path": str, "writer": str, "bytes": int, "storage": str, "during": str,
                    "seconds": NUMBER, "caller": str},
    # sha256 of the trainable weights of the models built under a strategy's scope, `at` the end of
    # fit's epoch `epoch`, of a pass outside fit, or the task's end.
    "audit_weights": {"at": str, "epoch": int, "digest": str, "parameters": int},
    # A script's: a Keras it imported (`keras`, Keras 3, or `tf_keras`, tf.keras under
    # TF_USE_LEGACY_KERAS=1) and its version, from inside its process (trainer/kerasversion.py).
    "imported": {"module": str, "version": str},
}
# Fields an event has only where its writer knows them: checked when present.
OPTIONAL_FIELDS: dict[str, dict[str, type | tuple[type, ...]]] = {
    # The lab's trainer and tflab's callback know the batch; Keras's own epochs (observe.py) do not.
    # rss_bytes: the task's resident memory at the epoch's end (/proc/self/statm), where it can be
    # read: the audit's memory-growth finding fits its slope (supervisor/memory.py). pss_bytes and
    # uss_bytes: its proportional and unique set sizes (/proc/self/smaps_rollup): what a task costs
    # where its tasks share TensorFlow's library pages (make bench's memory line).
    "epoch": {"examples_per_second": NUMBER, "rss_bytes": int, "pss_bytes": int, "uss_bytes": int},
    # backup_dir: as the script's BackupAndRestore has it, made absolute; backup_kept: whether it
    # lies in $TFLAB_OUTPUT, the run folder, which outlives a restart. steps: an epoch's, where fit
    # knows them (steps_per_epoch, or a dataset of known length).
    "fit": {"backup_dir": str, "backup_kept": bool, "steps": int},
    # What the restored checkpoint's integer scalars hold (the custom-loop tutorial's `epoch`, say).
    "checkpoint": {"counters": dict},
    # How many of the weights were NaN or infinite (the audit's since issue 36).
    "audit_weights": {"nonfinite": int},
    # The lab's trainer's, since issue 43: {"name", "size", "sum", "l2"} per variable (sum and l2 as
    # loss_field writes a number), which make chaos's verdict compares within a tolerance; the
    # digest beside it can only say equal or not.
    "end": {"weights_fingerprint": list},
}
LAB_START: Kinds = {"baseline_loss": NUMBER}  # what the lab's own data set scores predicting 0
SCRIPT_END: Kinds = {"exit_code": int}  # the user's script's own exit code
TRAINER_END: Kinds = {"final_loss": LOSS, "first_step_seconds": NUMBER, "first_step_at": NUMBER,
               "steady_step_seconds": NUMBER, "weights_sha256": str, "parameters": int}
EVALUATOR_END: Kinds = {"evaluations": int}
OPTIONAL_EVENTS = ("allreduce", "fit", "checkpoint", "step", "saving", "restoring", "imported", "audit_batch",
                   "audit_pass", "audit_write", "audit_weights")
# What readers index in any record they take (the runner's restart decision, chaos's timing), so
# even a partial record (schema.problems(partial=True)) has them.
ESSENTIAL = {"error": ("message",)}
LARGEST_INT = 2**63 - 1  # what any count, size or step of a run fits in (and a float converts from)


class SchemaError(ValueError):
    pass


def start_versions(tensorflow: str) -> dict:
    """The `start` event's `versions`, the ones that decide behaviour: `tensorflow` as the caller
    knows it (the trainer from TensorFlow itself; the launcher, which must not import it, from its
    distribution); `keras`, the package tf.keras really is (tf-keras with TF_USE_LEGACY_KERAS=1,
    else Keras 3, perhaps the keras-nightly distribution of TF 2.22's KERAS=nightly), read without
    importing it; `machine`, the architecture it ran on (aarch64 in the arm64 image, emulated or
    not)."""
    legacy = all(os.environ.get(name) == value for name, value in LEGACY_KERAS.items())
    package = "tf-keras" if legacy else "keras"
    keras = distribution_version(*(("keras", "keras-nightly") if package == "keras" else (package,)))
    return {"tensorflow": tensorflow, "keras": f"{package} {keras}", "python": sys.version.split()[0],
            "machine": platform.machine()}  # x86_64 | aarch64


def distribution_version(*names: str) -> str:
    """The installed release of the first of these distributions that is installed."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "not installed"


def problems(record: dict, partial: bool = False) -> list[str]:
    """What is wrong with one log record (empty when it is valid); values are quoted with repr,
    cut short, so a message never carries a control character raw. `partial`: a field left out is
    no problem unless every reader needs it (COMMON, ESSENTIAL), one of the wrong type is (what
    runfolder.events asks of every record it hands on)."""
    if not isinstance(record, dict):
        return [f"not a JSON object: {foreign.shown(repr(record), 100)}"]
    event = record.get("event")
    if not isinstance(event, str) or event not in EVENTS:
        return [f"unknown event {foreign.shown(repr(event), 100)}; expected one of {', '.join(EVENTS)}"]
    found = []
    fields = {**COMMON, **EVENTS[event]}
    if event in ("start", "end") and record.get("role") not in ROLES and not (partial and "role" not in record):
        found.append(f"{event}: role={foreign.shown(repr(record.get('role')), 100)} is not one of {', '.join(ROLES)}")
    role = record.get("role") if isinstance(record.get("role"), str) else None
    if event == "start" and role in ("trainer", "server", "evaluator"):
        fields.update(LAB_START)
    if event == "end":
        fields.update({"trainer": TRAINER_END, "script": SCRIPT_END, "evaluator": EVALUATOR_END}.get(role or "", {}))
    optional = OPTIONAL_FIELDS.get(event, {})
    for name, kind in {**fields, **optional}.items():
        if name not in record:
            if name not in optional and (not partial or name in COMMON or name in ESSENTIAL.get(event, ())):
                found.append(f"{event}: missing {name}")
        elif (isinstance(record[name], bool) and kind is not bool) or not isinstance(record[name], kind):
            found.append(f"{event}: {name}={foreign.shown(repr(record[name]), 100)} is not {_kind_name(kind)}")
        elif kind == LOSS and isinstance(record[name], str) and record[name] not in NONFINITE:
            found.append(f"{event}: {name}={foreign.shown(repr(record[name]), 100)} is not a number "
                         f"or one of {', '.join(NONFINITE)}")
        elif isinstance(record[name], float) and not math.isfinite(record[name]):
            found.append(f"{event}: {name}={record[name]!r} is not finite")
        elif isinstance(record[name], int) and not -LARGEST_INT <= record[name] <= LARGEST_INT:
            found.append(f"{event}: {name} is an integer of {len(str(abs(record[name])))} digits, out of range")
    return found


def _kind_name(kind) -> str:
    return "a number" if kind == NUMBER else f"a number or one of {', '.join(NONFINITE)}" if kind == LOSS \
        else f"a {kind.__name__}"


def loss_field(value: float) -> float | str:
    """A loss as an event carries it: the number, or NONFINITE's word for it."""
    value = float(value)
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else "inf" if value > 0 else "-inf"


def loss_value(field) -> float:
    """An event's loss (a number, or one of NONFINITE: checked by problems) as a float, nan included."""
    return float(field)


def finite(field) -> bool:
    """Whether an event's loss is a number, not NaN or an infinity."""
    return isinstance(field, (int, float)) and not isinstance(field, bool) and math.isfinite(field)


def attempts(records: list[dict]) -> list[list[dict]]:
    """A log split at each `start`: the lab appends one attempt per (re)start of the task."""
    found: list[list[dict]] = []
    for record in records:
        if record.get("event") == "start" or not found:
            found.append([])
        found[-1].append(record)
    return found


def completeness(records: list[dict], epochs: int, role: str = "trainer") -> list[str]:
    """What a finished, successful task's log lacks. Its last attempt must be start,
    cluster_ready, (restored,) the remaining epochs up to N, end (a server: start, cluster_ready,
    end); optional events may come anywhere before the end, and earlier attempts must have
    ended without an `end`."""
    found = [p for record in records for p in problems(record)]
    tries = attempts(records)
    if not tries:
        return found + ["no events at all"]
    for earlier in tries[:-1]:
        if any(r.get("event") == "end" for r in earlier):
            found.append("an attempt before the last one has an end event")
    last = tries[-1]
    kinds = [r.get("event") for r in last if r.get("event") not in OPTIONAL_EVENTS]
    if "error" in kinds:
        found.append(f"error: {next(r for r in last if r.get('event') == 'error')['message']}")
    restored = next((r for r in last if r.get("event") == "restored"), None)
    first_epoch = restored["epoch"] if restored else 1
    if role == "server":
        expected = ["start", "cluster_ready", "end"]
    elif role == "evaluator":  # one eval per checkpoint it took, the last epoch's always
        evals = [r.get("epoch") for r in last if r.get("event") == "eval"]
        expected = ["start"] + ["eval"] * len(evals) + ["end"]
        if not evals or evals[-1] != epochs:
            found.append(f"evaluated epochs {evals} do not end with the last, {epochs}")
    elif role == "script":  # its epochs (and a restore) as its Keras fits logged them, or none (a custom loop)
        expected = ["start"] + [k for k in kinds if k in ("restored", "epoch")] + ["end"]
    else:
        expected = (["start", "cluster_ready"] + ["restored"] * bool(restored)
                    + ["epoch"] * (epochs - first_epoch + 1) + ["end"])
    if kinds != expected:
        found.append(f"events {kinds} are not {expected}")
    epoch_numbers = [r.get("epoch") for r in last if r.get("event") == "epoch"]
    if role == "trainer" and epoch_numbers != list(range(first_epoch, epochs + 1)):
        found.append(f"epochs {epoch_numbers} are not {first_epoch}..{epochs}")
    roles = {r.get("role") for r in last if r.get("event") in ("start", "end")}
    if roles != {role}:
        found.append(f"roles {sorted(map(str, roles))} are not [{role!r}]")
    return found


class Events(list):
    """A log's records, and what was skipped reading it: `skipped` holds one "line N: why" per
    line that is no JSON object (a task's own stray line, a line torn mid-write is not counted)."""

    def __init__(self, records=(), skipped=()):
        super().__init__(records)
        self.skipped = list(skipped)


def read_events(path: Path) -> Events:
    """Every JSON object of a log, read as foreign (foreign.py): a missing file reads as no
    records, a torn last line is skipped, and so is any line that is no JSON object (counted in
    `skipped`); a folder, FIFO, unreadable or over-large file is a ForeignFile, one line."""
    try:
        data = foreign.read_bytes(Path(path), foreign.MAX_LOG_BYTES)
    except FileNotFoundError:
        return Events()
    return parse_events(data)


def parse_events(data: bytes) -> Events:
    """A log's bytes as read_events reads them (runfolder.events reads a run's through beneath.py)."""
    lines = data.split(b"\n")
    torn = lines.pop()  # after the last line break: b"" or a line still being written
    events = Events()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        record, why = foreign.json_line(line)
        if record is None:
            events.skipped.append(f"line {number}: {why}")
        else:
            events.append(record)
    if torn.strip():
        record, _ = foreign.json_line(torn)
        if record is not None:  # a last line written whole but without its line break
            events.append(record)
    return events


# Set only by a replay's hooks (trainer/replayhooks.py) in a replica running the lab's own program:
# a file every event is copied to as well, the replica's hooks folder, which the host reads. The
# program's own log may be a pod's emptyDir, which the host cannot see.
COPY_ENV = "TFLAB_EVENTS_COPY"


class EventLog:
    """Appends validated events to one task's JSONL file, flushed line by line (and to COPY_ENV's
    file, where it is set)."""

    def __init__(self, path: str | Path, task: str):
        self.path = Path(path)
        self.task = task
        # Several processes append to one task's log (the launcher, the script's observer and
        # callback, the trainer's watchdog): each line is one write() to an O_APPEND file, which
        # the kernel places whole at the end, so lines never interleave.
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
        self._fd = os.open(self.path, flags, 0o666)
        self._copy = -1
        copy = os.environ.get(COPY_ENV, "")
        if copy and os.path.abspath(copy) != os.path.abspath(self.path):
            try:
                self._copy = os.open(copy, flags, 0o666)
            except OSError:
                pass  # the copy is the replay's; the program logs on without it

    def emit(self, event: str, **fields) -> dict:
        record = {"event": event, "task": self.task, "time": time.time(), **fields}
        found = problems(record)
        if found:
            raise SchemaError("; ".join(found))
        line = (json.dumps(record, sort_keys=False) + "\n").encode()
        written = os.write(self._fd, line)
        if written != len(line):  # a full disk: what is left would land after another's line
            raise OSError(f"{self.path}: {written} of {len(line)} bytes written")
        if self._copy >= 0:
            try:
                os.write(self._copy, line)
            except OSError:
                pass
        return record

    def close(self) -> None:
        if self._copy >= 0:
            try:
                os.fsync(self._copy)
            except OSError:
                pass
            os.close(self._copy)
            self._copy = -1
        if self._fd < 0:
            return
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1


def complete(records: Iterable[dict]) -> list[dict]:
    """The records that have every field of their event, each of its type."""
    return [record for record in records if not problems(record)]


def by_event(records: Iterable[dict], event: str) -> list[dict]:
    return [r for r in records if r.get("event") == event]
