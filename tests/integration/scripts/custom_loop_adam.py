"""A custom training loop with Adam under MirroredStrategy, shaped as TensorFlow's guide writes it
(https://www.tensorflow.org/tutorials/distribute/custom_training): the model and optimizer made in
the strategy's scope, a `train_step` run by `strategy.run` inside a tf.function, so the optimizer's
slots (Adam's moments) are made on its first `apply_gradients`, inside the replica context.
`import tensorflow as tf` and tf.keras: tf-keras under TF_USE_LEGACY_KERAS=1, Keras 3 without it.
Under Keras 3.15.1 the first step fails with "You must feed a value for placeholder tensor
'cond/else/_1/cond/Placeholder_1'" (keras#23085, fixed by keras#23087 in keras-nightly 3.16).

    python custom_loop_adam.py --epochs 2
"""

import argparse

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

strategy = tf.distribute.MirroredStrategy()
print(f"Number of devices: {strategy.num_replicas_in_sync}", flush=True)
GLOBAL_BATCH = 64
x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
dataset = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH))

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.Adam(0.01)
    loss_object = tf.keras.losses.MeanSquaredError(reduction=tf.keras.losses.Reduction.NONE)


def compute_loss(labels, predictions):
    per_example_loss = loss_object(labels, predictions)
    return tf.nn.compute_average_loss(per_example_loss, global_batch_size=GLOBAL_BATCH)


def train_step(inputs):
    features, labels = inputs
    with tf.GradientTape() as tape:
        predictions = model(features, training=True)
        loss = compute_loss(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    return loss


@tf.function
def distributed_train_step(inputs):
    per_replica_losses = strategy.run(train_step, args=(inputs,))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


for epoch in range(args.epochs):
    total, batches = 0.0, 0
    for batch in dataset:
        total += float(distributed_train_step(batch))
        batches += 1
    print(f"Epoch {epoch + 1}, Loss: {total / batches:.4f}", flush=True)
