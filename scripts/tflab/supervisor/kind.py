"""A kind of run, as the supervisor (runner.py) asks it: how it starts, what ends its job, what a
restart is, its deadline, and its summary's rows. Two kinds implement it: the lab's own run
(labrun.LabRun, on every BACKEND) and a replayed TFJob or TrainJob (replay.run.ReplayRun). The
runner's loop, its stall watch, teardown, the set-ID strip and the writing of summary.json are the
same for both; a new kind of run is one more class with these members, and nothing in the runner
changes."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from tflab.backends.base import Backend, RunObserver
from tflab.core.settings import Settings
from tflab.supervisor.summary import Rows

SUCCEEDED, FAILED, WAITING = "succeeded", "failed", "waiting"  # RunKind.job_condition's answers


class Printer(Protocol):
    """What prints a run's events and output as they come (progress.py): print_new at every poll."""

    def print_new(self) -> None: ...


class RunKind(Protocol):
    """A kind of run: the runner reads these and asks these, nothing else of it."""

    @property
    def settings(self) -> Settings: ...
    @property
    def backend(self) -> Backend: ...
    @property
    def run_dir(self) -> Path: ...

    restarts_made: list[float]  # when each restart was made: the runner appends, the kind counts
    tasks_word: str  # how the runner's lines name its tasks: "tasks", "replicas"
    done_line: str  # said when the job is done and some still run: "...; ending {running}"

    # -- its start ------------------------------------------------------------------------

    def claimed(self) -> None:
        """Right after the run folder is claimed, before anything starts: a refusal here is one line
        and no summary."""

    def prepare(self) -> None:
        """The run folder's files, inside the runner's teardown: a failure here still ends in a summary."""

    def announce(self) -> list[str]:
        """The lines said before its tasks start (what runs where, its limits, its warnings)."""

    def printers(self) -> Printer:
        """What prints its tasks' events and output as they come."""

    def observers(self) -> list[RunObserver]:
        """Its own watchers beside the runner (a replay's watcher); the runner adds make chaos's fault."""

    @property
    def logs_from_start(self) -> bool:
        """Whether its tasks log progress from their start (the lab's trainer), so the stall watch is
        armed at once; else from its first advance (a script, a replica)."""

    # -- what ends its job ----------------------------------------------------------------

    @property
    def clean_exits(self) -> bool:
        """Whether a task ended by SIGTERM owes exit 0, so a non-zero code then is a failure."""

    def job_condition(self, codes: dict[str, int | None]) -> str | None:
        """The job's end from the exit codes so far: SUCCEEDED (end what runs), FAILED (stop what
        runs, no restart), WAITING (it succeeded; poll again while the rest ends by itself); None:
        the runner's own rules (the chief, servers, the failure's grace, restarts)."""

    # -- its deadline ---------------------------------------------------------------------

    def deadline(self, started: float) -> float:
        """When, on time.monotonic()'s clock, the run is stopped; `started` is the tasks' start (time.time())."""

    def deadline_line(self, running: list[str]) -> str:
        """What is said when the deadline passed, with `running` still running."""

    # -- what a restart is ----------------------------------------------------------------

    def restart_verdict(self, stopped: list[str], diagnosis: dict | None = None) -> tuple[bool, str]:
        """After a failure: whether every task is restarted, and why not (or a warning where it is);
        diagnosis: what the lab found of the tasks still running when it stopped them (a stall
        finding's dict, Supervision.diagnosis), None where it found nothing."""

    def restart_line(self) -> str:
        """What is said as every task is restarted."""

    def restart_alone(self, task: str, code: int, now: float) -> tuple[float, str] | None:
        """A task that failed with `code`, seen at `now` (time.monotonic()), which its kind restarts
        alone, in place, while the others run on (a TFJob's OnFailure replica, as the kubelet
        restarts its container): the seconds until then, and the line said as it waits; None: the
        runner's own rules (the failure's grace, then restart_verdict for every task)."""

    def restart_alone_now(self, task: str, ended: float, now: float, limit: float) -> None:
        """Restarts that task alone now, counted; `ended`: when its failure was seen; `limit`: the
        seconds its start may take (the deadline's). Asked only where restart_alone said when."""

    # -- its summary ----------------------------------------------------------------------

    def rows(self, codes: dict[str, int | None], stopped: list[str], outcome: str,
             oom_killed: dict[str, bool]) -> Rows:
        """Its summary's rows, audit and fields, once its tasks are gone (summary.summarise writes the rest)."""

    def writable_outside(self) -> dict[str, Path]:
        """Host folders outside the run folder its tasks could write, by name: the set-ID strip walks them too."""

    def image(self) -> str:
        """An image of the run's, for the set-ID strip's container where the lab is not root."""
