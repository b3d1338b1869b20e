"""The chief alone saves (issue 42; the mistake of raydp#447): under MultiWorkerMirroredStrategy
only worker-0 calls tf.saved_model.save. Worker-1 finishes and exits 0; worker-0 waits in the
all-reduce inside the save (CollectiveReduceV2) until TensorFlow's coordination service aborts
it ("tasks stopped sending heartbeats"). Every worker must call save, the others to a temporary
path they delete.

    make up SCRIPT=tests/integration/scripts/stall_chief_save.py STRATEGY=multiworker WORKERS=2
"""

import json
import os

import numpy as np
import tensorflow as tf

TASK_INDEX = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {}).get("index", 0)

strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(dataset, epochs=2, verbose=2)
if TASK_INDEX == 0:  # the mistake: "save from the chief only, to avoid races"
    tf.saved_model.save(model, os.path.join(os.environ.get("TFLAB_OUTPUT", "/tmp"), "model"))
print(f"worker-{TASK_INDEX}: done", flush=True)
