"""The lab's own run as a kind of run (kind.RunKind): the lab's trainers, or a SCRIPT, on BACKEND,
started by `up`, chaos, soak, compare, bench, matrix and the fixture (each through runner.up). Its
job ends by the runner's own rules (the chief, servers, the failure's grace); it restarts as
RESTART_POLICY says from each failure's evidence, up to RESTARTS; TIMEOUT is its deadline."""

from __future__ import annotations

import time
from pathlib import Path

from tflab.backends import userscript
from tflab.backends.base import Backend, RunObserver
from tflab.console import describe_run, display_path
from tflab.core import explain, restarts, runfolder
from tflab.core.errors import LabError
from tflab.core.foreign import ForeignFile
from tflab.core.schema import attempts
from tflab.core.settings import Settings
from tflab.supervisor import progress, resume, stackdump, summary
from tflab.supervisor.kind import Printer

OUTPUT_TAIL_BYTES = 256 * 1024  # what the restart decision reads of a SCRIPT task's output: its traceback


class LabRun:
    """The lab's own run (kind.RunKind): what `up` runs."""

    tasks_word = "tasks"
    done_line = "the chief is done; ending {running}"

    def __init__(self, settings: Settings, backend: Backend, run_dir: Path):
        self.settings, self.backend, self.run_dir = settings, backend, run_dir
        self.restarts_made: list[float] = []

    # -- its start ------------------------------------------------------------------------

    def claimed(self) -> None:
        pass  # nothing to refuse after the claim: every check ran before it

    def prepare(self) -> None:
        """config.json, and LINK's profile for every proxied task, before anything starts."""
        runfolder.write_config(self.run_dir, self.settings, self.backend.cluster)
        if self.settings.link:
            for task in self.backend.proxied:
                runfolder.set_link(self.run_dir, task, self.settings.link)

    def announce(self) -> list[str]:
        lines = [f"run {self.run_dir.name}: {describe_run(self.settings, self.backend.cluster)} on "
                 f"{self.backend.description}", f"outputs in {display_path(self.run_dir)}/"]
        if self.settings.script:  # the run still starts: a warning may be wrong, the run will tell
            lines += [f"warning: {w}" for w in userscript.script_warnings(Path(self.settings.script),
                                                                          self.settings.strategy)]
        return lines

    def printers(self) -> Printer:
        """The tasks' events as they come; a SCRIPT's output too."""
        events = progress.ProgressPrinter(self.settings, self.backend.cluster, self.run_dir)
        if not self.settings.script:
            return events
        return progress.Printers(events, progress.ScriptOutputPrinter(self.backend.cluster, self.run_dir))

    def observers(self) -> list[RunObserver]:
        return []

    @property
    def logs_from_start(self) -> bool:
        return not self.settings.script  # the lab's own trainer logs every epoch from its start

    # -- what ends its job ----------------------------------------------------------------

    @property
    def clean_exits(self) -> bool:
        """The lab's own tasks owe exit 0 on SIGTERM (their handler exits 0); a SCRIPT's servers do
        not (TF's tutorial: `server.join()`, no handler of the lab's): once the chief succeeded they
        are ended as a TFJob's `cleanPodPolicy: Running` ends its pods, and their code says nothing."""
        return not (self.settings.script and self.backend.cluster.servers)

    def job_condition(self, codes: dict[str, int | None]) -> str | None:
        return None  # the runner's own rules are the lab's

    # -- its deadline ---------------------------------------------------------------------

    def deadline(self, started: float) -> float:
        """TIMEOUT counts from the tasks' start."""
        return time.monotonic() + self.settings.timeout

    def deadline_line(self, running: list[str]) -> str:
        then = f"stopping {', '.join(running)}" if running else "no restart past it"
        return f"TIMEOUT={self.settings.timeout:g} s passed; {then}"

    # -- what a restart is ----------------------------------------------------------------

    def restart_verdict(self, stopped: list[str], diagnosis: dict | None = None) -> tuple[bool, str]:
        """RESTART_POLICY, from each failure's evidence and what the lab found of the tasks it
        stopped (diagnosis: restarts.diagnosed_verdict), while RESTARTS last."""
        allowed = self.settings.restarts
        if len(self.restarts_made) >= allowed:
            return False, f"all {allowed} restarts (RESTARTS) are spent" if allowed else ""
        policy = self.settings.restart_policy
        verdict = restarts.restart_verdict(policy, failures(self.backend, self.settings, self.run_dir, stopped))
        found = restarts.diagnosed_verdict(policy, diagnosis)
        # a failure's own reason not to restart (a bug, a memory kill), or its own warning, is said first
        return found if found and verdict == (True, "") else verdict

    def restart_line(self) -> str:
        settings = self.settings
        count = f"restarting every task ({len(self.restarts_made)} of {settings.restarts})"
        if settings.script:
            return f"{count}: {script_restart(self.run_dir, self.backend.cluster.chief)}"
        resumes = "from the last backup" if settings.backup != "off" and settings.loop == "fit" else "from the start"
        return f"{count}: training resumes {resumes}"

    # -- its summary ----------------------------------------------------------------------

    def restart_alone(self, task: str, code: int, now: float) -> tuple[float, str] | None:
        return None  # a lab run restarts every task (runner.supervise says why), never one alone

    def restart_alone_now(self, task: str, ended: float, now: float, limit: float) -> None:
        raise LabError(f"a lab run restarts every task, never {task} alone")

    def rows(self, codes: dict[str, int | None], stopped: list[str], outcome: str,
             oom_killed: dict[str, bool]) -> summary.Rows:
        return summary.lab_rows(self.settings, self.backend.cluster, self.run_dir, codes, stopped, outcome,
                                oom_killed, servers_owe_no_exit=not self.clean_exits)

    def writable_outside(self) -> dict[str, Path]:
        return {}  # the lab's tasks write only under the run folder

    def image(self) -> str:
        return getattr(self.backend, "image", "")  # local processes have none


def script_restart(run_dir: Path, chief: str) -> str:
    """A script's restart: where it resumes is its own doing, said once its tasks log it; what the
    chief's fit's backup lets one expect, where it has one."""
    try:
        expected = resume.expectation(runfolder.events(run_dir, chief))
    except ForeignFile:
        expected = ""
    return ("each runs the script again from its first line, and the lab will say where it resumed"
            + (f"; {chief}: {expected}" if expected else ""))


def failures(backend: Backend, settings: Settings, run_dir: Path, stopped: list[str]) -> list[explain.Evidence]:
    """The evidence of every task that failed by itself (not one the lab stopped), for the restart
    decision: what the summary reads of it (summary.evidence_of), its output from a SCRIPT's own
    `<task>.out` (output.log is written at the end of the run)."""
    oom_killed = backend.oom_killed
    codes = backend.exit_codes()
    found = []
    for task, code in codes.items():
        if code in (None, 0) or task in stopped:
            continue
        records = runfolder.events(run_dir, task)
        last = (attempts(records) or [[]])[-1]
        # a SCRIPT's traceback is in its <task>.out as it ran (its frames name a deadlock: a save ...)
        output = stackdump.tail_of(run_dir, runfolder.output_name(task), OUTPUT_TAIL_BYTES) if settings.script else ""
        found.append(summary.evidence_of(task, last, records, code, settings, output, oom_killed.get(task),
                                         summary.peers_done(backend.cluster, codes, task)))
    return found
