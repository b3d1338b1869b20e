"""The lab's training script: the same file runs in every container and every local process.

    python -m tflab.train --config runs/<RUN>/config.json --task worker-0

The settings and the cluster come from config.json (written by the host side from STRATEGY,
WORKERS, ...; the trainer builds no cluster of its own), the task name from --task (or TFLAB_TASK,
else TF_CONFIG's task). TensorFlow reads TF_CONFIG itself, exactly as its own multi-worker
tutorial has it; the trainer checks that it names config.json's cluster. Every event goes to
<run>/<task>.jsonl as one JSON line (see tflab/core/schema.py); the run folder is config.json's, or --output
(TFLAB_OUTPUT) where config.json is read-only, as in a Kubernetes ConfigMap.

MODEL=mlp (the default) is the source article's model, Dense(10, relu) on 32 features -> Dense(1)
with Adam and MSE, trained on a synthetic regression set y = xW + 0.1 noise generated from SEED
(the article trains on pure noise, which cannot converge); MODEL=cnn is a small convnet on
32x32x3 images, for the compute-dominated regime.

Expected result at the defaults (SEED=0, EXAMPLES=4096, GLOBAL_BATCH=64, EPOCHS=10): the loss falls
from 22.1 to 0.84, identically (to float rounding) for single, mirrored and multiworker.
"""

import os
import sys
import time

STARTED = time.time()  # cluster_ready and total_seconds count from here, imports included
# Keras 3 (TF 2.21's default) fails model.fit under MultiWorkerMirroredStrategy
# (tensorflow#72388, keras#20585); tf-keras is selected this way, and only before TF loads.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's C++ info and warnings drown the progress
# TF's preemption handling (BackupAndRestore's save_before_preemption) asks GCE's metadata server
# whether it runs on Google Cloud: on the lab's private network that was 10 s of DNS timeouts per
# start, and elsewhere a request off the machine. A closed loopback port answers "no" at once.
os.environ.setdefault("GCE_METADATA_IP", "127.0.0.1:9")

import argparse
import json
import resource
import shutil
import signal
import statistics
import tempfile
import threading
import traceback
from pathlib import Path

import numpy as np
import tensorflow as tf

from tflab.core import cluster, processes, runfolder
from tflab.core.explain import GCE_PREEMPTED, PREEMPTED  # TF's PreemptionCheckpointHandler exits so after its backup
from tflab.core.runfolder import read_run_config
from tflab.core.schema import EventLog, loss_field, start_versions
from tflab.core.settings import Settings, SettingsError
from tflab.trainer import audit, backups, chaossave, chaosstep, customloop, precision, signals
from tflab.trainer.peerwait import PeerWait
from tflab.trainer.weights import weights_digest, weights_fingerprint

FEATURES = 32  # the MLP's input width, the article's
IMAGE = (32, 32, 3)  # the CNN's input
NOISE = 0.1  # standard deviation of the target's noise: the lowest loss reachable is NOISE**2
COLLECTIVES = {"auto": "AUTO", "ring": "RING", "nccl": "NCCL"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=os.environ.get("TFLAB_CONFIG"),
                        help="the run's config.json (default: $TFLAB_CONFIG)")
    parser.add_argument("--task", default=os.environ.get("TFLAB_TASK") or task_from_tf_config(),
                        help="this task's name, e.g. worker-0 (default: $TFLAB_TASK, else TF_CONFIG's task)")
    parser.add_argument("--output", default=os.environ.get("TFLAB_OUTPUT"),
                        help="the folder for logs, backups and the model (default: $TFLAB_OUTPUT, "
                             "else the folder of config.json)")
    args = parser.parse_args(argv)
    if not args.config or not args.task:
        parser.error("--config and --task (or TFLAB_CONFIG and TFLAB_TASK or TF_CONFIG) are required")

    config_path = Path(args.config)
    run_dir = Path(args.output or config_path.parent)
    run_dir.mkdir(parents=True, exist_ok=True)
    log = EventLog(runfolder.log_path(run_dir, args.task), args.task)
    signals.install_in(str(run_dir), args.task)  # its stacks, and make chaos SCENARIO=hang
    try:
        config, settings = read_run_config(config_path)
    except SettingsError as error:  # the host's own checks refused it: one line, no traceback
        log.emit("error", message=str(error))
        log.close()
        print(f"[{args.task}] {error}", file=sys.stderr, flush=True)
        return 2
    print(f"[{args.task}] settings {json.dumps(settings.to_dict(), sort_keys=True)}", flush=True)
    try:
        run_task(settings, args.task, config["cluster"], run_dir, log)
        return 0
    except SystemExit as exit_:
        if exit_.code not in (PREEMPTED, GCE_PREEMPTED):
            raise
        heard = "SIGTERM" if exit_.code == PREEMPTED else "GCE notice"
        log.emit("error", message=f"preempted ({heard}): every worker saved the backup at the same step, "
                                  f"then exited with code {exit_.code} to be restarted")
        return exit_.code
    except BaseException as error:  # noqa: BLE001 - every failure is logged, then reported by exit code
        message = f"{type(error).__name__}: {error}".strip()
        log.emit("error", message=message[:4000])
        traceback.print_exc()
        return 130 if isinstance(error, KeyboardInterrupt) else 1
    finally:
        log.close()


def task_from_tf_config() -> str | None:
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    return cluster.task_of(tf_config) if "task" in tf_config else None


def run_task(settings: Settings, task: str, expected_cluster: dict, run_dir: Path, log: EventLog) -> None:
    # TF_CONFIG is what TensorFlow itself reads (and, under a TFJob, the operator's to write): it
    # must name config.json's cluster.
    spec = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    if spec != expected_cluster:
        raise RuntimeError(f"TF_CONFIG's cluster {spec} is not the run's cluster {expected_cluster}")
    # config.json's cluster, taken as written: nothing is rebuilt here. Its spec keeps TF_CONFIG's
    # key order (the operator's, sorted, under a TFJob), the order the peers are waited for in.
    the_cluster = cluster.recorded(settings, spec)
    role = the_cluster.role(task)
    # make chaos AT=save:N, AT=restore, AT=eval:N: TensorFlow's checkpoint writes and reads, held in the target
    if (checkpoints := chaossave.for_task(settings, task, the_cluster, str(run_dir), log.emit)) is not None:
        chaossave.install(checkpoints)
    x, y = synthetic_data(settings.model, settings.seed, settings.examples)
    log.emit("start", role=role, strategy=settings.strategy, cluster=spec, versions=start_versions(tf.__version__),
             settings=settings.to_dict(), baseline_loss=float(np.mean(y**2)))
    if role == "server":
        serve(task, spec, log)
    elif role == "evaluator":
        evaluate(settings, task, run_dir, log, x, y)
    else:
        train(settings, task, the_cluster, run_dir, log, x, y)


def train(settings: Settings, task: str, the_cluster: cluster.Cluster, run_dir: Path, log: EventLog, x, y) -> None:
    tf.keras.utils.set_random_seed(settings.seed)
    tf.config.experimental.enable_op_determinism()
    tf.keras.mixed_precision.set_global_policy(precision.plan(settings.precision).policy)  # before any model
    # Without this, a run that asked for GPUs and got none would train on CPUs and look fine.
    # (parameter_server's chief, the one trainer there, is given no GPU: its workers compute.)
    if settings.gpus and settings.strategy != "parameter_server" and not tf.config.list_physical_devices("GPU"):
        raise RuntimeError(f"GPUS={settings.gpus} but TensorFlow sees no GPU in this container; the image "
                           "must be tflab-trainer:gpu and the engine must hand GPUs over (NVIDIA Container Toolkit)")
    # Before any peer can train: before the strategy.
    backups.adopt_chief_backup(settings, task, the_cluster.chief, run_dir)
    if backups.gce_notice(settings):
        backups.take_the_gce_gpu_path()
    # AUDIT: the same instruments a user's script gets (trainer/audit.py), in a log writer of their own.
    auditing = None if settings.audit == "off" else audit.start(EventLog(log.path, task), settings.backend,
                                                                str(run_dir))
    peers = {name: address for job, addresses in the_cluster.spec.items() for i, address in enumerate(addresses)
             if (name := f"{job}-{i}") != task}
    # TensorFlow itself would wait forever for a peer that never comes (see tflab/trainer/peerwait.py).
    wait = PeerWait(settings.peer_timeout, peers, log.path, task).start() if peers else None
    strategy = build_strategy(settings)
    if settings.strategy != "parameter_server" and wait:
        wait.done()  # multiworker: the constructor returns once every worker has registered
    replicas = strategy.num_replicas_in_sync
    if settings.strategy != "parameter_server" and settings.global_batch % replicas:  # GPUs may differ
        raise ValueError(f"GLOBAL_BATCH={settings.global_batch} is not divisible by the "
                         f"{replicas} replicas this host has for {settings.strategy}")
    log.emit("cluster_ready", seconds=time.time() - STARTED, replicas=replicas,
             devices=replica_devices(strategy))
    print(f"[{task}] cluster ready: {replicas} replicas in sync", flush=True)

    with strategy.scope():
        model = build_model(settings.model, settings.precision)
        model.compile(optimizer=build_optimizer(settings.precision), loss="mse",
                      steps_per_execution=settings.steps_per_execution)
    # TensorBoard scalars, written by the chief alone (make tensorboard serves every run's).
    writer = tf.summary.create_file_writer(str(run_dir / "tensorboard")) \
        if task == the_cluster.chief else None
    timing = StepTiming(task, settings, log, on_first_step=wait.done if wait else None, writer=writer,
                        moment=chaosstep.for_task(settings, task, the_cluster, log.emit))
    callbacks = backups.backup_callbacks(settings, run_dir) + backups.checkpoint_callbacks(settings, run_dir) + [timing]
    # (the backup restores before timing starts)
    if settings.strategy == "parameter_server":
        losses = fit_parameter_server(model, settings, x, y, callbacks)
    elif settings.loop == "custom" and customloop.preemptible_custom_loop(settings):
        losses = customloop.custom_fit_preemptible(model, strategy, sync_dataset(settings, x, y), settings, timing,
                                                   run_dir)
    elif settings.loop == "custom":
        losses = customloop.custom_fit(model, strategy, sync_dataset(settings, x, y), settings, timing)
    else:
        history = model.fit(sync_dataset(settings, x, y), epochs=settings.epochs, callbacks=callbacks, verbose=0)
        losses = history.history["loss"]

    parameters = int(sum(np.prod(v.shape) for v in model.trainable_variables))
    if settings.allreduce_probe and settings.strategy != "parameter_server":
        probe_allreduce(strategy, parameters, settings.allreduce_probe, log)
    weights_sha256 = weights_digest(model.get_weights())
    fingerprint = weights_fingerprint([v.name for v in model.weights], model.get_weights())
    save_model(model, task, the_cluster.chief, run_dir)
    if auditing:
        auditing.finish()
    log.emit("end", role="trainer", final_loss=loss_field(losses[-1]), total_seconds=time.time() - STARTED,
             first_step_seconds=timing.first_step_seconds, first_step_at=timing.first_step_at,
             steady_step_seconds=timing.steady_step_seconds(), peak_rss_bytes=peak_rss_bytes(),
             weights_sha256=weights_sha256, parameters=parameters, weights_fingerprint=fingerprint)
    print(f"[{task}] done: final loss {losses[-1]:.4f}, weights {weights_sha256[:12]}", flush=True)


def synthetic_data(model: str, seed: int, examples: int):
    """A learnable target, identical for every task. mlp: x ~ N(0, 1)^32, y = xW + NOISE * N(0, 1);
    cnn: x ~ N(0, 1)^(32x32x3), y = 32 * (the image's mean colour) W + NOISE * N(0, 1)."""
    rng = np.random.default_rng(seed)
    if model == "cnn":
        w = rng.normal(size=(IMAGE[-1], 1))
        x = rng.normal(size=(examples, *IMAGE)).astype(np.float32)
        clean = np.sqrt(IMAGE[0] * IMAGE[1]) * x.mean(axis=(1, 2)) @ w  # unit variance per colour
    else:
        w = rng.normal(size=(FEATURES, 1))
        x = rng.normal(size=(examples, FEATURES)).astype(np.float32)
        clean = x @ w
    y = (clean + NOISE * rng.normal(size=(examples, 1))).astype(np.float32)
    return x, y


def build_model(name: str, policy: str = "float32"):
    """Under the global policy PRECISION set; a mixed one ends in float32, the loss with it (precision.py)."""
    layers = [tf.keras.layers.Conv2D(16, 3, activation="relu", input_shape=IMAGE),
              tf.keras.layers.Conv2D(32, 3, activation="relu"),
              tf.keras.layers.GlobalAveragePooling2D()] if name == "cnn" else [
        tf.keras.layers.Dense(10, activation="relu", input_shape=(FEATURES,))]
    output = [tf.keras.layers.Activation("linear", dtype="float32")] if precision.plan(policy).float32_output else []
    return tf.keras.Sequential([*layers, tf.keras.layers.Dense(1), *output])


def build_optimizer(policy: str):
    adam = tf.keras.optimizers.Adam()
    return tf.keras.mixed_precision.LossScaleOptimizer(adam) if precision.plan(policy).loss_scale else adam


def build_strategy(settings: Settings):
    if settings.strategy == "single":
        return tf.distribute.get_strategy()
    if settings.strategy == "mirrored":
        if tf.config.list_physical_devices("GPU"):
            return tf.distribute.MirroredStrategy()
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * settings.replicas)
        return tf.distribute.MirroredStrategy(devices=[d.name for d in tf.config.list_logical_devices("CPU")])
    if settings.strategy == "parameter_server":
        os.environ["GRPC_FAIL_FAST"] = "use_caller"  # TF's PS tutorial: fail RPCs fast, let the chief retry
        return tf.distribute.ParameterServerStrategy(tf.distribute.cluster_resolver.TFConfigClusterResolver())
    if settings.collective == "nccl" and not tf.config.list_physical_devices("GPU"):
        raise ValueError("COLLECTIVE=nccl needs GPUs and this host has none; use COLLECTIVE=auto or ring")
    options = tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=settings.bytes_per_pack,
        implementation=getattr(tf.distribute.experimental.CommunicationImplementation,
                               COLLECTIVES[settings.collective]))
    # Blocks until every task has registered with the coordination service on worker-0.
    return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)


def replica_devices(strategy) -> list[str]:
    if strategy is tf.distribute.get_strategy():  # the default strategy: TF's own placement
        return [(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU"))[0].name]
    return list(strategy.extended.worker_devices)


def sync_dataset(settings: Settings, x, y):
    """The whole data set batched with the global batch. tf.distribute splits every global batch
    over the replicas (and, with DATA sharding, over the workers), so each step sees the same
    examples whatever the strategy, which is what makes the strategies' losses comparable."""
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(settings.global_batch, drop_remainder=True)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


class Ended(Exception):
    """SIGTERM reached the evaluator: the lab ends it once training is over."""


def evaluate(settings: Settings, task: str, run_dir: Path, log: EventLog, x, y) -> None:
    """evaluator-0: tf-keras's SidecarEvaluator on the chief's checkpoints. It evaluates the newest
    checkpoint each time it looks (so it may skip some) and stops by itself after the last
    epoch's; SIGTERM (the lab's, if the chief never writes that one) ends it too, cleanly."""
    def ended(*_):
        raise Ended()

    signal.signal(signal.SIGTERM, ended)
    tf.keras.utils.set_random_seed(settings.seed)
    tf.keras.mixed_precision.set_global_policy(precision.plan(settings.precision).policy)
    model = build_model(settings.model, settings.precision)
    model.compile(optimizer=build_optimizer(settings.precision), loss="mse")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(settings.global_batch)
    evals = EvalLog(task, settings, log)
    checkpoints = run_dir / "checkpoints"
    checkpoints.mkdir(exist_ok=True)
    print(f"[{task}] evaluating every checkpoint in {checkpoints}", flush=True)
    try:
        tf.keras.utils.SidecarEvaluator(model, data, str(checkpoints), max_evaluations=settings.epochs,
                                        callbacks=[evals]).start()
    except Ended:
        print(f"[{task}] ended by the lab", flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    log.emit("end", role="evaluator", total_seconds=time.time() - STARTED, peak_rss_bytes=peak_rss_bytes(),
             evaluations=evals.count, **({"final_loss": loss_field(evals.last)} if evals.last is not None else {}))


class EvalLog(tf.keras.callbacks.Callback):
    """One `eval` event per checkpoint evaluated: its epoch and step (the optimizer's iterations,
    restored from the checkpoint) and its loss on the whole data set."""

    def __init__(self, task: str, settings: Settings, log: EventLog):
        super().__init__()
        self.task, self.settings, self.log = task, settings, log
        self.count = 0
        self.last: float | None = None  # the last evaluation's loss, once there is one

    def on_test_begin(self, logs=None):
        self._started = time.perf_counter()

    def on_test_end(self, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        epoch = step // self.settings.steps_per_epoch
        self.count, self.last = self.count + 1, float(logs["loss"])
        self.log.emit("eval", epoch=epoch, step=step, loss=loss_field(self.last),
                      seconds=time.perf_counter() - self._started)
        print(f"[{self.task}] eval of epoch {epoch} (step {step}): loss {self.last:.4f}", flush=True)


def fit_parameter_server(model, settings: Settings, x, y, callbacks) -> list[float]:
    """ParameterServerStrategy: the chief's fit schedules each step, a whole global batch, on
    whichever worker is free; the workers read their own shard of the data, repeated."""

    def dataset_fn(input_context):
        dataset = tf.data.Dataset.from_tensor_slices((x, y))
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        return dataset.repeat().batch(settings.global_batch, drop_remainder=True)

    history = model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn), epochs=settings.epochs,
                        steps_per_epoch=settings.steps_per_epoch, callbacks=callbacks, verbose=0)
    return history.history["loss"]


def probe_allreduce(strategy, floats: int, calls: int, log: EventLog) -> None:
    """The floor under a synchronous step: one bare all-reduce of the gradient's size, timed."""
    value = tf.ones([floats])

    @tf.function
    def all_reduce():
        return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, value))

    def once() -> float:
        started = time.perf_counter()
        for result in strategy.experimental_local_results(all_reduce()):
            result.numpy()
        return time.perf_counter() - started

    once()  # tracing
    seconds = [once() for _ in range(calls)]
    log.emit("allreduce", floats=floats, calls=calls, median_seconds=statistics.median(seconds))


def serve(task: str, spec: dict, log: EventLog) -> None:
    """A parameter_server worker or ps: a gRPC server the chief uses, until SIGTERM ends it."""
    os.environ["GRPC_FAIL_FAST"] = "use_caller"
    job, index = cluster.parse_task(task)
    ended = threading.Event()
    # Python runs this between bytecodes, so the main thread waits in Event.wait, not in join().
    signal.signal(signal.SIGTERM, lambda *_: ended.set())
    tf.distribute.Server(tf.train.ClusterSpec(spec), job_name=job, task_index=index, protocol="grpc", start=True)
    log.emit("cluster_ready", seconds=time.time() - STARTED, replicas=0, devices=[f"/job:{job}/task:{index}"])
    print(f"[{task}] serving as /job:{job}/task:{index}", flush=True)
    while not ended.wait(0.5):
        pass
    log.emit("end", role="server", total_seconds=time.time() - STARTED, peak_rss_bytes=peak_rss_bytes())
    print(f"[{task}] ended by the lab", flush=True)


class StepTiming(tf.keras.callbacks.Callback):
    """Times every call of the step function and logs each epoch: the `epoch` events and the
    `end` event's timings. With STEPS_PER_EXECUTION > 1 a call runs several steps, and each of
    them is counted at the call's time divided by its steps. Under ParameterServerStrategy batch
    hooks run when a step is scheduled, not when it is done, so there a step counts at its epoch's
    average (and the first step's time is real: its result is fetched)."""

    def __init__(self, task: str, settings: Settings, log: EventLog, on_first_step=None, writer=None, moment=None):
        super().__init__()
        self.task, self.settings, self.log, self.writer = task, settings, log, writer
        self.moment = moment  # chaosstep.StepMoment: make chaos AT=step:N's target only
        self.on_first_step = on_first_step
        self.first_step_seconds = 0.0
        self.first_step_at = 0.0
        self.per_step_by_epoch: list[list[float]] = []
        self._started_any, self._resumed_epoch = False, 0
        self.asynchronous = settings.strategy == "parameter_server"
        self._supports_tf_logs = self.asynchronous  # logs are RemoteValues there, to be fetched

    def on_train_begin(self, logs=None):
        self._fit_started = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        if not self._started_any:
            self._resumed_epoch = epoch
        self._epoch_started = time.perf_counter()
        if self.moment:
            self.moment.epoch_begin(epoch)
        self._first_batch: int | None = None
        self._last_batch: int | None = None
        self.per_step_by_epoch.append([])

    def on_train_batch_begin(self, batch, logs=None):
        if not self._started_any:
            self._started_any = True
            if self._resumed_epoch or batch:  # BackupAndRestore moved fit past the start
                self.log.emit("restored", epoch=int(self._resumed_epoch) + 1, step=int(batch))
                print(f"[{self.task}] restored from the backup: epoch {self._resumed_epoch + 1}, step {batch}",
                      flush=True)
        self._call_first_batch = int(batch)
        if self.moment:
            self.moment.batch_begin(batch)
        self._call_started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if not self.first_step_at:
            if hasattr(logs, "fetch"):
                logs.fetch()
            self.first_step_seconds = time.perf_counter() - self._fit_started  # tracing included
            self.first_step_at = time.time()
            if self.on_first_step:
                self.on_first_step()
        if self._first_batch is None:
            self._first_batch = self._call_first_batch
        steps = int(batch) - (self._call_first_batch - 1)
        self._last_batch = int(batch)
        if not self.asynchronous:
            self.per_step_by_epoch[-1].extend([(time.perf_counter() - self._call_started) / steps] * steps)
        if self.moment:  # last: its hold is no step's time
            self.moment.batch_end(batch)

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._epoch_started
        assert self._first_batch is not None and self._last_batch is not None  # fit ran a batch of the epoch
        steps = self._last_batch - self._first_batch + 1  # after a mid-epoch restore: fewer than an epoch
        if self.asynchronous:
            self.per_step_by_epoch[-1] = [seconds / steps] * steps
        loss = logs["loss"]
        loss = float(loss.fetch() if hasattr(loss, "fetch") else loss)
        record = self.log.emit("epoch", epoch=epoch + 1, loss=loss_field(loss), seconds=seconds, steps=steps,
                               examples_per_second=steps * self.settings.global_batch / seconds,
                               **processes.rss_field())
        if self.writer:
            with self.writer.as_default(step=epoch + 1):
                for name in ("loss", "examples_per_second", "seconds"):
                    tf.summary.scalar(name, loss if name == "loss" else record[name])
            self.writer.flush()
        print(f"[{self.task}] epoch {epoch + 1}/{self.settings.epochs} loss {loss:.4f} {seconds:.2f} s",
              flush=True)

    def steady_step_seconds(self) -> float:
        """Median step time after the first epoch (tracing and warm-up excluded)."""
        later = [s for steps in self.per_step_by_epoch[1:] for s in steps]
        if not later:
            later = self.per_step_by_epoch[0][1:] or self.per_step_by_epoch[0]
        return statistics.median(later)


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def save_model(model, task: str, chief: str, run_dir: Path) -> None:
    """The chief writes <run>/model.keras. Under multiworker every worker must take part in saving
    (TF's rule), so the others save to scratch space of their own, deleted at once."""
    if task == chief:
        model.save(run_dir / "model.keras")
        return
    scratch = tempfile.mkdtemp(prefix=f"tflab-{task}-")
    try:
        model.save(Path(scratch) / "model.keras")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
