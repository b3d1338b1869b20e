"""A worker that stops taking part (issue 42): under MultiWorkerMirroredStrategy, worker-1 blocks
in a callback after its first epoch (standing in for a stuck input pipeline or a wedged file
read), while worker-0 goes on to the next step and waits in its all-reduce, forever: heartbeats
go on, so TensorFlow notices nothing.

    make up SCRIPT=tests/integration/scripts/stall_callback.py STRATEGY=multiworker WORKERS=2 TIMEOUT=150
"""

import json
import os
import threading

import numpy as np
import tensorflow as tf

TASK_INDEX = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {}).get("index", 0)


class StuckAfterFirstEpoch(tf.keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if TASK_INDEX == 1 and epoch == 0:
            print("worker-1: waiting for something that never comes", flush=True)
            threading.Event().wait()


strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(dataset, epochs=5, verbose=2, callbacks=[StuckAfterFirstEpoch()])
