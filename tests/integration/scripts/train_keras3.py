"""A user's script written for Keras 3, the way most new code is: `import keras`, no tf_keras, and
MultiWorkerMirroredStrategy. Under TF 2.21 its `model.fit` fails on every worker (keras#20585,
tensorflow#72388); the lab must say so before it runs and explain it after, and not restart it.

    python train_keras3.py --epochs 2
"""

import argparse

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=(512, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)

with strategy.scope():
    model = keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(dataset, epochs=args.epochs, verbose=2)
