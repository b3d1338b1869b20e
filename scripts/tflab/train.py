"""The lab's training script: the same file runs in every container and every local process.

    python -m tflab.train --config runs/<RUN>/config.json --task worker-0

The settings come from config.json (written by the host side from STRATEGY, WORKERS, ...), the
task name from --task (or TFLAB_TASK), and for multiworker the cluster from TF_CONFIG, exactly as
TensorFlow's own multi-worker tutorial reads it. It trains the source article's model,
Dense(10, relu) on 32 features -> Dense(1) with Adam and MSE, on a synthetic regression set
y = xW + 0.1 noise generated from SEED (the article trains on pure noise, which cannot converge),
and writes one JSON line per event to <run>/<task>.jsonl (see tflab/schema.py).

Expected result at the defaults (SEED=0, EXAMPLES=4096, GLOBAL_BATCH=64, EPOCHS=5): the loss falls
from about 31 to about 5, identically (to float rounding) for single, mirrored and multiworker.
"""

import os
import sys
import time

STARTED = time.time()  # cluster_ready and total_seconds count from here, imports included
# Keras 3 (TF 2.21's default) fails model.fit under MultiWorkerMirroredStrategy
# (tensorflow#72388, keras#20585); tf-keras is selected this way, and only before TF loads.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's C++ info and warnings drown the progress

import argparse
import hashlib
import importlib.metadata
import json
import resource
import shutil
import statistics
import tempfile
import traceback
from pathlib import Path

import numpy as np
import tensorflow as tf

from tflab import cluster
from tflab.peerwait import PeerWait
from tflab.schema import EventLog
from tflab.settings import Settings

FEATURES = 32  # the article's input width
NOISE = 0.1  # standard deviation of the target's noise: the lowest loss reachable is NOISE**2


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=os.environ.get("TFLAB_CONFIG"),
                        help="the run's config.json (default: $TFLAB_CONFIG)")
    parser.add_argument("--task", default=os.environ.get("TFLAB_TASK"),
                        help="this task's name, e.g. worker-0 (default: $TFLAB_TASK)")
    args = parser.parse_args(argv)
    if not args.config or not args.task:
        parser.error("--config and --task (or TFLAB_CONFIG and TFLAB_TASK) are required")

    config_path = Path(args.config)
    config = json.loads(config_path.read_text())
    settings = Settings.from_dict(config["settings"])
    run_dir = config_path.parent
    log = EventLog(run_dir / f"{args.task}.jsonl", args.task)
    print(f"[{args.task}] settings {json.dumps(settings.to_dict(), sort_keys=True)}", flush=True)
    try:
        train(settings, args.task, config["cluster"], run_dir, log)
        return 0
    except BaseException as error:  # noqa: BLE001 - every failure is logged, then reported by exit code
        message = f"{type(error).__name__}: {error}".strip()
        log.emit("error", message=message[:4000])
        traceback.print_exc()
        return 130 if isinstance(error, KeyboardInterrupt) else 1
    finally:
        log.close()


def train(settings: Settings, task: str, expected_cluster: dict, run_dir: Path, log: EventLog) -> None:
    spec = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    if spec != expected_cluster:
        raise RuntimeError(f"TF_CONFIG's cluster {spec} is not the run's cluster {expected_cluster}")
    x, y = synthetic_data(settings.seed, settings.examples)
    log.emit("start", strategy=settings.strategy, cluster=spec, versions=versions(),
             settings=settings.to_dict(), baseline_loss=float(np.mean(y**2)))

    tf.keras.utils.set_random_seed(settings.seed)
    tf.config.experimental.enable_op_determinism()
    strategy = build_strategy(settings, task, spec, log)
    replicas = strategy.num_replicas_in_sync
    if settings.global_batch % replicas:
        raise ValueError(f"GLOBAL_BATCH={settings.global_batch} is not divisible by the "
                         f"{replicas} replicas this host has for {settings.strategy}")
    log.emit("cluster_ready", seconds=time.time() - STARTED, replicas=replicas,
             devices=replica_devices(strategy))
    print(f"[{task}] cluster ready: {replicas} replicas in sync", flush=True)

    with strategy.scope():
        model = tf.keras.Sequential([
            tf.keras.layers.Dense(10, activation="relu", input_shape=(FEATURES,)),
            tf.keras.layers.Dense(1),
        ])
        model.compile(optimizer=tf.keras.optimizers.Adam(), loss="mse")

    # The whole data set is batched with the global batch; tf.distribute splits every global
    # batch over the replicas (and, with DATA sharding, over the workers), so each step sees the
    # same examples whatever the strategy, which is what makes the strategies' losses comparable.
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(settings.global_batch, drop_remainder=True)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.with_options(options)

    timing = StepTiming(task, settings, log)
    history = model.fit(dataset, epochs=settings.epochs, callbacks=[timing], verbose=0)

    weights_sha256 = weights_digest(model.get_weights())
    save_model(model, task, settings, run_dir)
    log.emit("end", final_loss=float(history.history["loss"][-1]), total_seconds=time.time() - STARTED,
             first_step_seconds=timing.first_step_seconds,
             steady_step_seconds=timing.steady_step_seconds(),
             peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
             weights_sha256=weights_sha256)
    print(f"[{task}] done: final loss {history.history['loss'][-1]:.4f}, weights {weights_sha256[:12]}",
          flush=True)


def synthetic_data(seed: int, examples: int):
    """x ~ N(0, 1)^32, y = xW + NOISE * N(0, 1), W ~ N(0, 1): learnable, identical for every task."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(FEATURES, 1))
    x = rng.normal(size=(examples, FEATURES)).astype(np.float32)
    y = (x @ w + NOISE * rng.normal(size=(examples, 1))).astype(np.float32)
    return x, y


def versions() -> dict:
    """Versions that decide behaviour; `keras` is the package tf.keras really is (tf-keras or Keras 3)."""
    legacy = os.environ.get("TF_USE_LEGACY_KERAS") == "1"
    keras_package = "tf-keras" if legacy else "keras"
    return {"tensorflow": tf.__version__, "keras": f"{keras_package} {importlib.metadata.version(keras_package)}",
            "python": sys.version.split()[0]}


def build_strategy(settings: Settings, task: str, spec: dict, log: EventLog):
    """The strategy, with its replicas; for multiworker, the rendezvous bounded by PEER_TIMEOUT."""
    if settings.strategy == "single":
        return tf.distribute.get_strategy()
    if settings.strategy == "mirrored":
        if tf.config.list_physical_devices("GPU"):
            return tf.distribute.MirroredStrategy()
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * settings.replicas)
        return tf.distribute.MirroredStrategy(devices=[d.name for d in tf.config.list_logical_devices("CPU")])
    peers = {name: address for job, addresses in spec.items() for i, address in enumerate(addresses)
             if (name := f"{job}-{i}") != task}
    with PeerWait(settings.peer_timeout, peers, log.path, task):
        # Blocks until every task has registered with the coordination service on worker-0;
        # TensorFlow itself would wait forever for a task that never comes (see tflab/peerwait.py).
        return tf.distribute.MultiWorkerMirroredStrategy()


def replica_devices(strategy) -> list[str]:
    if strategy is tf.distribute.get_strategy():  # the default strategy: TF's own placement
        return [(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU"))[0].name]
    return list(strategy.extended.worker_devices)


class StepTiming(tf.keras.callbacks.Callback):
    """Times every step and logs each epoch: the `epoch` events and the `end` event's timings."""

    def __init__(self, task: str, settings: Settings, log: EventLog):
        super().__init__()
        self.task, self.settings, self.log = task, settings, log
        self.first_step_seconds = 0.0
        self.steps_by_epoch: list[list[float]] = []

    def on_train_begin(self, logs=None):
        self._fit_started = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_started = time.perf_counter()
        self.steps_by_epoch.append([])

    def on_train_batch_begin(self, batch, logs=None):
        self._step_started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        self.steps_by_epoch[-1].append(now - self._step_started)
        if len(self.steps_by_epoch) == 1 and batch == 0:
            self.first_step_seconds = now - self._fit_started  # tracing included

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._epoch_started
        steps = len(self.steps_by_epoch[-1])
        loss = float(logs["loss"])
        self.log.emit("epoch", epoch=epoch + 1, loss=loss, seconds=seconds, steps=steps,
                      examples_per_second=steps * self.settings.global_batch / seconds)
        print(f"[{self.task}] epoch {epoch + 1}/{self.settings.epochs} loss {loss:.4f} {seconds:.2f} s",
              flush=True)

    def steady_step_seconds(self) -> float:
        """Median step time after the first epoch (tracing and warm-up excluded)."""
        later = [s for steps in self.steps_by_epoch[1:] for s in steps]
        if not later:
            later = self.steps_by_epoch[0][1:] or self.steps_by_epoch[0]
        return statistics.median(later)


def weights_digest(weights) -> str:
    """sha256 of every weight as little-endian float32, in layer order: equal weights, equal digest."""
    digest = hashlib.sha256()
    for w in weights:
        digest.update(np.ascontiguousarray(w, dtype="<f4").tobytes())
    return digest.hexdigest()


def save_model(model, task: str, settings: Settings, run_dir: Path) -> None:
    """The chief writes <run>/model.keras. Under multiworker every worker must take part in saving
    (TF's rule), so the others save to scratch space of their own, deleted at once."""
    if task == cluster.chief_task(settings):
        model.save(run_dir / "model.keras")
        return
    scratch = tempfile.mkdtemp(prefix=f"tflab-{task}-")
    try:
        model.save(Path(scratch) / "model.keras")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
