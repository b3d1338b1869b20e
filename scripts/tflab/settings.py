"""Every setting of the lab: its name, default, what is allowed and what it means, in one place.

Settings arrive as environment variables (the Makefile's command-line variables become the
environment of its recipes) or as NAME=value arguments to `python3 -m tflab`. They are parsed
once, here, into a frozen `Settings`; anything not allowed raises `SettingsError` whose message is
one line naming the bad value and what is allowed. The host side writes the resolved settings to
`runs/<RUN>/config.json`; the trainer reads them back from there with `Settings.from_dict`.

This module is shared by the host side and the trainer, so it imports neither TensorFlow nor any
Docker code.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from tflab.errors import LabError

STRATEGIES = ("single", "mirrored", "multiworker", "parameter_server")
MODELS = ("mlp", "cnn")
LOOPS = ("fit", "custom")
COLLECTIVES = ("auto", "ring", "nccl")
NETWORKS = ("internal", "bridge")
SCENARIOS = ("kill", "stop", "pause", "partition", "slow-link", "slow-node")
LINK_PATTERN = re.compile(r"(\d+(?:\.\d+)?)ms,(\d+(?:\.\d+)?)mbit")
BACKENDS = ("compose", "local", "swarm")
RESTART_POLICIES = ("ExitCode", "OnFailure", "Never")  # a TFJob's; explain.restart_verdict applies them
COMPOSE_CLIS = ("auto", "v2", "v1")
MAX_TASKS = 16
RUN_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
# Kubernetes names (make k8s). A Service name must be a DNS-1035 label (a letter first, 63 at most)
# and the tasks' Services are <K8S_NAME>-worker-15 at the longest, so the name leaves room for that.
K8S_NAME_MAX = 63 - len(f"-worker-{MAX_TASKS - 1}")
K8S_NAME_PATTERN = re.compile(rf"[a-z](?:[a-z0-9-]{{0,{K8S_NAME_MAX - 2}}}[a-z0-9])?")
DNS_LABEL = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
K8S_NAMESPACE_PATTERN = re.compile(DNS_LABEL)  # DNS-1123 label
K8S_PVC_PATTERN = re.compile(rf"(?=.{{1,253}}$){DNS_LABEL}(?:\.{DNS_LABEL})*")  # DNS-1123 subdomain


DEFAULT_COMPARE = "single mirrored-2 mirrored-4 multiworker-1 multiworker-2 multiworker-4 parameter-server-2"
SCRIPT_STRATEGIES = ("single", "mirrored", "multiworker")
COMPARE_ENTRY = re.compile(r"(single)|(mirrored|multiworker|parameter-server)-(\d+)")


class SettingsError(LabError, ValueError):
    """A setting the lab refuses; str() is the one line a user sees."""


@dataclass(frozen=True)
class Settings:
    strategy: str = "multiworker"  # single | mirrored | multiworker | parameter_server
    workers: int = 2  # worker containers (processes) for multiworker and parameter_server
    replicas: int = 2  # mirrored: every GPU if any are visible, else this many logical CPUs
    gpus: str = ""  # empty: CPUs only; all: every NVIDIA GPU; 0,1: these GPUs (workers take one each, in turn)
    ps: int = 1  # parameter servers for parameter_server
    epochs: int = 10  # passes over the data set
    global_batch: int = 64  # examples per step summed over all replicas, whatever the strategy
    examples: int = 4096  # synthetic examples, y = xW + 0.1 noise, generated from SEED
    seed: int = 0  # seeds the data, the initial weights and TensorFlow's ops
    model: str = "mlp"  # mlp: the article's tiny MLP; cnn: a small convnet, compute-dominated
    loop: str = "fit"  # fit: Keras model.fit; custom: the lab's loop, one packed all-reduce a step
    steps_per_execution: int = 1  # training steps per call into the compiled step function
    collective: str = "auto"  # multiworker all-reduce implementation: auto | ring | nccl
    bytes_per_pack: int = 0  # multiworker gradient packing hint; 0 lets TensorFlow decide
    allreduce_probe: int = 0  # after training, time this many bare all-reduces of the gradient
    run: str = ""  # run id, outputs in RUNS_DIR/<RUN>/; empty means a fresh timestamped id
    backend: str = "compose"  # compose: one container per task; local: one process per task; swarm: a stack
    peer_timeout: float = 60.0  # seconds a trainer waits for its peers before it gives up
    timeout: float = 900.0  # seconds the whole run may take before the lab stops it
    runs_dir: str = "runs"  # where run folders go (relative to the repository root)
    compose: str = "auto"  # auto (v2 plugin, else docker-compose), v2 or v1
    base_image: str = ""  # trainer base image; empty: python:3.11-slim, else a local build
    compare: str = DEFAULT_COMPARE  # the runs `make compare` makes, as strategy-count entries
    restarts: int = 2  # times the lab restarts the whole cluster after a task fails
    restart_policy: str = "ExitCode"  # which failures are restarted: ExitCode | OnFailure | Never
    backup: str = "epoch"  # BackupAndRestore: every epoch, every N steps, or off
    cpus: float = 0.0  # CPU limit of every task's container; 0: none
    memory: str = "0"  # memory limit of every task's container (512m, 2g); 0: none
    network: str = "internal"  # internal: no route out; bridge: Docker's default bridge rules
    link: str = ""  # every task's inbound link, "<latency>ms,<rate>mbit", through a proxy; empty: direct
    scenario: str = "kill"  # make chaos: kill | stop | pause | partition | slow-link | slow-node
    target: str = ""  # make chaos: the task hit; empty: the last worker
    at: str = "epoch:2"  # make chaos: when, "epoch:N" (after N epochs) or "seconds:S" (after ready)
    heal: str = "5"  # make chaos: seconds until pause/partition is undone, or "never" (partition)
    slow_link: str = "10ms,100mbit"  # make chaos SCENARIO=slow-link: the target's inbound link
    slow_cpus: float = 0.25  # make chaos SCENARIO=slow-node: the target's CPU limit
    soak: int = 20  # make soak: how many random scenarios
    script: str = ""  # a user's own training script (absolute path) run in every task; empty: the lab's
    args: str = ""  # arguments for SCRIPT, as a shell would split them
    tensorboard_port: int = 6006  # make tensorboard: the port on 127.0.0.1

    @property
    def gpu_indexes(self) -> tuple[str, ...]:
        """The GPUs GPUS names one by one; empty for GPUS=all (the host's list) and for no GPUs."""
        return tuple(self.gpus.split(",")) if self.gpus not in ("", "all") else ()
    k8s_image: str = "tflab-trainer:latest"  # make k8s: the trainer image, pushed where the cluster can pull it
    k8s_namespace: str = "default"  # make k8s: the namespace of every object
    k8s_name: str = "tflab"  # make k8s: the TFJob's name, and the prefix of every other object's
    k8s_pvc: str = ""  # make k8s: a ReadWriteMany PVC for the outputs; empty: each pod's own emptyDir

    @property
    def replicas_in_sync(self) -> int:
        """Replicas a step's global batch is split over, as the host can know it. Mirrored takes
        every GPU it is given; with GPUS=all their number is the trainer's to find (it checks)."""
        if self.strategy == "multiworker":
            return self.workers
        if self.strategy == "mirrored":
            return len(self.gpu_indexes) or self.replicas
        return 1  # single; parameter_server: each step is one worker's, on a whole global batch

    @property
    def steps_per_epoch(self) -> int:
        return self.examples // self.global_batch

    @classmethod
    def from_env(cls, env: Mapping[str, str], overrides: Mapping[str, str] = ()) -> "Settings":
        """Settings from NAME=value pairs: `overrides` win over `env`; unknown overrides are refused."""
        overrides = dict(overrides)
        unknown = sorted(set(overrides) - set(SPECS))
        if unknown:
            raise SettingsError(
                f"unknown setting {unknown[0]}; allowed settings: {', '.join(SPECS)}"
            )
        values = {}
        for name, spec in SPECS.items():
            raw = overrides.get(name, env.get(name, ""))
            if raw.strip() == "":
                continue
            values[spec.field] = spec.parse(name, raw.strip())
        return cls(**values).validated()

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> "Settings":
        """Settings saved by `to_dict` (config.json), checked again."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known}).validated()

    def compare_runs(self) -> list[tuple[str, "Settings"]]:
        """(label, settings) for each COMPARE entry, each checked: `mirrored-4` is STRATEGY=mirrored
        REPLICAS=4, `parameter-server-2` is STRATEGY=parameter_server WORKERS=2 (and PS)."""
        runs = []
        for label in self.compare.split():
            match = COMPARE_ENTRY.fullmatch(label)
            strategy = (match.group(1) or match.group(2)).replace("-", "_")
            count = int(match.group(3) or 1)
            size = {"mirrored": {"replicas": count}, "single": {}}.get(strategy, {"workers": count})
            try:
                runs.append((label, self.replace(strategy=strategy, run=label, **size)))
            except SettingsError as error:
                raise SettingsError(f"COMPARE entry {label}: {error}") from None
        return runs

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "Settings":
        return dataclasses.replace(self, **changes).validated()

    def validated(self) -> "Settings":
        """Checks that involve more than one setting; raises SettingsError."""
        replicas = self.replicas_in_sync
        if self.global_batch % replicas:
            below = self.global_batch - self.global_batch % replicas
            nearest = " or ".join(str(n) for n in (below, below + replicas) if n > 0)
            raise SettingsError(
                f"GLOBAL_BATCH={self.global_batch} is not divisible by the {replicas} replicas of "
                f"STRATEGY={self.strategy}; allowed: a multiple of {replicas}, such as {nearest}"
            )
        if self.strategy == "parameter_server" and self.ps < 1:
            raise SettingsError(f"PS={self.ps} is not allowed with STRATEGY=parameter_server: "
                                f"expected 1..{MAX_TASKS} parameter servers")
        if self.loop == "custom" and self.strategy == "parameter_server":
            raise SettingsError("LOOP=custom is not allowed with STRATEGY=parameter_server: "
                                "expected LOOP=fit (the custom loop is for the synchronous strategies)")
        if self.heal == "never" and self.scenario != "partition":
            raise SettingsError(f"HEAL=never is not allowed with SCENARIO={self.scenario}: "
                                "expected seconds (only a partition may stay)")
        if self.args and not self.script:
            raise SettingsError(f"ARGS={self.args!r} is not allowed without SCRIPT: expected SCRIPT=path/to/train.py "
                                "(the lab's own trainer takes its settings, not arguments)")
        if self.script and self.strategy not in SCRIPT_STRATEGIES:
            raise SettingsError(f"SCRIPT is not allowed with STRATEGY={self.strategy}: expected one of "
                                f"{', '.join(SCRIPT_STRATEGIES)} (the lab cannot tell a script's servers "
                                "from its trainers)")
        if self.collective == "nccl" and not self.gpus:
            raise SettingsError("COLLECTIVE=nccl is not allowed without GPUS: expected GPUS=all or GPU indexes "
                                "such as GPUS=0,1 (NCCL runs on GPUs only), or COLLECTIVE=auto or ring")
        if self.gpus and self.backend != "compose":
            raise SettingsError(f"GPUS={self.gpus} is not allowed with BACKEND={self.backend}: expected "
                                "BACKEND=compose (the lab hands GPUs to containers), or GPUS empty")
        if self.examples < self.global_batch:
            raise SettingsError(
                f"EXAMPLES={self.examples} is smaller than GLOBAL_BATCH={self.global_batch}; "
                "allowed: at least one global batch of examples"
            )
        return self


@dataclass(frozen=True)
class Spec:
    field: str
    parse: Callable[[str, str], object]
    allowed: str  # what a user may give, for errors and the settings table
    doc: str


def _integer(low: int, high: int) -> Callable[[str, str], int]:
    def parse(name: str, raw: str) -> int:
        if not re.fullmatch(r"[+-]?\d+", raw) or not low <= int(raw) <= high:
            raise SettingsError(f"{name}={raw} is not allowed: expected an integer from {low} to {high}")
        return int(raw)

    return parse


def _number(low: float, high: float, what: str = "seconds") -> Callable[[str, str], float]:
    def parse(name: str, raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if not low <= value <= high:  # also false for nan
            raise SettingsError(f"{name}={raw} is not allowed: expected {what} from {low:g} to {high:g}")
        return value

    return parse


def _choice(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        if raw not in choices:
            raise SettingsError(f"{name}={raw} is not allowed: expected one of {', '.join(choices)}")
        return raw

    return parse


def _run_id(name: str, raw: str) -> str:
    if not RUN_ID_PATTERN.fullmatch(raw):
        raise SettingsError(
            f"{name}={raw} is not allowed: expected lowercase letters, digits and '-', "
            "starting with a letter or digit, at most 63 characters"
        )
    return raw


def _compare(name: str, raw: str) -> str:
    entries = raw.split()
    bad = [entry for entry in entries if not COMPARE_ENTRY.fullmatch(entry)]
    if bad or not entries or len(set(entries)) != len(entries):
        what = f"entry {bad[0]}" if bad else "a repeated entry" if entries else "nothing"
        raise SettingsError(f"{name}={raw!r} is not allowed ({what}): expected distinct entries such as "
                            "single mirrored-2 multiworker-4 parameter-server-2")
    return " ".join(entries)


def _backup(name: str, raw: str) -> str:
    if raw in ("epoch", "off") or (raw.isdigit() and int(raw) > 0):
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected epoch, off, or a number of steps")


def _memory(name: str, raw: str) -> str:
    if re.fullmatch(r"0|\d+[kmg]", raw):
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected 0 (no limit) or a size such as 512m or 2g")


def _link(name: str, raw: str) -> str:
    match = LINK_PATTERN.fullmatch(raw)
    if match and float(match.group(2)) > 0:
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected <latency>ms,<rate>mbit such as 1ms,1000mbit")


def _moment(name: str, raw: str) -> str:
    kind, _, value = raw.partition(":")
    if kind in ("epoch", "seconds") and re.fullmatch(r"\d+(\.\d+)?", value) and (kind != "epoch" or value.isdigit()):
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected epoch:N (after N epochs) or seconds:S")


def _heal(name: str, raw: str) -> str:
    if raw == "never" or re.fullmatch(r"\d+(\.\d+)?", raw):
        return raw
    raise SettingsError(f"{name}={raw} is not allowed: expected seconds, or never")


def _gpus(name: str, raw: str) -> str:
    indexes = raw.split(",")
    if raw == "all" or (all(re.fullmatch(r"[0-9]+", index) for index in indexes)
                        and len({int(index) for index in indexes}) == len(indexes)):
        return raw if raw == "all" else ",".join(str(int(index)) for index in indexes)
    raise SettingsError(f"{name}={raw} is not allowed: expected all, or distinct GPU indexes such as 0,1 "
                        "(empty: CPUs only)")


def _k8s_name(pattern: re.Pattern, what: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        if not pattern.fullmatch(raw):
            raise SettingsError(f"{name}={raw} is not allowed: expected {what}")
        return raw

    return parse


def _text(name: str, raw: str) -> str:
    if any(c.isspace() for c in raw):
        raise SettingsError(f"{name}={raw!r} is not allowed: expected a value without spaces")
    return raw


def _script(name: str, raw: str) -> str:
    path = Path(raw).expanduser()
    if path.suffix != ".py" or not path.is_file():
        raise SettingsError(f"{name}={raw} is not allowed: expected the path of an existing Python file (*.py)")
    return str(path.resolve())


def _args(name: str, raw: str) -> str:
    try:
        shlex.split(raw)
    except ValueError as error:
        raise SettingsError(f"{name}={raw!r} is not allowed ({error}): expected arguments as a shell "
                            "would split them") from None
    return raw


_DEFAULTS = Settings()

SPECS: dict[str, Spec] = {
    "STRATEGY": Spec("strategy", _choice(STRATEGIES), " | ".join(STRATEGIES),
                     "single: one process, one replica; mirrored: one process, REPLICAS replicas; "
                     "multiworker: WORKERS processes, one replica each; parameter_server: a chief, "
                     "WORKERS workers and PS parameter servers, asynchronous"),
    "WORKERS": Spec("workers", _integer(1, MAX_TASKS), f"1..{MAX_TASKS}",
                    "worker containers (or local processes) for multiworker and parameter_server"),
    "REPLICAS": Spec("replicas", _integer(1, MAX_TASKS), f"1..{MAX_TASKS}",
                     "mirrored replicas: every GPU if any are visible, else this many logical CPUs"),
    "GPUS": Spec("gpus", _gpus, "empty | all | GPU indexes such as 0,1",
                 "NVIDIA GPUs for the tasks (needs the NVIDIA Container Toolkit): single and mirrored take every "
                 "one given; each worker takes one, in turn; empty: CPUs only"),
    "PS": Spec("ps", _integer(0, MAX_TASKS), f"1..{MAX_TASKS} for parameter_server",
               "parameter servers for parameter_server (its chief and workers are the other tasks)"),
    "EPOCHS": Spec("epochs", _integer(1, 10_000), "1..10000", "passes over the data set"),
    "GLOBAL_BATCH": Spec("global_batch", _integer(1, 1 << 20), "1..1048576, a multiple of the replicas",
                         "examples per step summed over every replica, the same for every strategy"),
    "EXAMPLES": Spec("examples", _integer(1, 100_000_000), "GLOBAL_BATCH..100000000",
                     "synthetic examples y = xW + 0.1 noise, generated from SEED"),
    "SEED": Spec("seed", _integer(0, 2**31 - 1), f"0..{2**31 - 1}",
                 "seeds the data, the initial weights and TensorFlow's ops"),
    "MODEL": Spec("model", _choice(MODELS), " | ".join(MODELS),
                  "mlp: the article's Dense(10)-Dense(1), communication-dominated; "
                  "cnn: a small convnet on 32x32x3 images, compute-dominated"),
    "LOOP": Spec("loop", _choice(LOOPS), " | ".join(LOOPS),
                 "fit: Keras model.fit; custom: the lab's own step, one packed all-reduce per step"),
    "STEPS_PER_EXECUTION": Spec("steps_per_execution", _integer(1, 1000), "1..1000",
                                "training steps per call into the compiled step function"),
    "COLLECTIVE": Spec("collective", _choice(COLLECTIVES), " | ".join(COLLECTIVES),
                       "multiworker all-reduce implementation (nccl needs GPUS)"),
    "BYTES_PER_PACK": Spec("bytes_per_pack", _integer(0, 1 << 30), "0..1073741824",
                           "multiworker gradient packing hint in bytes; 0 lets TensorFlow decide"),
    "ALLREDUCE_PROBE": Spec("allreduce_probe", _integer(0, 100_000), "0..100000",
                            "after training, time this many bare all-reduces of the gradient's size"),
    "RUN": Spec("run", _run_id, "[a-z0-9][a-z0-9-]*, not an existing run",
                "run id; outputs go to RUNS_DIR/<RUN>/ and RUNS_DIR/latest points at the newest"),
    "BACKEND": Spec("backend", _choice(BACKENDS), " | ".join(BACKENDS),
                    "compose: a container per task; local: a process per task on loopback, same script; "
                    "swarm: a Docker Swarm service per task (make stack-up)"),
    "PEER_TIMEOUT": Spec("peer_timeout", _number(1, 3600), "1..3600 seconds",
                         "how long a trainer waits for its peers before it exits naming the missing ones"),
    "TIMEOUT": Spec("timeout", _number(10, 86_400), "10..86400 seconds",
                    "how long a whole run may take before the lab stops it and reports it failed"),
    "RUNS_DIR": Spec("runs_dir", _text, "a folder", "where run folders are written"),
    "COMPOSE": Spec("compose", _choice(COMPOSE_CLIS), " | ".join(COMPOSE_CLIS),
                    "Compose CLI: v2 is `docker compose`, v1 is `docker-compose`; auto prefers v2"),
    "BASE_IMAGE": Spec("base_image", _text, "an image reference",
                       "base of the trainer image; empty: python:3.11-slim if it can be had, "
                       "else a Debian base built locally with debootstrap"),
    "COMPARE": Spec("compare", _compare, "entries single, mirrored-N, multiworker-N, parameter-server-N",
                    "the runs `make compare` makes, side by side, with every other setting shared"),
    "RESTARTS": Spec("restarts", _integer(0, 10), "0..10",
                     "times the lab restarts the whole cluster after a task fails; each resumes from the backup"),
    "RESTART_POLICY": Spec("restart_policy", _choice(RESTART_POLICIES), " | ".join(RESTART_POLICIES),
                           "which failures the lab restarts, as a TFJob's: ExitCode: exit codes 128 and up "
                           "(killed), a preemption or a lost peer, never a known bug or a memory kill; "
                           "OnFailure: every failure; Never: none. RESTARTS bounds them"),
    "BACKUP": Spec("backup", _backup, "epoch | off | N steps",
                   "how often training backs itself up (tf-keras BackupAndRestore) in RUNS_DIR/<RUN>/backup"),
    "CPUS": Spec("cpus", _number(0, 64, "CPUs"), "0..64",
                 "CPU limit of every task's container, to imitate small nodes; 0: none"),
    "MEMORY": Spec("memory", _memory, "0 | <n>k | <n>m | <n>g", "memory limit of every task's container; 0: none"),
    "NETWORK": Spec("network", _choice(NETWORKS), " | ".join(NETWORKS),
                    "internal: the tasks' network has no route out and the host has no address on it; "
                    "bridge: Docker's usual bridge"),
    "LINK": Spec("link", _link, "empty | <latency>ms,<rate>mbit",
                 "every task's inbound link through a delay proxy, e.g. 1ms,1000mbit; empty: direct"),
    "SCENARIO": Spec("scenario", _choice(SCENARIOS), " | ".join(SCENARIOS), "make chaos: the fault to inject"),
    "TARGET": Spec("target", _text, "a task of the run; empty: the last worker", "make chaos: the task it hits"),
    "AT": Spec("at", _moment, "epoch:N | seconds:S",
               "make chaos: after the target's Nth epoch, or S seconds after it is ready"),
    "HEAL": Spec("heal", _heal, "seconds | never (partition only)",
                 "make chaos: when a pause or partition is undone"),
    "SLOW_LINK": Spec("slow_link", _link, "<latency>ms,<rate>mbit",
                      "make chaos SCENARIO=slow-link: the link the target gets from AT on"),
    "SLOW_CPUS": Spec("slow_cpus", _number(0.01, 64, "CPUs"), "0.01..64",
                      "make chaos SCENARIO=slow-node: the target's CPUs"),
    "SOAK": Spec("soak", _integer(1, 1000), "1..1000", "make soak: how many random scenarios it runs"),
    "SCRIPT": Spec("script", _script, "empty | path/to/train.py",
                   "your own training script, unmodified, in every task with the generated TF_CONFIG; "
                   "empty: the lab's own"),
    "ARGS": Spec("args", _args, "arguments", "arguments for SCRIPT, split as a shell would"),
    "TENSORBOARD_PORT": Spec("tensorboard_port", _integer(1024, 65535), "1024..65535",
                             "make tensorboard: the port it serves on, on 127.0.0.1 only"),
    "K8S_IMAGE": Spec("k8s_image", _text, "an image reference",
                      "make k8s: the trainer image the pods run; push `make images`'s image to a registry "
                      "the cluster can pull from and name it here"),
    "K8S_NAMESPACE": Spec("k8s_namespace", _k8s_name(K8S_NAMESPACE_PATTERN,
                                                     "a DNS-1123 label: lowercase letters, digits and '-', "
                                                     "a letter or digit at each end, at most 63 characters"),
                          "a DNS-1123 label", "make k8s: the namespace of every object"),
    "K8S_NAME": Spec("k8s_name", _k8s_name(K8S_NAME_PATTERN,
                                           "lowercase letters, digits and '-', a letter first, a letter or "
                                           f"digit last, at most {K8S_NAME_MAX} characters (room for "
                                           f"-worker-{MAX_TASKS - 1})"),
                     f"[a-z][a-z0-9-]*, at most {K8S_NAME_MAX} characters",
                     "make k8s: the TFJob's name; its tasks' Services and Jobs are <K8S_NAME>-<job>-<index>"),
    "K8S_PVC": Spec("k8s_pvc", _k8s_name(K8S_PVC_PATTERN, "the name of a PersistentVolumeClaim (a DNS-1123 "
                                                           "subdomain), or nothing for each pod's own emptyDir"),
                    "empty | a PVC name",
                    "make k8s: an existing ReadWriteMany claim every task writes its outputs to, in <K8S_NAME>/; "
                    "empty: each pod's own emptyDir, gone with the pod"),
}


def default_of(name: str) -> object:
    return getattr(_DEFAULTS, SPECS[name].field)


def settings_table() -> list[tuple[str, str, str, str]]:
    """(NAME, default, allowed, meaning) for every setting, for `make help` and the README."""
    rows = []
    for name, spec in SPECS.items():
        default = default_of(name)
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        shown = {"run": "timestamped id", "base_image": "(auto)"}.get(spec.field, shown)
        rows.append((name, shown, spec.allowed, spec.doc))
    return rows
