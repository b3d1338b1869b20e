"""Where a restarted script resumed, measured from its own events, and in words.

After a restart every task of a SCRIPT run starts the script again from its first line; whether
its training resumes is the script's doing (a BackupAndRestore, a tf.train checkpoint), and only
the script's own events (trainer/observe.py: `fit`, `checkpoint`) say what it did:

    worker-0: after restart 1, resumed at epoch 3
    worker-1: after restart 1, started over at epoch 1: its backup_dir /tmp/backup does not outlive
        a restart, as on a cluster; keep it in $TFLAB_OUTPUT

The lab's own trainer says it with its `restored` event instead. Pure: records in, words out.
"""

from __future__ import annotations

from tflab.core.schema import attempts, by_event

OUTPUT_HINT = "keep it in $TFLAB_OUTPUT, the run folder, which every task shares and a restart keeps"
UNSEEN = "the lab could not see whether it resumed: no Keras fit and no tf.train checkpoint restore before it ended"


def fit_words(fit: dict, before: list[dict]) -> tuple[bool, str]:
    """(resumed, words) for one `fit` event of a restarted attempt; `before`: the attempt before."""
    epoch, step = fit["epoch"], fit["step"]
    if epoch > 1 or step > 0:
        return True, f"resumed at epoch {epoch}" + (f", step {step}" if step else "")
    folder = fit.get("backup_dir")
    if folder is None:  # weights it loads itself (keras-io's guide does) are beyond the lab's sight
        why = ("its fit has no BackupAndRestore, so Keras counts its epochs from 1 again (weights the script "
               "loads itself, the lab cannot see); to resume, add tf.keras.callbacks.BackupAndRestore("
               "backup_dir=...) with the folder in $TFLAB_OUTPUT")
    elif not fit.get("backup_kept"):
        why = f"its backup_dir {folder} does not outlive a restart, as on a cluster; {OUTPUT_HINT}"
        if folder == "/tmp" or folder.startswith("/tmp/"):
            why += " (/tmp is each task's own, and the restart empties it)"
    elif not by_event(before, "epoch"):
        why = f"no backup was in {folder} yet: the attempt before ended before its first epoch did"
    else:
        why = f"no backup was found in {folder}, though it is kept with the run"
    return False, f"started over at epoch 1: {why}"


def checkpoint_words(checkpoint: dict) -> tuple[bool, str]:
    if checkpoint["found"]:
        counters = ", ".join(f"{name}={value}" for name, value in (checkpoint.get("counters") or {}).items())
        return True, f"resumed from its checkpoint {checkpoint['path']}" + (f" ({counters})" if counters else "")
    why = f"tf.train.latest_checkpoint found none in {checkpoint['path']}"
    if checkpoint["path"].startswith("/tmp/"):
        why += f", which does not outlive a restart, as on a cluster; {OUTPUT_HINT}"
    return False, f"started over: {why}"


def attempt_resume(attempt: list[dict], before: list[dict]) -> tuple[bool | None, str]:
    """What one restarted attempt did: its first fit with a BackupAndRestore (else its first fit),
    else its checkpoints (a restore found wins over none found), else unseen (None)."""
    fits = by_event(attempt, "fit")
    fit = next((f for f in fits if f.get("backup_dir") is not None), fits[0] if fits else None)
    if fit is not None:
        return fit_words(fit, before)
    checkpoints = by_event(attempt, "checkpoint")
    if checkpoints:
        return checkpoint_words(next((c for c in checkpoints if c["found"]), checkpoints[0]))
    return own_trainer_resume(attempt)


def own_trainer_resume(attempt: list[dict]) -> tuple[bool | None, str]:
    """The lab's own trainer (train.py, a replay of what make k8s writes among them) logs no `fit`
    but says it: a `restored` event where it adopted a backup, else its epochs from 1 again."""
    if (by_event(attempt, "start") or [{}])[0].get("role") != "trainer":
        return None, UNSEEN
    restored = by_event(attempt, "restored")
    if restored:
        step = restored[0].get("step")
        return True, f"resumed at epoch {restored[0].get('epoch')}" + (f", step {step}" if step else "")
    epochs = by_event(attempt, "epoch")
    if epochs and epochs[0].get("epoch") == 1:
        return False, ("started over at epoch 1: it restored no backup (the lab's trainer keeps one with "
                       "BACKUP=epoch, in a folder a restart keeps)")
    return None, UNSEEN


def resumes(records: list[dict]) -> list[dict]:
    """One entry per restarted attempt of a script's log: {"attempt" (2 for the first restart's),
    "resumed" (True, False, or None where the lab could not see), "words"}."""
    tries = attempts(records)
    found = []
    for number in range(1, len(tries)):
        resumed, words = attempt_resume(tries[number], tries[number - 1])
        found.append({"attempt": number + 1, "resumed": resumed, "words": words})
    return found


def expectation(records: list[dict]) -> str:
    """Before a restart, from the attempt that failed: what its fit's backup lets one expect,
    never a claim of what the script will do."""
    fits = [f for f in by_event((attempts(records) or [[]])[-1], "fit") if f.get("backup_dir") is not None]
    if not fits:
        return ""
    folder = fits[-1]["backup_dir"]
    if fits[-1].get("backup_kept"):
        return f"its BackupAndRestore keeps its backup in {folder}, which the restart keeps"
    return f"its backup_dir {folder} does not outlive a restart: expect it to start over"
