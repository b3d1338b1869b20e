"""The training operator's examples/tensorflow/distribution_strategy save (issue 45): the chief
saves the model to saved_model_dir, every other worker to saved_model_dir + '/worker_tmp_' + its
index, and nothing deletes those, so the exported SavedModel holds a stray one inside it. With
--tutorial, TensorFlow's multi-worker tutorial's way instead: a non-chief saves to
<dir>/workertemp_<index>/<name> and deletes it after the save. It exits 0 either way.

    python operator_worker_tmp.py --epochs 2 [--tutorial]
"""

import argparse
import json
import os
import shutil

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--tutorial", action="store_true")
args = parser.parse_args()

TASK_INDEX = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {}).get("index", 0)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
tf.keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(dataset, epochs=args.epochs, verbose=2)

saved_model_dir = os.path.join(os.environ.get("TFLAB_OUTPUT", "."), "saved_model")
if args.tutorial:
    model_path = saved_model_dir if TASK_INDEX == 0 else os.path.join(
        os.path.dirname(saved_model_dir), f"workertemp_{TASK_INDEX}", "saved_model")
    model.save(model_path)
    if TASK_INDEX != 0:
        shutil.rmtree(os.path.dirname(model_path))
else:
    model_path = saved_model_dir if TASK_INDEX == 0 else saved_model_dir + "/worker_tmp_" + str(TASK_INDEX)
    model.save(model_path)
