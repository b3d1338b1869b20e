"""A user's training script, written the way TensorFlow's multi-worker Keras tutorial writes one:
it reads TF_CONFIG itself, builds MultiWorkerMirroredStrategy, and calls model.fit. The lab runs it
unmodified (`tflab up SCRIPT=train.py WORKERS=2` here, or `make up
SCRIPT=examples/multiworker-tutorial/train.py WORKERS=2` in the lab's checkout), and test_train.py
beside it tests it through the pytest fixture. Without TF_CONFIG it trains as one worker, as the
tutorial's does.

    python train.py --epochs 3 --per-worker-batch 32 [--fail-with 3]
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Keras 3's fit fails under MWMS in TF 2.21

import numpy as np
import tabulate  # not in the lab's image: requirements.txt next to this file brings it
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--per-worker-batch", type=int, default=32)
parser.add_argument("--fail-with", type=int, default=0, help="exit with this code before training")
args = parser.parse_args()
if args.fail_with:
    print("failing on purpose", file=sys.stderr)
    sys.exit(args.fail_with)

tf_config = json.loads(os.environ.get("TF_CONFIG", "{}"))
num_workers = len(tf_config.get("cluster", {}).get("worker", [])) or 1
strategy = tf.distribute.MultiWorkerMirroredStrategy()
global_batch_size = args.per_worker_batch * num_workers

tf.keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(2048, 8)).astype("float32")
y = x @ np.arange(1, 9, dtype="float32").reshape(8, 1) / 8
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch_size)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="mse")

callbacks = []
try:  # the lab's optional callback: epoch events in the lab's logs; absent outside the lab
    from tflab.callback import LabCallback

    callbacks.append(LabCallback(global_batch_size=global_batch_size))
except ImportError:
    pass
history = model.fit(dataset, epochs=args.epochs, callbacks=callbacks, verbose=2)
print(tabulate.tabulate([[n + 1, loss] for n, loss in enumerate(history.history["loss"])],
                        headers=["epoch", "loss"]))
