"""`make chaos`: one fault in one run, at one moment, recorded, with a bound.

    make chaos SCENARIO=kill TARGET=worker-1 AT=epoch:2
    make chaos SCENARIO=kill AT=step:40
    make chaos SCENARIO=kill AT=save:2
    make chaos SCENARIO=pause AT=seconds:3 HEAL=20

A scenario hits one task (TARGET, default the last worker) at one moment (AT, core/moment.py:
after its Nth epoch, at its Nth training step, S seconds after it is ready, while it writes its
Nth checkpoint, while a restart restores its backup, or while the evaluator reads its Nth
checkpoint: faults/checkpointmoment.py) with one fault (a class in faults/, by
faults/registry.py). A user's SCRIPT is timed by its own epochs and steps as Keras counts them
(trainer/observe.py logs them; tflab's LabCallback where the script has it), or by seconds from
its start; what only the lab's trainer logs (its weights) is said unchecked. Where the fault
landed is said too: at which step (AT=step:N, where the target waits for it), in which
checkpoint's write and with what on disk (AT=save:N) or read (AT=restore, AT=eval:N), or how long
after the epoch's end or the start.

Everything done is appended to <run>/chaos.jsonl, and summary.json gets a `chaos` section: when
it was injected and undone, how long until a task failed (detection) and until the chief logged
an epoch again (recovery). The run itself restarts after a failure (RESTARTS, runner.py).

A fault that never landed (its moment never came, or its command failed) is never "survived": the
run's outcome is "not injected", with one line saying what the target did reach, and make chaos
exits 1 however the run itself ended.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path

from tflab import console
from tflab.backends.base import RunObserver
from tflab.core import cluster, moment, runfolder
from tflab.core.errors import LabError
from tflab.core.foreign import ForeignFile
from tflab.core.runsummary import Summary
from tflab.core.schema import by_event, complete
from tflab.core.settings import Settings
from tflab.faults import checkpointmoment, registry, twin, verdict
from tflab.supervisor import runner, table

NOT_INJECTED = "not injected"  # the chaos outcome of a run whose fault never landed
INTERRUPTED = "interrupted"  # the chaos outcome of a run the lab itself was stopped in (Ctrl-C, SIGTERM, down)


class Chaos(RunObserver):
    """One fault in one run: a backend.RunObserver that the runner ticks at every poll. It times
    the fault and records it; the fault itself (registry.FAULTS[SCENARIO]) acts."""

    def __init__(self, settings: Settings, the_cluster: cluster.Cluster | None = None):
        """`the_cluster`: a replayed job's (tfjob.Plan.as_cluster: its replicas as tasks); else the lab's."""
        self.scenario = settings.scenario
        self.kind, self.at = moment.parts(settings.at)
        fault = registry.FAULTS[settings.scenario]
        self.heal = None if settings.heal == "never" or not fault.heals else float(settings.heal)
        self.cluster: cluster.Cluster = the_cluster or cluster.build(settings)  # the tasks it may act on
        self.replayed = self.cluster.replayed_from  # TFJOB or TRAINJOB for a replayed job's replicas
        # A SCRIPT's and a replayed job's readiness and epochs are their own (a script's start, its
        # Keras epochs through the hooks), not the lab's trainer's.
        self.their_own = bool(settings.script or settings.tfjob or settings.trainjob)
        self.target = moment.target(settings, self.cluster.tasks, self.cluster.chief)
        self.settings = settings
        self.run_dir: Path | None = None
        self.injected_at: float | None = None
        self.healed_at: float | None = None
        self.detected_at: float | None = None
        self.recovered_at: float | None = None
        self.ended_at: float | None = None  # when the run was torn down (finish)
        self.inject_error: str | None = None  # what the fault's command said where it failed
        self.landed: str | None = None  # where it landed, in words (landing)
        self.landed_step: int | None = None  # AT=step:N: the step it landed at, where the target waited for it
        self.not_injected: str | None = None  # result's line where the fault never landed
        self.image = ""  # what ran the tasks (finish): the twin's key has it (faults/twin.py)
        self.primed_at: float | None = None  # AT=restore: when the lab killed the target to make it restore
        self.primed: str | None = None  # what that kill did, in words
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
        if self.kind == "step":
            self.check_step(settings)
        if self.kind in checkpointmoment.KINDS:
            checkpointmoment.check(self.kind, self.at, settings, self.replayed, self.target,
                                   self.target in self.cluster.trainers)
        self.fault.check(settings, self.cluster)

    def check_step(self, settings: Settings) -> None:
        """AT=step:N: counted by the lab's hooks (trainer/chaosstep.py) in its own trainer's fit and
        custom loop, and in a SCRIPT's Keras fits, whose steps are known only as they come."""
        if self.replayed:
            raise LabError(f"AT={settings.at} is not allowed with {self.replayed}: the lab counts the steps of its "
                           "own trainer and of a SCRIPT's Keras fit, not a replayed job's; expected epoch:N or "
                           "seconds:S")
        if settings.script:
            return
        trainers = self.cluster.trainers
        if self.target not in trainers:
            role = self.cluster.role(self.target)
            article = "an" if role[:1] in ("a", "e", "i", "o", "u") else "a"
            raise LabError(f"AT={settings.at} is not allowed with TARGET={self.target}: {article} {role} runs no "
                           "training step of its own; expected TARGET="
                           f"{' or '.join(trainers)}, or AT=epoch:N or seconds:S")
        total = settings.epochs * settings.steps_per_epoch
        if not self.at < total:
            raise LabError(f"AT={settings.at} is not allowed with EPOCHS={settings.epochs} of "
                           f"{settings.steps_per_epoch} steps (EXAMPLES/GLOBAL_BATCH): expected step:1 to "
                           f"step:{total - 1}, so that training is left")

    def proxied(self) -> frozenset[str]:
        return self.fault.proxied()

    def describe(self) -> str:
        """The run's line for it (backend.RunObserver)."""
        return f"chaos: {self.fault_words()}"

    def fault_words(self) -> str:
        """The fault, its target, its moment and its undoing, as chaos and make soak print them."""
        heal = "" if not self.fault.heals else (
            f", undone {self.heal:g} s later" if self.heal is not None else ", never undone")
        return f"{self.fault.words()} on {self.target} {self.moment_words()}{heal}"

    def moment_words(self) -> str:
        """AT in words: "after epoch 2", "at step 40", "5 s after it is ready" (a script's: its own
        epochs, steps and start)."""
        if self.kind == "epoch":
            return f"after its script's epoch {self.at:g}" if self.their_own else f"after epoch {self.at:g}"
        if self.kind == "step":
            return f"at its script's step {self.at:g}" if self.their_own else f"at step {self.at:g}"
        if self.kind == "save":
            return f"while it writes checkpoint {self.at:g}"
        if self.kind == "eval":
            return f"while it reads checkpoint {self.at:g} to evaluate it"
        if self.kind == "restore":
            return (f"while it restores its backup (killed by the lab after epoch "
                    f"{checkpointmoment.prime_epoch(self.settings)} to make it restart)")
        return f"{self.at:g} s after its script started" if self.their_own else f"{self.at:g} s after it is ready"

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
            if self.kind == "restore" and self.primed_at is None:
                self.prime(backend)
            elif self._due(backend.run_dir):
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

    def holds(self) -> bool:
        """Injected, to be undone and not yet: a hang or pause of HEAL seconds holds the training on
        purpose, and the first step after it is the stall watch's to time (a 20 s hang, whose 20 s
        counted, was called a stall 10 s after its release in a busy CI run, 2026-12-06)."""
        return self.injected_at is not None and self.heal is not None and self.healed_at is None

    def _events(self, task: str, event: str) -> list[dict]:
        assert self.run_dir is not None  # tick() and unchecked() set it first
        return by_event(runfolder.events(self.run_dir, task), event)

    def _due(self, run_dir: Path) -> bool:
        if self.kind == "epoch":
            return len(self._events(self.target, "epoch")) >= self.at
        if self.kind == "step":  # logged once, by the target's hooks, which wait there for the fault
            return bool(complete(self._events(self.target, "step")))
        if self.kind in checkpointmoment.KINDS:  # likewise, at a checkpoint's write or read
            return self.checkpoint_seen() is not None
        ready = self._events(self.target, "start" if self.their_own else "cluster_ready")
        return bool(ready) and time.time() >= ready[0]["time"] + self.at

    def checkpoint_seen(self) -> dict | None:
        """AT=save:N's `saving` record, AT=eval:N's `restoring`, or AT=restore's after the lab's kill;
        None before."""
        return checkpointmoment.seen(self._events(self.target, "saving" if self.kind == "save" else "restoring"),
                                     self.primed_at if self.kind == "restore" else None)

    def prime(self, backend) -> None:
        """AT=restore: kills the target once it has a backup, so that the restart restores it. The
        chief's epoch too: under multiworker every task restores the chief's backup, and a task's
        epoch is logged after its own save (the backup callback runs first), not after the chief's."""
        epoch = checkpointmoment.prime_epoch(self.settings)
        if any(len(complete(self._events(task, "epoch"))) < epoch for task in {self.target, self.cluster.chief}):
            return
        result = registry.FAULTS["kill"](self).inject(backend, backend.container(self.target))
        self.primed_at = time.time()
        said = (result.stderr or "").strip().splitlines()
        self.primed = (f"the lab killed {self.target} after epoch {epoch} to make it restore" if not result.returncode
                       else f"the lab's kill of {self.target} after epoch {epoch}, to make it restore, failed: "
                            f"{said[-1][:300] if said else f'its command exited {result.returncode}'}")
        self.record("primed", ok=result.returncode == 0, epoch=epoch)

    def inject(self, backend) -> None:
        container = backend.container(self.target)
        self.injected_at = time.time()
        result = self.fault.inject(backend, container)
        if result.returncode:
            said = (result.stderr or "").strip().splitlines()
            self.inject_error = said[-1][:300] if said else f"its command exited {result.returncode}"
        self.landed = None if self.inject_error else self.landing(time.time())
        self.record("injected", at=self.settings.at, ok=result.returncode == 0, landed=self.landed,
                    **({"error": result.stderr.strip()} if result.returncode else {}))

    def landing(self, done: float) -> str:
        """Where the fault landed, its command `done` (and landed_step, where that is a step the
        target waited at): the step, or how long after the epoch's end or the start."""
        if self.kind == "step":
            seen = complete(self._events(self.target, "step"))[0]
            waited = done - seen["time"]
            if waited > moment.HOLD_SECONDS:
                return (f"after step {seen['step']}: {waited:.1f} s after {self.target} reached it, past the "
                        f"{moment.HOLD_SECONDS:g} s it waits there, so at a later step")
            self.landed_step = seen["step"]
            past = "" if seen["step"] == self.at else f", the first at or past {self.at:g} its hooks saw"
            return (f"at step {seen['step']} (epoch {seen['epoch']}){past}, {waited:.1f} s after {self.target} "
                    "reached it")
        if self.kind in checkpointmoment.KINDS:
            record = self.checkpoint_seen()
            assert record is not None  # _due found it
            return checkpointmoment.landing(self.kind, record, done, self.target, moment.HOLD_SECONDS)
        if self.kind == "epoch":
            epochs = complete(self._events(self.target, "epoch"))
            return (f"{done - epochs[-1]['time']:.1f} s after the end of epoch {epochs[-1]['epoch']}, the last "
                    f"{self.target} had logged") if epochs else "after an epoch no complete record of says which"
        ready = self._events(self.target, "start" if self.their_own else "cluster_ready")
        return f"{done - ready[0]['time']:.1f} s after {self.target} {'started' if self.their_own else 'was ready'}"

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
        self.ended_at = time.time()
        self.image = twin.image_of(backend)
        self.fault.finish(backend)

    def result(self, run_dir: Path, summary: Summary) -> dict | None:
        def since(moment):
            return moment - self.injected_at if moment and self.injected_at else None

        self.run_dir = run_dir
        self.not_injected = self.missed()
        if self.not_injected and summary.outcome == "interrupted":  # its moment may well have come later
            self.not_injected = f"the lab was stopped before the fault landed: {self.not_injected}"
        found = {"scenario": self.scenario, "target": self.target, "at": self.settings.at,
                 "heal": self.settings.heal, "injected": self.not_injected is None,
                 "detection_seconds": since(self.detected_at), "recovery_seconds": since(self.recovered_at),
                 "restarts": len(summary.restarts), "landed": self.landed, "landed_step": self.landed_step,
                 "outcome": outcome_of(summary) if self.not_injected is None or summary.outcome == "interrupted"
                 else NOT_INJECTED,
                 **({"not_injected": self.not_injected} if self.not_injected else {}), **self.fault.result()}
        if self.their_own:
            found["unchecked"] = self.unchecked(run_dir, summary)
        found["verdict"] = self.verdict(run_dir, {**summary.to_dict(), "chaos": found})
        return found

    def verdict(self, run_dir: Path, summary: Mapping, the_twin: Summary | None = None, no_twin: str = "") -> dict:
        """faults/verdict.py's judgement of this run, with its twin (TWIN=, or the one cached for
        these settings and this image) where there is one; make chaos may run a missing one after."""
        if the_twin is None and not no_twin and self.replayed and not self.settings.twin:
            no_twin = (f"make chaos runs no twin of a replayed {self.replayed}, so it is judged without one; "
                       f"TWIN=<run> names an undisturbed replay of the same manifest to compare with")
        if the_twin is None and not no_twin:
            the_twin, no_twin = twin.found(self.settings, self.image)
        events = {}
        for row in summary["tasks"]:
            try:
                events[row["task"]] = list(runfolder.events(run_dir, row["task"]))
            except (ForeignFile, OSError):
                events[row["task"]] = []  # a log the summary could not read either: it counts no step
        return verdict.judge(summary, events, the_twin, no_twin, twin.ignored())

    def missed(self) -> str | None:
        """Why the fault never landed, in one line: the moment that never came and what the target
        did reach, or the fault's command that failed; None where it landed."""
        if self.injected_at is not None:
            return None if self.inject_error is None else (
                f"the {self.fault.name} on {self.target} failed: {self.inject_error}")
        if self.kind == "epoch":
            return f"{self.target} never reached the end of epoch {self.at:g}: it {self.reached()}"
        if self.kind == "step":
            return f"{self.target} never reached step {self.at:g}: it {self.reached()}"
        if self.kind in checkpointmoment.KINDS:
            evaluations = len(complete(self._events(self.target, "eval")))
            reached = f"logged {evaluations} evaluation{'s' * (evaluations != 1)}" if self.kind == "eval" else (
                self.reached())
            return checkpointmoment.missed(self.kind, self.at, self.target, reached, self.primed)
        started = self._events(self.target, "start" if self.their_own else "cluster_ready")
        if not started:
            return f"{self.target} never logged that it {'started' if self.their_own else 'was ready'}"
        ran = (self.ended_at or time.time()) - started[0]["time"]
        return (f"the run ended {ran:.1f} s after {self.target} {'started' if self.their_own else 'was ready'}, "
                f"before {self.at:g} s; it {self.reached()}")

    def reached(self) -> str:
        """How far the target trained, as its logs say: "logged 3 epochs (96 steps), the last epoch 3"."""
        epochs = complete(self._events(self.target, "epoch"))
        if not epochs:
            counted = "steps" if self.kind == "step" else "epochs, and tflab's LabCallback's"
            return "logged no epoch" + (f" (the lab counts a Keras fit's {counted})" if self.their_own else "")
        steps = sum(r["steps"] for r in epochs)
        return (f"logged {len(epochs)} epoch{'s' * (len(epochs) != 1)} ({steps} step{'s' * (steps != 1)}), "
                f"the last epoch {epochs[-1]['epoch']}")

    def unchecked(self, run_dir: Path, summary: Summary | None = None) -> list[str]:
        """What the lab checks of its own trainer and cannot of a script, said rather than failed (a
        replay of the lab's own image reports its weights from its claim: those are checked)."""
        self.run_dir = run_dir
        known = summary is not None and summary.tasks and all(row.weights_sha256 for row in summary.tasks)
        job = "a script" if self.settings.script else f"the replayed {self.replayed}"
        notes = [] if known else [f"weights: {job} logs no digest of its weights, so whether every task ended "
                                  "with the same weights is not checked"]
        chief = self.cluster.chief
        if self.injected_at is not None and not self._events(chief, "epoch"):
            notes.append(f"recovery: {chief} logged no epochs (no Keras fit, no LabCallback), so when training "
                         "ran again is not known")
        return notes


def outcome_of(summary: Summary | dict) -> str:
    """survived: finished ok (restarts or not); ended cleanly: failed, every task ended, with an
    error saying why; hung: stopped by TIMEOUT, or failed without a word; interrupted: the lab
    itself was stopped, and the exit codes (137) are its own stop's, not the fault's."""
    if summary["ok"]:
        return "survived"
    if summary["outcome"] == "interrupted":
        return INTERRUPTED
    if summary["outcome"] == "timed out":
        return "hung"
    said = any(row["error"] for row in summary["tasks"]) or any(row["exit_code"] for row in summary["tasks"])
    return "ended cleanly" if said else "hung"


def chaos(settings: Settings, given: dict[str, str] | None = None) -> int:
    """`make chaos`: the run with its fault as the runner's observer. A replayed job (TFJOB=,
    TRAINJOB=) is run by replay/, which makes the observer once it has the job's
    replicas; the fault checks itself there first (Chaos.check), so the replay asks nothing of faults/."""
    made: list[Chaos] = []
    twin.check(settings)  # TWIN= that names no twin is refused before anything starts

    def observer(the_cluster: cluster.Cluster | None = None) -> Chaos:
        made.append(Chaos(settings, the_cluster))
        return made[-1]

    if settings.tfjob or settings.trainjob:  # a replayed job: its replicas are the tasks
        from tflab import replay  # PyYAML is needed only here

        code = replay.up(settings, given, observer=observer)
    else:
        code = runner.up(settings, observer=observer())
    if made and made[-1].run_dir is not None:
        judged_again(settings, made[-1], made[-1].run_dir)
    return ended(made[-1] if made else None, code)


def judged_again(settings: Settings, fault: Chaos, run_dir: Path) -> None:
    """VERDICT=auto after a run that finished ok with no twin yet: runs the twin once (faults/twin.py),
    judges the run again against it, and writes the verdict into its summary."""
    try:
        summary = Summary.read(run_dir)
    except (FileNotFoundError, OSError, ValueError):
        return  # the run said why already (it could not write its summary)
    judged = (summary.chaos or {}).get("verdict")
    if not twin.wanted(settings, summary) or not isinstance(judged, dict) or judged.get("kind") != "no twin" or \
            (runfolder.runs_dir(settings) / twin.twin_id(settings, fault.image)).exists():
        return
    the_twin, why = twin.run(settings, fault.image)
    assert summary.chaos is not None  # twin.wanted asks for it
    summary.chaos["verdict"] = fault.verdict(run_dir, summary, the_twin, why or "")
    try:
        summary.write(run_dir)
    except OSError as error:
        console.say(f"chaos: the verdict could not be written to {run_dir.name}'s summary.json: "
                    f"{error.strerror or error}")
    for said in table.verdict_lines(summary):
        console.say(said)


def ended(fault: Chaos | None, code: int) -> int:
    """make chaos's exit: 1 where the fault never landed, whatever the run did (a chaos test in CI
    must not pass without its fault), said last so that the run's own `ok` is not the last word."""
    if fault is None or fault.not_injected is None:
        return code
    console.say(f"chaos: {NOT_INJECTED}: {fault.not_injected}")
    return code or 1
