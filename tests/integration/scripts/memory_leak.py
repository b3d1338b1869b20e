"""Memory that grows every epoch (issue 56): a callback keeps --mb MB of each epoch's "outputs" in a
Python list, as a callback that appends each epoch's predictions does (tensorflow#42616 and #50790
are TensorFlow's own versions of it), so each worker's resident memory grows by that much an epoch.

    make up SCRIPT=tests/integration/scripts/memory_leak.py ARGS="--mb 40 --epochs 8" WORKERS=2
"""

import argparse

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--mb", type=int, default=40)  # kept each epoch
parser.add_argument("--epochs", type=int, default=8)
args = parser.parse_args()


class KeepsEveryEpoch(tf.keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.kept = []

    def on_epoch_end(self, epoch, logs=None):
        self.kept.append(np.ones(args.mb * 1_000_000 // 8))  # float64, touched: resident at once


strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).with_options(options)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(dataset, epochs=args.epochs, verbose=2, callbacks=[KeepsEveryEpoch()])
