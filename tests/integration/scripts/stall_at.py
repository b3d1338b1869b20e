"""The SCRIPT `make bench BENCH=stall` runs (reports/stallbench.py): a small MultiWorkerMirroredStrategy
fit that stalls one worker at a chosen step, or stays healthy in a way the stall watch must not
mistake for a stall. It stands in for a user's script, so it uses nothing of the lab's.

    make up SCRIPT=tests/integration/scripts/stall_at.py ARGS="--block callback --worker 1 --step 37"
    make up SCRIPT=tests/integration/scripts/stall_at.py ARGS="--slow-first 45"
    make up SCRIPT=tests/integration/scripts/stall_at.py ARGS="--checkpoint-mb 512"

--block callback: the worker blocks in a callback (on_train_batch_begin) at global step --step;
--block pipeline: its input generator stops yielding once training reached that step (counted by the
same callback: how many batches the generator makes per step depends on how the strategy rebatches
them, and tf.data runs it ahead); either way its peers wait in the next all-reduce for ever.
--slow-first S: every worker's first batch takes S seconds (a long first step, as a big model's
tracing or a slow first read); --checkpoint-mb M: every worker saves a checkpoint of M MB after each
epoch (the chief to its own folder, the others to a temporary one they delete, as TensorFlow's
multi-worker tutorial says).
"""

import argparse
import json
import os
import shutil
import tempfile
import threading
import time

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--block", choices=("none", "callback", "pipeline"), default="none")
parser.add_argument("--worker", type=int, default=1)  # the worker that blocks
parser.add_argument("--step", type=int, default=0)  # the global step (counted from 0) at which it blocks
parser.add_argument("--epochs", type=int, default=5)
parser.add_argument("--steps", type=int, default=16)  # steps per epoch
parser.add_argument("--slow-first", type=float, default=0.0)
parser.add_argument("--checkpoint-mb", type=int, default=0)
args = parser.parse_args()

STEP = [0]  # the global step training reached, counted by StepCounter; the generator reads it
TASK_INDEX = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {}).get("index", 0)
BLOCKS_HERE = args.block != "none" and TASK_INDEX == args.worker


def block(where: str) -> None:
    print(f"worker-{TASK_INDEX}: blocking {where} at step {args.step} ({time.time():.3f})", flush=True)
    threading.Event().wait()


def batches():
    """One batch of 64 a yield, for ever (fit's steps_per_epoch ends each epoch)."""
    rng = np.random.default_rng(0)
    made = 0
    while True:
        if made == 0 and args.slow_first:
            time.sleep(args.slow_first)
        if BLOCKS_HERE and args.block == "pipeline" and STEP[0] >= args.step:
            block("in the input pipeline")
        x = rng.normal(size=(64, 8)).astype("float32")
        yield x, x.sum(axis=1, keepdims=True)
        made += 1


class StepCounter(tf.keras.callbacks.Callback):
    """Counts the global step, and at --step blocks there with --block callback."""

    def on_train_batch_begin(self, batch, logs=None):
        if BLOCKS_HERE and args.block == "callback" and STEP[0] == args.step:
            block("in a callback")
        STEP[0] += 1


class SaveEveryEpoch(tf.keras.callbacks.Callback):
    """Every worker saves (a save is a collective under MultiWorkerMirroredStrategy); a non-chief
    worker's copy goes to a temporary folder it deletes."""

    def __init__(self, checkpoint: tf.train.Checkpoint):
        super().__init__()
        self.checkpoint = checkpoint

    def on_epoch_end(self, epoch, logs=None):
        folder = "checkpoints" if TASK_INDEX == 0 else tempfile.mkdtemp(prefix="checkpoints-")
        began = time.time()
        path = self.checkpoint.write(os.path.join(folder, "ckpt"))
        print(f"worker-{TASK_INDEX}: saved {args.checkpoint_mb} MB in {time.time() - began:.1f} s to {path}",
              flush=True)
        if TASK_INDEX != 0:
            shutil.rmtree(folder, ignore_errors=True)


strategy = tf.distribute.MultiWorkerMirroredStrategy()
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
dataset = tf.data.Dataset.from_generator(batches, output_signature=(
    tf.TensorSpec((None, 8), tf.float32), tf.TensorSpec((None, 1), tf.float32))).with_options(options)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
callbacks = [StepCounter()]
if args.checkpoint_mb:
    # A plain variable, outside the strategy's scope: each worker's own, not broadcast at creation.
    ballast = tf.Variable(tf.random.uniform([args.checkpoint_mb * 2**18], seed=TASK_INDEX), trainable=False)
    callbacks.append(SaveEveryEpoch(tf.train.Checkpoint(model=model, ballast=ballast)))
model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps, verbose=2, callbacks=callbacks)
print(f"worker-{TASK_INDEX}: done", flush=True)
