"""A user's script as the multi-worker Keras tutorial's fault-tolerance section writes it: tf.keras,
MultiWorkerMirroredStrategy from TF_CONFIG, and BackupAndRestore so that a restarted worker goes
on from its last epoch. Nothing of the lab in it: no tflab import, no LabCallback.

    python train_backup.py --backup-dir /tmp/backup          # as the tutorial has it
    python train_backup.py --backup-dir output               # in $TFLAB_OUTPUT, which a restart keeps
"""

import argparse
import os

import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=8)
parser.add_argument("--backup-dir", default="/tmp/backup", help="a folder, or `output` for $TFLAB_OUTPUT/backup")
args = parser.parse_args()
backup_dir = os.path.join(os.environ["TFLAB_OUTPUT"], "my-backup") if args.backup_dir == "output" else args.backup_dir

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 8)).astype("float32")
y = (x @ (np.arange(1, 9, dtype="float32") / 8)).reshape(-1, 1)
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.Adam(0.01), loss="mse")

callbacks = [tf.keras.callbacks.BackupAndRestore(backup_dir=backup_dir)]
model.fit(dataset, epochs=args.epochs, callbacks=callbacks, verbose=2)
