"""The audit's eyes inside a task (AUDIT=on or strict): what each worker trained on, what it wrote
and which weights it held, logged as `audit_*` events for the host to compare (tflab/supervisor/audit.py).

A hook of inscript.py for a user's script (installed once `tensorflow` is imported), and called
directly by the lab's own trainer (`start`). Nothing here changes what the script computes:

- Data: the distributed iterator's `get_next` (what fit, custom loops and `for batch in dataset`
  call under Mirrored and MultiWorkerMirrored) gets a `tf.py_function` beside it that reads the
  batch the worker is handed (never its own copy of the data set, which would advance a shuffle's
  seed): every step counts the batch's examples, and the first SAMPLED_STEPS steps of each pass
  (a fresh iterator: an epoch in fit and the usual loops) hash the batch and each example on the
  host. Its value is returned as it was; nothing consumes an element it would not have.
- Writes: Model.save/save_weights (tf-keras and Keras 3, so ModelCheckpoint and
  BackupAndRestore too), tf.train.Checkpoint.save/write, CheckpointManager.save and a
  tf.io.gfile file opened for writing: the outermost call is logged (path, size after it, the
  script's line that called it), and whether the path lies on storage the tasks share.
- Weights: a digest of the trainable weights of every Keras model built under a strategy's scope,
  and how many of them are NaN or infinite, after each fit epoch, at each new pass outside fit (a
  custom loop's epoch), and at exit.

ParameterServerStrategy is left alone: its steps run on remote workers, where a Python function
of this process cannot.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import threading
import time
import traceback
import weakref
from typing import Any

from tflab.core.backends import capabilities
from tflab.core.schema import AUDIT_SAMPLED_STEPS
from tflab.trainer import inscript

SAMPLED_STEPS = AUDIT_SAMPLED_STEPS  # steps hashed at the start of each pass, per worker
EXAMPLE_DIGEST_BYTES = 6  # 48 bits: among a few thousand sampled examples, a collision is ~1e-8
WRITERS = ("Model.save", "Model.save_weights", "Checkpoint.save", "Checkpoint.write", "CheckpointManager.save",
           "tf.io.gfile")
UNSHARED_FILESYSTEMS = {"tmpfs", "proc", "sysfs", "devtmpfs", "devpts", "mqueue", "cgroup", "cgroup2"}


class Audit:
    """One task's audit: its log (anything with `emit(event, **fields)`) and what it has seen."""

    def __init__(self, log, backend: str = "compose", output: str | None = None):
        self.log = log
        self.backend = backend
        self.output = os.path.realpath(output) if output else None
        self.lock = threading.RLock()
        self.passes = 0  # distributed iterators made so far, eagerly
        self.policy: dict[int, str] = {}
        self.steps: dict[int, int] = {}
        self.examples: dict[int, int] = {}
        self.flushed = 0
        self.models: list[weakref.ref] = []
        self.in_fit = 0
        self.epochs = 0
        self.local = threading.local()
        self.finished = False
        self.complained = False

    # --- events: never allowed to break the script
    def emit(self, event: str, **fields) -> None:
        try:
            with self.lock:
                self.log.emit(event, **fields)
        except Exception as error:  # noqa: BLE001 - a full disk must not end a user's training
            inscript.complain(f"the audit's {event} event", error)

    # --- data
    def new_pass(self, policy: str) -> None:
        with self.lock:
            self.flush_passes()
            self.passes += 1
            self.policy[self.passes] = policy
            self.steps[self.passes] = self.examples[self.passes] = 0
        if self.passes > 1 and not self.in_fit:
            self.weights("pass", self.passes - 1)

    def flush_passes(self) -> None:
        with self.lock:
            for number in range(self.flushed + 1, self.passes + 1):
                self.emit("audit_pass", **{"pass": number, "steps": self.steps[number],
                                           "examples": self.examples[number], "policy": self.policy[number]})
            self.flushed = self.passes

    def batch_or_complain(self, replicas: int, tensors) -> list:
        """The graph's call: an error here would end the step, so it is said once and dropped."""
        try:
            self.batch(replicas, [tensor.numpy() for tensor in tensors])
        except Exception as error:  # noqa: BLE001 - see the module's docstring
            if not self.complained:
                self.complained = True
                inscript.complain("the audit's batch fingerprint", error)
        return []

    def batch(self, replicas: int, arrays: list) -> None:
        """Called by the graph each step with the worker's local tensors: leaves x replicas, the
        replicas of each leaf in turn."""
        with self.lock:
            number = self.passes
            if number == 0:  # an iterator made inside a tf.function: one pass for all
                self.passes = number = 1
                self.policy[1], self.steps[1], self.examples[1] = "unknown", 0, 0
            self.steps[number] += 1
            step = self.steps[number]
        rows = [arrays[r].shape[0] if arrays[r].shape else 1 for r in range(replicas)] if arrays else [0]
        with self.lock:
            self.examples[number] += sum(rows)
        if step > SAMPLED_STEPS:
            return
        digest, examples = hashlib.sha256(), []
        leaves = len(arrays) // max(replicas, 1)
        for replica in range(replicas):
            parts = [arrays[leaf * replicas + replica] for leaf in range(leaves)]
            for part in parts:
                digest.update(as_bytes(part))
            for row in range(rows[replica]):
                one = hashlib.blake2b(digest_size=EXAMPLE_DIGEST_BYTES)
                for part in parts:
                    one.update(as_bytes(part[row] if part.shape and row < part.shape[0] else part))
                examples.append(one.hexdigest())
        self.emit("audit_batch", **{"pass": number, "step": step, "examples": sum(rows),
                                    "digest": digest.hexdigest(), "example_digests": examples})

    # --- weights
    def track(self, model) -> None:
        with self.lock:
            self.models.append(weakref.ref(model))

    def weights(self, at: str, epoch: int) -> None:
        with self.lock:
            models = [m for m in (ref() for ref in self.models) if m is not None]
        digest, parameters, nonfinite = hashlib.sha256(), 0, 0
        try:
            import numpy  # TensorFlow's own dependency: imported already, as the script imported tensorflow

            for model in models:
                for variable in model.trainable_weights:
                    value = variable.numpy()
                    digest.update(value.astype(value.dtype.newbyteorder("<")).tobytes())
                    parameters += value.size
                    if value.dtype.kind in "fc":
                        nonfinite += int(value.size - numpy.count_nonzero(numpy.isfinite(value)))
        except Exception as error:  # noqa: BLE001 - a model half torn down at exit, say
            inscript.complain("the audit's weights digest", error)
            return
        if parameters:
            self.emit("audit_weights", at=at, epoch=epoch, digest=digest.hexdigest(), parameters=int(parameters),
                      nonfinite=nonfinite)

    # --- writes
    def wrote(self, writer: str, path, began: float) -> None:
        path = os.fspath(path) if not isinstance(path, str) else path
        local = "://" not in path
        real = os.path.realpath(os.path.abspath(path)) if local else path
        self.emit("audit_write", path=real, writer=writer, bytes=size_of(real) if local else 0,
                  storage=self.storage(real), during="fit" if self.in_fit else "script",
                  seconds=time.time() - began, caller=caller())

    def storage(self, path: str) -> str:
        """shared: every task sees this path (the run folder, a mounted volume, a bucket, or any
        path of a local run, whose tasks are processes of one machine); own: the task's own file
        (its container's /tmp or its image's filesystem)."""
        if "://" in path or capabilities(self.backend).shared_files:
            return "shared"
        if self.output and (path == self.output or path.startswith(self.output.rstrip("/") + "/")):
            return "shared"
        mount, kind = mount_of(path)
        return "own" if mount == "/" or kind in UNSHARED_FILESYSTEMS else "shared"

    def outermost(self, writer: str, call, path_of):
        """Runs call(); logs the write if no other audited writer is under way in this thread."""
        depth = getattr(self.local, "depth", 0)
        self.local.depth = depth + 1
        began = time.time()
        try:
            result = call()
        finally:
            self.local.depth = depth
        if depth == 0:
            try:
                path = path_of(result)
            except Exception:  # noqa: BLE001
                path = None
            self.wrote_at(writer, path, began)
        return result

    def wrote_at(self, writer: str, path, began: float) -> None:
        """Logs a write whose path is a string, or a tensor: an eager one's value, and a graph's
        (a Checkpoint written inside a tf.function) when the function runs, at each call."""
        if path is None or isinstance(path, (str, bytes, os.PathLike)):
            if path:
                self.wrote(writer, os.fsdecode(path), began)
            return
        import tensorflow as tf
        if not tf.is_tensor(path):
            return
        if hasattr(path, "numpy") and tf.executing_eagerly():
            self.wrote(writer, os.fsdecode(path.numpy()), began)
            return
        tf.py_function(lambda value: self.wrote(writer, os.fsdecode(value.numpy()), time.time()), [path], Tout=[])

    def finish(self) -> None:
        """The last pass's counts and the end's weights; once (the trainer calls it, then atexit)."""
        if self.finished:
            return
        self.finished = True
        self.flush_passes()
        self.weights("end", self.epochs or self.passes)


def as_bytes(array) -> bytes:
    """An array's values as bytes; strings (an object array of bytes, or one) by their contents."""
    if isinstance(array, bytes):
        return array
    if array.dtype == object:
        return b"\0".join(bytes(value) for value in array.ravel())
    return array.tobytes()


def size_of(path: str) -> int:
    """Bytes of a file, of a folder's files, or of a checkpoint's prefix.* files."""
    try:
        if os.path.isfile(path):
            return os.path.getsize(path)
        if os.path.isdir(path):
            return sum(os.path.getsize(os.path.join(folder, name))
                       for folder, _, names in os.walk(path) for name in names)
        folder, prefix = os.path.split(path)
        return sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder or ".")
                   if name.startswith(prefix + "."))
    except OSError:
        return 0


def mount_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> tuple[str, str]:
    """The mount point holding `path` and its filesystem type ("/" and "" where unknown)."""
    best, kind = "/", ""
    try:
        with open(mountinfo) as lines:
            for line in lines:
                fields = line.split()
                if " - " not in line or len(fields) < 5:
                    continue
                point = fields[4].encode().decode("unicode_escape")
                if (path == point or path.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                    best, kind = point, line.split(" - ", 1)[1].split()[0]
    except OSError:
        pass
    return best, kind


def caller() -> str:
    """The first frame outside TensorFlow, Keras and the lab: the script's own line."""
    for frame in reversed(traceback.extract_stack(limit=60)):
        name = frame.filename
        if not any(part in name for part in ("/tensorflow/", "/tf_keras/", "/keras/", "/tflab/", "<frozen")):
            return f"{os.path.basename(name)}:{frame.lineno}"
    return ""


_audit: Audit | None = None


def start(log, backend: str = "compose", output: str | None = None) -> Audit:
    """Patches TensorFlow and Keras (both imported by then) to report into `log`; once."""
    global _audit
    if _audit is not None:
        return _audit
    _audit = Audit(log, backend, output)
    import tensorflow  # noqa: F401 - already imported by the caller

    patch_tensorflow(_audit)
    for name in ("tf_keras", "keras"):
        inscript.when_imported(name, lambda module, name=name: patch_keras(_audit, name))
    atexit.register(_audit.finish)
    return _audit


def install() -> None:
    """inscript's hook: with AUDIT on or strict, start once the script imports tensorflow."""
    inscript.when_imported("tensorflow", lambda module: _start_from_environment())


def _start_from_environment() -> None:
    settings, log = inscript.run_settings(), inscript.task_log()
    if settings is None or log is None or getattr(settings, "audit", "off") == "off":
        return
    start(log, settings.backend, os.environ.get("TFLAB_OUTPUT"))


def _parameter_server(strategy) -> bool:
    return "ParameterServer" in type(strategy).__name__


def patch_tensorflow(audit: Audit) -> None:
    import tensorflow as tf
    from tensorflow.python.checkpoint import checkpoint, checkpoint_management
    from tensorflow.python.distribute import distribute_lib, input_lib
    from tensorflow.python.eager import context
    from tensorflow.python.lib.io import file_io

    def policy_of(dataset) -> str:
        try:
            return dataset.options().experimental_distribute.auto_shard_policy.name
        except Exception:  # noqa: BLE001
            return "unknown"

    def distribute(original, function: bool):
        @functools.wraps(original)
        def wrapper(self, dataset, *args, **kwargs):
            result = original(self, dataset, *args, **kwargs)
            try:
                result._tflab_policy = "function" if function else policy_of(dataset)
            except Exception:  # noqa: BLE001
                pass
            return result
        setattr(wrapper, "_tflab_audit", True)  # a mark on TensorFlow's method, which readers getattr
        return wrapper

    base = distribute_lib.StrategyBase
    if not getattr(base.experimental_distribute_dataset, "_tflab_audit", False):
        base.experimental_distribute_dataset = distribute(base.experimental_distribute_dataset, False)
        base.distribute_datasets_from_function = distribute(base.distribute_datasets_from_function, True)

    def iterate(original):
        @functools.wraps(original)
        def wrapper(self):
            if context.executing_eagerly() and not _parameter_server(getattr(self, "_strategy", None)):
                audit.new_pass(getattr(self, "_tflab_policy", "unknown"))
            return original(self)
        return wrapper

    for kind in (input_lib.DistributedDataset, input_lib.DistributedDatasetsFromFunction):
        kind.__iter__ = iterate(kind.__iter__)

    original_get_next = input_lib.DistributedIteratorBase.get_next

    @functools.wraps(original_get_next)
    def get_next(self, name=None):
        result = original_get_next(self, name)
        if not _parameter_server(getattr(self, "_strategy", None)):
            tap(result)
        return result

    def tap(result) -> None:
        leaves = tf.nest.flatten(result)
        locals_ = [tuple(getattr(leaf, "values", (leaf,))) for leaf in leaves]
        dense = [values for values in locals_ if all(isinstance(v, tf.Tensor) for v in values)]
        if not dense:
            return
        replicas = len(dense[0])
        dense = [values for values in dense if len(values) == replicas]
        tensors = [value for values in dense for value in values]
        tf.py_function(lambda *arrays: audit.batch_or_complain(replicas, arrays), tensors, Tout=[])

    input_lib.DistributedIteratorBase.get_next = get_next

    def writer(cls, method: str, label: str, path_of):
        original = getattr(cls, method)

        @functools.wraps(original)
        def wrapper(self, *args, **kwargs):
            return audit.outermost(label, lambda: original(self, *args, **kwargs),
                                   lambda result: path_of(self, result, args, kwargs))
        setattr(cls, method, wrapper)

    returned = lambda self, result, args, kwargs: result  # noqa: E731 - the path the call returns
    writer(checkpoint.Checkpoint, "save", "Checkpoint.save", returned)
    writer(checkpoint.Checkpoint, "write", "Checkpoint.write", returned)
    writer(checkpoint_management.CheckpointManager, "save", "CheckpointManager.save", returned)

    original_close = file_io.FileIO.close

    @functools.wraps(original_close)
    def close(self):
        writing = getattr(self, "_write_check_passed", False) and not getattr(self, "_tflab_logged", False)
        began = time.time()
        result = original_close(self)
        if writing and getattr(audit.local, "depth", 0) == 0:
            self._tflab_logged = True
            audit.wrote("tf.io.gfile", self.name, began)
        return result

    file_io.FileIO.close = close


def patch_keras(audit: Audit, package: str) -> None:
    import importlib

    module = importlib.import_module(package)
    model = getattr(module, "Model", None)
    if model is None or getattr(model, "_tflab_audit", False):
        return
    model._tflab_audit = True
    import tensorflow as tf

    original_init = model.__init__

    @functools.wraps(original_init)
    def init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        try:
            strategy = tf.distribute.get_strategy() if tf.distribute.has_strategy() else None
            if strategy is not None and not _parameter_server(strategy) and not getattr(self, "_tflab_tracked", False):
                self._tflab_tracked = True
                audit.track(self)
        except Exception as error:  # noqa: BLE001
            inscript.complain("the audit's model tracking", error)

    model.__init__ = init

    callback_base: Any = module.callbacks.Callback  # the Keras in use's (tf_keras or keras), untyped

    class WeightsAudit(callback_base):
        def on_epoch_end(self, epoch, logs=None):
            audit.epochs = max(audit.epochs, int(epoch) + 1)
            if getattr(self.model, "_tflab_tracked", False):
                audit.weights("epoch", int(epoch) + 1)

    original_fit = model.fit

    @functools.wraps(original_fit)
    def fit(self, *args, **kwargs):
        given = list(args)
        if len(given) > 5:  # fit(x, y, batch_size, epochs, verbose, callbacks, ...)
            given[5] = list(given[5] or []) + [WeightsAudit()]
        else:
            kwargs["callbacks"] = list(kwargs.get("callbacks") or []) + [WeightsAudit()]
        audit.in_fit += 1
        try:
            return original_fit(self, *given, **kwargs)
        finally:
            audit.in_fit -= 1

    model.fit = fit

    def path_argument(self, result, args, kwargs):
        return args[0] if args else kwargs.get("filepath")

    for method in ("save", "save_weights"):
        original = getattr(model, method)

        def wrapper(self, *args, original=original, method=method, **kwargs):
            return audit.outermost(f"Model.{method}", lambda: original(self, *args, **kwargs),
                                   lambda result: path_argument(self, result, args, kwargs))
        setattr(model, method, functools.wraps(original)(wrapper))
