"""Written as Keras's distributed-training guide writes a single-host script: `import keras`
(Keras 3), `tf.distribute.MirroredStrategy()` with no arguments, checkpoints to `./ckpt` and
TensorBoard logs to `./logs` in the working directory, a file read beside the script by its
relative path, settings from the environment. Nothing in it knows the lab.

    python train.py --epochs 2
"""

import argparse
import json
import os

import keras
import numpy as np
import tensorflow as tf

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
args = parser.parse_args()

strategy = tf.distribute.MirroredStrategy()
print("Number of devices: {}".format(strategy.num_replicas_in_sync))

# As keras.datasets finds a data set it has: in datasets/ of KERAS_HOME (here ".", the working
# directory, where datasets/ beside the script is seen), else it would download it.
with open(keras.utils.get_file("scale.txt", origin="https://example.invalid/scale.txt")) as file:
    scale = float(file.read())
data_dir = os.environ.get("TFLAB_DATA")
weights = np.load(os.path.join(data_dir, "weights.npy")) if data_dir else np.ones(8, "float32")

x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")
y = (x @ weights * scale)[:, None].astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)

with strategy.scope():
    model = keras.Sequential([keras.Input(shape=(8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")

os.makedirs("./ckpt", exist_ok=True)
callbacks = [keras.callbacks.ModelCheckpoint(filepath="./ckpt/ckpt-{epoch}.keras"),
             keras.callbacks.TensorBoard(log_dir="./logs")]
history = model.fit(dataset, epochs=args.epochs, callbacks=callbacks)

with open("seen.json", "w") as out:  # the working directory is writable
    json.dump({"replicas": strategy.num_replicas_in_sync, "scale": scale, "greeting": os.environ.get("GREETING"),
               "weights": weights.tolist(), "cwd": os.getcwd(), "losses": history.history["loss"]}, out)
