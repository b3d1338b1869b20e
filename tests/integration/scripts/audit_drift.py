"""A custom training loop whose replicas drift apart (issue 25): the step is right, but after each
epoch every worker adds noise to the weights outside strategy.run, from a random generator with no
seed, so each worker adds its own. Every worker exits 0 with a model of its own.

    python audit_drift.py --epochs 3
"""

import argparse
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
tf.keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(512, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)  # AUTO: sharded by DATA
distributed = strategy.experimental_distribute_dataset(dataset)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu", input_shape=(8,)),
                                 tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.01)


@tf.function
def train_step(iterator):
    def step(inputs, targets):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(tf.square(targets - model(inputs)), global_batch_size=64)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return strategy.reduce("SUM", strategy.run(step, args=next(iterator)), axis=None)


for epoch in range(args.epochs):
    iterator, total = iter(distributed), 0.0
    for _ in range(512 // 64):
        total += float(train_step(iterator))
    print(f"epoch {epoch + 1} loss {total / 8:.4f}", flush=True)
    noise = np.random.default_rng()  # the bug: no seed, so every worker draws its own noise
    for variable in model.trainable_variables:  # outside strategy.run: nothing keeps the replicas alike
        variable.assign_add(noise.normal(0, 1e-3, variable.shape).astype("float32"))
