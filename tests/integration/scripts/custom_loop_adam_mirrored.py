"""A custom training loop with Adam under MirroredStrategy, as the guides write one: tf.keras, the
optimizer's slots made on its first `apply_gradients`, inside `strategy.run` in a tf.function
(keras#23085's shape). Under Keras 3.15.1 (TF 2.21's own) that first step fails with
`InvalidArgumentError: You must feed a value for placeholder tensor 'cond/else/_1/cond/Placeholder_1'`;
under tf-keras it trains, and keras#23087 fixed it in keras-nightly 3.16. Nothing in it knows the lab:
make matrix TF=2.21 KERAS="3.12 3.14 3.15 nightly" STRATEGIES=mirrored SCRIPT=<this> says which
Keras releases it breaks on.

    python custom_loop_adam_mirrored.py --epochs 2
"""

import argparse

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--replicas", type=int, default=2)  # logical CPUs, where nothing split the CPU yet
args = parser.parse_args()

cpu = tf.config.list_physical_devices("CPU")[0]
if not tf.config.get_logical_device_configuration(cpu):  # the lab (REPLICAS) splits it before this line
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * args.replicas)
strategy = tf.distribute.MirroredStrategy()
print(f"replicas: {strategy.num_replicas_in_sync}")

GLOBAL_BATCH = 64
x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
dataset = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH, drop_remainder=True))

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam(0.01)  # no slots yet: the first apply_gradients makes them


def replica_step(features, labels):
    with tf.GradientTape() as tape:
        per_example = tf.reduce_mean(tf.square(model(features, training=True) - labels), axis=1)
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


@tf.function
def train_step(features, labels):
    return strategy.reduce("SUM", strategy.run(replica_step, args=(features, labels)), axis=None)


for epoch in range(1, args.epochs + 1):
    total, steps = 0.0, 0
    for features, labels in dataset:
        total += float(train_step(features, labels))
        steps += 1
    print(f"epoch {epoch}: loss {total / steps:.6f}", flush=True)
