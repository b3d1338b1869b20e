"""Sharded, and still wrong (issue 25): a shuffle with no seed, before DATA sharding. Each worker
shuffles in its own order, then keeps every other example of it, so the workers' shares overlap
and some examples are never trained on in an epoch. Every worker exits 0.

    python audit_unseeded_shuffle.py --epochs 2
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
x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
# the bug: no seed here, nor tf.keras.utils.set_random_seed, so every worker shuffles its own way
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024).batch(64).with_options(options)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(dataset, epochs=args.epochs, verbose=2)
