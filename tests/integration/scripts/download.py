"""As TensorFlow's tutorials begin: the data set downloaded from the internet on first use, which
a lab's tasks cannot reach (their network has no route out).

    python download.py
"""

import tensorflow as tf

(x_train, y_train), _ = tf.keras.datasets.mnist.load_data()
print(x_train.shape)
