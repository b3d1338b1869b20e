"""Every setting of the lab: its name, default, what is allowed and what it means, in one place.

Each setting is declared once, as a field of the frozen `Settings` dataclass below: its type, its
default and, through `setting(...)`, its grammar (core/grammars.py), what is allowed, what it means,
the commands that read it and what a TFJob decides instead. SETTINGS and SPECS, the tables of
`make help` and `--help`, docs/settings.md's table (`python3 -m tflab.core.settings --markdown`
prints it) and the refusal of a setting given to a command that never reads it are all made from
those fields. refuse_unhonoured, which applies each declaration's `refused`, is here too: k8s/ and
faults/ call it as well as the CLI.

Settings arrive as environment variables (the Makefile's command-line variables become the
environment of its recipes) or as NAME=value arguments to `python3 -m tflab`. They are parsed
once (Settings.from_env, core/rules.py) into a frozen `Settings`; anything not allowed raises
`SettingsError` whose message is one line naming the bad value and what is allowed. The host side
writes the resolved settings to `runs/<RUN>/config.json`; the trainer reads them back from there
with `Settings.from_dict`.

This module is shared by the host side and the trainer, so it imports neither TensorFlow nor any
Docker code.
"""

import dataclasses
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from tflab.core import grammars, hostfiles, versions
from tflab.core.backends import BACKENDS  # the names, with what each backend can do (core/backends.py)
from tflab.core.commands import RUN_FOLDERS, RUNS, SCRIPT_REFUSED, TFJOB_REFUSED, TRAINJOB_REFUSED
from tflab.core.grammars import (
    DATA_DIR,
    K8S_NAME_MAX,
    K8S_NAME_PATTERN,
    MATRIX_STRATEGIES,
    MIN_CPUS,
    MIN_MEMORY,
    PRECISIONS,
    SettingsError,  # the settings' own error, raised by their grammars; imported from here by most
)
from tflab.core.rules import Setting, SettingsRules, check_declared_types, specs_of

STRATEGIES = ("single", "mirrored", "multiworker", "parameter_server")
MODELS = ("mlp", "cnn")
LOOPS = ("fit", "custom")
COLLECTIVES = ("auto", "ring", "nccl")
NETWORKS = ("internal", "bridge")
SCENARIOS = ("kill", "stop", "pause", "partition", "slow-link", "slow-node", "preempt", "hang")
VERDICTS = ("auto", "off")  # make chaos VERDICT: run or reuse the undisturbed twin, or not (faults/twin.py)
NOTICES = ("sigterm", "gce", "none")  # SCENARIO=preempt: how the task hears of it (faults/)
PLACEMENTS = ("spread", "local")  # BACKEND=swarm: tasks over the swarm's nodes, or all on this one
MAX_SIM_NODES = 8
RESTART_POLICIES = ("ExitCode", "OnFailure", "Never")  # a TFJob's; restarts.restart_verdict applies them
COMPOSE_CLIS = ("auto", "v2", "v1")
PLATFORMS = ("linux/amd64", "linux/arm64")
AUDITS = ("on", "strict", "off")  # AUDIT: report findings, fail on them, or look at nothing
BENCHES = ("overhead", "stall")  # make bench: the lab's overhead (reports/bench.py), or the stall watch
K8S_RUNTIMES = ("cluster", "namespaced")  # make k8s: a ClusterTrainingRuntime, or a TrainingRuntime in K8S_NAMESPACE

DEFAULT_COMPARE = "single mirrored-2 mirrored-4 multiworker-1 multiworker-2 multiworker-4 parameter-server-2"
# TF, KERAS and STRATEGIES (versions.py holds the table of versions): one value for a run, a list
# for make matrix (images.trainer_variant refuses a list to a single run).
MATRIX_TF = "2.15 2.18 2.21 next"  # make matrix with TF empty
MATRIX_KERAS = "tf-keras keras3"  # make matrix with KERAS empty

# `tflab up TFJOB=` runs what the TFJob says, so a setting that shapes the cluster or the training
# would be dropped without a word: it is refused, naming what decides it instead (Setting.tfjob).
# The replay reads the REPLAYED ones (TIMEOUT where the TFJob sets no activeDeadlineSeconds).
REPLAYED = "read by the replay"
CONTAINER_FIELD = "spec.tfReplicaSpecs.<type>.template.spec.containers[tensorflow]"  # the operator's container
TRAINED_AS_THE_CONTAINERS_SAY = (
    "the TFJob's containers train as their own command, args and env say (those make k8s writes: as their "
    f"ConfigMap's config.json says); edit {CONTAINER_FIELD}.args or env, or the ConfigMap, or write the "
    "manifests again with make k8s")
OWN_IMAGE = f"the TFJob's containers run their own image, built or pulled beforehand; edit {CONTAINER_FIELD}.image"


# No `from __future__ import annotations` here: a field's type must be the class itself (str, int
# or float), as the dataclass reads it from the annotation; so `Optional`, as Python 3.9 (the
# oldest pyproject.toml allows) has no `X | None` at run time.
def setting(default: object, parse: Callable[[str, str], object], allowed: str, doc: str, *,
            on_host: Optional[Callable[[str, str], str]] = None, commands: tuple[str, ...] = RUNS,
            tfjob: str = "", refused: Optional[Mapping[str, str]] = None, left_out: str = "") -> Any:
    """A field of Settings, declaring its setting: the default, and in the field's metadata the rest
    of the `Setting` (core/rules.py says what each part is for)."""
    return dataclasses.field(default=default, metadata=dict(
        parse=parse, allowed=allowed, doc=doc, on_host=on_host, commands=commands, tfjob=tfjob,
        refused=refused or {}, left_out=left_out))


@dataclass(frozen=True)
class Settings(SettingsRules):
    """Every setting's value, checked (from_env, from_dict, replace): one field per setting, each
    declared with `setting(...)`; its name is the field's, upper case, and config.json's key is the
    field's own."""

    # Each grammar is spelled grammars.<name>, never imported bare: in a class body a name that an
    # earlier field took (link, memory, script...) is that field's default, not the parser.
    strategy: str = setting("multiworker", grammars.choice(STRATEGIES), " | ".join(STRATEGIES),
            "single: one process, one replica; mirrored: one process, REPLICAS replicas; "
            "multiworker: WORKERS processes, one replica each; parameter_server: a chief, "
            "WORKERS workers and PS parameter servers, asynchronous",
            tfjob="the TFJob's replica types set the strategy; edit spec.tfReplicaSpecs")
    workers: int = setting(2, grammars.integer(1, grammars.MAX_WORKERS), "1 or more", "worker containers (or local "
            "processes) for multiworker and parameter_server; a run: as many as the memory holds (said up front)",
            tfjob="the TFJob's Worker replicas set the workers; "
                  "edit spec.tfReplicaSpecs.Worker.replicas")
    replicas: int = setting(2, grammars.integer(1, grammars.MAX_REPLICAS), f"1..{grammars.MAX_REPLICAS}",
            "mirrored replicas: every GPU if any are visible, else this many logical CPUs",
            tfjob="the TFJob's replicas set the tasks; edit spec.tfReplicaSpecs.<type>.replicas")
    gpus: str = setting("", grammars.gpus, "empty | all | GPU indexes such as 0,1",
            "NVIDIA GPUs for the tasks (needs the NVIDIA Container Toolkit): single and mirrored take every "
            "one given; each worker takes one, in turn; empty: CPUs only",
            commands=(*RUNS, "images", "wheels", "tensorboard"),
            tfjob="the replay gives no GPUs (it lists a TFJob's nvidia.com/gpu limits as not applied); "
                  "leave GPUS out")
    ps: int = setting(1, grammars.integer(0, grammars.MAX_WORKERS), "1 or more for parameter_server",
            "parameter servers for parameter_server (its chief and workers are the other tasks)",
            tfjob="the TFJob's PS replicas set the parameter servers; "
                  "edit spec.tfReplicaSpecs.PS.replicas")
    chief: int = setting(0, grammars.integer(0, 1), "0 | 1 (multiworker)",
            "multiworker: 1 adds chief-0, a TFJob's Chief: one more replica, and the one that writes "
            "the model, TensorBoard and checkpoints",
            tfjob="the TFJob's Chief replica sets the chief; edit spec.tfReplicaSpecs.Chief")
    evaluator: int = setting(0, grammars.integer(0, 1), "0 | 1 (multiworker, parameter_server)",
            "1 adds evaluator-0, outside the cluster: it evaluates each checkpoint the chief writes "
            "(tf-keras SidecarEvaluator) and logs eval events, so not under Keras 3, which has none; "
            "with SCRIPT it runs the script, "
            "whose TF_CONFIG names task evaluator 0",
            tfjob="the TFJob's Evaluator replica sets the evaluator; "
                  "edit spec.tfReplicaSpecs.Evaluator")
    epochs: int = setting(10, grammars.integer(1, 10_000), "1..10000", "passes over the data set",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY)
    global_batch: int = setting(64, grammars.integer(1, 1 << 20), "1..1048576, a multiple of the replicas",
            "examples per step summed over every replica, the same for every strategy",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY)
    examples: int = setting(4096, grammars.integer(1, 100_000_000), "GLOBAL_BATCH..100000000",
            "synthetic examples y = xW + 0.1 noise, generated from SEED",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY)
    seed: int = setting(0, grammars.integer(0, 2**31 - 1), f"0..{2**31 - 1}",
            "seeds the data, the initial weights and TensorFlow's ops",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY)
    model: str = setting("mlp", grammars.choice(MODELS), " | ".join(MODELS),
            "mlp: the article's Dense(10)-Dense(1), communication-dominated; "
            "cnn: a small convnet on 32x32x3 images, compute-dominated",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY)
    loop: str = setting("fit", grammars.choice(LOOPS), " | ".join(LOOPS),
            "fit: Keras model.fit; custom: the lab's own step, one packed all-reduce per step",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY)
    precision: str = setting("float32", grammars.choice(PRECISIONS), " | ".join(PRECISIONS),
            "the lab's trainer's Keras dtype policy: mixed_* compute in float16 or bfloat16 with float32 variables "
            "and a float32 output and loss; mixed_float16 scales the loss (LossScaleOptimizer), so not over several "
            "replicas under Keras 3, whose scaler checks one replica's gradients (NaN, measured on 3.15.1 and nightly)",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY)
    steps_per_execution: int = setting(1, grammars.integer(1, 1000), "1..1000",
            "training steps per call into the compiled step function",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY)
    collective: str = setting("auto", grammars.choice(COLLECTIVES), " | ".join(COLLECTIVES),
            "multiworker all-reduce implementation (nccl needs GPUS)",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY)
    bytes_per_pack: int = setting(0, grammars.integer(0, 1 << 30), "0..1073741824",
            "multiworker gradient packing hint in bytes; 0 lets TensorFlow decide",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY)
    allreduce_probe: int = setting(0, grammars.integer(0, 100_000), "0..100000",
            "after training, time this many bare all-reduces of the gradient's size",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY)
    audit: str = setting("on", grammars.choice(AUDITS), " | ".join(AUDITS),
            "the run's audit (docs/audit.md): each worker's input batches, writes and weights, compared "
            "after the run; on: findings are reported; strict: a finding also fails the run; off: no "
            "instrumentation at all",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY)
    run: str = setting("", grammars.run_id, "empty | [a-z0-9][a-z0-9-]*, not latest nor an existing run",
            "run id; outputs go to RUNS_DIR/<RUN>/ and RUNS_DIR/latest points at the newest",
            # tensorboard serves every run, RUN's among them; it takes RUN as given to every lab command
            commands=(*RUNS, *RUN_FOLDERS, "tensorboard", "migrate"),
            tfjob=REPLAYED)
    backend: str = setting("compose", grammars.choice(BACKENDS), " | ".join(BACKENDS),
            "compose: a container per task; local: a process per task on loopback, same script, as the lab's "
            "user (root included: no trust boundary); "
            "swarm: a Docker Swarm service per task (make stack-up)",
            commands=tuple(c for c in RUNS if c != "stack-up"),
            tfjob=REPLAYED)
    peer_timeout: float = setting(60.0, grammars.number(1, 3600), "1..3600 seconds",
            "how long a trainer waits for its peers before it exits naming the missing ones",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY)
    timeout: float = setting(900.0, grammars.number(10, 86_400), "10..86400 seconds",
            "how long a whole run may take before the lab stops it and reports it failed (make migrate: each "
            "replay, where the TFJob sets no activeDeadlineSeconds)",
            commands=(*RUNS, "migrate"), tfjob=REPLAYED)
    stall: str = setting("auto", grammars.stall, "auto | off | 5..86400 seconds",
            "when the lab calls a run stalled (no trainer advanced), asks every task for its stacks and says who "
            "waits on whom: auto: 5 x the run's own pace (the largest gap between its steps, epochs, checkpoints..., "
            "the first step's tracing included), at least 30 s and at most 300 s (300 s before its first step); "
            "N: after N s; off: never",
            tfjob=REPLAYED)
    runs_dir: str = setting("runs", grammars.folder,
            "a folder, no ':' in its path, that no other user may write (nor one above it, unless sticky)",
            "where run folders are written",
            on_host=hostfiles.folder_on_host,
            commands=(*RUNS, *RUN_FOLDERS, "tensorboard", "migrate"),
            tfjob=REPLAYED)
    compose: str = setting("auto", grammars.choice(COMPOSE_CLIS), " | ".join(COMPOSE_CLIS),
            "Compose CLI: v2 is `docker compose`, v1 is `docker-compose`; auto prefers v2",
            commands=(*RUNS, "tensorboard", "migrate"),
            tfjob=REPLAYED)
    base_image: str = setting("", grammars.image, "empty | an image reference",
            "base of the trainer image; empty: python:3.11-slim if it can be had, "
            "else a Debian base built locally with debootstrap",
            commands=(*RUNS, "images", "tensorboard"),
            tfjob=OWN_IMAGE)
    platform: str = setting("", grammars.choice(PLATFORMS), "empty | " + " | ".join(PLATFORMS),
            "the trainer image's platform; empty: the engine's own (linux/arm64 on Apple Silicon); "
            "another runs emulated (slow; on Linux: scripts/enable-arm64-emulation.sh)",
            commands=(*RUNS, "images", "wheels", "tensorboard"),
            tfjob=OWN_IMAGE)
    tf: str = setting("", grammars.tf, f"empty | {versions.ALLOWED}",
            "the TensorFlow of the trainer image (one image per version, tagged cpu-tf<version>); empty: the "
            f"lab's own, {versions.DEFAULT}; make matrix: a list, empty: {MATRIX_TF}",
            commands=("up", "compare", "chaos", "soak", "chaos-grid", "images", "wheels", "matrix"),
            tfjob=OWN_IMAGE, left_out=f"the lab's own, {versions.DEFAULT} (make matrix: {MATRIX_TF})")
    keras: str = setting("", grammars.keras, "empty | " + versions.KERAS_ALLOWED,
            "tf.keras: keras3 (TF 2.16 on), tf-keras (tf_keras, TF_USE_LEGACY_KERAS=1; TF 2.14 to 2.21) or bundled "
            "(Keras 2, TF <= 2.15), or a Keras release in place of the TF line's own (3.10 .. 3.15, nightly: "
            f"{versions.keras_label('nightly')}; TF 2.16 on); empty: tf-keras from 2.16, else bundled; make matrix: "
            "a list, empty: "
            f"{MATRIX_KERAS}",
            commands=("up", "compare", "chaos", "soak", "chaos-grid", "images", "wheels", "matrix"),
            tfjob=OWN_IMAGE, left_out=f"tf-keras from 2.16, else bundled (make matrix: {MATRIX_KERAS})")
    strategies: str = setting("mirrored multiworker", grammars.strategies,
            " | ".join(MATRIX_STRATEGIES) + ", one or more",
            "make matrix: the strategies each TF and KERAS runs with (WORKERS, REPLICAS as set)",
            commands=("matrix",))
    precisions: str = setting("", grammars.precisions, "empty | " + " | ".join(PRECISIONS) + ", one or more",
            "make matrix and make compare: one cell or run per precision, each beside the single-device run's "
            "of its precision; empty: PRECISION alone",
            commands=("compare", "matrix"))
    compare: str = setting(DEFAULT_COMPARE, grammars.compare,
            f"entries single, mirrored-N (N: 1..{grammars.MAX_REPLICAS}), multiworker-N, parameter-server-N (N: 1+)",
            "the runs `make compare` makes, side by side, with every other setting shared",
            commands=("compare",))
    restarts: int = setting(2, grammars.integer(0, 10), "0..10",
            "times the lab restarts the whole cluster after a task fails; the lab's trainer resumes from its "
            "backup, a SCRIPT where its own lets it (the lab says where it did)",
            tfjob="the TFJob's spec.runPolicy.backoffLimit bounds its restarts as the operator counts them, and "
                  "without one there is no limit (the operator sets none; activeDeadlineSeconds or TIMEOUT still "
                  "ends the run); edit spec.runPolicy.backoffLimit")
    restart_policy: str = setting("ExitCode", grammars.choice(RESTART_POLICIES), " | ".join(RESTART_POLICIES),
            "which failures the lab restarts, as a TFJob's: ExitCode: exit codes 128 and up "
            "(killed), a preemption or a lost peer, never a known bug or a memory kill; "
            "OnFailure: every failure; Never: none. RESTARTS bounds them",
            tfjob="the TFJob's restart policies say which failures restart; "
                  "edit spec.tfReplicaSpecs.<type>.restartPolicy")
    backoff: float = setting(10.0, grammars.number(0.1, 10), "0.1..10 seconds",
            "tflab up TFJOB= or TRAINJOB=: the kubelet's back-off before it restarts a failed OnFailure or Always "
            "replica in place (k8s/kubelet.py): none at its first failure, then this, doubling to 30 x it; 10: the "
            "kubelet's own (10 s doubling to 300 s); it scales a TrainJob's Job controller's pod failure back-off "
            "alike (10 s doubling to 600 s); less only to make a test quick",
            commands=("up", "chaos", "matrix"), tfjob=REPLAYED)
    backup: str = setting("epoch", grammars.backup, "epoch | off | N steps",
            "how often training backs itself up (tf-keras BackupAndRestore) in RUNS_DIR/<RUN>/backup",
            tfjob=TRAINED_AS_THE_CONTAINERS_SAY)
    cpus: float = setting(0.0, grammars.number(MIN_CPUS, 64, "CPUs", zero="no limit"),
            f"0 | {MIN_CPUS:g}..64, at most the engine's",
            "CPU limit of every task's container, to imitate small nodes; 0: none",
            tfjob=f"the TFJob's CPU limits apply; edit {CONTAINER_FIELD}.resources.limits.cpu")
    memory: str = setting("0", grammars.memory, f"0 | <n>k | <n>m | <n>g, at least {MIN_MEMORY}",
            "memory limit of every task's container; 0: none",
            tfjob="the TFJob's memory limits apply; "
                  f"edit {CONTAINER_FIELD}.resources.limits.memory")
    network: str = setting("internal", grammars.choice(NETWORKS), " | ".join(NETWORKS),
            "internal: the tasks' network has no route out and the host has no address on it; "
            "bridge: Docker's usual bridge (a TFJob replay's replicas too: out, as a cluster's pods)",
            tfjob=REPLAYED)
    link: str = setting("", grammars.link, "empty | <latency>ms,<rate>mbit",
            "every task's inbound link through a delay proxy, e.g. 1ms,1000mbit; empty: direct",
            tfjob="the replay's tasks talk directly; leave LINK out")
    scenario: str = setting("kill", grammars.choice(SCENARIOS), " | ".join(SCENARIOS),
            "make chaos: the fault to inject; make migrate: the fault injected in both replays (none unless "
            "given)",
            commands=("chaos", "migrate"))
    target: str = setting("", grammars.text, "a task of the run; empty: the last worker",
            "make chaos: the task it hits",
            commands=("chaos", "chaos-grid", "migrate"))
    at: str = setting("epoch:2", grammars.moment, "epoch:N | step:N | seconds:S | save[:N] | restore | eval[:N]",
            "make chaos: after the target's Nth epoch (a SCRIPT's: as Keras counts them, every fit's), at its Nth "
            "training step (the lab's trainer or a SCRIPT's Keras fit; it waits there for the fault), S "
            "seconds after it is ready (a SCRIPT: after it started), while it writes its Nth checkpoint (shards "
            "written, index not; it waits there), while it restores its backup after a restart (the lab kills "
            "it after its first backup to make it restore; RESTARTS of 1 or more), or while the evaluator reads "
            "its Nth checkpoint (EVALUATOR=1; TARGET defaults to it)",
            commands=("chaos", "migrate"))
    heal: str = setting("5", grammars.heal, "seconds | never (partition, hang)",
            "make chaos: when a pause, hang or partition is undone",
            commands=("chaos", "chaos-grid", "migrate"))
    verdict: str = setting("auto", grammars.choice(VERDICTS), " | ".join(VERDICTS),
            "make chaos: the verdict on the resume (equivalent, lossy, corrupt, hang, failed) compares a run "
            "that finished with its undisturbed twin, the same settings without the fault (faults/twin.py); "
            "auto: reuses the twin of these settings and image, or runs it once after a run that finished ok; "
            "off: runs none (the verdict says no twin)",
            commands=("chaos", "chaos-grid"))
    twin: str = setting("", grammars.run_id, "empty | the id of a finished run in RUNS_DIR",
            "make chaos: the undisturbed run to compare with, instead of the lab's own twin; its settings "
            "must be the run's, less the fault's",
            commands=("chaos",))
    notice: str = setting("sigterm", grammars.choice(NOTICES), " | ".join(NOTICES),
            "make chaos SCENARIO=preempt: how the task hears of it: sigterm (Kubernetes), gce (the metadata "
            "server's maintenance-event and preempted turn, GCE_METADATA_IP), none (no word)",
            commands=("chaos", "soak", "chaos-grid"))
    grace: int = setting(30, grammars.integer(0, 3600), "0..3600 seconds",
            "make chaos SCENARIO=preempt: seconds from the notice to SIGKILL, as terminationGracePeriodSeconds",
            commands=("chaos", "soak", "chaos-grid"))
    slow_link: str = setting("10ms,100mbit", grammars.link, "<latency>ms,<rate>mbit",
            "make chaos SCENARIO=slow-link: the link the target gets from AT on",
            commands=("chaos", "soak", "chaos-grid"))
    slow_cpus: float = setting(0.25, grammars.number(MIN_CPUS, 64, "CPUs"), f"{MIN_CPUS:g}..64",
            "make chaos SCENARIO=slow-node: the target's CPUs",
            commands=("chaos", "soak", "chaos-grid"))
    soak: int = setting(20, grammars.integer(1, 1000), "1..1000", "make soak: how many random scenarios it runs",
            commands=("soak",))
    scenarios: str = setting("kill pause", grammars.choices(SCENARIOS), " | ".join(SCENARIOS) + ", one or more",
            "make chaos-grid: the faults, a row each",
            commands=("chaos-grid",))
    moments: str = setting("epoch:1 step:40", grammars.moments, "AT's values, one or more",
            "make chaos-grid: the moments each fault lands at (AT), a column each",
            commands=("chaos-grid",))
    bench: str = setting("overhead", grammars.choice(BENCHES), " | ".join(BENCHES),
            "make bench: overhead: the lab's own overhead and the multi-worker step; stall: the stall watch, "
            "BENCH_STALLS stalls at random points (seeded by SEED) named or not, a healthy set, and its cost "
            "on the steady step over BENCH_PAIRS pairs of STALL=auto and off",
            commands=("bench",))
    bench_stalls: int = setting(10, grammars.integer(1, 100), "1..100",
            "make bench BENCH=stall: the stalls it injects, alternately in the lab's trainer and in a SCRIPT",
            commands=("bench",))
    bench_pairs: int = setting(3, grammars.integer(1, 20), "1..20",
            "make bench BENCH=stall: the STALL=auto and STALL=off runs it alternates, for the watch's cost",
            commands=("bench",))
    script: str = setting("", grammars.script, "empty | path/to/train.py, no ':' in its path",
            "your own training script, unmodified, in every task with the generated TF_CONFIG; "
            "empty: the lab's own", on_host=hostfiles.script_on_host,
            commands=tuple(c for c in RUNS if c not in SCRIPT_REFUSED),
            tfjob="the TFJob's containers run their own command; "
                  f"edit {CONTAINER_FIELD}.command and args", refused=SCRIPT_REFUSED, left_out="the lab's own trainer")
    args: str = setting("", grammars.args, "arguments", "arguments for SCRIPT, split as a shell would",
            tfjob=f"the TFJob's containers run their own arguments; edit {CONTAINER_FIELD}.args")
    script_env: str = setting("", grammars.script_env, "empty | NAME=value ..., split as a shell would",
            "environment variables for SCRIPT's every task, as a TFJob's env gives them (not TF_CONFIG, "
            "PYTHONPATH, TFLAB_*, PATH, PYTHONHOME nor TF_USE_LEGACY_KERAS: KERAS sets it), e.g. "
            "KERAS_HOME=/lab/data/keras",
            commands=tuple(c for c in RUNS if c not in SCRIPT_REFUSED),
            tfjob=f"the TFJob's containers get their own env; edit {CONTAINER_FIELD}.env")
    data: str = setting("", grammars.folder, "empty | path/to/folder, no ':' in its path",
            f"a data folder for SCRIPT or a TFJob replay, mounted read-only at {DATA_DIR} in every task ($TFLAB_DATA "
            "says where; BACKEND=local: the folder itself)", on_host=hostfiles.data_on_host,
            commands=tuple(c for c in RUNS if c not in SCRIPT_REFUSED),
            tfjob=REPLAYED, left_out="no data folder")
    tfjob: str = setting("", grammars.tfjob, "empty | path/to/tfjob.yaml",
            "tflab up: replay a Kubeflow TFJob (kubeflow.org/v1) and the ConfigMaps in its file, each "
            "replica a task on Compose, with the operator's TF_CONFIG; make k8s: write it as a Kubeflow "
            "Trainer v2 TrainJob and runtime; make migrate: both, replayed one after the other, and what "
            "differs", on_host=hostfiles.tfjob_on_host,
            commands=("up", "k8s", "chaos", "matrix", "migrate"),
            tfjob=REPLAYED, refused=TFJOB_REFUSED, left_out="the lab's own training, no TFJob")
    trainjob: str = setting("", grammars.manifest("a TrainJob manifest"), "empty | path/to/trainjob.yaml",
            "tflab up: replay a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1), its TensorFlow "
            "runtime and the ConfigMaps in its file, each node a task on Compose that builds its TF_CONFIG as "
            "its pod would", on_host=hostfiles.manifest_on_host("TrainJob manifest"),
            commands=("up", "chaos", "matrix"), refused=TRAINJOB_REFUSED,
            left_out="the lab's own training, no TrainJob")
    runtime: str = setting("", grammars.manifest("a TrainingRuntime or ClusterTrainingRuntime manifest"),
            "empty | path/to/runtime.yaml",
            "tflab up TRAINJOB=: the file holding the runtime the TrainJob names, where it is not in the "
            "TrainJob's own file", on_host=hostfiles.manifest_on_host("runtime manifest"),
            commands=("up", "chaos", "matrix"), left_out="the runtime in the TrainJob's own file")
    claims: str = setting("", grammars.claims, "empty | claim=/host/folder[:ro|:rw],...",
            "tflab up TFJOB=: a folder of this host for each PersistentVolumeClaim named, mounted where the "
            "manifest mounts the claim (ro: read-only; rw, the default: writable, kept after the run); "
            "empty: each claim a fresh folder of the run's (volumes/<claim>/)", on_host=hostfiles.claims_on_host,
            commands=("up", "chaos", "matrix"), tfjob=REPLAYED,
            left_out="each claim a fresh folder of the run's")
    tensorboard_port: int = setting(6006, grammars.integer(1024, 65535), "1024..65535",
            "make tensorboard: the port it serves on, on 127.0.0.1 only",
            commands=("tensorboard",))
    swarm_placement: str = setting("spread", grammars.choice(PLACEMENTS), " | ".join(PLACEMENTS),
            "BACKEND=swarm: spread puts task i on node i (this node first, then the others by "
            "hostname), in turn; local pins every task to this node")
    registry: str = setting("", grammars.registry, "empty | host:port",
            "BACKEND=swarm across nodes: the registry the lab pushes the image to and every node pulls "
            "it from, by digest (make swarm-sim starts one); empty: the image stays on this node")
    shared_runs_dir: int = setting(0, grammars.integer(0, 1), "0 | 1",
            "BACKEND=swarm across nodes: 1 states that RUNS_DIR is mounted at the same path on "
            "every node (NFS, or make swarm-sim's nodes, which share this host's files)")
    node_engines: str = setting("", grammars.node_engines, "empty | hostname=ssh://user@host ...",
            "BACKEND=swarm across nodes: each other node's engine as the docker CLI's -H takes it, so "
            "make chaos and the run's output reach its tasks; make swarm-sim's nodes need none")
    nodes: int = setting(3, grammars.integer(2, MAX_SIM_NODES), f"2..{MAX_SIM_NODES}",
            "make swarm-sim: nodes of the simulated swarm, this host's engine (the manager) and "
            "NODES-1 engines in network namespaces",
            commands=("swarm-sim",))
    force: int = setting(0, grammars.integer(0, 1), "0 | 1",
            "make down: 1 also ends the runs whose lab is still running (outcome interrupted, \"ended by "
            "tflab down\"); 0 leaves them running and names them",
            commands=("down", "clean"))
    k8s_image: str = setting("", grammars.image, "empty | an image reference",
            "make k8s: the trainer image the pods run; empty: the one `make images` builds here (built "
            "if need be), which `make up TFJOB=` replays; for a cluster, push it to a registry it can "
            "pull from and name it here",
            commands=("k8s",),
            tfjob=f"the TFJob's containers name their image; edit {CONTAINER_FIELD}.image")
    k8s_namespace: str = setting("default",
            grammars.k8s_name(grammars.DNS1123_LABEL, "a DNS-1123 label: lowercase letters, digits and '-', "
                                                      "a letter or digit at each end, at most 63 characters"),
            "a DNS-1123 label", "make k8s: the namespace of every object",
            commands=("k8s",),
            tfjob="the TFJob's namespace is in its tasks' addresses; edit metadata.namespace")
    k8s_name: str = setting("tflab",
            grammars.k8s_name(K8S_NAME_PATTERN, "lowercase letters, digits and '-', a letter first, a letter "
                                                 f"or digit last, at most {K8S_NAME_MAX} characters "
                                                 "(room for -worker-31)"),
            f"[a-z][a-z0-9-]*, at most {K8S_NAME_MAX} characters",
            "make k8s: the TFJob's name; its tasks' Services and Jobs are <K8S_NAME>-<job>-<index>",
            commands=("k8s",),
            tfjob="the TFJob's name names its tasks' hosts; edit metadata.name")
    k8s_runtime: str = setting("cluster", grammars.choice(K8S_RUNTIMES), " | ".join(K8S_RUNTIMES),
            "make k8s: the TrainJob's TensorFlow runtime, a ClusterTrainingRuntime (cluster) or a TrainingRuntime "
            "in K8S_NAMESPACE (namespaced, for a user who may not make cluster-wide objects)",
            commands=("k8s", "migrate"))
    k8s_pvc: str = setting("",
            grammars.k8s_name(grammars.DNS1123_SUBDOMAIN, "the name of a PersistentVolumeClaim (a DNS-1123 "
                                                          "subdomain), or nothing for each pod's own emptyDir"),
            "empty | a PVC name",
            "make k8s: an existing ReadWriteMany claim every task writes its outputs to, in <K8S_NAME>/; "
            "empty: each pod's own emptyDir, gone with the pod",
            commands=("k8s",),
            tfjob="the TFJob's volumes name their claims; "
                  "edit spec.tfReplicaSpecs.<type>.template.spec.volumes")


SPECS: dict[str, Setting] = specs_of(Settings)  # NAME -> Setting, in declaration order
SETTINGS: tuple[Setting, ...] = tuple(SPECS.values())


check_declared_types(Settings)


def default_of(name: str) -> object:
    return SPECS[name].default


def settings_table() -> list[tuple[str, str, str, str]]:
    """(NAME, default, allowed, meaning) for every setting, for `make help` and the README."""
    rows = []
    for name, spec in SPECS.items():
        default = default_of(name)
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        shown = {"run": "timestamped id", "base_image": "(auto)"}.get(spec.field, shown)
        rows.append((name, shown, spec.allowed, spec.doc))
    return rows


def settings_markdown() -> str:
    """docs/settings.md's table of settings, as tests/unit/test_readme.py expects it."""
    rows = ["| setting | default | allowed | meaning |", "|---|---|---|---|"]
    rows += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in settings_table()]
    return "\n".join(rows) + "\n"


def refuse_unhonoured(command: str, values: "Mapping[str, object] | Settings") -> None:
    """A value the command cannot honour (Setting.refused), given in any way, the environment too:
    `values` is the settings, or NAME -> value as given."""
    if not isinstance(values, Mapping):
        values = {spec.name: getattr(values, spec.field) for spec in SETTINGS}
    for name, value in values.items():
        refused = SPECS[name].refused.get(command) if name in SPECS else None
        if refused and value not in ("", SPECS[name].default):
            raise SettingsError(f"{name}={value} is not allowed with {refused}")


def main(arguments: list[str]) -> int:
    """PYTHONPATH=scripts python3 -m tflab.core.settings --markdown; a write error on stdout (a full
    disk) is one line and exit 1, as in the lab's own commands (console.py's, which core cannot import)."""
    if arguments != ["--markdown"]:
        given = " ".join(arguments) or "no argument"
        given = given if given.isprintable() and len(given) <= 100 else repr(given[:100])  # an ESC never raw
        print(f"tflab: {given} is not allowed: expected --markdown (python3 -m tflab.core.settings --markdown "
              "prints docs/settings.md's table of settings)", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(settings_markdown())
        sys.stdout.flush()
    except OSError as error:  # only stdout is written here
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush is quiet too
        if isinstance(error, BrokenPipeError):
            return 0
        print(f"tflab: cannot write to standard output: {error.strerror or error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
