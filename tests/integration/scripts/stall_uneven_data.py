"""Workers that run out of data at different steps (issue 42): under MultiWorkerMirroredStrategy
each worker reads its own file of examples (auto-sharding off, as with files that a worker
lists for itself), and worker-1's has half as many. It ends its epoch after 8 steps; worker-0
goes on to step 9 and waits in an all-reduce that worker-1 never joins. Every worker must see
the same number of steps: shard one dataset (auto-sharding), or give fit `steps_per_epoch` and
repeat the data.

    make up SCRIPT=tests/integration/scripts/stall_uneven_data.py STRATEGY=multiworker WORKERS=2
"""

import json
import os

import numpy as np
import tensorflow as tf

TASK_INDEX = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {}).get("index", 0)

strategy = tf.distribute.MultiWorkerMirroredStrategy()
examples = 1024 if TASK_INDEX == 0 else 512  # this worker's own file, as it were
x = np.random.default_rng(TASK_INDEX).normal(size=(examples, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).with_options(options)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(dataset, epochs=3, verbose=2)
print(f"worker-{TASK_INDEX}: done", flush=True)
