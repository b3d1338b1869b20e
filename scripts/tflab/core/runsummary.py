"""summary.json as a typed, versioned record: `Summary` and its `TaskRow`s, which also read as the
dict their JSON is. One writer, `Summary.write`, and one reader, `Summary.read`, which checks every
field against its annotation and refuses a file the lab did not write in one line (ForeignFile);
the file itself lies in the lab's space of the run folder (runfolder.py).

Shared by the host side and the trainer: imports neither TensorFlow nor any Docker code.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Iterator

from tflab.core import foreign
from tflab.core.foreign import ForeignFile
from tflab.core.runfolder import SUMMARY, read_lab_json, write_lab_json
from tflab.core.schema import NONFINITE

SUMMARY_VERSION = 1  # 1: the first versioned summary (2026-12); a file without `version` is older


class Record(Mapping):
    """A typed record that also reads as the dict its JSON is: `summary.ok` and `summary["ok"]`
    both work, so tests written against the JSON (the fixture's users' among them) keep working."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # every Record is a dataclass

    def __getitem__(self, key: str):
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def _keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self) if not (f.name in OPTIONAL and getattr(self, f.name) is None)]

    def to_dict(self) -> dict:
        return {key: value.to_dict() if isinstance(value, Record) else
                [item.to_dict() if isinstance(item, Record) else item for item in value] if isinstance(value, list)
                else value for key, value in self.items()}


# left out of the JSON when None
OPTIONAL = {"evals", "host", "image", "chaos", "tfjob", "not_applied", "weights_fingerprint"}


@dataclasses.dataclass(eq=False)
class TaskRow(Record):
    """One task's line of the summary: from its log, its exit code and the engine's word on it."""

    task: str
    status: str  # ok, failed, stopped (still running when the lab ended the run), missing
    role: str = "trainer"  # schema.ROLES
    exit_code: int | None = None
    epochs_done: int = 0
    losses: list = dataclasses.field(default_factory=list)
    attempts: int = 0
    restored: list = dataclasses.field(default_factory=list)  # {"epoch", "step"} after each restart
    # A script's: {"attempt", "resumed" (true, false, null: unseen), "words"} per restarted attempt (resume.py)
    resumes: list = dataclasses.field(default_factory=list)
    earlier_errors: list = dataclasses.field(default_factory=list)  # the errors of attempts before the last
    final_loss: float | None = None
    cluster_ready_seconds: float | None = None
    first_step_seconds: float | None = None
    steady_step_seconds: float | None = None
    examples_per_second: float | None = None
    total_seconds: float | None = None
    peak_rss_bytes: int | None = None
    weights_sha256: str | None = None
    weights_fingerprint: list | None = None  # the lab's trainer's: {"name", "size", "sum", "l2"} per variable
    parameters: int | None = None
    first_step_at: float | None = None
    error: str | None = None
    explanation: dict | None = None  # explain.Explanation's dict, for a task that failed by itself
    evals: list | None = None  # the evaluator's: {"epoch", "step", "loss"} per checkpoint
    host: str | None = None  # a TFJob replay's: the replica's hostname
    image: str | None = None  # a TFJob replay's: the replica's image
    restart_count: int | None = None  # a TFJob replay's: the kubelet's restarts of it in place (restartCount)


@dataclasses.dataclass(eq=False)
class Summary(Record):
    """summary.json: the run's outcome and one TaskRow per task."""

    run: str
    strategy: str  # or "tfjob" for a replay
    backend: str
    outcome: str  # ok, failed, timed out, stalled, interrupted
    ok: bool
    launched_at: float  # unix time the tasks were started
    wall_seconds: float
    settings: dict
    weights_agree: bool
    tasks: list[TaskRow]
    restarts: list = dataclasses.field(default_factory=list)  # unix time of each restart
    chaos: dict | None = None  # make chaos: what was done, when it was noticed and recovered
    tfjob: str | None = None  # a replay's manifest
    not_applied: list | None = None  # a replay's fields the lab does not apply
    reason: str | None = None  # a replay that failed as its operator words it (TFJobFailed: ...)
    # AUDIT (tflab/supervisor/audit.py): each finding's kind, tasks, message and fix; notes on cost, one line each.
    findings: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)
    # Where every task was at a stall, or before the lab stopped them (supervisor/stall.py's Finding):
    # kind, what (who stopped where, who waits on whom), fix, link, places (task -> where), seconds.
    stall: dict | None = None
    version: int = SUMMARY_VERSION

    def write(self, run_dir: Path) -> None:
        write_lab_json(run_dir, SUMMARY, self.to_dict())

    @classmethod
    def from_dict(cls, data: Any) -> "Summary":
        """A summary from its JSON; ValueError (TypeError's subclass SummaryError included, whose
        message names the field) for anything the lab did not write: every field is checked
        against its annotation here, so no reader meets a string where a number is."""
        if not isinstance(data, dict) or not isinstance(data.get("tasks"), list):
            raise SummaryError("not a summary: no list of tasks")
        data = {**data, "tasks": [numbers(row) for row in data["tasks"]]}
        rows = [checked_record(TaskRow, row, f"tasks[{index}].") for index, row in enumerate(data["tasks"])]
        return checked_record(cls, {**data, "tasks": rows}, "")

    @classmethod
    def read(cls, run_dir: Path) -> "Summary":
        """FileNotFoundError where the run has none yet; ForeignFile (one line naming the file and
        what is wrong) for a file the lab did not write."""
        path = run_dir / SUMMARY
        try:
            return cls.from_dict(read_lab_json(run_dir, SUMMARY))
        except SummaryError as error:
            raise ForeignFile(f"{foreign.named(path)} is not a summary the lab wrote: {error}") from None


def numbers(row):
    """A row's losses as floats again where strict_json wrote a non-finite one as its word."""
    if not isinstance(row, dict):
        return row
    row = dict(row)
    if row.get("final_loss") in NONFINITE:
        row["final_loss"] = float(row["final_loss"])
    if isinstance(row.get("losses"), list):
        row["losses"] = [float(loss) if loss in NONFINITE else loss for loss in row["losses"]]
    return row


class SummaryError(TypeError, ValueError):
    """A summary's field of the wrong type; str() names the field."""


# Annotation -> the JSON types it takes (bool is no number: JSON's true is not 1 here).
KINDS = {"str": (str,), "int": (int,), "float": (int, float), "bool": (bool,), "list": (list,), "dict": (dict,),
         "list[TaskRow]": (list,)}
# What readers index inside a summary's containers (table.table, report, soak): checked too.
CONTAINED = {
    "losses": (int, float), "restarts": (int, float), "earlier_errors": (str,), "not_applied": (str,),
    "restored": (dict,), "evals": (dict,), "resumes": (dict,), "findings": (dict,), "notes": (str,),
    "weights_fingerprint": (dict,),
}
FINDING = {"kind": (str,), "tasks": (list,), "message": (str,), "fix": (str,)}
EXPLANATION = {"what": (str,), "fix": (str,), "signature": (str,), "link": (str, type(None))}
CHAOS_NUMBERS = ("detection_seconds", "recovery_seconds", "landed_step")
# The fields of the objects inside those containers that readers use: a list where a number or a
# string is would crash them (an unhashable key in table.resume_lines, sorted() of mixed types in
# preemption.result_line), so each is checked as the lab writes it.
NONE = type(None)
NUMBER = (int, float)
INSIDE: dict[str, dict[str, tuple[type, ...]]] = {
    "restored": {"epoch": (int,), "step": (int,)},  # summary.py
    "evals": {"epoch": (int,), "step": (int,), "loss": NUMBER},  # summary.py
    "resumes": {"attempt": (int,), "resumed": (bool, NONE), "words": (str,)},  # resume.resumes
    # trainer/weights.py weights_fingerprint: sum and l2 as schema.loss_field writes them (a word where not finite)
    "weights_fingerprint": {"name": (str,), "size": (int,), "sum": (*NUMBER, str), "l2": (*NUMBER, str)},
}
# faults/verdict.py's judge, the chaos section's `verdict`
VERDICT = {"kind": (str,), "words": (str,), "twin": (str, NONE), "steps_repeated": (int, NONE),
           "steps_skipped": (int, NONE), "difference": (*NUMBER, NONE), "file": (str, NONE), "by": (str, NONE)}
PREEMPTION = {  # preemption.Preemption.result
    "target": (str,), "notice": (str,), "grace": NUMBER, "noticed_at": (*NUMBER, NONE),
    "step_at_notice": (int, NONE), "exit_code": (int, NONE), "killed": (bool,), "exit_seconds": (*NUMBER, NONE),
    "step_reached": (int, NONE), "last_checkpoint_step": (int, NONE), "resumed_steps": (dict,),
    "steps_lost": (int, NONE), "training_again_seconds": (*NUMBER, NONE),
}


def _checked_value(where: str, value: Any, allowed: tuple) -> None:
    if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
        names = " or ".join(sorted({"an integer" if kind is int and float not in allowed else
                                    "a number" if kind in (int, float) else "null" if kind is type(None)
                                    else f"a {kind.__name__}" for kind in allowed}))
        raise SummaryError(f"{where} is {foreign.shown(json.dumps(value)[:60], 60)}, not {names}")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63:
        raise SummaryError(f"{where} is an integer of {len(str(abs(value)))} digits, out of range")


def checked_record(kind, data: Any, where: str):
    """The dataclass `kind` (a Record) from a JSON object, each field checked against its declared
    type; SummaryError names the first wrong one, `where` its path. summary.json's and matrix.json's."""
    if not isinstance(data, dict):
        raise SummaryError(f"{where.rstrip('.') or 'the summary'} is a JSON {type(data).__name__}, not an object")
    known = {f.name: f for f in dataclasses.fields(kind)}
    for name, field in known.items():
        value: Any = data.get(name)  # JSON from a file, checked below against the field's type
        if name not in data:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise SummaryError(f"{where}{name} is missing")
            continue
        if name == "tasks" and kind is Summary:
            continue  # rows, checked one by one already
        parts = [part.strip() for part in str(field.type).split("|")]
        if value is None and "None" in parts:
            continue
        _checked_value(f"{where}{name}", value, tuple(t for part in parts if part != "None" for t in KINDS[part]))
        for index, item in enumerate(value if name in CONTAINED else []):
            _checked_value(f"{where}{name}[{index}]", item, CONTAINED[name])
            for key, allowed in INSIDE.get(name, {}).items():
                _checked_value(f"{where}{name}[{index}].{key}", item.get(key), allowed)
        if name == "explanation":
            for key, allowed in EXPLANATION.items():
                _checked_value(f"{where}explanation.{key}", value.get(key), allowed)
        for index, finding in enumerate(value if name == "findings" else []):
            for key, allowed in FINDING.items():
                _checked_value(f"{where}findings[{index}].{key}", finding.get(key), allowed)
            for number, task in enumerate(finding["tasks"]):
                _checked_value(f"{where}findings[{index}].tasks[{number}]", task, (str,))
        if name == "chaos":
            for key in CHAOS_NUMBERS:
                _checked_value(f"{where}chaos.{key}", value.get(key), (int, float, type(None)))
            _checked_preemptions(f"{where}chaos.preemptions", value.get("preemptions"))
            if value.get("verdict") is not None:
                _checked_value(f"{where}chaos.verdict", value["verdict"], (dict,))
                for key, allowed in VERDICT.items():
                    _checked_value(f"{where}chaos.verdict.{key}", value["verdict"].get(key), allowed)
    return kind(**{key: value for key, value in data.items() if key in known})


def _checked_preemptions(where: str, value: Any) -> None:
    """chaos.preemptions (SCENARIO=preempt only): a list of Preemption.result's records, each
    resumed_steps a task -> step object."""
    if value is None:
        return
    _checked_value(where, value, (list,))
    for index, record in enumerate(value):
        _checked_value(f"{where}[{index}]", record, (dict,))
        for key, allowed in PREEMPTION.items():
            _checked_value(f"{where}[{index}].{key}", record.get(key), allowed)
        for task, step in record["resumed_steps"].items():
            _checked_value(f"{where}[{index}].resumed_steps.{foreign.shown(task, 60)}", step, (int,))
