"""Keras's own epochs, and where a restarted script resumed, logged from inside a user's script.

A hook of inscript.py: once the script imports Keras 3 (`keras`) or tf-keras (`tf_keras`, which
`import tensorflow` brings with TF_USE_LEGACY_KERAS=1), every fit's CallbackList, the object fit
calls at each epoch and step, is watched at the class level, so a script needs no line of the lab:

- `fit` at a fit's first step: the epoch (1-based) and step it starts at, its epochs, and where
  its BackupAndRestore keeps its backup (`backup_dir`, `backup_kept`: in $TFLAB_OUTPUT, which
  outlives a restart). After a restart this says, measured, whether the task resumed or started over.
- `restored` where a BackupAndRestore moved fit past its start (epoch > 1 or step > 0).
- `epoch` at each epoch's end: Keras's own count (1-based), its mean loss (NaN too), seconds and steps;
  none where the script's fit has tflab's LabCallback, which logs the epochs itself.
- `step` once, in make chaos AT=step:N's target only, at its Nth training step over every fit,
  where it holds for the fault (chaosstep.py); `saving` and `restoring` likewise for AT=save:N
  and AT=restore, at TensorFlow's checkpoint writes and reads (chaossave.py).

Once the script imports TensorFlow, `checkpoint` events say where a custom loop's tf.train
checkpoint came from (tf.train.latest_checkpoint found none, Checkpoint.restore restored one).

The watch only reads: it calls the original method first and touches neither its arguments nor
its result, so the script computes what it computes without the lab. A wrapper is installed once
per class (idempotent) and calls whatever method it found, so another hook's patch stays in the
chain. Outside the lab (no TFLAB_LOG) it installs nothing. Stdlib only until Keras is imported.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from typing import Any

from tflab.core.processes import rss_field
from tflab.core.schema import loss_field
from tflab.trainer import chaossave, chaosstep, inscript

MARK = "_tflab_observed"  # set on a class (or function) once it is watched
# Every fit's BackupAndRestore folder: tf-keras keeps its backup as a tf.train checkpoint there,
# which is the `fit` event's business, not a custom loop's `checkpoint`.
_backup_dirs: set[str] = set()
_moment: chaosstep.StepMoment | None = None  # AT=step:N's count, in its target's process only


def install() -> None:
    global _moment
    if not inscript.task_log():
        return
    try:
        _moment = chaosstep.for_script(emit)
    except Exception as error:  # noqa: BLE001 - a config.json it cannot read: the script runs on, unheld
        inscript.complain("the lab's AT=step count", error)
    try:  # AT=save:N, AT=restore: TensorFlow's checkpoint writes and reads, in the target's process only
        checkpoints = chaossave.for_script(emit)
    except Exception as error:  # noqa: BLE001 - as above
        checkpoints = None
        inscript.complain("the lab's AT=save and AT=restore hooks", error)
    if checkpoints is not None:
        inscript.when_imported("tensorflow", lambda module: chaossave.install(checkpoints))
    for name in ("keras", "tf_keras"):
        inscript.when_imported(name, lambda module: watch(module.callbacks.CallbackList))
    inscript.when_imported("tensorflow", watch_checkpoints)


def emit(event: str, **fields) -> None:
    """Appends to the task's log; a failure is said once on stderr, never raised into the script."""
    try:
        inscript.task_log().emit(event, **fields)
    except Exception as error:  # noqa: BLE001 - a NaN loss, a full disk: the script runs on
        print(f"tflab: {event} not logged: {type(error).__name__}: {error}", file=sys.stderr, flush=True)


def _named(instance, name: str) -> bool:
    return any(kind.__name__ == name for kind in type(instance).__mro__)


def lab_callback(callback) -> bool:
    return any(kind.__name__ == "LabCallback" and kind.__module__.startswith("tflab")
               for kind in type(callback).__mro__)


def kept(path: str) -> bool:
    """Whether `path` lies in $TFLAB_OUTPUT (the run folder: it outlives a restart, as a cluster's
    shared storage does; a container's /tmp is emptied by one)."""
    output = os.environ.get("TFLAB_OUTPUT")
    if not output:
        return False
    here, there = os.path.realpath(path), os.path.realpath(output)
    return here == there or here.startswith(there.rstrip(os.sep) + os.sep)


class Fit:
    """What is known of one fit, kept on its CallbackList."""

    def __init__(self, callbacks: list):
        self.quiet = any(lab_callback(callback) for callback in callbacks)  # LabCallback logs epochs
        backup = next((callback for callback in callbacks if _named(callback, "BackupAndRestore")), None)
        directory = getattr(backup, "backup_dir", None)
        self.backup_dir = os.path.abspath(str(directory)) if directory is not None else None
        if self.backup_dir is not None:
            _backup_dirs.add(self.backup_dir)
        self.began = False
        self.epoch = 0
        self.steps = 0
        self.started = time.perf_counter()


def _on_train_begin(self, *args, **kwargs):
    self.__dict__[MARK] = Fit(list(getattr(self, "callbacks", [])))


def _on_epoch_begin(self, epoch, *args, **kwargs):
    fit = self.__dict__.get(MARK)
    if fit is not None:
        fit.epoch, fit.steps, fit.started = int(epoch), 0, time.perf_counter()
        if _moment is not None:
            _moment.epoch_begin(epoch)


def _on_train_batch_begin(self, batch, *args, **kwargs):
    fit = self.__dict__.get(MARK)
    if fit is not None and _moment is not None:
        _moment.batch_begin(batch)
    if fit is None or fit.began:
        return
    fit.began = True
    step = int(batch)
    params = getattr(self, "params", None) or {}
    epochs, steps = params.get("epochs"), params.get("steps")
    extra = {} if fit.backup_dir is None else {"backup_dir": fit.backup_dir, "backup_kept": kept(fit.backup_dir)}
    if isinstance(steps, int) and steps > 0:  # fit's steps an epoch, where it knows them: the stall watch's
        extra["steps"] = steps
    emit("fit", epoch=fit.epoch + 1, step=step, epochs=int(epochs) if isinstance(epochs, int) else 0, **extra)
    if fit.backup_dir is not None and (fit.epoch or step):
        emit("restored", epoch=fit.epoch + 1, step=step)


def _on_train_batch_end(self, batch, *args, **kwargs):
    fit = self.__dict__.get(MARK)
    if fit is None:
        return
    # Keras 3 says a call of STEPS_PER_EXECUTION steps ends at its first step + k - 1 even where the
    # epoch's last call is cut short (measured with Keras 3.15: 8 steps by 3 end at "8"); fit's
    # own `steps` param, where it knows it, bounds it.
    last, steps = int(batch), (getattr(self, "params", None) or {}).get("steps")
    if isinstance(steps, int) and steps > 0:
        last = min(last, steps - 1)
    fit.steps = last + 1  # batch counts from 0 within the epoch
    if _moment is not None:
        _moment.batch_end(last)


def _on_epoch_end(self, epoch, logs=None, *args, **kwargs):
    fit = self.__dict__.get(MARK)
    if fit is None or fit.quiet:
        return
    logged: Any = (logs or {}).get("loss") if isinstance(logs, dict) else None  # whatever Keras put there
    try:
        loss = float(logged)
    except (TypeError, ValueError):  # none, or a value that is not a number here (a RemoteValue)
        return
    # A NaN loss is logged too (schema.loss_field): the epoch happened, and learned nothing.
    emit("epoch", epoch=int(epoch) + 1, loss=loss_field(loss), seconds=time.perf_counter() - fit.started,
         steps=fit.steps, **rss_field())


# Each watched method: (what runs before the original, what runs after it).
WATCHED = {
    "on_train_begin": (_on_train_begin, None),  # before: a BackupAndRestore restores in it
    "on_epoch_begin": (_on_epoch_begin, None),
    "on_train_batch_begin": (_on_train_batch_begin, None),
    "on_train_batch_end": (_on_train_batch_end, None),
    "on_epoch_end": (None, _on_epoch_end),
}


def watch(cls) -> None:
    if cls.__dict__.get(MARK):
        return
    for name, (before, after) in WATCHED.items():
        setattr(cls, name, _chained(getattr(cls, name), before, after))
    setattr(cls, MARK, True)


def _chained(original, before, after):
    @functools.wraps(original)
    def watched(self, *args, **kwargs):
        _quietly(before, self, *args, **kwargs)
        result = original(self, *args, **kwargs)
        _quietly(after, self, *args, **kwargs)
        return result
    return watched


_complained: set[str] = set()


def _quietly(function, *args, **kwargs) -> None:
    if function is None:
        return
    try:
        function(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - the lab's watch never breaks the script's fit
        if function.__name__ not in _complained:
            _complained.add(function.__name__)
            inscript.complain(f"the lab's epoch observer ({function.__name__})", error)


# -- custom loops: tf.train checkpoints ------------------------------------------------------

def watch_checkpoints(tf) -> None:
    """tf.train.latest_checkpoint finding none, and Checkpoint.restore of a path: where a custom
    loop (the multi-worker custom-loop tutorial's) took its state from after a restart."""
    train = tf.train
    if not getattr(train.latest_checkpoint, MARK, False):
        original_latest = train.latest_checkpoint

        @functools.wraps(original_latest)
        def latest_checkpoint(checkpoint_dir, *args, **kwargs):
            found = original_latest(checkpoint_dir, *args, **kwargs)
            if found is None and isinstance(checkpoint_dir, (str, bytes, os.PathLike)):
                _quietly(_none_found, checkpoint_dir)
            return found

        setattr(latest_checkpoint, MARK, True)
        train.latest_checkpoint = latest_checkpoint
    checkpoint = train.Checkpoint
    if not checkpoint.__dict__.get(MARK):
        original_restore = checkpoint.restore

        @functools.wraps(original_restore)
        def restore(self, save_path, *args, **kwargs):
            status = original_restore(self, save_path, *args, **kwargs)
            if isinstance(save_path, (str, bytes, os.PathLike)):  # not a tensor: nothing to evaluate
                _quietly(_restored_checkpoint, self, save_path)
            return status

        checkpoint.restore = restore
        setattr(checkpoint, MARK, True)


def _keras_backup(path: str) -> bool:
    return any(path == folder or path.startswith(folder.rstrip(os.sep) + os.sep) for folder in _backup_dirs)


def _none_found(directory) -> None:
    path = os.path.abspath(os.fsdecode(directory))
    if not _keras_backup(path):
        emit("checkpoint", found=False, path=path)


def _restored_checkpoint(checkpoint, save_path) -> None:
    """The path, and the checkpoint's integer scalar variables (the tutorial's `epoch` and
    `step_in_epoch`): a local read of each, no collective."""
    path = os.path.abspath(os.fsdecode(save_path))
    if _keras_backup(path):
        return
    counters = {}
    for name, value in vars(checkpoint).items():
        if name.startswith("_") or not hasattr(value, "dtype") or getattr(value, "shape", None) != ():
            continue
        if getattr(value.dtype, "is_integer", False) and hasattr(value, "numpy"):
            counters[name] = int(value.numpy())
    emit("checkpoint", found=True, path=path, counters=counters)
