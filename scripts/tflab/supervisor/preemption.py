"""`make chaos SCENARIO=preempt`: a preemption as platforms do it, and what it cost.

    make chaos SCENARIO=preempt NOTICE=sigterm GRACE=30 TARGET=worker-1 AT=epoch:2

At the fault the target hears a notice (NOTICE): `sigterm`, SIGTERM to its container, as
Kubernetes sends before it kills a pod; `gce`, its `instance/preempted` and
`instance/maintenance-event` turn on the run's GCE metadata stand-in (trainer/metadata.py),
which TensorFlow's PreemptionCheckpointHandler polls; `none`, no word at all. GRACE seconds
after the notice, a target still running is killed (SIGKILL), as at the end of
terminationGracePeriodSeconds, and the lab says so. The runner then restarts the cluster as
after any failure (RESTART_POLICY, RESTARTS).

What it cost is read from the tasks' events: the step the target was at when noticed, the step
it had reached when it went, the step every task resumed from (its `restored` event), the steps
lost (reached, less resumed: trained twice), and the seconds from the notice to its exit and to
training again. The lab's trainer logs epochs, not steps, so a step inside an epoch is estimated
from the epoch's own pace (step_at); a task that saved itself on the notice (exit 42, or 143 as
TensorFlow's handler exits on Google Cloud) lost nothing by definition: it resumes where it saved,
and the estimate of its step at the notice is held to that step.

Host side: imports neither TensorFlow nor Docker's own modules beyond docker.py.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tflab import console
from tflab.core import runfolder
from tflab.core.explain import GCE_PREEMPTED, PREEMPTED
from tflab.core.schema import attempts, by_event
from tflab.core.settings import Settings
from tflab.engine import docker

SAVED_ON_NOTICE = (PREEMPTED, GCE_PREEMPTED)  # the codes of a task that saved and went by itself


def step_at(epochs: list[dict], moment: float, steps_per_epoch: int, first_step: int = 0) -> int:
    """The step a task had reached at `moment`, from its `epoch` events (each at its epoch's end,
    with its `seconds`): whole epochs ended by then, and of the next one the share its last
    epoch's pace allows, never a whole one (that one's event would be there). first_step: the
    step its attempt resumed from, where the epochs counted start."""
    done = [e for e in epochs if e["time"] <= moment]
    if not done:
        return first_step
    last = done[-1]
    reached = int(last["epoch"]) * steps_per_epoch
    pace = last.get("seconds") or 0
    if pace > 0:
        reached += min(steps_per_epoch - 1, int((moment - last["time"]) / pace * steps_per_epoch))
    return reached


def checkpoint_step(reached: int | None, steps_per_epoch: int, backup: str) -> int | None:
    """The step of the last backup a task had at `reached` (BACKUP=epoch: the last whole epoch;
    N: the last multiple of N); None where there is no backup, or no step known (no epoch logged)."""
    if backup == "off" or reached is None:
        return None
    every = steps_per_epoch if backup == "epoch" else int(backup)
    return reached // every * every


def resumed_step(restored: dict, steps_per_epoch: int) -> int:
    """The global step of a `restored` event (its epoch counts from 1, its step within it)."""
    return (int(restored["epoch"]) - 1) * steps_per_epoch + int(restored["step"])


def steps_lost(reached: int | None, resumed: dict[str, int]) -> int | None:
    """Steps trained twice: reached before the preemption, less the earliest step any task resumed
    from (the cluster resumes together; the earliest is what it redoes)."""
    if reached is None or not resumed:
        return None
    return max(0, reached - min(resumed.values()))


def grace_line(task: str, grace: float, checkpoint: int | None) -> str:
    """What the lab says of a task it killed at the end of the grace."""
    last = f"its last checkpoint was step {checkpoint}" if checkpoint is not None else \
        "it has no checkpoint (BACKUP=off, or LOOP=custom saves only on a notice), so it starts over"
    return f"{task} did not exit in the {grace:g} s grace: killed; {last}"


def result_line(record: dict) -> str:
    """The summary table's line for one preemption (table.table)."""
    def number(key, form="{:.1f} s"):
        value = record.get(key)
        return "-" if not isinstance(value, (int, float)) or isinstance(value, bool) else form.format(value)

    resumed = record.get("resumed_steps") or {}
    steps = sorted(set(resumed.values())) if isinstance(resumed, dict) else []
    where = ("resumed at step " + "/".join(str(s) for s in steps) + (" on every task" if len(steps) == 1 else "")) \
        if steps else "not resumed"
    went = "killed at the grace's end" if record.get("killed") else f"exited (code {record.get('exit_code')})"
    return (f"preemption: notice {record.get('notice')} at step {number('step_at_notice', '{}')}; {went} "
            f"{number('exit_seconds')} after it; training again {number('training_again_seconds')} after it, "
            f"{where}; {number('steps_lost', '{}')} steps lost")


class Preemption:
    """One preemption in one run, driven by chaos.Chaos: notify() at the fault, tick() at every poll."""

    def __init__(self, settings: Settings, target: str, record):
        self.target, self.notice, self.grace = target, settings.notice, float(settings.grace)
        self.steps_per_epoch, self.backup = settings.steps_per_epoch, settings.backup
        self.record = record  # chaos.Chaos.record: a line in chaos.jsonl and on the terminal
        self.noticed_at: float | None = None
        self.exited_at: float | None = None
        self.training_again_at: float | None = None
        self.step_at_notice: int | None = None
        self.reached: int | None = None  # the step the target reached before it ended
        self.checkpoint: int | None = None
        self.exit_code: int | None = None
        self.killed = False
        self.resumed: dict[str, int] = {}

    def notify(self, backend) -> subprocess.CompletedProcess:
        self.noticed_at = time.time()
        self.step_at_notice = self._step(backend.run_dir, self.noticed_at)
        if self.notice == "sigterm":
            return docker.kill([backend.container(self.target)], "SIGTERM", timeout=60,
                               engine=backend.docker_for(self.target))
        if self.notice == "gce":
            runfolder.set_notice(backend.run_dir, self.target, True)
        return subprocess.CompletedProcess([], 0, "", "")

    def tick(self, backend, codes: dict) -> None:
        if self.noticed_at is None:
            return
        now = time.time()
        if self.exited_at is None and codes.get(self.target) is not None:
            self._exited(backend, codes[self.target], now)
        elif self.exited_at is None and now >= self.noticed_at + self.grace:
            self.reached = self._step(backend.run_dir, now)
            self.checkpoint = checkpoint_step(self.reached, self.steps_per_epoch, self.backup)
            result = docker.kill([backend.container(self.target)], None, timeout=60,
                                 engine=backend.docker_for(self.target))
            self.killed = True
            console.say(grace_line(self.target, self.grace, self.checkpoint))
            self.record("killed", ok=result.returncode == 0, grace=self.grace, step=self.reached,
                        last_checkpoint_step=self.checkpoint)
        if self.exited_at is not None and self.training_again_at is None:
            self._resumed(backend)

    def _exited(self, backend, code: int, now: float) -> None:
        assert self.noticed_at is not None  # tick() hears of an exit only after the notice
        self.exited_at, self.exit_code = now, code
        if self.notice == "gce":
            runfolder.set_notice(backend.run_dir, self.target, False)  # its replacement is told nothing
        if self.reached is None:
            self.reached = None if code in SAVED_ON_NOTICE else self._step(backend.run_dir, now)
        self.record("exited", code=code, seconds=now - self.noticed_at, killed=self.killed)

    def _resumed(self, backend) -> None:
        """Once a task of the restarted cluster trains again: where each one resumed."""
        later = {}
        for task in backend.cluster.tasks:
            tries = attempts(runfolder.events(backend.run_dir, task))
            if len(tries) < 2:
                continue
            newest = tries[-1]
            restored = by_event(newest, "restored")
            epochs = by_event(newest, "epoch")
            if restored:
                later[task] = (restored[0]["time"], resumed_step(restored[0], self.steps_per_epoch))
            elif epochs:
                later[task] = (epochs[0]["time"], 0)  # no backup to restore: it started over
        if not later:
            return
        assert self.noticed_at is not None  # tick() looks for a resume only after the exit, after the notice
        self.training_again_at = min(moment for moment, _ in later.values())
        self.resumed = {task: step for task, (_, step) in later.items()}
        if self.reached is None:  # it saved on the notice: it resumes exactly where it was
            self.reached = max(self.resumed.values())
            if self.step_at_notice is not None:  # and it saved at the notice's step or after it
                self.step_at_notice = min(self.step_at_notice, min(self.resumed.values()))
        self.record("training again", seconds=self.training_again_at - self.noticed_at, resumed=self.resumed,
                    steps_lost=steps_lost(self.reached, self.resumed))

    def after_restart(self, backend) -> None:
        if self.notice == "gce":
            runfolder.set_notice(backend.run_dir, self.target, False)

    def _step(self, run_dir: Path, moment: float) -> int | None:
        """The target's step at `moment`, in its current attempt."""
        tries = attempts(runfolder.events(run_dir, self.target))
        if not tries:
            return None
        newest = tries[-1]
        restored = by_event(newest, "restored")
        first = resumed_step(restored[0], self.steps_per_epoch) if restored else 0
        return step_at(by_event(newest, "epoch"), moment, self.steps_per_epoch, first)

    def result(self) -> dict:
        def since(moment):
            return moment - self.noticed_at if moment is not None and self.noticed_at is not None else None

        return {"target": self.target, "notice": self.notice, "grace": self.grace, "noticed_at": self.noticed_at,
                "step_at_notice": self.step_at_notice, "exit_code": self.exit_code, "killed": self.killed,
                "exit_seconds": since(self.exited_at), "step_reached": self.reached,
                "last_checkpoint_step": self.checkpoint, "resumed_steps": self.resumed,
                "steps_lost": steps_lost(self.reached, self.resumed),
                "training_again_seconds": since(self.training_again_at)}
