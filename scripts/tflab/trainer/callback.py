"""An optional Keras callback for your own script: it adds `epoch` events to the lab's logs.

    from tflab.callback import LabCallback      # in the lab's image, tflab is importable
    model.fit(dataset, epochs=3, callbacks=[LabCallback(global_batch_size=64)])

Under the lab (SCRIPT=...) each task's callback appends to that task's JSONL file (TFLAB_LOG, set
by tflab/trainer/launch.py), so `make up`'s progress, summary and the pytest fixture see your losses and
timings. Anywhere else it does nothing, so the script runs unchanged outside the lab. Works with
tf-keras (TF_USE_LEGACY_KERAS=1, the lab's default) and Keras 3.
"""

from __future__ import annotations

import os
import sys
import time

import tensorflow as tf

from tflab.core.processes import rss_field
from tflab.core.schema import EventLog, SchemaError, loss_field


class LabCallback(tf.keras.callbacks.Callback):
    def __init__(self, global_batch_size: int):
        super().__init__()
        self.global_batch_size = int(global_batch_size)
        path, task = os.environ.get("TFLAB_LOG"), os.environ.get("TFLAB_TASK")
        self._log = EventLog(path, task) if path and task else None
        self._steps = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._started = time.perf_counter()
        self._steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self._steps = int(batch) + 1  # batch counts from 0 within the epoch

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("loss")
        if self._log is None or loss is None or not self._steps:
            return
        seconds = time.perf_counter() - self._started
        try:
            self._log.emit("epoch", epoch=int(epoch) + 1, loss=loss_field(loss), seconds=seconds, steps=self._steps,
                           examples_per_second=self._steps * self.global_batch_size / seconds,
                           **rss_field())
        except (SchemaError, TypeError, ValueError) as error:  # the lab's log must never break your training
            print(f"tflab.callback: epoch {int(epoch) + 1} not logged: {error}", file=sys.stderr)
