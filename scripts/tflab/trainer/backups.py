"""The trainer's backups and checkpoints, and TensorFlow's preemption handling turned on for them:
BackupAndRestore in <run>/backup (with a save on SIGTERM under multiworker), the chief's backup
adopted by a restarted worker, EVALUATOR's checkpoints for the evaluator, and a GCE notice taken
the GPU VM's way. train.py calls these before and around its fit; customloop.py's preemptible
loop saves through the same handler.
"""

import inspect
import shutil
from pathlib import Path

import tensorflow as tf

from tflab.core import cluster, runfolder
from tflab.core.settings import Settings


def gce_notice(settings: Settings) -> bool:
    """make chaos SCENARIO=preempt NOTICE=gce: GCE_METADATA_IP names the run's metadata stand-in."""
    return settings.scenario == "preempt" and settings.notice == "gce"


def take_the_gce_gpu_path() -> None:
    """TensorFlow 2.21's PreemptionCheckpointHandler, once it finds itself on Google Cloud, acts
    on GPU VMs only: on a CPU VM it logs "PreemptionCheckpointHandler does not support usage with
    TPU or CPU device on GCP" and does nothing, and tf-keras's BackupAndRestore, which calls it
    directly, fails on the attributes it then lacks. The lab's trainers run on CPUs, so here a
    GCE CPU VM takes the GPU VM's path: TF's own watcher of instance/maintenance-event, its exit
    code 143 and its grace period (an hour, unless the TerminationConfig says otherwise). A
    user's script that does not do this gets what a CPU VM gets on GCE: no reaction, and the kill
    at the grace's end. Replaces a private TF function, like enable_preemption_checkpoints; the
    gce chaos test notices the day it stops working."""
    from tensorflow.python.distribute.failure_handling import failure_handling_util as util

    detect = util.detect_platform

    def detect_platform():
        found = detect()
        return util.PlatformDevice.GCE_GPU if found is util.PlatformDevice.GCE_CPU else found

    util.detect_platform = detect_platform


def enable_preemption_checkpoints() -> None:
    """tf-keras turns `save_before_preemption` on only when it finds itself on Google Cloud, and
    ignores it everywhere else, while TensorFlow's own handler (PreemptionCheckpointHandler) works
    on any MultiWorkerMirroredStrategy cluster. Measured here: without this, a SIGTERM is caught by
    TF's C++ preemption notifier and then ignored, and the worker trains on as if nothing
    happened. With it, the signalled worker tells its peers, every worker saves the backup at the
    same step, and all of them exit (code 42) for the lab to restart them. This replaces a private
    tf-keras check; the `stop` chaos test notices the day it stops working."""
    from tf_keras.src.distribute import worker_training_state

    worker_training_state.support_on_demand_checkpoint_callback = (
        lambda strategy: isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy))


def backup_callbacks(settings: Settings, run_dir: Path) -> list:
    """tf-keras BackupAndRestore in <run>/backup, which every task sees (the run folder is shared):
    after the lab restarts a failed cluster, fit resumes where the last backup left it. Under
    multiworker it also saves on SIGTERM (TF's preemption handling). LOOP=custom has no backup:
    a restarted custom loop starts over."""
    if settings.backup == "off" or settings.loop == "custom":
        return []
    if settings.strategy == "multiworker":
        enable_preemption_checkpoints()
    options = {"backup_dir": str(run_dir / runfolder.BACKUP),
               "save_freq": "epoch" if settings.backup == "epoch" else int(settings.backup)}
    # Keras 3's BackupAndRestore (KERAS=keras3) has no save_before_preemption: it backs up per save_freq only.
    if "save_before_preemption" in inspect.signature(tf.keras.callbacks.BackupAndRestore).parameters:
        options["save_before_preemption"] = settings.strategy == "multiworker"
    return [tf.keras.callbacks.BackupAndRestore(**options)]


def adopt_chief_backup(settings: Settings, task: str, chief_task: str, run_dir: Path) -> None:
    """A restarted multiworker worker takes the chief's backup as its own, before training: Keras
    restores the model from backup/chief on every worker, but TensorFlow's preemption handler reads
    each worker's own backup/workertemp_<i>, which Keras empties after each save; measured here,
    one worker then restored its step counter and the other initialised it, and their collectives
    no longer matched ("Collective instance ... expected type 1 ... but got type 0"). Done here, in
    the trainer, it needs nothing but a shared backup folder: a Kubernetes restart (a TFJob's
    restartPolicy, a claim for the outputs) restores as the lab's does. No peer writes the backup
    meanwhile: nothing trains until this worker has joined the cluster."""
    if settings.strategy != "multiworker" or settings.backup == "off" or settings.loop == "custom":
        return
    chief = run_dir / runfolder.BACKUP / "chief"
    if task == chief_task or not chief.is_dir():
        return
    own = run_dir / runfolder.BACKUP / f"workertemp_{cluster.parse_task(task)[1]}"
    shutil.rmtree(own, ignore_errors=True)
    shutil.copytree(chief, own)


def checkpoint_callbacks(settings: Settings, run_dir: Path) -> list:
    """EVALUATOR=1: the chief writes the weights (with the optimizer's step) to
    <run>/checkpoints/ckpt-<epoch> after every epoch, the way tf-keras's SidecarEvaluator expects
    them; under multiworker the other workers write theirs to scratch folders ModelCheckpoint
    deletes (every worker must take part in a save)."""
    if not settings.evaluator:
        return []
    return [tf.keras.callbacks.ModelCheckpoint(filepath=str(run_dir / "checkpoints" / "ckpt-{epoch}"),
                                               save_weights_only=True)]
