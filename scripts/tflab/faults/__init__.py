"""`make chaos` and `make soak`: cluster faults on purpose, each recorded, each with a bound.

    make chaos SCENARIO=kill TARGET=worker-1 AT=epoch:2
    make chaos SCENARIO=pause AT=seconds:3 HEAL=20
    make soak SOAK=20

A scenario hits one task (TARGET, default the last worker) at one moment (AT: after its Nth
epoch, or S seconds after it is ready) with one fault. A user's SCRIPT is timed by its own epochs
as Keras counts them (trainer/observe.py logs them; tflab's LabCallback where the script has it),
or by seconds from its start; what only the lab's trainer logs (its weights) is said unchecked:

| SCENARIO   | what the lab does                                   | undone                      |
|------------|-----------------------------------------------------|-----------------------------|
| kill       | SIGKILL (`docker kill`)                             | -                           |
| stop       | SIGTERM (`docker kill -s SIGTERM`): a preemption    | -                           |
| pause      | freezes it (`docker pause`)                         | `docker unpause` after HEAL |
| partition  | cuts it off the network (`docker network disconnect`)| reconnected after HEAL, or never |
| slow-link  | its inbound link through a delay proxy gets SLOW_LINK | -                         |
| slow-node  | caps its CPUs at SLOW_CPUS (`docker update --cpus`) | -                           |
| preempt    | a NOTICE (sigterm, gce, none), SIGKILL after GRACE s if still running (preemption.py) | - |

Everything done is appended to <run>/chaos.jsonl, and summary.json gets a `chaos` section: when
it was injected and undone, how long until a task failed (detection) and until the chief logged
an epoch again (recovery). The run itself restarts after a failure (RESTARTS, runner.py).
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path

from tflab import backends, console
from tflab.backends.base import RunObserver
from tflab.core import cluster, runfolder
from tflab.core.backends import TABLE, capabilities, those_with
from tflab.core.errors import LabError
from tflab.core.runfolder import Summary
from tflab.core.schema import by_event
from tflab.core.settings import NOTICES, SCENARIOS, Settings, refuse_unhonoured
from tflab.engine import docker
from tflab.supervisor import preemption, runner

CUT_AGAIN_SECONDS = 60  # a swarm gives a restarted task its container within seconds


class Chaos(RunObserver):
    """One fault in one run: a backend.RunObserver that the runner ticks at every poll."""

    def __init__(self, settings: Settings, the_cluster=None):
        """`the_cluster`: a replayed job's (replay.ReplayCluster: its replicas as tasks); else the lab's."""
        self.scenario = settings.scenario
        self.kind, _, value = settings.at.partition(":")
        self.at = float(value)
        self.heal = None if settings.heal == "never" or settings.scenario not in ("pause", "partition") \
            else float(settings.heal)
        self.link = settings.slow_link
        self.slow_cpus = settings.slow_cpus
        self.cluster = the_cluster or cluster.build(settings)  # the tasks it may act on
        # A SCRIPT's and a replayed job's readiness and epochs are their own (a script's start, its
        # Keras epochs through the hooks), not the lab's trainer's.
        self.their_own = bool(settings.script or settings.tfjob or settings.trainjob)
        workers = [t for t in self.cluster.tasks if t.startswith("worker-")]
        self.target = settings.target or (workers[-1] if workers else self.cluster.chief)
        self.settings = settings
        self.run_dir: Path | None = None
        self.injected_at = self.healed_at = self.detected_at = self.recovered_at = None
        self.cut_again: float | None = None  # since when a partition never undone waits to be cut again
        self.preemption = preemption.Preemption(settings, self.target, self.record) \
            if settings.scenario == "preempt" else None

    def check(self, settings: Settings) -> None:
        """Refuses what cannot be done, before anything starts."""
        tasks = self.cluster.tasks
        check_backend(settings, (self.scenario,))
        if self.target not in tasks:
            raise LabError(f"TARGET={self.target} is not a task of this run; expected one of {', '.join(tasks)}")
        if self.kind == "epoch" and self.their_own and self.at < 1:
            raise LabError(f"AT={settings.at} is not allowed: expected epoch:1 or later (after the script's "
                           "first epoch at the earliest)")
        if self.kind == "epoch" and not self.their_own and not 1 <= self.at < settings.epochs:
            raise LabError(f"AT={settings.at} is not allowed with EPOCHS={settings.epochs}: "
                           f"expected epoch:1 to epoch:{settings.epochs - 1}, so that training is left")
        if self.scenario == "slow-link" and not self.cluster.jobs:
            raise LabError(f"SCENARIO=slow-link needs a cluster: STRATEGY={settings.strategy} has no network link")
        if self.scenario == "slow-node":
            docker.check_cpus("SLOW_CPUS", settings.slow_cpus)
        if self.scenario == "preempt" and settings.notice == "gce" and not capabilities(settings.backend).notice_gce:
            raise LabError(f"NOTICE=gce is not allowed with BACKEND={settings.backend}: its metadata stand-in is a "
                           f"service of the run's Compose project; expected BACKEND={those_with('notice_gce')}, or "
                           "NOTICE=sigterm or none")

    def proxied(self) -> frozenset[str]:
        return frozenset([self.target]) if self.scenario == "slow-link" else frozenset()

    def describe(self) -> str:
        """The run's line for it (backend.RunObserver)."""
        return f"chaos: {self.fault()}"

    def fault(self) -> str:
        what = {"slow-link": f"slow-link ({self.link})", "slow-node": f"slow-node ({self.slow_cpus:g} CPUs)",
                "preempt": f"preempt (notice {self.settings.notice}, {self.settings.grace:g} s grace)"}
        heal = "" if self.scenario not in ("pause", "partition") else (
            f", undone {self.heal:g} s later" if self.heal is not None else ", never undone")
        moment = f"after epoch {self.at:g}" if self.kind == "epoch" else f"{self.at:g} s after it is ready"
        if self.their_own:  # its epochs and readiness are the script's own
            moment = (f"after its script's epoch {self.at:g}" if self.kind == "epoch"
                      else f"{self.at:g} s after its script started")
        return f"{what.get(self.scenario, self.scenario)} on {self.target} {moment}{heal}"

    # -- during the run --------------------------------------------------------------------

    def record(self, event: str, **fields) -> None:
        line = {"event": event, "time": time.time(), "scenario": self.scenario, "target": self.target, **fields}
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
        if self.preemption:
            self.preemption.tick(backend, codes)
        if self.heal is not None and self.healed_at is None and now >= self.injected_at + self.heal:
            self.undo(backend)
        if self.cut_again is not None:
            self._cut_again(backend)
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
        return by_event(runfolder.events(self.run_dir, task), event)

    def _due(self, run_dir: Path) -> bool:
        if self.kind == "epoch":
            return len(self._events(self.target, "epoch")) >= self.at
        ready = self._events(self.target, "start" if self.their_own else "cluster_ready")
        return bool(ready) and time.time() >= ready[0]["time"] + self.at

    def inject(self, backend) -> None:
        container = backend.container(self.target)
        self.injected_at = time.time()
        if self.scenario in ("kill", "stop"):
            # On a swarm the target may run on another node: its engine's docker (backends/swarm/nodes.py).
            signal = "SIGTERM" if self.scenario == "stop" else None
            result = docker.kill([container], signal, timeout=60, engine=backend.docker_for(self.target))
        elif self.scenario == "pause":
            result = docker.pause(container, engine=backend.docker_for(self.target))
        elif self.scenario == "partition":
            result = backend.cut_off(self.target)
        elif self.scenario == "slow-node":
            result = docker.update_cpus(container, self.slow_cpus)
        elif self.preemption:
            result = self.preemption.notify(backend)
        else:  # slow-link: the proxy in front of the target picks the profile up within 0.2 s
            runfolder.set_link(backend.run_dir, self.target, self.link)
            result = subprocess.CompletedProcess([], 0, "", "")
        self.record("injected", at=self.settings.at, ok=result.returncode == 0,
                    **({"error": result.stderr.strip()} if result.returncode else {}))

    def undo(self, backend) -> None:
        if self.scenario == "pause":
            result = docker.unpause(backend.container(self.target), engine=backend.docker_for(self.target))
        else:
            result = backend.reconnect(self.target)
        self.healed_at = time.time()
        self.record("undone", ok=result.returncode == 0)

    def after_restart(self, backend) -> None:
        """A restart recreates what the fault took: a paused container comes back running, a
        cut-off one reconnected by Compose. A partition that is never undone is cut again, as a
        node that stays unreachable would be."""
        if self.preemption:
            self.preemption.after_restart(backend)
        if self.injected_at is None or self.healed_at is not None:
            return
        if self.scenario == "pause":
            self.healed_at = time.time()
            self.record("undone", by="the restart")
        elif self.scenario == "partition" and self.heal is None:
            self.cut_again = time.time()
            self._cut_again(backend)

    def _cut_again(self, backend) -> None:
        """Cuts the restarted target off; until a swarm has given it a container (Compose has at
        once), it is tried again at every tick, for CUT_AGAIN_SECONDS at most."""
        try:
            result = backend.cut_off(self.target)
        except LabError as error:
            result = subprocess.CompletedProcess([], 1, "", str(error))
        if result.returncode == 0 or time.time() > self.cut_again + CUT_AGAIN_SECONDS:
            self.cut_again = None
            self.record("cut again after the restart", ok=result.returncode == 0,
                        **({"error": result.stderr.strip()} if result.returncode else {}))

    def finish(self, backend) -> None:
        """Never leaves a container frozen or cut off behind it (so `down` can remove it cleanly)."""
        if self.injected_at is not None and self.healed_at is None and self.scenario == "pause":
            self.undo(backend)

    def result(self, run_dir: Path, summary: Summary) -> dict | None:
        def since(moment):
            return moment - self.injected_at if moment and self.injected_at else None

        found = {"scenario": self.scenario, "target": self.target, "at": self.settings.at,
                 "heal": self.settings.heal, "injected": self.injected_at is not None,
                 "detection_seconds": since(self.detected_at), "recovery_seconds": since(self.recovered_at),
                 "restarts": len(summary.restarts), "outcome": outcome_of(summary),
                 **({"preemptions": [self.preemption.result()]} if self.preemption else {})}
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


def check_backend(settings: Settings, scenarios: tuple[str, ...] = SCENARIOS) -> None:
    """Refuses a backend the scenarios cannot act on: which it offers is its `chaos` in
    core/backends.py's table (why swarm offers fewer is written there)."""
    offered = capabilities(settings.backend)
    if not offered.containers:
        raise LabError(f"make chaos needs BACKEND=compose, not BACKEND={settings.backend}: its faults act on "
                       "containers")
    refuse_unhonoured("chaos", settings)
    refused = [scenario for scenario in scenarios if not offered.offers(scenario)]
    if refused:
        everywhere = " or ".join(entry.name for entry in TABLE if entry.offers(refused[0]))
        raise LabError(f"SCENARIO={refused[0]} needs BACKEND={everywhere}; with BACKEND={settings.backend} make "
                       f"chaos offers {', '.join(offered.chaos or SCENARIOS)} (make soak draws from every scenario, "
                       "so it needs compose)")


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
    if settings.tfjob or settings.trainjob:  # a replayed job: its replicas are the tasks
        from tflab.backends import replay  # PyYAML is needed only here

        return replay.up(settings, given, observer=lambda the_cluster: Chaos(settings, the_cluster))
    return runner.up(settings, observer=Chaos(settings))


REPLAY_SCENARIOS = ("kill", "stop", "pause", "partition", "slow-node", "preempt")  # no delay proxy in a replay


PREEMPT_ONLY = ("NOTICE", "GRACE")  # what SCENARIO=preempt alone reads: the notice, and the seconds to the kill


def refuse_unread(settings: Settings, given: dict[str, str]) -> None:
    """`make chaos SCENARIO=kill NOTICE=gce`: NOTICE and GRACE given (by name, or in the
    environment) to a scenario that never reads them were ignored without a word. (make soak reads
    them for the preemptions it draws.)"""
    for name in PREEMPT_ONLY:
        if name in given and settings.scenario != "preempt":
            raise LabError(f"{name}={given[name]} is not allowed with SCENARIO={settings.scenario}: NOTICE and GRACE "
                           "are SCENARIO=preempt's (the notice the target hears, the seconds from it to the kill); "
                           f"expected SCENARIO=preempt, or {name} left out")


def soak(settings: Settings) -> int:
    """SOAK random scenarios, one run each, in runs/<RUN>/; prints the counts and worst times."""
    folder = runfolder.planned(settings)
    check_backend(settings)
    if settings.epochs < 2:
        raise LabError(f"EPOCHS={settings.epochs} is not allowed with make soak: expected 2 or more (each fault "
                       "comes after one of the first EPOCHS-1 epochs, with training left)")
    rng = random.Random(settings.seed)
    tasks = cluster.build(settings).tasks
    workers = [t for t in tasks if t.startswith("worker-")] or tasks
    trials = []
    for index in range(settings.soak):
        scenario = rng.choice(["kill", "stop", "pause", "partition", "slow-link", "slow-node", "preempt"])
        heal = "never" if scenario == "partition" and rng.random() < 0.25 else str(rng.choice([2, 5, 15, 30]))
        trial = settings.replace(runs_dir=str(folder), run=f"{index + 1:03d}-{scenario}", scenario=scenario,
                                 target=rng.choice(workers), at=f"epoch:{rng.randint(1, settings.epochs - 1)}",
                                 heal=heal if scenario in ("pause", "partition") else "5",
                                 notice=rng.choice(NOTICES) if scenario == "preempt" else settings.notice)
        Chaos(trial).check(trial)  # every trial checked before the soak's folder is written
        trials.append(trial)
    backends.check_engine(settings)
    runfolder.make(folder, link_latest=True)
    results = []
    for index, trial in enumerate(trials):
        console.say(f"--- soak {index + 1} of {settings.soak}: {Chaos(trial).fault()}")
        runner.up(trial, link_latest=False, observer=Chaos(trial))
        results.append(Summary.read(folder / trial.run).chaos)
    outcomes = ("survived", "ended cleanly", "hung")
    counts = {outcome: sum(r["outcome"] == outcome for r in results) for outcome in outcomes}
    detection = [r["detection_seconds"] for r in results if r["detection_seconds"] is not None]
    recovery = [r["recovery_seconds"] for r in results if r["recovery_seconds"] is not None]
    lines = [f"soak of {len(results)}: survived {counts['survived']}, ended cleanly {counts['ended cleanly']}, "
             f"hung {counts['hung']}",
             f"max detection {max(detection):.1f} s over {len(detection)} failures" if detection else "no failures",
             f"max recovery {max(recovery):.1f} s over {len(recovery)} recoveries" if recovery else "no recoveries"]
    lines += [f"  {r['scenario']:<10} {r['target']:<9} {r['at']:<8} "
              f"heal {r['heal'] if r['scenario'] in ('pause', 'partition') else '-':<6} -> {r['outcome']}"
              f"{'' if r['injected'] else ' (not injected)'}"
              f" (restarts {r['restarts']}, detection {fmt(r['detection_seconds'])}, "
              f"recovery {fmt(r['recovery_seconds'])})"
              + "".join(f"\n    {preemption.result_line(p)}" for p in preemptions_of(r)) for r in results]
    lost = [p["steps_lost"] for r in results for p in preemptions_of(r) if isinstance(p.get("steps_lost"), int)]
    if lost:
        lines.insert(3, f"max steps lost {max(lost)} over {len(lost)} preemptions")
    print("\n".join(lines))
    runfolder.write_whole(folder / "soak.txt", "\n".join(lines) + "\n")
    runfolder.write_json(folder / "soak.json", {"counts": counts, "runs": results})
    return 0 if counts["hung"] == 0 else 1


def preemptions_of(result: dict) -> list[dict]:
    """A chaos section's preemptions (SCENARIO=preempt), as summary.json has them."""
    found = result.get("preemptions")
    return [p for p in found if isinstance(p, dict)] if isinstance(found, list) else []


def fmt(seconds) -> str:
    return f"{seconds:.1f} s" if seconds is not None else "-"
