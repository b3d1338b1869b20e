"""A user's custom training loop as TensorFlow's "Custom training loop with Keras and
MultiWorkerMirroredStrategy" tutorial writes it: MultiWorkerMirroredStrategy from TF_CONFIG, a
per-worker dataset, a tf.train.Checkpoint of the model, the optimizer and the epoch, saved each
epoch through tf.train.CheckpointManager by every worker (the chief into the checkpoint folder,
the others into a temporary folder they delete, the tutorial's write_filepath), and restored from
the chief's latest at the start. Nothing of the lab in it.

    python ctl_checkpoint.py --epochs 8 --checkpoints /lab/run/ckpt
"""

import argparse
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=8)
parser.add_argument("--steps", type=int, default=32, help="steps an epoch")
parser.add_argument("--checkpoints", default=os.path.join(os.environ.get("TFLAB_OUTPUT", "/tmp"), "ckpt"))
args = parser.parse_args()

strategy = tf.distribute.MultiWorkerMirroredStrategy()
resolver = strategy.cluster_resolver
task_type, task_id = resolver.task_type, resolver.task_id
GLOBAL_BATCH = 64


def is_chief(task_type, task_id):
    # the tutorial's: the chief, or worker 0 where there is no chief
    return task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0)


def write_filepath(filepath, task_type, task_id):
    """The tutorial's: the chief writes to filepath, every other worker to a temporary folder of its own."""
    dirpath = os.path.dirname(filepath)
    base = os.path.basename(filepath)
    if not is_chief(task_type, task_id):
        dirpath = os.path.join(dirpath, f"workertemp_{task_id}")
        tf.io.gfile.makedirs(dirpath)
    return os.path.join(dirpath, base)


def dataset_fn(context):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(GLOBAL_BATCH * args.steps, 8)).astype("float32")
    y = (x @ (np.arange(1, 9, dtype="float32") / 8)).reshape(-1, 1)
    batch = context.get_per_replica_batch_size(GLOBAL_BATCH)
    data = tf.data.Dataset.from_tensor_slices((x, y)).shard(context.num_input_pipelines, context.input_pipeline_id)
    return data.batch(batch, drop_remainder=True).repeat()


with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    optimizer = tf.keras.optimizers.SGD(0.05)
    epoch = tf.Variable(0, dtype=tf.int64, trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)

iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))


@tf.function
def train_step(iterator):
    def step(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(model(x, training=True) - y)) / GLOBAL_BATCH
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step, args=(next(iterator),)), axis=None)


checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch)
write_checkpoint_dir = write_filepath(args.checkpoints, task_type, task_id)
manager = tf.train.CheckpointManager(checkpoint, directory=write_checkpoint_dir, max_to_keep=1)
latest = tf.train.latest_checkpoint(args.checkpoints)
if latest:
    checkpoint.restore(latest)
    print(f"restored {os.path.basename(latest)}: resuming at epoch {int(epoch.numpy()) + 1}", flush=True)

while epoch.numpy() < args.epochs:
    total = 0.0
    for _ in range(args.steps):
        total += float(train_step(iterator))
    epoch.assign_add(1)
    manager.save()
    if not is_chief(task_type, task_id):
        tf.io.gfile.rmtree(write_checkpoint_dir)
    print(f"epoch {int(epoch.numpy())}/{args.epochs} loss {total / args.steps:.4f}", flush=True)
