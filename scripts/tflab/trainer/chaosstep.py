"""AT=step:N inside the fault's target: its training steps counted, one `step` event logged at the
Nth, and training held there for the host's fault (core/moment.py says why).

The count is of the steps this process ran, from the batch numbers Keras's fit (or the lab's
custom loop) hands its callbacks, over every epoch and every fit: a step is one call of the
step function, so with STEPS_PER_EXECUTION=k (a call runs k steps) the hooks see every kth step,
and the event says the first step at or past N they saw. A task restarted before the fault counts
from 1 again. Only the target counts; every other task gets None from for_task and pays nothing.

Stdlib only: the lab's trainer (StepTiming) and a SCRIPT's process (observe.py) both call it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable

from tflab.core import cluster, moment
from tflab.core.cluster import Cluster
from tflab.core.settings import Settings
from tflab.trainer import inscript


class StepMoment:
    """The count, told of each epoch's start and each call's first and last batch."""

    def __init__(self, task: str, step: int, emit: Callable[..., object], hold: float = moment.HOLD_SECONDS):
        self.task, self.step, self.emit, self.hold = task, step, emit, hold
        self.before = 0  # steps of the epochs this process ran before the current one
        self.epoch = 0  # the current epoch, 0-based as Keras counts it
        self.first: int | None = None  # the current epoch's first batch in this process (a resumed fit's is not 0)
        self.last: int | None = None
        self.logged = False

    def epoch_begin(self, epoch: int) -> None:
        if self.first is not None and self.last is not None:
            self.before += self.last - self.first + 1
        self.epoch, self.first, self.last = int(epoch), None, None

    def batch_begin(self, batch: int) -> None:
        if self.first is None:
            self.first = int(batch)

    def batch_end(self, batch: int) -> None:
        """After a call of the step function whose last step is `batch` (0-based in the epoch)."""
        self.last = int(batch)
        if self.logged or self.first is None:
            return
        steps = self.before + self.last - self.first + 1
        if steps < self.step:
            return
        self.logged = True
        self.emit("step", step=steps, epoch=self.epoch + 1)
        print(f"[{self.task}] at step {steps}: waiting up to {self.hold:g} s here for make chaos's fault",
              file=sys.stderr, flush=True)
        time.sleep(self.hold)


def for_task(settings: Settings, task: str, the_cluster: Cluster, emit: Callable[..., object]) -> StepMoment | None:
    """The count for `task` where it is AT=step:N's target in `the_cluster` (config.json's); None
    anywhere else."""
    step = moment.step_of(settings, task, the_cluster.tasks, the_cluster.chief)
    return StepMoment(task, step, emit) if step is not None else None


def for_script(emit: Callable[..., object]) -> StepMoment | None:
    """for_task in a SCRIPT's process (observe.py), from the run's config.json (TFLAB_CONFIG) and
    its task (TFLAB_TASK); None outside the lab."""
    found, task = inscript.run_config(), os.environ.get("TFLAB_TASK")
    if found is None or not task or moment.step(found[1]) is None:  # a replay's replicas: never
        return None
    config, settings = found
    return for_task(settings, task, cluster.recorded(settings, config["cluster"]), emit)
