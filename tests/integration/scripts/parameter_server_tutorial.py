"""A parameter-server script shaped as TensorFlow's own tutorial writes it
(https://www.tensorflow.org/tutorials/distribute/parameter_server_training): one script for every
task, which tells its role from TF_CONFIG itself, as on a cluster where every replica runs the same
command. Workers and parameter servers start a tf.distribute.Server and join it (forever: whoever
runs them ends them once the chief is done); the evaluator evaluates the chief's checkpoints as they
come (SidecarEvaluator); the chief builds ParameterServerStrategy and runs Model.fit over a
DatasetCreator. tf.keras: tf-keras under TF_USE_LEGACY_KERAS=1.

    python parameter_server_tutorial.py --epochs 4
"""

import argparse
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=4)
parser.add_argument("--steps-per-epoch", type=int, default=16)
args = parser.parse_args()

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
# Where every task sees the same files: the lab's run folder (TFLAB_OUTPUT), a bucket on a cluster.
working_dir = os.path.join(os.environ.get("TFLAB_OUTPUT", "/tmp"), "ps_tutorial")
checkpoint_dir = os.path.join(working_dir, "ckpt")

if cluster_resolver.task_type in ("worker", "ps"):
    # The tutorial: a worker or ps retries a lost peer for ever unless told to fail fast.
    os.environ["GRPC_FAIL_FAST"] = "use_caller"
    server = tf.distribute.Server(cluster_resolver.cluster_spec(), job_name=cluster_resolver.task_type,
                                  task_index=cluster_resolver.task_id, protocol=cluster_resolver.rpc_layer or "grpc",
                                  start=True)
    print(f"{cluster_resolver.task_type} {cluster_resolver.task_id} serving", flush=True)
    server.join()


def make_model():
    return tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                tf.keras.layers.Dense(1)])


x = np.random.default_rng(0).normal(size=(2048, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)

if cluster_resolver.task_type == "evaluator":
    model = make_model()
    model.compile(loss="mse")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(256)
    tf.keras.utils.SidecarEvaluator(model, data, checkpoint_dir, max_evaluations=args.epochs).start()
    print("evaluator: done", flush=True)
else:  # the chief ("chief" in TF_CONFIG)
    strategy = tf.distribute.ParameterServerStrategy(
        cluster_resolver,
        variable_partitioner=tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=256 << 10, max_shards=len(cluster_resolver.cluster_spec().as_dict().get("ps", []))))

    def dataset_fn(input_context):
        batch = input_context.get_per_replica_batch_size(64)
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(2048, seed=0).repeat()
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return dataset.batch(batch).prefetch(2)

    with strategy.scope():
        model = make_model()
        model.compile(tf.keras.optimizers.legacy.SGD(learning_rate=0.05), loss="mse", steps_per_execution=4)
    callbacks = [tf.keras.callbacks.ModelCheckpoint(os.path.join(checkpoint_dir, "ckpt-{epoch}"),
                                                    save_weights_only=True),
                 tf.keras.callbacks.BackupAndRestore(backup_dir=os.path.join(working_dir, "backup"))]
    history = model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn), epochs=args.epochs,
                        steps_per_epoch=args.steps_per_epoch, callbacks=callbacks)
    print("chief: losses", " ".join(f"{loss:.4f}" for loss in history.history["loss"]), flush=True)
