"""A user's MultiWorkerMirroredStrategy custom loop that survives a preemption notice: SIGTERM (as
Kubernetes sends) or Google Cloud's metadata notice (instance/preempted at $GCE_METADATA_IP, as
`make chaos SCENARIO=preempt NOTICE=gce` serves it). Public APIs only.

    python preempt_notice.py --epochs 20 --checkpoints /lab/run/user-ckpt

Why not TensorFlow's PreemptionCheckpointHandler alone: it handles SIGTERM anywhere, but on a
Google Cloud VM without a GPU TF 2.21 does nothing with it (it logs "PreemptionCheckpointHandler
does not support usage with TPU or CPU device on GCP"). So each worker watches for its own
notice, and every step the workers all-reduce "has anyone been told?": all of them learn it at
the same step, save there and exit 143, the code TF itself exits with on Google Cloud. After the
restart each restores the checkpoint and resumes at that step, its data skipped to it.
"""

import argparse
import os
import signal
import sys
import threading
import time
import urllib.request

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=20)
parser.add_argument("--checkpoints", default="/lab/run/user-ckpt")
args = parser.parse_args()

told = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: told.set())


def watch_metadata():
    """Polls instance/preempted once a second, as TF's own watcher does."""
    address = os.environ.get("GCE_METADATA_IP")
    if not address:
        return
    request = urllib.request.Request(f"http://{address}/computeMetadata/v1/instance/preempted",
                                     headers={"Metadata-Flavor": "Google"})
    while not told.is_set():
        try:
            with urllib.request.urlopen(request, timeout=2) as response:
                if response.read().decode() == "TRUE":
                    told.set()
        except OSError:
            pass  # no metadata server here: SIGTERM is the only notice
        time.sleep(1)


threading.Thread(target=watch_metadata, daemon=True).start()
strategy = tf.distribute.MultiWorkerMirroredStrategy()
task = strategy.cluster_resolver.task_id or 0  # worker-0 is the chief; None when run alone
tf.keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.normal(size=(2048, 32)).astype("float32")
y = (x @ rng.normal(size=(32, 1))).astype("float32")
STEPS = 2048 // 64
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64, drop_remainder=True)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(10, activation="relu", input_shape=(32,)),
                                 tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam()
    step_count = tf.Variable(0, dtype=tf.int64, trainable=False,
                             aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step_count)
# Every worker saves (MWMS's rule); the chief's folder is the one read back.
folder = args.checkpoints if task == 0 else f"{args.checkpoints}-scratch-{task}"
manager = tf.train.CheckpointManager(checkpoint, folder, max_to_keep=1)
latest = tf.train.latest_checkpoint(args.checkpoints)
if latest:
    checkpoint.restore(latest)


@tf.function
def train_step(iterator, notice):
    def step(batch, notice):
        features, labels = batch
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(tf.reduce_mean(tf.square(labels - model(features, training=True)),
                                                             axis=-1), global_batch_size=64)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        # One all-reduce: the global loss, and how many workers have been told.
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.stack([loss, notice]))

    both = strategy.experimental_local_results(strategy.run(step, args=(next(iterator), notice)))[0]
    step_count.assign_add(1)
    return both[0], both[1]


distributed = strategy.experimental_distribute_dataset(dataset)
start = int(step_count.numpy())
if start:
    print(f"resumed at step {start}", flush=True)
for epoch in range(start // STEPS, args.epochs):
    iterator = iter(distributed)
    done = start % STEPS if epoch == start // STEPS else 0
    for _ in range(done):
        next(iterator)
    total = 0.0
    for _ in range(done, STEPS):
        loss, anyone = train_step(iterator, tf.constant(1.0 if told.is_set() else 0.0))
        total += float(loss)
        if float(anyone) > 0:  # every worker learns it at this same step
            manager.save()
            print(f"notice heard: saved at step {int(step_count.numpy())}, exiting 143", flush=True)
            sys.exit(143)
    trained = STEPS - (start % STEPS if epoch == start // STEPS else 0)  # fewer in the epoch it resumed in
    print(f"epoch {epoch + 1} loss {total / trained:.4f}", flush=True)
