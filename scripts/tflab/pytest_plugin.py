"""A pytest fixture that runs your training script on a lab cluster and hands back its parsed logs.

    # pip install tflab (or this repository): the plugin registers itself (pytest11 entry point), so
    # a test needs no conftest line and no PYTHONPATH. In a checkout without installing, add
    # `from tflab.pytest_plugin import tflab_cluster` to conftest.py with scripts/ on PYTHONPATH.

    def test_training_converges(tflab_cluster):
        lab = tflab_cluster(workers=2, script="train.py", args="--epochs 3")
        assert lab.ok, lab.why()
        assert lab.tasks["worker-0"].final_loss < 0.5

`tflab_cluster(**settings)` takes the lab's settings in lower case (workers=2, strategy="mirrored",
script=..., args=..., timeout=...; see `make help`; audit="strict" unless given, so a run whose
workers trained on the same data, wrote one file or drifted apart fails: `lab.findings` lists
why; a replay, tfjob= or trainjob=, takes no audit), each a str, int, float, bool (1/0) or path,
runs `python3 -m tflab up` with them in a runs folder of the test's own (or `runs_dir=`), under a
fresh run id (or `run=`), waits for the end and returns a `LabRun`. A refused setting, a value of
another type, or a run id used already fails the test with one line naming it. Host side: needs
Docker (or backend="local" with TensorFlow installed), never TensorFlow itself. If the lab
overruns its timeout, or the test run is interrupted, the lab gets SIGTERM, which stops and
removes the run's containers and writes its summary as interrupted, before the fixture gives up on it.
"""

from __future__ import annotations

import math
import os
import secrets
import shlex
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path, PurePath
from typing import Any, NoReturn, Protocol, Union

import pytest

from tflab.core import runfolder
from tflab.core.errors import LabError
from tflab.core.foreign import shown
from tflab.core.runsummary import Summary, TaskRow
from tflab.core.schema import complete, loss_value
from tflab.core.settings import SPECS
from tflab.supervisor.table import why_lines

SCRIPTS = Path(__file__).resolve().parents[1]  # the folder holding the tflab package
USAGE_ERROR = 2  # what `python -m tflab` exits with on a refused setting
CLEANUP_SECONDS = 60  # after SIGTERM, how long the lab gets to remove its run (it needs about 15 s)

# What a setting takes (environment_value checks it again at run time, for untyped callers): a str,
# an int or float, a bool (1/0), a path, or for script_env also a dict of names to such values.
# Union, not |: an alias is evaluated at import, and pyproject.toml allows Python 3.9.
Scalar = Union[str, int, float, PurePath]
SettingValue = Union[Scalar, Mapping[str, Scalar]]


@dataclass
class Task:
    """One task's result: its summary row's fields as attributes, and its log's events."""

    name: str
    row: TaskRow
    events: list[dict] = field(repr=False)

    def __getattr__(self, key: str) -> Any:  # a summary row's field: str, int, float, list... or None
        try:
            return self.__dict__["row"][key]
        except KeyError:
            raise AttributeError(key) from None

    def of(self, event: str) -> list[dict]:
        return [record for record in self.events if record.get("event") == event]


@dataclass
class LabRun:
    """One finished lab run: the lab's exit code and output, and everything its folder holds."""

    returncode: int
    output: str = field(repr=False)
    run_dir: Path

    @cached_property
    def config(self) -> dict:
        return runfolder.read_config(self.run_dir)

    @property
    def tasks_dir(self) -> Path:
        """The run's tasks' space (`runs/<RUN>/tasks/`, $TFLAB_OUTPUT in every task): what the tasks
        wrote, their logs, `<task>.out`, the model, backups, `work/<task>/`. Written by the tasks'
        code: read it as foreign, as the lab does."""
        return runfolder.task_space(self.run_dir)

    @cached_property
    def summary(self) -> Summary:
        """summary.json, typed (runsummary.Summary); it reads as a dict too: `summary["ok"]`. A
        LabError (one line) where there is none, or it is not one the lab wrote."""
        try:
            return Summary.read(self.run_dir)
        except FileNotFoundError:
            raise LabError(f"run {self.run_dir.name} has no summary.json: the lab ended (exit {self.returncode}) "
                           "before writing one; lab.why() has its output") from None

    @property
    def ok(self) -> bool:
        """Whether the lab exited 0 and its summary says ok; False where there is none, or none the
        lab wrote (`summary` raises the line that says which)."""
        try:
            return self.returncode == 0 and self.summary.ok
        except LabError:
            return False

    @property
    def findings(self) -> list[dict]:
        """The audit's findings (summary.json's: kind, tasks, message, fix); [] for a run the audit
        found nothing wrong in. Under the fixture's default AUDIT=strict they also fail the run."""
        return self.summary.findings

    @property
    def stall(self) -> dict | None:
        """Where every task was at a stall, or before the lab stopped them (summary.json's: kind,
        what, fix, link, places); None where the lab never had to ask."""
        return self.summary.stall

    @property
    def tasks(self) -> dict[str, Task]:
        return {row.task: Task(row.task, row, self.events(row.task)) for row in self.summary.tasks}

    def events(self, task: str) -> list[dict]:
        return runfolder.events(self.run_dir, task)

    def of(self, task: str, event: str) -> list[dict]:
        """The task's `event` records that have every field the event has (schema.py)."""
        return [record for record in complete(self.events(task)) if record["event"] == event]

    def losses(self, task: str) -> list[float]:
        return [loss_value(record["loss"]) for record in self.of(task, "epoch")]  # nan where it went so

    def why(self) -> str:
        """What to read when an assertion about this run fails: first what broke and what to do
        (the summary's explanations), a chaos run's verdict on its resume (faults/verdict.py) and
        where a restarted script resumed, then the lab's output."""
        try:
            explained = why_lines(self.summary)
        except (OSError, ValueError, TypeError, LabError):  # no summary: the lab ended before it wrote one
            explained = []
        head = "".join(f"{line}\n" for line in explained)
        return f"{head}lab run in {self.run_dir} exited {self.returncode}:\n{self.output[-4000:]}"


def refuse(message: str) -> NoReturn:
    """The fixture's own one line, as a failed test (no traceback into the plugin)."""
    pytest.fail(f"tflab_cluster: {message}", pytrace=False)


def environment_value(key: str, value: object) -> str:
    """A setting's value as the lab takes it (text): a str, int, float, bool (1 or 0) or path;
    anything else is refused, naming the argument and what it takes."""
    if isinstance(value, bool):
        return str(int(value))
    if key == "script_env" and isinstance(value, Mapping):  # {"KERAS_HOME": "/lab/data"}, as SCRIPT_ENV's words
        for name, text in value.items():  # each a name and a value of its own: None is no "None"
            if not isinstance(name, str) or isinstance(text, bool) or \
                    not isinstance(text, (str, int, float, PurePath)) or "\0" in f"{name}{text}":
                what = f"its name {shown(repr(name), 60)} is a {type(name).__name__}" if not isinstance(name, str) \
                    else f"{shown(repr(name), 60)} holds a NUL character" if "\0" in f"{name}{text}" \
                    else f"the value of {shown(repr(name), 60)} is a {type(text).__name__}"
                refuse(f"script_env={shown(repr(dict(value)), 100)} is not allowed: {what}; script_env takes a dict "
                       "of str names to str, int, float or path values, or its NAME=value words as a str (leave a "
                       "variable out rather than None)")
        return shlex.join(f"{name}={text}" for name, text in value.items())
    if isinstance(value, (str, int, float, PurePath)):
        text = str(value)
        if "\0" not in text:
            return text
    kind = "a NUL character" if isinstance(value, (str, PurePath)) else f"a {type(value).__name__}"
    refuse(f"{key}={shown(repr(value), 100)} is not allowed: {kind}; a lab setting takes a str, int, float, "
           f"bool (1/0) or path, and script_env a dict too (leave {key} out for its default)")


def run_lab(runs_dir: Path, run: str, settings: Mapping[str, SettingValue], timeout: float | None = None) -> LabRun:
    """Runs `python -m tflab up` with `settings` (lower-case names) in runs_dir/run."""
    names = {name.lower(): name for name in SPECS}
    unknown = sorted(str(key) for key in set(settings) - set(names))
    if unknown:
        case = " (settings are lower case here)" if unknown[0].lower() in names else ""
        refuse(f"unknown lab setting {shown(repr(unknown[0]), 100)}{case}; allowed: {', '.join(sorted(names))}")
    if {"run", "runs_dir"} & set(settings):
        refuse("run and runs_dir are run_lab's own arguments, not settings")
    values = {names[key]: environment_value(key, value) for key, value in settings.items()}
    # A test's run fails on what the audit finds, unless it says otherwise. Not a replay's: the job's
    # containers train as they say, so the lab refuses AUDIT with TFJOB or TRAINJOB, and a test that
    # never named AUDIT would get a refusal about it.
    if not {"TFJOB", "TRAINJOB"} & set(values):
        values.setdefault("AUDIT", "strict")
    if (runs_dir / run).exists() or (runs_dir / run).is_symlink():
        refuse(f"run={run!r} exists already in {runs_dir}; a run's outputs are never overwritten: choose another "
               "run (or leave run out for a fresh one)")
    env = {key: value for key, value in os.environ.items() if key not in SPECS}  # only what the test says
    env.update(values)
    env.update(RUNS_DIR=str(runs_dir), RUN=run, PYTHONPATH=os.pathsep.join(
        [str(SCRIPTS), *filter(None, [os.environ.get("PYTHONPATH")])]))
    try:
        bound = float(values.get("TIMEOUT", 900))
    except ValueError:
        bound = 900  # the lab refuses it, in its own line
    bound = bound if math.isfinite(bound) else 900
    limit = timeout or bound + 300  # the lab bounds itself; this bounds the lab
    lab = subprocess.Popen([sys.executable, "-m", "tflab", "up"], env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout, stderr = lab.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        stdout, stderr = end_cleanly(lab)
        stderr += f"\ntflab_cluster: the lab overran {limit:g} s and was stopped with SIGTERM"
    except BaseException:  # Ctrl-C, or pytest's own timeout: the run's containers go with the lab
        end_cleanly(lab)
        raise
    output = stdout + stderr
    if lab.returncode == USAGE_ERROR and not (runs_dir / run).exists():
        said = (output.strip().splitlines() or ["(it said nothing)"])[-1]
        pytest.fail(f"the lab refused the settings: {shown(said, limit=0)}", pytrace=False)
    return LabRun(lab.returncode, output, runs_dir / run)


def end_cleanly(lab: subprocess.Popen) -> tuple[str, str]:
    """SIGTERM, which the lab answers by removing its run; SIGKILL only if it does not end in time."""
    lab.send_signal(signal.SIGTERM)
    try:
        return lab.communicate(timeout=CLEANUP_SECONDS)
    except subprocess.TimeoutExpired:
        lab.kill()
        return lab.communicate()


class StartLab(Protocol):
    """What tflab_cluster hands a test: `tflab_cluster(workers=2, script="train.py")` runs the lab
    with those settings (lower case; run= and runs_dir= name the run and its folder) and returns the
    finished run."""

    def __call__(self, **settings: SettingValue) -> LabRun: ...


def starter(tmp_path: Path) -> StartLab:
    """What tflab_cluster hands a test: a function that runs the lab with the given settings."""
    count, token = 0, secrets.token_hex(3)

    def start(**settings: SettingValue) -> LabRun:
        """run= names the run (the lab checks the name), runs_dir= the folder it is written in."""
        nonlocal count
        count += 1
        run, runs_dir = settings.pop("run", None), settings.pop("runs_dir", None)
        if run is not None and (not isinstance(run, str) or not run):
            refuse(f"run={shown(repr(run), 100)} is not allowed: a run id is a str (leave run out for a fresh one)")
        if run is not None and "\0" in run:
            refuse(f"run={shown(repr(run), 100)} is not allowed: a NUL character; a run id is "
                   "[a-z0-9][a-z0-9-]* (leave run out for a fresh one)")
        if runs_dir is not None and (not isinstance(runs_dir, (str, PurePath)) or "\0" in str(runs_dir)):
            kind = "a NUL character, which no path holds" if isinstance(runs_dir, (str, PurePath)) else \
                f"a {type(runs_dir).__name__}"
            refuse(f"runs_dir={shown(repr(runs_dir), 100)} is not allowed: {kind}; expected a folder as a str or path "
                   "(leave runs_dir out for the test's own)")
        # A fresh id names the session too: ids are what a person finds a run by in a shared runs_dir.
        return run_lab(Path(runs_dir).absolute() if runs_dir is not None else tmp_path / "runs",
                       run if run is not None else f"cluster-{token}-{count}", settings)

    return start


@pytest.fixture
def tflab_cluster(tmp_path: Path) -> StartLab:
    """A function that runs the lab with the given settings and returns its LabRun."""
    return starter(tmp_path)
