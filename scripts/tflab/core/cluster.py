"""The cluster spec and each task's TF_CONFIG: built here and nowhere else.

    the_cluster = build(settings)                 # built once per run, on the host, handed along
    recorded(settings, config["cluster"])         # the trainer's: config.json's cluster, as written
    the_cluster.tasks                             # ["worker-0", "worker-1"]
    the_cluster.spec                              # {"worker": ["worker-0:2222", "worker-1:2222"]}
    the_cluster.tf_config("worker-1")             # {"cluster": spec, "task": {"type": "worker", "index": 1}}

Compose gives every task a stable hostname, `<job>-<index>`, and every task listens on port 2222
(the Kubeflow TFJob convention), so the spec needs nothing but the job sizes. The local backend
runs the same tasks as processes on loopback and takes `readdressed(local_addresses(...))`: the same
generator, the same JSON shape, only the addresses differ (one host cannot give every process
port 2222). On Kubernetes (`make k8s`, tflab/k8s/writer.py) `kubeflow_address(...)` gives each task the
headless Service the Kubeflow training operator makes for it, so the spec is the operator's own.

Shared by the host side and the trainer: imports neither TensorFlow nor any Docker code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

from tflab.core import limits
from tflab.core.grammars import SettingsError
from tflab.core.settings import Settings

PORT = 2222
EVALUATOR = "evaluator"  # the job TensorFlow and the TFJob give a sidecar evaluator


@dataclass(frozen=True)
class Cluster:
    """A run's cluster, built once and handed along: its tasks in start order, each task's role,
    the spec's addresses and every TF_CONFIG. The lab's own is `build`'s, from the settings; a
    replayed TFJob's or TrainJob's is its plan's (k8s/tfjob.py's Plan.cluster): its replicas as
    tasks, each running its own command (role "script"), with the TF_CONFIG its manifest or
    operator gives it. A backend that needs other addresses (local ports, delay proxies) takes
    `readdressed(...)`: the same tasks, its own addresses."""

    strategy: str  # or "tfjob" for a replay
    jobs: dict[str, int]  # tasks per TF job of the training cluster; empty for one process
    evaluator: bool  # EVALUATOR=1: evaluator-0, outside the training cluster (see evaluators)
    script: bool  # SCRIPT (or a replay): every task's role is "script", watched from outside
    spec: dict[str, list[str]]  # TF's cluster spec: job -> each task's address, in index order
    # TFJOB or TRAINJOB: the setting that named the manifest this run replays; None: the lab's own run
    replayed_from: str | None = None
    # A replay's: each replica's TF_CONFIG as its manifest or operator gives it (None: none), which
    # the lab does not derive from the spec (a TFJob may set its own)
    given_tf_configs: dict[str, dict | None] | None = None

    @property
    def tasks(self) -> list[str]:
        """Every task the run starts, in start order; also its service and log file name."""
        if not self.jobs:
            return [self.strategy]  # "single" or "mirrored"
        return [f"{job}-{index}" for job, size in self.jobs.items() for index in range(size)] + self.evaluators

    @property
    def evaluators(self) -> list[str]:
        """EVALUATOR=1: evaluator-0. Outside the training cluster, as the training operator and
        TensorFlow have it: genClusterSpec leaves the Evaluator out of every TF_CONFIG's cluster ("not
        part of training cluster"), its own TF_CONFIG names the training cluster and task evaluator 0,
        and MultiWorkerMirroredStrategy counts it in no collective (worker_count)."""
        return [f"{EVALUATOR}-0"] if self.evaluator and self.jobs else []

    @property
    def chief(self) -> str:
        """The task that writes the final model: chief-0 (a TFJob's master-0) where there is one,
        else worker-0 (TF's default chief), or the only task."""
        return next((f"{job}-0" for job in ("chief", "master", "worker") if self.jobs.get(job)), self.tasks[0])

    @property
    def chiefs(self) -> list[str]:
        """The tasks whose success is the run's (runner.follow, where servers owe no clean exit)."""
        return [self.chief]

    @property
    def servers(self) -> list[str]:
        """Tasks that serve until they are ended (parameter_server's workers and ps): they never exit
        by themselves, so the lab ends them once the chief is done, and that is no failure."""
        if self.strategy != "parameter_server":
            return []
        return [task for task in self.tasks if parse_task(task)[0] in ("worker", "ps")]

    @property
    def trainers(self) -> list[str]:
        """The tasks that train: neither parameter_server's servers nor the evaluator."""
        return [task for task in self.tasks if task not in self.servers and task not in self.evaluators]

    @property
    def replicas(self) -> list[str]:
        """The tasks that hold a replica of the model: multiworker's chief and workers,
        parameter_server's workers (its chief and ps compute nothing), or the one process."""
        if not self.jobs:
            return self.tasks
        kinds = ("chief", "worker") if self.strategy == "multiworker" else ("worker",)
        return [task for task in self.tasks if parse_task(task)[0] in kinds]

    def role(self, task: str) -> str:
        """The role its log's start and end events carry (schema.ROLES)."""
        if self.script:
            return "script"
        if task in self.evaluators:
            return "evaluator"
        return "server" if task in self.servers else "trainer"

    def tf_config(self, task: str) -> dict:
        return tf_config_for(self.spec, task)

    def tf_configs(self) -> dict[str, dict | None]:
        """Every task's TF_CONFIG, as config.json records them; None for all where there is no
        cluster (one process); a replay's as its manifest gives them."""
        if self.given_tf_configs is not None:
            return dict(self.given_tf_configs)
        return {task: self.tf_config(task) if self.spec else None for task in self.tasks}

    def tf_config_env(self, task: str) -> dict[str, str]:
        return tf_config_env(self.spec, task)

    def readdressed(self, address) -> "Cluster":
        """The same tasks at other addresses (`address(job, index) -> "host:port"`)."""
        return replace(self, spec=_spec(self.jobs, address))


def build(settings: Settings, address=None) -> Cluster:
    """The cluster of a run with these settings; Compose's addresses unless `address` is given.
    Once per run, on the host: the backend readdresses it, config.json records it, and the
    trainer reads it back from there (`recorded`). Refuses a cluster whose TF_CONFIG no process
    could start with (check_tf_config), before building it."""
    address = address or compose_address
    check_tf_config(settings, address)
    return recorded(settings, _spec(job_sizes(settings), address))


def lab_tf_config(spec: Mapping[str, Sequence[str]], task: str) -> str:
    """TF_CONFIG's text as the lab's tasks get it (tf_config_env)."""
    return json.dumps(tf_config_for(spec, task), separators=(",", ":"))


def longest_tf_config(jobs: Mapping[str, int], address, render=lab_tf_config) -> tuple[int, bool, str]:
    """The bytes of the longest TF_CONFIG a cluster of these job sizes gives a task (`render` writes
    it: the lab's, or the operator's tfjob_tf_config), whether that count is exact, and the task.
    Every task shares the cluster; the longest is the last of one job. Past Linux's limit for sure
    (each address at least as long as its job's first, plus its quotes and comma) the cluster is
    never built, so a count of a billion costs nothing: the lower bound is returned, not exact."""
    last = [f"{job}-{size - 1}" for job, size in jobs.items() if size]
    if not last:
        return 0, True, ""
    lower = sum(size * (len(address(job, 0)) + 3) for job, size in jobs.items())
    if lower > limits.ARG_STRLEN_MAX:
        return lower, False, last[-1]
    spec = _spec(jobs, address)
    return max((len(render(spec, task).encode()), True, task) for task in last)


# The settings that size a job of the cluster, for check_tf_config's words (the chief is always one).
SIZED_BY = {"worker": ("WORKERS", "workers"), "ps": ("PS", "parameter servers")}


def check_tf_config(settings: Settings, address, render=lab_tf_config) -> None:
    """Refuses, in one line, settings whose cluster gives a task a TF_CONFIG over Linux's limit for
    one environment string (core/limits.py), naming the setting of the largest job and how many of
    that job would fit beside the others."""
    jobs = job_sizes(settings)
    size, exact, task = longest_tf_config(jobs, address, render)
    too_long = limits.env_too_long("TF_CONFIG", size, exact)
    if not too_long:
        return
    job = max((job for job in jobs if job in SIZED_BY), key=lambda job: jobs[job])
    largest = limits.largest_fitting(lambda count: longest_tf_config({**jobs, job: count}, address, render)[0],
                                     limits.env_value_max("TF_CONFIG"), jobs[job])
    others = ", ".join(f"{other}: {count}" for other, count in jobs.items() if other != job)
    setting, plural = SIZED_BY[job]
    raise SettingsError(f"{setting}={jobs[job]} is not allowed: {task}'s TF_CONFIG would be {too_long}; at most "
                        f"{largest:,} {plural} fit" + (f" beside {others}" if others else "") + " at these "
                        f"addresses ({address(job, 0)} ...)")


def recorded(settings: Settings, spec: Mapping[str, Sequence[str]]) -> Cluster:
    """The cluster config.json records (its settings and its spec), taken as written: the trainer
    makes no address of its own, so it trains in exactly the cluster the host or `make k8s` wrote.
    ValueError where the spec's job sizes are not those of the settings beside it."""
    jobs = job_sizes(settings)
    if {job: len(addresses) for job, addresses in spec.items()} != jobs:
        raise ValueError(f"the spec {dict(spec)} is not a cluster of {jobs}")
    return Cluster(strategy=settings.strategy, jobs=jobs, evaluator=bool(settings.evaluator),
                   script=bool(settings.script), spec={job: list(addresses) for job, addresses in spec.items()})


def job_sizes(settings: Settings) -> dict[str, int]:
    """Tasks per TF job of the training cluster. Single-process strategies have no cluster at all.
    The evaluator is no part of it (Cluster.evaluators)."""
    if settings.strategy == "multiworker":
        # CHIEF=1: TensorFlow counts the chief as one more worker, with id 0 in the collective and
        # the workers after it (multi_worker_util.worker_count, id_in_cluster), and makes it the
        # coordination service's leader: chief-0, worker-0, worker-1 shard the data as worker-0,
        # worker-1, worker-2 would.
        return {"chief": 1, "worker": settings.workers} if settings.chief else {"worker": settings.workers}
    if settings.strategy == "parameter_server":
        # The chief coordinates (it runs fit); workers run the steps it schedules; ps hold the variables.
        return {"chief": 1, "worker": settings.workers, "ps": settings.ps}
    return {}


def compose_address(job: str, index: int) -> str:
    return f"{job}-{index}:{PORT}"


def linked_address(proxied: frozenset[str] = frozenset()):
    """An address function for Compose where the tasks in `proxied` are reached through their
    delay proxy, `<task>-link` (LINK, make chaos SCENARIO=slow-link). The task itself still
    listens on its own port 2222: TensorFlow binds the port of its address on every interface."""
    def address(job: str, index: int) -> str:
        task = f"{job}-{index}"
        return f"{task}-link:{PORT}" if task in proxied else compose_address(job, index)

    return address


def kubeflow_service(name: str, job: str, index: int) -> str:
    """The headless Service of one task: what the Kubeflow training operator (v1) names the Service
    and pod of TFJob `name`'s replica `index` of type `job` (lowercased: Worker -> worker)."""
    return f"{name}-{job}-{index}"


def kubeflow_address(name: str, namespace: str, port: int = PORT):
    """An address function for Kubernetes: `<name>-<job>-<index>.<namespace>.svc:2222`, exactly the
    cluster spec the training operator v1 puts into each TFJob pod's TF_CONFIG (its genClusterSpec
    in pkg/controller.v1/tensorflow/tensorflow.go, release 1.9, for an operator started without
    CUSTOM_CLUSTER_DOMAIN; port 2222 is its default and the port the manifests name). Plain Jobs
    get Services of the same names, so both manifests carry the same TF_CONFIG."""
    def address(job: str, index: int) -> str:
        return f"{kubeflow_service(name, job, index)}.{namespace}.svc:{port}"

    return address


def tfjob_cluster_spec(name: str, namespace: str, replicas: Mapping[str, tuple[int, int]]) -> dict[str, list[str]]:
    """What the training operator v1.9 puts in a TFJob's TF_CONFIG: `replicas` is job (the replica
    type lowercased) -> (replicas, its tfjob-port); each task `<name>-<job>-<i>.<namespace>.svc:<port>`
    (genClusterSpec); the evaluator is left out, "not part of training cluster"."""
    return {job: [kubeflow_address(name, namespace, port)(job, index) for index in range(count)]
            for job, (count, port) in replicas.items() if job != EVALUATOR and count}


def tfjob_tf_config(spec: Mapping[str, Sequence[str]], task: str) -> str:
    """The operator's TF_CONFIG for one pod, byte for byte as Go's json.Marshal writes its TFConfig
    struct: cluster (keys sorted), task (type, index), "environment": "cloud"."""
    config = tf_config_for(spec, task)
    config["cluster"] = dict(sorted(config["cluster"].items()))
    config["environment"] = "cloud"
    return json.dumps(config, separators=(",", ":"))


# Kubeflow Trainer v2 (v2.3.0) runs a TrainJob as a JobSet: the trainer nodes are the pods of its
# replicated job `node`, one Job in Indexed completion mode, so node i is pod `<trainjob>-node-0-<i>`
# with JOB_COMPLETION_INDEX=i, and JobSet's headless Service `<trainjob>` makes it resolvable as
# `<trainjob>-node-0-<i>.<trainjob>` (jobset plugin's IdentifyPodNetwork; the jax plugin's
# JAX_COORDINATOR_ADDRESS addresses node 0 so). Trainer v2 ships no TensorFlow runtime, so these
# nodes get no TF_CONFIG from it: each pod builds its own from its index and its hostname
# (trainer/tfconfig.py), with the functions below, which the replay uses too.
TRAINJOB_NODE = "node"  # the replicated job and the container Trainer v2 gives a TrainJob's nodes
TRAINJOB_JOB = "worker"  # every node is a TF worker: a TrainJob's nodes share one pod template
NUM_NODES_ENV = "TFLAB_NUM_NODES"  # the node count: nothing in a plain runtime's pod says it


def trainjob_host(name: str, index: int) -> str:
    """The hostname JobSet gives node `index` of TrainJob `name`: <name>-node-0-<index>."""
    return f"{name}-{TRAINJOB_NODE}-0-{index}"


def trainjob_address(name: str, port: int = PORT):
    """An address function for Trainer v2: node i at `<name>-node-0-<i>.<name>:<port>`."""
    def address(job: str, index: int) -> str:
        return f"{trainjob_host(name, index)}.{name}:{port}"

    return address


def trainjob_cluster_spec(name: str, nodes: int, port: int = PORT) -> dict[str, list[str]]:
    """The training cluster of a TrainJob's `nodes` nodes: every node a worker, in index order."""
    return _spec({TRAINJOB_JOB: nodes}, trainjob_address(name, port))


def trainjob_name(hostname: str, index: int) -> str:
    """The TrainJob a node's pod belongs to, from the hostname JobSet gave it; ValueError where the
    hostname is not `<name>-node-0-<index>`."""
    suffix = f"-{TRAINJOB_NODE}-0-{index}"
    if not hostname.endswith(suffix) or len(hostname) == len(suffix):
        raise ValueError(f"the hostname {hostname!r} is not <trainjob>{suffix}, the name JobSet gives node {index}")
    return hostname[:-len(suffix)]


def trainjob_tf_config_env(hostname: str, index: int, nodes: int, port: int = PORT) -> dict[str, str]:
    """TF_CONFIG and TFLAB_TASK of TrainJob node `index` of `nodes`, whose pod's hostname is
    `hostname`: what trainer/tfconfig.py sets in each pod, and what the replay records."""
    if not 0 <= index < nodes:
        raise ValueError(f"node {index} is not one of {nodes} nodes (0..{nodes - 1})")
    spec = trainjob_cluster_spec(trainjob_name(hostname, index), nodes, port)
    return tf_config_env(spec, f"{TRAINJOB_JOB}-{index}")


def local_addresses(ports: Sequence[int]):
    """An address function for the local backend: the i-th task overall gets localhost:ports[i]."""
    free = iter(ports)
    assigned: dict[tuple[str, int], str] = {}

    def address(job: str, index: int) -> str:
        if (job, index) not in assigned:
            assigned[(job, index)] = f"localhost:{next(free)}"
        return assigned[(job, index)]

    return address


def cluster_spec(settings: Settings, address=compose_address) -> dict[str, list[str]]:
    """TF's cluster spec: job name -> the address of each of its tasks, in index order."""
    return build(settings, address).spec


def _spec(jobs: Mapping[str, int], address) -> dict[str, list[str]]:
    return {job: [address(job, index) for index in range(size)] for job, size in jobs.items()}


def parse_task(task: str) -> tuple[str, int]:
    """'worker-3' -> ('worker', 3)."""
    job, _, index = task.rpartition("-")
    if not job or not index.isdigit():
        raise ValueError(f"task {task!r} is not of the form <job>-<index>")
    return job, int(index)


def task_of(tf_config: Mapping) -> str:
    """The task a TF_CONFIG is for: {"task": {"type": "worker", "index": 1}, ...} -> 'worker-1'.
    Under a TFJob every replica of a type shares one pod template, so only TF_CONFIG, which the
    operator sets per pod, can tell a trainer which task it is."""
    return f"{tf_config['task']['type']}-{tf_config['task']['index']}"


def tf_config_for(spec: Mapping[str, Sequence[str]], task: str) -> dict:
    """The TF_CONFIG dict for one task of `spec`."""
    job, index = parse_task(task)
    if job == EVALUATOR and index == 0 and spec:
        pass  # outside the cluster it evaluates (Cluster.evaluators)
    elif job not in spec or index >= len(spec[job]):
        raise ValueError(f"task {task!r} is not in the cluster {dict(spec)}")
    return {"cluster": {name: list(addresses) for name, addresses in spec.items()},
            "task": {"type": job, "index": index}}


def tf_config_env(spec: Mapping[str, Sequence[str]], task: str) -> dict[str, str]:
    """Environment entries for one task: TF_CONFIG (only where there is a cluster) and TFLAB_TASK."""
    env = {"TFLAB_TASK": task}
    if spec:
        env["TF_CONFIG"] = lab_tf_config(spec, task)
    return env
