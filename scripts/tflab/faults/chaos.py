"""`make chaos`: one fault in one run, at one moment, recorded, with a bound.

    make chaos SCENARIO=kill TARGET=worker-1 AT=epoch:2
    make chaos SCENARIO=pause AT=seconds:3 HEAL=20

A scenario hits one task (TARGET, default the last worker) at one moment (AT: after its Nth
epoch, or S seconds after it is ready) with one fault (a class in faults/, by faults/registry.py).
A user's SCRIPT is timed by its own epochs as Keras counts them (trainer/observe.py logs them;
tflab's LabCallback where the script has it), or by seconds from its start; what only the lab's
trainer logs (its weights) is said unchecked.

Everything done is appended to <run>/chaos.jsonl, and summary.json gets a `chaos` section: when
it was injected and undone, how long until a task failed (detection) and until the chief logged
an epoch again (recovery). The run itself restarts after a failure (RESTARTS, runner.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tflab import console
from tflab.backends.base import RunObserver
from tflab.core import cluster, runfolder
from tflab.core.errors import LabError
from tflab.core.runsummary import Summary
from tflab.core.schema import by_event
from tflab.core.settings import Settings
from tflab.faults import registry
from tflab.supervisor import runner


class Chaos(RunObserver):
    """One fault in one run: a backend.RunObserver that the runner ticks at every poll. It times
    the fault and records it; the fault itself (registry.FAULTS[SCENARIO]) acts."""

    def __init__(self, settings: Settings, the_cluster: cluster.Cluster | None = None):
        """`the_cluster`: a replayed job's (tfjob.Plan.as_cluster: its replicas as tasks); else the lab's."""
        self.scenario = settings.scenario
        self.kind, _, value = settings.at.partition(":")
        self.at = float(value)
        fault = registry.FAULTS[settings.scenario]
        self.heal = None if settings.heal == "never" or not fault.heals else float(settings.heal)
        self.cluster: cluster.Cluster = the_cluster or cluster.build(settings)  # the tasks it may act on
        self.replayed = self.cluster.replayed_from  # TFJOB or TRAINJOB for a replayed job's replicas
        # A SCRIPT's and a replayed job's readiness and epochs are their own (a script's start, its
        # Keras epochs through the hooks), not the lab's trainer's.
        self.their_own = bool(settings.script or settings.tfjob or settings.trainjob)
        workers = [t for t in self.cluster.tasks if t.startswith("worker-")]
        self.target = settings.target or (workers[-1] if workers else self.cluster.chief)
        self.settings = settings
        self.run_dir: Path | None = None
        self.injected_at: float | None = None
        self.healed_at: float | None = None
        self.detected_at: float | None = None
        self.recovered_at: float | None = None
        self.fault = fault(self)

    @property
    def pending(self) -> bool:
        """Injected, and not undone (yet, or ever)."""
        return self.injected_at is not None and self.healed_at is None

    def check(self, settings: Settings) -> None:
        """Refuses what cannot be done, before anything starts."""
        if self.replayed:  # what cannot be done to a replayed job's replicas comes first
            if self.fault.not_on_replay is not None:
                raise LabError(f"SCENARIO={settings.scenario} is not allowed with {self.replayed}: "
                               f"{self.fault.not_on_replay}; expected one of {', '.join(registry.REPLAY_SCENARIOS)}")
            self.fault.check_replay(settings, self.replayed)
        tasks = self.cluster.tasks
        registry.check_backend(settings, (self.scenario,))
        if self.target not in tasks:
            raise LabError(f"TARGET={self.target} is not a task of this run; expected one of {', '.join(tasks)}")
        if self.kind == "epoch" and self.their_own and self.at < 1:
            raise LabError(f"AT={settings.at} is not allowed: expected epoch:1 or later (after the script's "
                           "first epoch at the earliest)")
        if self.kind == "epoch" and not self.their_own and not 1 <= self.at < settings.epochs:
            raise LabError(f"AT={settings.at} is not allowed with EPOCHS={settings.epochs}: "
                           f"expected epoch:1 to epoch:{settings.epochs - 1}, so that training is left")
        self.fault.check(settings, self.cluster)

    def proxied(self) -> frozenset[str]:
        return self.fault.proxied()

    def describe(self) -> str:
        """The run's line for it (backend.RunObserver)."""
        return f"chaos: {self.fault_words()}"

    def fault_words(self) -> str:
        """The fault, its target, its moment and its undoing, as chaos and make soak print them."""
        heal = "" if not self.fault.heals else (
            f", undone {self.heal:g} s later" if self.heal is not None else ", never undone")
        moment = f"after epoch {self.at:g}" if self.kind == "epoch" else f"{self.at:g} s after it is ready"
        if self.their_own:  # its epochs and readiness are the script's own
            moment = (f"after its script's epoch {self.at:g}" if self.kind == "epoch"
                      else f"{self.at:g} s after its script started")
        return f"{self.fault.words()} on {self.target} {moment}{heal}"

    # -- during the run --------------------------------------------------------------------

    def record(self, event: str, **fields) -> None:
        line = {"event": event, "time": time.time(), "scenario": self.scenario, "target": self.target, **fields}
        assert self.run_dir is not None  # the first tick set it, before anything is recorded
        with runfolder.lab_space(self.run_dir) as folder, folder.append(runfolder.CHAOS_LOG) as log:
            log.write((json.dumps(line) + "\n").encode())
        console.say(f"chaos: {event} {json.dumps(fields) if fields else ''}".rstrip())

    def tick(self, backend, codes: dict) -> None:
        self.run_dir = backend.run_dir
        now = time.time()
        if self.injected_at is None:
            if self._due(backend.run_dir):
                self.inject(backend)
            return
        self.fault.tick(backend, codes)
        if self.heal is not None and self.healed_at is None and now >= self.injected_at + self.heal:
            self.undo(backend)
        if self.detected_at is None:
            errors = [r["time"] for task in backend.tasks for r in self._events(task, "error")
                      if r["time"] >= self.injected_at]
            if errors or any(code not in (None, 0) for code in codes.values()):
                self.detected_at = min(errors + [now])
                self.record("detected", seconds=self.detected_at - self.injected_at)
        since = self.detected_at or self.healed_at
        if since and self.recovered_at is None:
            chief = backend.cluster.chief
            later = [r["time"] for r in self._events(chief, "epoch") if r["time"] > since]
            if later:
                self.recovered_at = min(later)
                self.record("recovered", seconds=self.recovered_at - self.injected_at)

    def _events(self, task: str, event: str) -> list[dict]:
        assert self.run_dir is not None  # tick() and unchecked() set it first
        return by_event(runfolder.events(self.run_dir, task), event)

    def _due(self, run_dir: Path) -> bool:
        if self.kind == "epoch":
            return len(self._events(self.target, "epoch")) >= self.at
        ready = self._events(self.target, "start" if self.their_own else "cluster_ready")
        return bool(ready) and time.time() >= ready[0]["time"] + self.at

    def inject(self, backend) -> None:
        container = backend.container(self.target)
        self.injected_at = time.time()
        result = self.fault.inject(backend, container)
        self.record("injected", at=self.settings.at, ok=result.returncode == 0,
                    **({"error": result.stderr.strip()} if result.returncode else {}))

    def undo(self, backend) -> None:
        result = self.fault.undo(backend)
        self.healed_at = time.time()
        self.record("undone", ok=result.returncode == 0)

    def undone(self, by: str) -> None:
        """Undone by something other than the fault itself (a restart that recreates what it took)."""
        self.healed_at = time.time()
        self.record("undone", by=by)

    def before_restart(self, backend) -> None:
        pass  # what a restart does to the fault is after_restart's

    def after_restart(self, backend) -> None:
        """A restart recreates what the fault took: a paused container comes back running, a
        cut-off one reconnected by Compose; the fault says what follows (faults/pause.py, partition.py)."""
        self.fault.after_restart(backend)

    def finish(self, backend) -> None:
        """Never leaves a container frozen or cut off behind it (so `down` can remove it cleanly)."""
        self.fault.finish(backend)

    def result(self, run_dir: Path, summary: Summary) -> dict | None:
        def since(moment):
            return moment - self.injected_at if moment and self.injected_at else None

        found = {"scenario": self.scenario, "target": self.target, "at": self.settings.at,
                 "heal": self.settings.heal, "injected": self.injected_at is not None,
                 "detection_seconds": since(self.detected_at), "recovery_seconds": since(self.recovered_at),
                 "restarts": len(summary.restarts), "outcome": outcome_of(summary), **self.fault.result()}
        if self.their_own:
            found["unchecked"] = self.unchecked(run_dir, summary)
        return found

    def unchecked(self, run_dir: Path, summary: Summary | None = None) -> list[str]:
        """What the lab checks of its own trainer and cannot of a script, said rather than failed (a
        replay of the lab's own image reports its weights from its claim: those are checked)."""
        self.run_dir = run_dir
        known = summary is not None and summary.tasks and all(row.weights_sha256 for row in summary.tasks)
        notes = [] if known else ["weights: a script logs no digest of its weights, so whether every task ended "
                                  "with the same weights is not checked"]
        if self.injected_at is None and self.kind == "epoch":
            done = len(self._events(self.target, "epoch"))
            notes.append(f"the fault: not injected, as {self.target} logged {done} epoch{'s' * (done != 1)}, not "
                         f"{self.at:g} (the lab counts a Keras fit's epochs, and tflab's LabCallback's)")
        chief = self.cluster.chief
        if self.injected_at is not None and not self._events(chief, "epoch"):
            notes.append(f"recovery: {chief} logged no epochs (no Keras fit, no LabCallback), so when training "
                         "ran again is not known")
        return notes


def outcome_of(summary: Summary | dict) -> str:
    """survived: finished ok (restarts or not); ended cleanly: failed, every task ended, with an
    error saying why; hung: stopped by TIMEOUT, or failed without a word."""
    if summary["ok"]:
        return "survived"
    if summary["outcome"] == "timed out":
        return "hung"
    said = any(row["error"] for row in summary["tasks"]) or any(row["exit_code"] for row in summary["tasks"])
    return "ended cleanly" if said else "hung"


def chaos(settings: Settings, given: dict[str, str] | None = None) -> int:
    """`make chaos`: the run with its fault as the runner's observer. A replayed job (TFJOB=,
    TRAINJOB=) is run by replay/, which makes the observer once it has the job's
    replicas; the fault checks itself there first (Chaos.check), so the replay asks nothing of faults/."""
    if settings.tfjob or settings.trainjob:  # a replayed job: its replicas are the tasks
        from tflab import replay  # PyYAML is needed only here

        return replay.up(settings, given, observer=lambda the_cluster: Chaos(settings, the_cluster))
    return runner.up(settings, observer=Chaos(settings))
