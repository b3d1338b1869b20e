"""make chaos AT=save[:N], AT=restore and AT=eval[:N] on the host side: what a run must write or read for the
moment to come, when it has come, and where the fault landed, from the target's `saving` and
`restoring` events (trainer/chaossave.py logs them and holds there).

    make chaos SCENARIO=kill AT=save:2     while the target writes its 2nd checkpoint
    make chaos SCENARIO=kill AT=restore    while the restarted target restores its backup
    make chaos SCENARIO=kill AT=eval:2 EVALUATOR=1    while evaluator-0 reads its 2nd checkpoint

A first attempt has nothing to restore, so AT=restore comes in two acts: the lab kills the target
(SIGKILL, as SCENARIO=kill does) once it has a backup, after the epoch in which its first backup is
written (`prime_epoch`); the run's restart policy restarts the cluster (so RESTARTS of 1 or more,
and a RESTART_POLICY that restarts a SIGKILL's 137); the restarted target logs `restoring` as it
begins to read the backup and holds, and the SCENARIO lands there. That lab's kill uses one of
RESTARTS: a run that is to survive the SCENARIO too needs RESTARTS=2 or more.

Shared by chaos.py's check, _due, landing and missed; imports no TensorFlow.
"""

from __future__ import annotations

import math

from tflab.core.errors import LabError
from tflab.core.schema import complete
from tflab.core.settings import Settings

KINDS = ("save", "restore", "eval")  # the moments of AT this module holds


def the_saves(settings: Settings) -> tuple[int, str]:
    """How many TensorFlow checkpoints a lab trainer writes in one undisturbed run, and which:
    tf-keras BackupAndRestore's (one per epoch, or one per BACKUP steps) and, with EVALUATOR=1,
    ModelCheckpoint's (one per epoch). The custom loop writes none (its preemptible form only on a
    notice); model.keras at the end is a zip file, not a checkpoint."""
    if settings.loop == "custom":
        return 0, "no checkpoint (LOOP=custom: its preemptible loop saves only on a preemption notice)"
    backups = 0 if settings.backup == "off" else settings.epochs if settings.backup == "epoch" else (
        settings.epochs * settings.steps_per_epoch // int(settings.backup))
    evaluations = settings.epochs if settings.evaluator else 0
    words = [f"{backups} backup{'s' * (backups != 1)}"] * bool(backups) + (
        [f"{evaluations} checkpoints for the evaluator"] * bool(evaluations))
    return backups + evaluations, " and ".join(words) or "no checkpoint (BACKUP=off and no EVALUATOR)"


def prime_epoch(settings: Settings) -> int:
    """The epoch after whose end the lab kills AT=restore's target: the first with a backup written
    (a script's: its first epoch; the lab cannot know when it saves)."""
    if settings.script or settings.backup == "epoch" or settings.backup == "off":
        return 1
    return max(1, math.ceil(int(settings.backup) / settings.steps_per_epoch))


def check(kind: str, at: float, settings: Settings, replayed: str | None, target: str, trainer: bool) -> None:
    """Refuses AT=save:N, AT=restore or AT=eval:N where the run cannot reach it (`target`: the
    fault's; `trainer`: whether it is one of the lab trainer's training tasks), in one line."""
    if replayed:
        raise LabError(f"AT={settings.at} is not allowed with {replayed}: the lab hooks the checkpoints of its own "
                       "trainer and of a SCRIPT, not a replayed job's; expected epoch:N or seconds:S")
    if kind == "eval":
        if not settings.evaluator:
            raise LabError(f"AT={settings.at} is not allowed without EVALUATOR=1: no task of this run evaluates "
                           "checkpoints; expected EVALUATOR=1, or another moment")
        if not target.startswith("evaluator-"):
            raise LabError(f"AT={settings.at} is not allowed with TARGET={target}: the evaluator reads the "
                           "checkpoints it evaluates; expected TARGET=evaluator-0, or no TARGET")
        if not settings.script and not at <= settings.epochs:
            raise LabError(f"AT={settings.at} is not allowed with EPOCHS={settings.epochs}: the evaluator reads at "
                           "most one checkpoint an epoch (it skips to the newest); expected eval:1 to "
                           f"eval:{settings.epochs}")
        return
    if kind == "restore":
        if settings.restarts < 1 or settings.restart_policy == "Never":
            said = "RESTART_POLICY=Never" if settings.restart_policy == "Never" else f"RESTARTS={settings.restarts}"
            raise LabError(f"AT=restore is not allowed with {said}: a first attempt has nothing to restore, so the "
                           "lab kills the target after its first backup and lands the fault as the restart restores "
                           "it; expected RESTARTS=1 or more (2 to survive the fault too) and RESTART_POLICY=ExitCode "
                           "or OnFailure")
    if settings.script:
        return  # what a script saves and restores is known only as it comes
    if not trainer:
        raise LabError(f"AT={settings.at} is not allowed with TARGET={settings.target}: it writes and restores no "
                       "checkpoint of its own; expected a training task as TARGET")
    if settings.strategy == "parameter_server":
        raise LabError(f"AT={settings.at} is not allowed with STRATEGY=parameter_server: the hold inside its "
                       "variables' save, on the ps tasks, is not built; expected single, mirrored or multiworker")
    saves, which = the_saves(settings)
    if kind == "save" and not at <= saves:
        expected = f"expected save:1 to save:{saves}" if saves else (
            "expected LOOP=fit with BACKUP=epoch or a number of steps, or EVALUATOR=1")
        raise LabError(f"AT={settings.at} is not allowed: this run writes {which}; {expected}")
    if kind == "restore":
        if settings.backup == "off" or settings.loop == "custom":
            said = "LOOP=custom" if settings.loop == "custom" else "BACKUP=off"
            raise LabError(f"AT=restore is not allowed with {said}: the restarted trainer restores no backup; "
                           "expected BACKUP=epoch or a number of steps, and LOOP=fit")
        if not prime_epoch(settings) < settings.epochs:
            raise LabError(f"AT=restore is not allowed with EPOCHS={settings.epochs} and BACKUP={settings.backup}: "
                           f"the first backup is written in epoch {prime_epoch(settings)}, and training must be left "
                           "after it; expected more epochs or a smaller BACKUP")


def seen(events: list[dict], since: float | None = None) -> dict | None:
    """The target's first complete `saving` or `restoring` record (after `since`, the lab's kill)."""
    found = [record for record in complete(events) if since is None or record["time"] > since]
    return found[0] if found else None


def landing(kind: str, record: dict, done: float, target: str, hold: float) -> str:
    """Where the fault landed, its command `done`, from the target's `saving` or `restoring` record."""
    waited = done - record["time"]
    if kind == "eval":
        if waited > hold:
            return (f"after {target} began reading checkpoint {record['restore']}, {record['file']}: {waited:.1f} s "
                    f"after, past the {hold:g} s it waits there, so probably after it was read")
        return (f"as {target} began reading checkpoint {record['restore']}, {record['file']}, to evaluate it, "
                f"{waited:.1f} s after it reached it")
    if kind == "save":
        doing = f"checkpoint {record['save']}, {record['file']}"
        if waited > hold:
            return (f"after {target} began writing {doing}: {waited:.1f} s after, past the {hold:g} s it waits "
                    "there, so probably after its index was written")
        written = record["written"]
        shown = ", ".join(str(name) for name in written[:4]) + (f" and {len(written) - 4} more" if len(written) > 4
                                                                 else "")
        return (f"while {target} wrote {doing}, {waited:.1f} s after it began: on disk its shards ({shown or 'none'}) "
                f"and no index{' of its own (an older one under that name)' if record['index_exists'] else ''}")
    if waited > hold:
        return (f"after {target} began restoring {record['file']}: {waited:.1f} s after, past the {hold:g} s it waits "
                "there, so probably after the restore")
    return f"as {target} began restoring {record['file']} after its restart, {waited:.1f} s after it reached it"


def missed(kind: str, at: float, target: str, reached: str, primed: str | None) -> str:
    """Why AT=save:N, AT=restore or AT=eval:N never came, in one line (`reached`: what the target's
    logs say it did; `primed`: for AT=restore, what the lab's kill did, None where it never came)."""
    if kind == "save":
        return f"{target} never began writing checkpoint {at:g}: it {reached}"
    if kind == "eval":
        return f"{target} never began reading checkpoint {at:g}: it {reached}"
    if primed is None:
        return f"{target} never reached the backup after which the lab kills it to make it restore: it {reached}"
    return f"{primed}, and no restarted {target} restored a checkpoint: it {reached}"
