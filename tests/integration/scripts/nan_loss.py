"""A MultiWorkerMirroredStrategy fit whose loss is NaN every epoch and which exits 0: one example of
its data holds a NaN (a bad row in a CSV, a log of zero in preprocessing), the first step's gradient
is NaN, and so is every weight from then on. Keras prints `loss: nan` and the script ends as if it
trained; the lab must not call that run ok.

    python nan_loss.py --epochs 3
"""

import argparse

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")
x[0, 0] = np.nan  # the one bad example
y = x.sum(axis=1, keepdims=True)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).with_options(options)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
history = model.fit(dataset, epochs=args.epochs, verbose=2)
print("losses:", history.history["loss"], flush=True)
