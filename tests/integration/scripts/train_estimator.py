"""A user's script from the TF 1.x/2.x-estimator era: it reads its cluster through tf.estimator's
RunConfig, which TensorFlow 2.16 removed with the rest of tf.estimator. On TF 2.15 it trains; from
2.16 on it dies with `AttributeError: module 'tensorflow' has no attribute 'estimator'`.

    python train_estimator.py --epochs 2
"""

import argparse

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

config = tf.estimator.RunConfig()  # TF_CONFIG's cluster, as estimators read it
print(f"task {config.task_type}/{config.task_id}, {config.num_worker_replicas} worker replica(s)", flush=True)
x = np.random.default_rng(0).normal(size=(256, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model.fit(x, y, batch_size=32, epochs=args.epochs, verbose=2)
