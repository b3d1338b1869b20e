"""A user's script written against tf.keras, as TF 2.x tutorials had it before 2.16, under
MultiWorkerMirroredStrategy. Where tf.keras is Keras 2 (TF <= 2.15, or tf_keras with
TF_USE_LEGACY_KERAS=1: KERAS=tf-keras) it trains; where tf.keras is Keras 3 (TF 2.16 on, KERAS=keras3)
its model.fit fails on every worker (keras#20585, tensorflow#72388).

    python train_tf_keras_mwms.py --epochs 2
"""

import argparse

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
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(dataset, epochs=args.epochs, verbose=2)
