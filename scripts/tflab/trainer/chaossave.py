"""AT=save[:N], AT=restore and AT=eval[:N] inside the fault's target: the moment TensorFlow writes
a checkpoint torn in two, and the moment a restarted task (or the evaluator) reads one back, logged
and held for the host's fault (core/moment.py says why it holds).

Where a save is torn: TensorFlow 2.21 writes a checkpoint in two phases
(tensorflow/python/checkpoint/functional_saver.py, MultiDeviceSaver.save): each shard's tensors
through save_v2 into a temporary prefix (`<prefix>_temp/part-00000-of-00001.{index,data-...}`),
then one merge_v2_checkpoints that writes `<prefix>.index` from them and deletes the temporary
folder. Every tf.train.Checkpoint write goes there: tf-keras's BackupAndRestore and ModelCheckpoint
(save_weights_only), CheckpointManager.save, PreemptionCheckpointHandler, a SavedModel's variables.
The hook wraps gen_io_ops.merge_v2_checkpoints, which functional_saver looks up at each call: run
eagerly (fit's saves, under MWMS too: measured, 2026-12-07, TF 2.21, every BackupAndRestore save of
an MWMS fit came here eagerly with the shards on disk and no index), it counts and holds before
the merge; traced into a tf.function (MultiDeviceSaver's own when variables span tasks, or a save
a user's tf.function makes), a Python hook would run once, at tracing, so there it adds a
py_function the merge waits on, which runs, counts and holds at every execution, after the shards.

Where a restore is: TrackableSaver.restore, which Checkpoint.restore and read,
CheckpointManager.restore_or_initialize and tf-keras's BackupAndRestore (on_train_begin) all
reach with the checkpoint's prefix, and tf-keras's SidecarEvaluator at each checkpoint it
evaluates (twice each: Checkpoint.restore, then load_weights; so checkpoints are counted by their
prefix, not by calls). It holds before the first byte is read: the fault lands as the restarted
task (AT=restore: the first checkpoint it reads) or the evaluator (AT=eval:N: the Nth) begins to
read. A first attempt, with nothing to restore, never calls it with a path, so nothing is logged.

Only the target hooks anything (for_task, for_script give None elsewhere). TensorFlow is imported
only by install, in a process that has already imported it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Sequence

from tflab.core import cluster, moment
from tflab.core.cluster import Cluster
from tflab.core.settings import Settings
from tflab.trainer import inscript

MARK = "_tflab_chaossave"  # set on TensorFlow's function once it is wrapped
LISTED = 64  # at most this many files named in an event: a checkpoint of many shards is said by its first


class CheckpointMoment:
    """AT=save:N (`kind` "save", `count` N), AT=restore or AT=eval:N ("eval") in one process: counts
    TensorFlow's checkpoint writes (merging) or the checkpoints it reads (restoring), logs the
    moment once and holds there."""

    def __init__(self, task: str, kind: str, count: int, run_dir: str, emit: Callable[..., object],
                 hold: float = moment.HOLD_SECONDS, sleep: Callable[[float], object] = time.sleep):
        self.task, self.kind, self.count, self.run_dir = task, kind, count, os.path.abspath(run_dir)
        self.emit, self.hold, self.sleep = emit, hold, sleep
        self.saves = 0
        self.read: list[str] = []  # the checkpoints restored, each once, in the order first read
        self.logged = False

    def named(self, path: str) -> str:
        """`path` relative to the run's folder where it lies there; else as it is (absolute)."""
        here = os.path.abspath(path)
        return os.path.relpath(here, self.run_dir) if here.startswith(self.run_dir.rstrip(os.sep) + os.sep) else here

    def merging(self, prefix: str, shard_prefixes: Sequence[str]) -> None:
        """merge_v2_checkpoints is about to write `prefix`.index from the shards: the save's data is
        on disk, its index is not."""
        self.saves += 1
        if self.kind != "save" or self.logged or self.saves < self.count:
            return
        self.logged = True
        written = [self.named(path) for path in files_of(shard_prefixes)]
        index = prefix + ".index"
        self.emit("saving", save=self.saves, file=self.named(index), written=written,
                  index_exists=os.path.exists(index))
        self.wait(f"writing checkpoint {self.saves}, {self.named(index)} ({len(written)} shard files written)")

    def restoring(self, prefix: str) -> None:
        """TrackableSaver.restore is about to read the checkpoint at `prefix`."""
        if prefix not in self.read:
            self.read.append(prefix)
        wanted = 1 if self.kind == "restore" else self.count
        if self.kind not in ("restore", "eval") or self.logged or self.read.index(prefix) + 1 != wanted:
            return
        self.logged = True
        self.emit("restoring", restore=wanted, file=self.named(prefix),
                  files=[self.named(path) for path in files_of([prefix])])
        self.wait(f"restoring {self.named(prefix)}")

    def wait(self, doing: str) -> None:
        print(f"[{self.task}] {doing}: waiting up to {self.hold:g} s here for make chaos's fault",
              file=sys.stderr, flush=True)
        self.sleep(self.hold)


def files_of(prefixes: Sequence[str]) -> list[str]:
    """The files each checkpoint prefix names (`<prefix>.index`, `<prefix>.data-*`), sorted, at most LISTED."""
    found: list[str] = []
    for prefix in prefixes:
        folder, stem = os.path.split(os.path.abspath(prefix))
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        found += [os.path.join(folder, name) for name in names if name.startswith(stem + ".")]
    return found[:LISTED]


def texts(value: Any) -> list[str]:
    """A path, or paths, as TensorFlow hands them over: str, bytes, tensors, lists of either."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [text for item in value for text in texts(item)]
    return [value.decode() if isinstance(value, bytes) else str(value)]


def install(found: CheckpointMoment) -> None:
    """Wraps TensorFlow's merge and restore for `found` (once a process). TensorFlow must be imported."""
    from tensorflow.python.checkpoint import checkpoint as tracking
    from tensorflow.python.eager import context
    from tensorflow.python.framework import dtypes, ops
    from tensorflow.python.ops import gen_io_ops, script_ops

    merge = gen_io_ops.merge_v2_checkpoints
    if not getattr(merge, MARK, False):
        def held(destination, *prefixes):
            found.merging(texts(destination)[0], [text for prefix in prefixes for text in texts(prefix)])
            return True

        def merge_v2_checkpoints(checkpoint_prefixes, destination_prefix, *args, **kwargs):
            if context.executing_eagerly():
                held(destination_prefix, checkpoint_prefixes)
                return merge(checkpoint_prefixes, destination_prefix, *args, **kwargs)
            # Traced: the hold is an op of the graph, run at every save after its shards (the
            # merge's own control dependencies are the shards' saves, and it waits on this op).
            inputs = [destination_prefix, *(checkpoint_prefixes if isinstance(checkpoint_prefixes, (list, tuple))
                                            else [checkpoint_prefixes])]
            done = script_ops.eager_py_func(held, inputs, dtypes.bool)
            with ops.control_dependencies([done]):
                return merge(checkpoint_prefixes, destination_prefix, *args, **kwargs)

        setattr(merge_v2_checkpoints, MARK, True)
        gen_io_ops.merge_v2_checkpoints = merge_v2_checkpoints

    restore = tracking.TrackableSaver.restore
    if not getattr(restore, MARK, False):
        def restore_then(self, save_path, *args, **kwargs):
            if save_path is not None:
                found.restoring(texts(save_path)[0])
            return restore(self, save_path, *args, **kwargs)

        setattr(restore_then, MARK, True)
        tracking.TrackableSaver.restore = restore_then


def for_task(settings: Settings, task: str, the_cluster: Cluster, run_dir: str,
             emit: Callable[..., object]) -> CheckpointMoment | None:
    """The moment for `task` where it is AT=save:N's, AT=restore's or AT=eval:N's target in
    `the_cluster` (config.json's); None anywhere else."""
    found = moment.checkpoint_moment_of(settings, task, the_cluster.tasks, the_cluster.chief)
    return CheckpointMoment(task, found[0], found[1], run_dir, emit) if found else None


def for_script(emit: Callable[..., object]) -> CheckpointMoment | None:
    """for_task in a SCRIPT's process, from config.json (TFLAB_CONFIG), its task (TFLAB_TASK) and
    the run's folder as the script sees it (TFLAB_OUTPUT); None outside the lab."""
    found, task, output = inscript.run_config(), os.environ.get("TFLAB_TASK"), os.environ.get("TFLAB_OUTPUT")
    if found is None or not task:
        return None
    config, settings = found
    if settings.at.partition(":")[0] not in ("save", "restore", "eval"):
        return None  # no checkpoint moment: the run's recorded cluster is not this hook's to read
    return for_task(settings, task, cluster.recorded(settings, config["cluster"]), output or os.getcwd(), emit)
