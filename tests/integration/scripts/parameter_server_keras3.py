"""The parameter-server tutorial's script (parameter_server_tutorial.py beside it) as a Keras 3 user
writes it: `import keras`, Keras 3's own optimizer, and fit on a tf.data dataset under
ParameterServerStrategy (Keras 3 has no DatasetCreator). Keras 3 has no ParameterServerStrategy
support (no ClusterCoordinator in keras/src), so the chief's fit fails; tf-keras's fit has it.

    python parameter_server_keras3.py --epochs 2
"""

import argparse
import os

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if cluster_resolver.task_type in ("worker", "ps"):
    os.environ["GRPC_FAIL_FAST"] = "use_caller"
    server = tf.distribute.Server(cluster_resolver.cluster_spec(), job_name=cluster_resolver.task_type,
                                  task_index=cluster_resolver.task_id, protocol=cluster_resolver.rpc_layer or "grpc",
                                  start=True)
    server.join()

strategy = tf.distribute.ParameterServerStrategy(cluster_resolver)
x = np.random.default_rng(0).normal(size=(2048, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=0).repeat().batch(64)
with strategy.scope():
    model = keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(learning_rate=0.05), loss="mse")
model.fit(dataset, epochs=args.epochs, steps_per_epoch=16, verbose=2)
