"""Wrong in two ways a cluster never reports (issue 25): the input is not sharded, so every worker
trains on the same batches, and every worker saves its model to one path on the run folder every
task shares. It exits 0 on every worker; only the lab's audit says what is wrong.

    python audit_unsharded_shared_save.py --epochs 2
"""

import argparse
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
tf.keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF  # the bug
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).with_options(options)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(dataset, epochs=args.epochs, verbose=2)
model.save(os.path.join(os.environ.get("TFLAB_OUTPUT", "."), "model.keras"))  # the bug: every worker, one path
