"""Why a task failed, in words a user can act on: the known failure signatures in one table, and
pure functions from a task's evidence (exit code, the engine's state, its `error` event, its
output) to an explanation: what happened, what to do, where to read more.

    explanation = explain(Evidence(task="worker-0", exit_code=1, error=..., output=...))
    explanation.what, explanation.fix, explanation.link

Adding a signature is one row in SIGNATURES and one recorded log in tests/unit/logs/<name>.log.
Each row also says whether a restart can help (RESTART_POLICY=ExitCode reads it): True for a lost
peer or a preemption, False for a bug that will fail the same way again, None to let the exit
code decide.

Shared by the host side and the launcher inside the image: imports neither TensorFlow nor Docker.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from tflab.core.commands import lab_command
from tflab.core.exitcodes import describe_code, shell_code
from tflab.core.tracebacks import chain_links, exception_head

PREEMPTED = 42  # the lab's trainer exits with this after TF's preemption backup (train.py)
# TensorFlow's PreemptionCheckpointHandler exits with this on Google Cloud after its checkpoint
# (failure_handling_util._RESTARTABLE_EXIT_CODE); 128 + SIGTERM, so ExitCode retries it as a signal's.
GCE_PREEMPTED = 143
# A task whose container or process disappeared while the run went on (removed from outside the
# lab): not an exit code any process gives, so the summary cannot mistake it for one. The
# backends report it; the explanation below names it.
VANISHED = -1
KERAS_ISSUE = "https://github.com/keras-team/keras/issues/20585"
KERAS_OPTIMIZER_ISSUE = "https://github.com/keras-team/keras/issues/23085"
PS_TUTORIAL = "https://www.tensorflow.org/tutorials/distribute/parameter_server_training"
TF_KERAS_FIX = ("`pip install tf_keras` and use tf.keras with TF_USE_LEGACY_KERAS=1 set before TensorFlow is imported "
                "(or `import tf_keras as keras`)")
TUTORIAL = "https://www.tensorflow.org/tutorials/distribute/multi_worker_with_keras"
INPUT_GUIDE = "https://www.tensorflow.org/tutorials/distribute/input"
MEMORY_LINK = "https://docs.docker.com/engine/containers/resource_constraints/#memory"
SIDECAR_EVALUATOR = "https://www.tensorflow.org/api_docs/python/tf/keras/utils/SidecarEvaluator"
# The words of keras3-no-sidecar-evaluator and of the refusal of the lab's EVALUATOR=1 under Keras 3 (rules.py).
KERAS3_NO_EVALUATOR = ("Keras 3 has no SidecarEvaluator, the evaluator that reads the chief's checkpoints as they "
                       "come, and its ModelCheckpoint is not chief-aware (tf-keras's writes a non-chief's save to a "
                       "temporary path, distributed_file_utils)")


@dataclass(frozen=True)
class Signature:
    name: str
    pattern: str  # a regular expression searched in the task's error, then in its output
    what: str  # what happened to the task; {code}, {memory}, {last_memory} are filled in
    fix: str  # {down}, {config}: the lab's command as the user runs it (console.lab_command)
    link: str
    retry: bool | None  # can a restart help? None: the exit code decides
    strategy: str = ""  # the row explains a failure under this STRATEGY alone; "" under any


# TensorFlow's words for a checkpoint it could not read whole, each found in TF 2.21's
# libtensorflow_framework.so.2: tensorflow/core/util/tensor_slice_reader.cc ("Unsuccessful
# TensorSliceReader constructor", "Unable to open table file"), tensorflow/core/util/tensor_bundle/
# tensor_bundle.cc ("Checksum does not match", "Read less bytes than requested" from its input
# buffer) and tsl/lib/io/format.cc ("not an sstable (bad magic number)", "block checksum mismatch").
# A DataLossError is one only where its line names a checkpoint's part: a TFRecord's "corrupted
# record" is the data's, not a checkpoint's.
TORN_CHECKPOINT = (r"(?:DataLossError|DATA_LOSS)[^\n]*(?:checkpoint|ckpt|\.index|\.data-\d|bundle|sstable)|"
                   r"Unsuccessful TensorSliceReader constructor|Unable to open table file|"
                   r"Checksum does not match|Read less bytes than requested|not an sstable \(bad magic number\)|"
                   r"block checksum mismatch|NotFoundError:[^\n]*\.index\b")

# Most specific first: the first row that matches explains the failure.
SIGNATURES = [
    Signature("vanished", r"^engine: vanished$",
              "vanished: its container or service was removed from outside the lab (docker rm, docker service rm, "
              "an engine restart) while it ran",
              "start the run again, and leave its containers to the lab (`{down}` ends a run cleanly); "
              "the lab does not recreate what it did not remove",
              "https://docs.docker.com/reference/cli/docker/container/rm/", False),
    Signature("oom-killed", r"^engine: OOMKilled",
              "killed by the kernel for memory (the engine says OOMKilled): it reached its limit MEMORY={memory} "
              "(last measured: {last_memory})",
              "raise MEMORY (MEMORY=2g, say), or make the task need less: a smaller batch, model or "
              "data set held in memory", MEMORY_LINK, False),
    Signature("killed-at-memory-limit", r"^engine: exit 137 under MEMORY=",
              "killed (SIGKILL, code 137) while it ran under MEMORY={memory} (last measured: {last_memory}); "
              "this backend cannot say whether for memory, but that is the usual cause",
              "raise MEMORY, or run with BACKEND=compose, where the engine's OOMKilled state is read",
              MEMORY_LINK, None),
    Signature("keras3-multiworker",
              r"unsupported type \(<class 'tensorflow\.python\.distribute\.values\.PerReplica'>\)",
              "Keras 3's model.fit does not work under MultiWorkerMirroredStrategy in TensorFlow 2.x: it "
              "gets a PerReplica value it cannot convert (keras-team/keras#20585, tensorflow/tensorflow#72388)",
              "`pip install tf_keras` and use tf.keras with TF_USE_LEGACY_KERAS=1 set before TensorFlow is "
              "imported (or `import tf_keras as keras`); `import keras` is Keras 3 whatever that variable says",
              KERAS_ISSUE, False),
    # Recorded under Keras 3.15.1 and TF 2.21 (2 logical CPUs), with the custom loop of TF's guide:
    # the same loop trains under tf-keras, and under Keras 3.15.1 with the slots built first.
    Signature("keras3-custom-loop-optimizer",
              r"You must feed a value for placeholder tensor 'cond/else/_\d+/cond/Placeholder(?:_\d+)?'",
              "Keras 3 (3.15.1 and before) under MirroredStrategy makes a stateful optimizer's slots (Adam's "
              "moments) on the first apply_gradients inside strategy.run, and that graph asks for a placeholder "
              "nothing feeds (keras-team/keras#23085; its fix, keras#23087, is in keras-nightly 3.16, not in 3.15.1)",
              "build the slots before the loop, in the strategy's scope: `optimizer.build(model.trainable_variables)` "
              "right after the model and optimizer are made (measured to train under Keras 3.15.1); or "
              + TF_KERAS_FIX + ", where the same loop trains; or keras-nightly 3.16",
              KERAS_OPTIMIZER_ISSUE, False),
    # The same words from fit, but not keras#23085's cause. Recorded under TF 2.21 with Keras 3.15.1 and
    # keras-nightly 3.16.0.dev2026102704 alike (the lab's mlp, STEPS_PER_EXECUTION=2, mirrored over 2 logical
    # CPUs): fit's multi-step loop (multi_step_on_iterator, in keras/src/backend/tensorflow's trainer) calls each
    # step's strategy.run inside a tf.cond in a tf.while_loop. It fails with SGD, which has no slots, and
    # with the slots built before fit; it trains with steps_per_execution=1, under tf-keras, and with
    # steps_per_execution=2 under no strategy. No upstream issue names steps_per_execution;
    # keras#19246 (open) is the same error from Keras 3's fit under MirroredStrategy.
    Signature("keras3-steps-per-execution-mirrored",
              r"You must feed a value for placeholder tensor "
              r"'while/body/_\d+/while/cond/then/_\d+/while/cond/Placeholder(?:_\d+)?'",
              "Keras 3's fit with steps_per_execution above 1 does not work under MirroredStrategy: it runs "
              "each step's strategy.run inside a tf.cond in its multi-step tf.while_loop, and that graph asks for a "
              "placeholder nothing feeds, whatever the optimizer (measured with Keras 3.15.1 and keras-nightly "
              "3.16.0.dev2026102704; keras-team/keras#19246 is the same error from fit under MirroredStrategy, "
              "open)",
              "steps_per_execution=1 (STEPS_PER_EXECUTION=1 for the lab's trainer; compile's default), or "
              + TF_KERAS_FIX + " (KERAS=tf-keras), where the same fit trains with steps_per_execution=2; "
              "building the optimizer before fit does not help, nor does keras-nightly",
              "https://github.com/keras-team/keras/issues/19246", False),
    # -- Keras 3 and the parts of tf.distribute it left to tf-keras (issue 45) --
    # An evaluator task (a SCRIPT's; the lab's own is refused under Keras 3, rules.keras3_evaluator_refusal):
    # recorded under TF 2.21 and Keras 3.15.1, tf.keras.utils.SidecarEvaluator gives "module 'keras.utils' has
    # no attribute 'SidecarEvaluator'", tf.keras.experimental.SidecarEvaluator "module 'keras._tf_keras.keras'
    # has no attribute 'experimental'" under the line that names it. Before keras3-parameter-server: under
    # parameter_server too, the evaluator's problem is its own.
    Signature("keras3-no-sidecar-evaluator",
              r"has no attribute 'SidecarEvaluator'|"
              r"cannot import name 'SidecarEvaluator' from '(?:tensorflow\.)?keras[\w.]*' \((?![^)\n]*/tf_keras/)|"
              r"SidecarEvaluator[^\n]*\n(?:[ \t]*[~^]+[ \t]*\n)?AttributeError: module 'keras[\w.]*' has no attribute",
              KERAS3_NO_EVALUATOR + ", so an evaluator task written for tf.keras fails on the first name it asks for",
              "run the evaluator with tf-keras: KERAS=tf-keras, or `pip install tf_keras` with TF_USE_LEGACY_KERAS=1 "
              "set before TensorFlow is imported (`import keras` is Keras 3 whatever it says), and "
              "tf.keras.utils.SidecarEvaluator; or keep Keras 3 and write the evaluator yourself: poll the chief's "
              "checkpoint folder, load_weights each new file (Keras 3's ModelCheckpoint writes .weights.h5), evaluate",
              SIDECAR_EVALUATOR, False),
    # Under ParameterServerStrategy, whatever Keras 3 lacks is its missing parameter-server training, not
    # removed-api's "Keras 3 dropped much of Keras 2's API". Recorded under TF 2.21 and Keras 3.15.1:
    # tf.keras.utils.experimental.DatasetCreator gives "module 'keras.utils' has no attribute 'experimental'",
    # tf.keras.layers.experimental.preprocessing "module 'keras._tf_keras.keras.layers' ...", an import of either
    # "No module named" or "cannot import name ... (.../keras/...)" (tf-keras's path is .../tf_keras/...); Keras 3's
    # fit given tf-keras's DatasetCreator or a ClusterCoordinator's per-worker dataset "Unrecognized data type",
    # and given a dataset under the strategy TensorFlow's create_per_worker_dataset error.
    Signature("keras3-parameter-server",
              r"AttributeError: module 'keras(?:\.[\w.]+)?' has no attribute '\w+'|"
              r"No module named '(?:tensorflow\.)?keras\.[\w.]+'|"
              r"cannot import name '\w+' from '(?:tensorflow\.)?keras[\w.]*' \((?![^)\n]*/tf_keras/)[^)\n]*/keras/|"
              r"To use this dataset, you need to pass this dataset to ClusterCoordinator\.create_per_worker_dataset|"
              r"Unrecognized data type: x=<[^\n]*(?:PerWorker|DatasetCreator)",
              "Keras 3 has no parameter-server training at all: its fit knows no ClusterCoordinator (keras/src has "
              "none), and DatasetCreator and Keras 2's experimental API are gone, so a script written for "
              "ParameterServerStrategy fails on whichever of them it meets first (keras-team/keras#20585: "
              "parameter-server users are on Keras 2)",
              "run it with tf-keras: KERAS=tf-keras (the lab's image), or `pip install tf_keras` with "
              "TF_USE_LEGACY_KERAS=1 set before TensorFlow is imported (`import keras` is Keras 3 whatever it "
              "says), and give fit a tf.keras.utils.experimental.DatasetCreator and steps_per_epoch, as "
              "TensorFlow's parameter-server tutorial does; or keep Keras 3 and write the loop yourself with "
              "tf.distribute.coordinator.ClusterCoordinator (create_per_worker_dataset, schedule)",
              KERAS_ISSUE, False, strategy="parameter_server"),
    # A Keras Loss called inside strategy.run with its default reduction. Recorded under TF 2.21 and tf-keras
    # 2.21 (MirroredStrategy, 2 logical CPUs): tf-keras refuses it. Keras 3.15.1 runs the same code and divides
    # each replica's loss by the replicas (Keras's scale_loss_for_distribution): measured 0.5 per
    # replica for a mean squared error of 1.0; no error, so no signature of its own but this one's words.
    Signature("keras-loss-in-replica",
              r"Please use `tf\.keras\.losses\.Reduction\.SUM` or `tf\.keras\.losses\.Reduction\.NONE` for "
              r"loss reduction when losses are used with `tf\.distribute\.Strategy`",
              "a Keras loss with its default reduction (the mean over the batch) was called inside strategy.run: "
              "tf-keras refuses it, as each replica's mean of its share is not the global batch's; Keras 3 takes "
              "it and divides each replica's loss by the replica count, so a loop that reports it or averages it "
              "again shows the loss scaled by the replicas (huggingface/transformers#28296)",
              "take the per-example loss (reduction=NONE, or keras.losses.mean_squared_error) and "
              "`tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)`, then SUM the replicas' "
              "losses and gradients, as TensorFlow's custom-training tutorial does",
              "https://www.tensorflow.org/tutorials/distribute/custom_training", False),
    # Not here, as they did not reproduce on this lab's CPUs (TF 2.21, Keras 3.15.1, MirroredStrategy over 2
    # logical CPUs, PRECISION's 2026-12-07 checks): keras#18666, LossScaleOptimizer's merge_call under fit (fit
    # trained under mixed_float16; fixed by keras#18691), and keras#21366, the same with jit_compile=True (it
    # failed, but with float32 too: XLA cannot reach a variable on the other logical CPU). No error text, no row.
    # -- end of issue 45's block --
    # What a TensorFlow version change brings (make matrix, TF=): an old build against numpy 2, an
    # API a release removed, a package that has no release for that TensorFlow.
    Signature("numpy2-old-tensorflow",
              r"compiled using NumPy 1\.x cannot be run in\s+NumPy 2|_ARRAY_API not found|"
              r"numpy\.core\.(?:umath|multiarray) failed to import",
              "numpy 2 met a TensorFlow built against numpy 1 (TensorFlow 2.17 and older): its compiled "
              "modules cannot load",
              "keep numpy below 2 for that TensorFlow (the lock files of TF 2.12 to 2.17 pin numpy 1.x: a "
              "requirements.txt or an install step must not upgrade it), or move to TensorFlow 2.18 or later",
              "https://numpy.org/devdocs/numpy_2_0_migration_guide.html", False),
    Signature("module-not-found", r"ModuleNotFoundError: No module named '(?P<module>[\w.]+)'",
              "it imports {module}, which is not installed where it ran",
              "{install}",
              "https://pip.pypa.io/en/stable/reference/requirements-file-format/", False),
    Signature("removed-api",
              r"AttributeError: module '(?:tensorflow|keras|tf_keras)(?:\.[\w.]+)?' has no attribute '\w+'",
              "it uses an attribute this TensorFlow or Keras no longer has: TensorFlow 2.16 removed "
              "tf.estimator, and Keras 3 (tf.keras from 2.16 on) dropped much of Keras 2's API",
              "run the TensorFlow the script was written for (TF=2.15, KERAS=tf-keras keeps Keras 2 on later "
              "versions), or port the script: tf.estimator to tf.keras with a tf.distribute strategy",
              "https://github.com/tensorflow/tensorflow/releases/tag/v2.16.1", False),
    Signature("not-installable",
              r"No matching distribution found for|Could not find a version that satisfies the requirement|"
              r"ResolutionImpossible|conflicting dependencies",
              "a package the script's requirements.txt asks for cannot be installed beside this TensorFlow "
              "version's pins: PyPI has no release of it for CPython 3.11 on manylinux that fits, or what it "
              "needs conflicts with the pins",
              "ask for a release made for this TensorFlow (`pip index versions NAME` lists them; the pins are "
              "requirements/tf/<version>.txt), or leave this TF out",
              "https://pip.pypa.io/en/stable/topics/dependency-resolution/", False),
    Signature("collectives-after-startup",
              r"Collective ops must be configured at program startup|Enabling collective ops after program startup",
              "MultiWorkerMirroredStrategy was built after TensorFlow had already started (a tensor, a "
              "model, a device list came first), or a second strategy was built after TF_CONFIG changed",
              "set TF_CONFIG before anything, and build the strategy once, right after `import tensorflow`, "
              "before any other TensorFlow work", TUTORIAL, False),
    Signature("batch-not-divisible",
              r"not divisible by the \d+ replicas|(?:global )?batch[ _]size[^\n]{0,80}(?:not divisible|must be "
              r"divisible|divisible by the number of replicas)",
              "the global batch does not divide evenly among the replicas in sync",
              "make the global batch a multiple of the replicas (per-replica batch x replicas)",
              "https://www.tensorflow.org/guide/distributed_training", False),
    Signature("unshardable-dataset",
              r"Found an unshardable source dataset|failed to apply FILE sharding policy|AutoShardPolicy",
              "TensorFlow could not shard the dataset across the workers as asked (AutoShardPolicy): it "
              "is not read from files, so FILE sharding cannot apply",
              "set options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy"
              ".DATA (or OFF and shard it yourself with dataset.shard(num_workers, index))", INPUT_GUIDE, False),
    Signature("same-path-as-chief",
              r"unable to lock file|FileExistsError|AlreadyExistsError|Failed to rename|Directory not empty",
              "more than one worker wrote the same file or folder: under MultiWorkerMirroredStrategy every "
              "worker must call save, and each needs a path of its own",
              "let the chief write to the real path and every other worker to a temporary folder of its own "
              "(the tutorial's write_filepath), deleted after the save", TUTORIAL + "#model_saving_and_loading",
              False),
    Signature("port-in-use", r"Address already in use|Failed to add port|could not bind|Failed to bind",
              "its gRPC server could not listen: its port is already taken by another process",
              "end whatever holds the port, or give the task another one in TF_CONFIG",
              "https://www.tensorflow.org/api_docs/python/tf/distribute/Server", None),
    Signature("read-only-file", r"\[Errno 30\] Read-only file system|Read-only file system",
              "it wrote to a read-only path: the script's own folder (/lab/script, and the links to its entries in "
              "the working directory) or DATA's (/lab/data) are mounted read-only in a task",
              "write to a new name in the working directory (runs/<RUN>/work/<task>/, writable and kept with the "
              "run) or in $TFLAB_OUTPUT, not over a file beside the script",
              "https://docs.docker.com/engine/storage/bind-mounts/#use-a-read-only-bind-mount", False),
    # Before peer-name-unresolved: a name outside the cluster (a download's host) is no peer's.
    Signature("no-route-out",
              r"URL fetch failure on https?://|<urlopen error|HTTPS?ConnectionPool\(host=|Failed to establish a new "
              r"connection|Could not resolve host",
              "it tried to reach the internet (a download: keras.datasets, a pretrained model, pip) and {route}",
              "{bring_in}{or_bridge}",
              "https://docs.docker.com/engine/network/drivers/bridge/", False),
    Signature("peer-name-unresolved",
              r"could not reach [^\n]*name does not resolve|DNS resolution failed|"
              r"^(?![^\n]*(?:https?://|urlopen|ConnectionPool))[^\n]*Name or service not known",
              "a peer's host name does not resolve: its container or node is not there, or TF_CONFIG names "
              "it wrongly", "check that every task in TF_CONFIG was started and is on the same network "
                            "({config} shows the cluster spec)", TUTORIAL, None),
    Signature("peer-never-came", r"gave up after \S+ s waiting for the cluster",
              "the cluster never formed: a peer did not register within PEER_TIMEOUT",
              "check the peer named above is running and reachable, or raise PEER_TIMEOUT if it starts slowly",
              TUTORIAL, None),
    Signature("preempted", r"^preempted \((?:SIGTERM|GCE notice)\)",
              "preempted: it heard the notice and saved its backup before it exited",
              "nothing: the lab restarts it from the backup (RESTARTS)", TUTORIAL + "#fault_tolerance", True),
    # A checkpoint cut short, as TensorFlow 2.21 refuses one (recorded: tf.train.Checkpoint.save, then its
    # .data file truncated to half, then restore: "IndexError: Read less bytes than requested"; its
    # .index truncated: "OpError: not an sstable (bad magic number)"). make chaos's verdict calls it corrupt.
    Signature("torn-checkpoint", TORN_CHECKPOINT,
              "could not read the checkpoint it restored from: a file of it is cut short or damaged (a save "
              "torn by a kill or a full disk, a copy cut off, two writers on one path)",
              "delete that checkpoint (its .index and .data files; the newest in the backup or checkpoint folder) so "
              "the restore takes the one before it, or start over with an empty folder; a restart reads the same "
              "file again", "https://www.tensorflow.org/guide/checkpoint", False),
    # Before lost-peer, whose "is aborted by" it carries. Recorded (tests/unit/data/stalls/uneven_data): a
    # worker whose data ran out began its epoch-end reduce (int64) against its peer's step all-reduce (float).
    Signature("collective-mismatch",
              r"Collective instance \d+ expected type \d+ and data_type \d+ but got type \d+ and data_type \d+",
              "its collective met a different one on a peer: the workers called their collectives in different "
              "orders, most often because they ran out of data at different steps (one began its epoch's end while "
              "another still stepped); run where the order differs the other way, it stalls instead",
              "give every worker the same number of steps: shard one dataset (auto-sharding) or give fit "
              "steps_per_epoch with a repeated dataset, and call every collective (save, evaluate) on every worker",
              INPUT_GUIDE, False),
    # Before lost-peer, whose DEADLINE_EXCEEDED it carries: CommunicationOptions(timeout_seconds=...)
    # ended a collective a peer never joined (base_collective_executor.cc's "Collective has timed out").
    Signature("collective-timeout",
              r"Collective has timed out|Collective ops timeout|collective[^\n]{0,40}timed out",
              "a collective (an all-reduce, a broadcast) timed out: the timeout_seconds of its "
              "CommunicationOptions passed while a peer had not joined it; that peer was stuck or never called it",
              "find the peer that did not join (its stacks in the run folder's tasks/<task>.stacks, `{why}`): "
              "every worker must run the same steps and call every collective; TensorFlow documents the "
              "timeout as for debugging only",
              "https://www.tensorflow.org/api_docs/python/tf/distribute/experimental/CommunicationOptions", None),
    Signature("lost-peer",
              r"\b(?:Unavailable|DeadlineExceeded|Aborted)Error\b|UNAVAILABLE|DEADLINE_EXCEEDED|"
              r"Connection reset by peer|stopped sending heartbeats|Socket closed|is aborted by",
              "lost a peer mid-run (it went away, froze or was cut off), so the collectives could not go on",
              "nothing if the peer was killed or preempted: the lab restarts every task from the backup; "
              "else read the peer's own error above", TUTORIAL + "#fault_tolerance", True),
]
# A lost peer's words from a task whose peer had EXITED 0 (Evidence.peers_done): that peer was not
# lost, it finished while this task still waited on it in a collective (the coordination service
# then aborts the waiter: "stopped sending heartbeats"). A deadlock of the program, which a restart
# repeats; these rows replace lost-peer then, the first whose pattern the error, the output or the
# task's stacks show (the frames of a save, of a restore, of fit's steps), most specific first.
# A frame as a traceback prints it (`File "...", line 3, in save`) and as faulthandler does (no comma).
FRAME_AT = r"line \d+,? in "
SAVE_FRAMES = (rf"saved_model[/\\]save\.py|checkpoint_management\.py\S* {FRAME_AT}save|"
               rf"{FRAME_AT}(?:save|save_weights|save_model|_save_model|save_counter)\b|\.save(?:_weights)?\(")
RESTORE_FRAMES = (rf"{FRAME_AT}(?:restore|_restore_from_checkpoint|load_weights|read)\b|"
                  rf"backup_and_restore\S* {FRAME_AT}on_train_begin|\.restore\(")
STEP_FRAMES = rf"{FRAME_AT}(?:train_function|step_function|run_step|fit|__next__)\b|OutOfRange|End of sequence"
PEER_DONE_SIGNATURES = [
    Signature("chief-only-save", SAVE_FRAMES,
              "waited in a save's collective for {peers}, which had already exited 0: under "
              "MultiWorkerMirroredStrategy a save is a collective every worker must join, so a save on the chief "
              "alone deadlocks until TensorFlow's coordination service aborts it (raydp#447 made this mistake)",
              "let every worker call save: the chief to the real path, every other worker to a temporary folder "
              "of its own that it deletes after the save (the tutorial's write_filepath); a restart deadlocks the "
              "same way", TUTORIAL + "#model_saving_and_loading", False),
    Signature("deadlock-at-restore", RESTORE_FRAMES,
              "waited in a restore's collective for {peers}, which had already exited 0: a restore (a "
              "checkpoint's or BackupAndRestore's) that only some workers make deadlocks the rest",
              "restore on every worker, from the same checkpoint, at the same point of the program; a restart "
              "deadlocks the same way", TUTORIAL + "#fault_tolerance", False),
    Signature("out-of-data-unevenly", STEP_FRAMES,
              "waited in a training step's all-reduce for {peers}, which had already exited 0: the workers ran "
              "out of data at different steps (uneven shards, a dataset without repeat()), so one finished "
              "its fit while the others still stepped",
              "give every worker the same number of steps: steps_per_epoch with a repeated dataset, or "
              "drop_remainder=True and shards of equal size; a restart stalls the same way",
              INPUT_GUIDE, False),
    Signature("peer-exited-mid-collective", r"",
              "waited in a collective for {peers}, which had already exited 0: a peer that exits 0 was not "
              "lost; the program called a collective on some workers only",
              "make every worker call the same collectives (saves, evaluations, custom all-reduces) the same "
              "number of times; a restart stalls the same way", TUTORIAL, False),
]
BY_NAME = {signature.name: signature for signature in SIGNATURES + PEER_DONE_SIGNATURES}


@dataclass(frozen=True)
class Evidence:
    """What the lab knows about one task that ended."""

    task: str
    exit_code: int | None
    error: str = ""  # its last attempt's `error` event, if any
    output: str = ""  # what it printed (output.log's lines of this task)
    oom_killed: bool | None = None  # the engine's State.OOMKilled; None where the backend cannot say
    memory: str = "0"  # MEMORY, the task's limit
    last_memory_bytes: int | None = None  # its largest measured memory in its log
    network: str = "internal"  # NETWORK: whether the tasks had a route out
    replay: bool = False  # a TFJob's replica: it runs its own image, and the replay's ways in and out apply
    peers_done: tuple[str, ...] = ()  # its peers (trainers) that had exited 0: none of them is a lost peer
    stacks: str = ""  # its last stack dump (core/stacks.py), where the lab took one
    strategy: str = ""  # STRATEGY (a replay's, as its replica types make it); "" where unknown

    def header(self) -> str:
        """The engine's state as lines the table's patterns read."""
        if self.exit_code == VANISHED:
            return "engine: vanished"
        if self.oom_killed:
            return "engine: OOMKilled"
        if self.oom_killed is None and self.exit_code == 137 and self.memory != "0":
            return f"engine: exit 137 under MEMORY={self.memory}"
        return ""


@dataclass(frozen=True)
class Explanation:
    task: str
    signature: str  # a SIGNATURES name; "exception" or "exit code" where none matched
    what: str
    fix: str
    link: str
    retry: bool | None

    def to_dict(self) -> dict:
        return asdict(self)


def explain(evidence: Evidence) -> Explanation | None:
    """The explanation of a failed task; None for one that exited 0 or has not ended."""
    if not evidence.exit_code:
        return None
    found = find(evidence)
    if found:
        signature, matched = found
        internal = evidence.network == "internal"
        who = "replicas" if evidence.replay else "tasks"
        fields = {"code": evidence.exit_code, "memory": evidence.memory, "peers": " and ".join(evidence.peers_done),
                  "last_memory": _megabytes(evidence.last_memory_bytes),
                  "route": f"the lab's network has no route out, by design (NETWORK=internal: the {who} reach each "
                           "other only, as on many clusters)" if internal else
                           f"could not, though NETWORK=bridge lets the {who} out: this host's own network failed it "
                           "(offline, a proxy, or its DNS)",
                  **{key: value or "?" for key, value in matched.groupdict().items()}}
        commands = {verb: lab_command(verb) for verb in ("down", "config", "why")}
        commands["or_bridge"] = (f", or let the {who} out with NETWORK=bridge"
                                 + (", as a cluster's pods are" if evidence.replay else "")) if internal else ""
        commands["bring_in"] = REPLAY_BRING_IN if evidence.replay else SCRIPT_BRING_IN
        commands["install"] = (REPLAY_INSTALL if evidence.replay else SCRIPT_INSTALL).format(**fields)
        return Explanation(evidence.task, signature.name, signature.what.format(**fields),
                           signature.fix.format(**commands), signature.link, signature.retry)
    exception = exception_head(evidence.error) or exception_head(evidence.output)
    code = describe_code(evidence.exit_code)
    if exception:
        return Explanation(evidence.task, "exception", f"{code} after {exception}",
                           f"read the traceback in `{lab_command('logs')}`; the lab knows no fix for this one", "",
                           None)
    shell = shell_code(evidence.exit_code, evidence.output)
    if shell:
        return Explanation(evidence.task, "exit code", shell[0], shell[1], "", None)
    return Explanation(evidence.task, "exit code", code, f"read its output in `{lab_command('logs')}`", "", None)


# The ways data gets into a task that may not download it (no-route-out), and a missing module's fix:
# a SCRIPT's (the lab builds its image) and a TFJob replica's (it runs its own image, as it is).
SCRIPT_BRING_IN = ("bring the data in: keep it beside the script (linked into its working directory) or in DATA=path "
                   "(read-only at $TFLAB_DATA) and load it from there (Keras 3's keras.datasets finds datasets/<file> "
                   "beside the script with SCRIPT_ENV=KERAS_HOME=.)")
REPLAY_BRING_IN = ("bring the data in: DATA=path mounts a folder read-only at $TFLAB_DATA (/lab/data) in every "
                   "replica, and CLAIMS=<claim>=/host/folder:ro gives a claim the manifest mounts a folder of yours "
                   "(:rw to keep what the job writes there), as a cluster's volume holds its data; load it from there "
                   "(keras.datasets.mnist.load_data(path=...) takes a file)")
SCRIPT_INSTALL = ("list its package in a requirements.txt beside the script (often named as the module; `yaml` is "
                  "PyYAML): the lab installs it into the tasks' image before the run, beside this TensorFlow's pins")
REPLAY_INSTALL = ("install its package into the replica's image (a `RUN pip install ...` or a requirements.txt its "
                  "Dockerfile installs; often named as the module) and build the image again: the lab runs a "
                  "TFJob's image as it is; as a SCRIPT run instead, a requirements.txt beside the script does it")


def match(evidence: Evidence) -> Signature | None:
    found = find(evidence)
    return found[0] if found else None


def find(evidence: Evidence) -> tuple[Signature, re.Match] | None:
    """The signature that explains the failure, and its match: the engine's state first; then, in
    the error event and then the output, each link of the last chained exception from its root cause
    on (a download that failed, then the read-only folder its clean-up hit: the download explains
    it); then the first signature anywhere in the error, then the output: the exception a task died
    of outranks a warning it printed earlier."""
    header = evidence.header()
    texts = [header] if header else []
    for text in (evidence.error, evidence.output):
        texts += chain_links(text)
    texts += ["\n".join(filter(None, [header, evidence.error])), evidence.output]
    for text in texts:
        for signature in SIGNATURES:
            if signature.strategy and signature.strategy != evidence.strategy:
                continue
            matched = re.search(signature.pattern, text, re.M) if text else None
            if matched:
                return peer_done(evidence, matched) if signature.name == "lost-peer" else (signature, matched)
    return None


def peer_done(evidence: Evidence, lost: re.Match) -> tuple[Signature, re.Match]:
    """A lost peer's words, refined where a peer had exited 0 (PEER_DONE_SIGNATURES): the frames of
    its stacks first (where it waited when the lab asked), then its error and output."""
    if not evidence.peers_done:
        return BY_NAME["lost-peer"], lost
    for text in (evidence.stacks, evidence.error, evidence.output):
        for signature in PEER_DONE_SIGNATURES:
            matched = re.search(signature.pattern, text, re.M) if text and signature.pattern else None
            if matched:
                return signature, matched
    return PEER_DONE_SIGNATURES[-1], lost


def _megabytes(value: int | None) -> str:
    return f"{value / 1e6:.0f} MB" if value else "nothing measured before the kill"
