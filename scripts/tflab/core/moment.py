"""AT=, the moment a make chaos fault lands, as the host and the target's hooks both read it.

    AT=epoch:2      after the target's 2nd epoch (its `epoch` events)
    AT=step:40      at the target's 40th training step: its hooks log `step` there and hold it
    AT=seconds:5    5 s after it is ready (a SCRIPT: after it started)
    AT=save:2       while the target writes its 2nd checkpoint (a backup, a checkpoint, a SavedModel's
                    variables): its shards written, its index not; its hooks log `saving` and hold there
    AT=restore      while a restarted target restores its backup: the lab kills it after its first
                    backup (so the restart has one to restore), and its hooks log `restoring` and hold
    AT=eval:2       while the evaluator (EVALUATOR=1; the default target then) reads its 2nd checkpoint

The grammar is core/grammars.py's `moment`; what a run cannot reach is refused by faults/chaos.py.
Here: the parts of AT, the target a fault hits (TARGET, or the last worker), and the hold at a
step. The host polls the tasks' logs every half second and takes a while to act (an engine call
under a loaded machine), in which a target trains on by tens of steps; so the target waits at the
step it logged, HOLD_SECONDS at most, and the host's fault lands there. A fault that stops the
process (kill, stop, pause, hang, a preemption's signal) lands within the hold; one that does not
(partition, slow-link, slow-node) finds the target resuming once the hold has passed.

Shared by the host side and the trainer: imports neither TensorFlow nor any Docker code.
"""

from __future__ import annotations

from typing import Sequence

from tflab.core.settings import Settings

HOLD_SECONDS = 5.0  # how long a target waits at AT=step:N for the host's fault (the host's pace: a poll and a call)


def parts(at: str) -> tuple[str, float]:
    """("epoch", 2.0) for AT=epoch:2, ("save", 1.0) for AT=save (and eval), ("restore", 0.0); the
    grammar has checked it."""
    kind, _, value = at.partition(":")
    return kind, float(value) if value else (1.0 if kind in ("save", "eval") else 0.0)


def target(settings: Settings, tasks: Sequence[str], chief: str) -> str:
    """The task a fault hits: TARGET, else (AT=eval) the evaluator, else the last worker, else the
    chief (the only task)."""
    workers = [task for task in tasks if task.startswith("worker-")]
    evaluators = [task for task in tasks if task.startswith("evaluator-")]
    if not settings.target and evaluators and settings.at.partition(":")[0] == "eval":
        return evaluators[0]
    return settings.target or (workers[-1] if workers else chief)


def step(settings: Settings) -> int | None:
    """N where AT=step:N in a run of the lab's cluster (its own trainer or a SCRIPT); else None."""
    kind, value = parts(settings.at)
    return int(value) if kind == "step" and not (settings.tfjob or settings.trainjob) else None


def step_of(settings: Settings, task: str, tasks: Sequence[str], chief: str) -> int | None:
    """step(settings) where `task` is the fault's target (`tasks` and `chief`: config.json's
    cluster's); else None: that task logs no `step` and holds nowhere."""
    found = step(settings)
    return found if found is not None and task == target(settings, tasks, chief) else None


def checkpoint_moment_of(settings: Settings, task: str, tasks: Sequence[str], chief: str) -> tuple[str, int] | None:
    """("save", N) for AT=save:N, ("restore", 0) for AT=restore, ("eval", N) for AT=eval:N, where
    `task` is the target in a run of the lab's cluster (its own trainer or a SCRIPT); None anywhere
    else: no hook holds there."""
    kind, value = parts(settings.at)
    if kind not in ("save", "restore", "eval") or settings.tfjob or settings.trainjob:
        return None
    return (kind, int(value)) if task == target(settings, tasks, chief) else None
