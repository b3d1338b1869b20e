"""`tflab up TFJOB=path/to/tfjob.yaml`: a Kubeflow TFJob's replicas as local containers.

    python3 -m tflab up TFJOB=runs/k8s-<id>/tfjob.yaml     # what `make k8s` wrote, or your own

The file holds one TFJob (kubeflow.org/v1, what training-operator v1.9 runs) and, optionally, the
ConfigMaps it reads. Every replica (Chief/Master, Worker, PS, Evaluator, times `replicas`) becomes
one task on Compose, named `<type>-<i>` as in the lab (its log, its row), with the pod's hostname
`<job>-<type>-<i>` and the Service's name `<job>-<type>-<i>.<namespace>.svc`, and the TF_CONFIG the
operator would give it (cluster.tfjob_cluster_spec / tfjob_tf_config). Only the container named
`tensorflow` runs, as the operator sets TF_CONFIG only there.

What the lab applies, maps or leaves out is decided field by field, below for the job and in
pod.py for each replica's pod template; everything it does not apply is named in one line before
anything starts, and a field it cannot honour (a Secret, a hostPath, a subPath) is refused in one
line. The image runs as it is, watched from outside: the
lab writes each task's start and end (exit code, seconds, peak memory of its cgroup) to
<task>.jsonl, restarts the whole job as the restart policy says, and keeps its hardening (internal
network, no published ports, every capability dropped, no-new-privileges); the user the image
declares is kept unless the manifest's securityContext names one.

The manifest is untrusted input (tflab/k8s/manifest.py): a bounded YAML read, every object against its
schema, then the API server's rules for names, keys and paths, all before anything is planned or
written; every host path the replay writes comes from manifest.path_under.

This module reads and plans, and touches neither the engine nor a run folder; replay/ runs the
plan through the lab's one pipeline (runner.run). PyYAML is the host side's one dependency, for
this file alone (pyproject.toml).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from tflab.core import cluster, runfolder
from tflab.core.backends import replays_on
from tflab.core.commands import MATRIX_VARIES
from tflab.core.errors import LabError
from tflab.core.grammars import REPLAY_TASKS_MOST
from tflab.core.settings import (
    REPLAYED,
    SETTINGS,
    SPECS,
    TRAINED_AS_THE_CONTAINERS_SAY,
    Settings,
    refuse_unhonoured,
)
from tflab.k8s import jobset, manifest, tfoperator
from tflab.k8s.manifest import ManifestError, shown
from tflab.k8s.pod import claim_folder, field_of, port_of, service_of, unapplied

API_VERSION = "kubeflow.org/v1"
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
CLEAN_POD_POLICIES = ("None", "Running", "All")
# Fields the lab applies of the run policy; any other present is listed as not applied (pod.py: a pod's).
APPLIED_RUN_POLICY = {"backoffLimit", "activeDeadlineSeconds", "cleanPodPolicy"}

# `tflab up TFJOB=` runs what the TFJob says: what it decides instead of a setting, what the
# replay reads itself (TIMEOUT where the TFJob sets no deadline: Plan.decided)
# and the commands that would ignore a TFJOB are declared with each setting (settings.SETTINGS).
DECIDED_BY_THE_TFJOB = {spec.name: spec.tfjob for spec in SETTINGS if spec.tfjob not in ("", REPLAYED)}
APPLIED_SETTINGS = tuple(spec.name for spec in SETTINGS if spec.tfjob == REPLAYED)  # the replay's own
NOT_REPLAYING = tuple(SPECS["TFJOB"].refused)


@dataclass
class Task:
    name: str  # worker-1: the Compose service, the log and the summary row
    job: str  # worker: the replica type lowercased, TF_CONFIG's task type
    index: int
    host: str  # <job>-worker-1: the pod's hostname, and its Service's name
    image: str
    service: dict = field(default_factory=dict)  # the Compose service, less the run's labels
    non_root: bool = False  # runAsNonRoot with no runAsUser: the image's own user must not be root
    tf_config: str = ""  # a TrainJob node's, which its container builds itself (trainjob.py); a TFJob's is in service


@dataclass
class Plan:
    path: Path
    name: str
    namespace: str
    tasks: list[Task]
    spec: dict  # the training cluster, as in every TF_CONFIG
    backoff_limit: int | None  # spec.runPolicy.backoffLimit; None: no limit, as the operator's
    timeout: float  # activeDeadlineSeconds where set, else the lab's TIMEOUT
    not_applied: list[str]
    config_maps: dict[str, dict[str, str]]
    volumes: dict[str, dict]  # name -> its kind and source, for the run folder
    decided: dict[str, str] = field(default_factory=dict)  # setting -> the TFJob's field that overrides it
    policies: dict[str, str] = field(default_factory=dict)  # job (worker, chief, ...) -> its replicas' restartPolicy
    kind: str = "TFJob"  # or TrainJob (trainjob.py translates one into this plan)
    setting: str = "TFJOB"  # the setting that named the file, for errors
    active_deadline: int | None = None  # spec.runPolicy.activeDeadlineSeconds; None: the operator sets none
    clean_pod_policy: str = tfoperator.DEFAULT_CLEAN_POD_POLICY
    success_policy: str = ""  # spec.successPolicy: "" (the operator's default) or AllWorkers
    failure_policy: jobset.Policy | None = None  # a TrainJob's JobSet's (jobset.py); None: it fails at once
    node_backoff_limit: int = 0  # a TrainJob's node Job's backoffLimit (jobcontroller.py: 6 where unset)

    @property
    def replicas(self) -> list[tfoperator.Replica]:
        return [tfoperator.Replica(t.name, t.job, t.index) for t in self.tasks]

    @property
    def chief(self) -> list[str]:
        """The tasks the lab's summary reads as the job's chief: Chief or Master, else every worker
        (whose success ends the job is the operator's rule: tfoperator.succeeded)."""
        for job in ("chief", "master"):
            found = [t.name for t in self.tasks if t.job == job]
            if found:
                return found
        return [t.name for t in self.tasks if t.job == "worker"]

    @property
    def servers(self) -> list[str]:
        """Tasks that serve until ended: PS, and a PS job's workers (its chief runs the steps)."""
        has_ps = any(t.job == "ps" for t in self.tasks)
        return [t.name for t in self.tasks
                if t.job == "ps" or (has_ps and t.job == "worker" and t.name not in self.chief)]

    @property
    def evaluators(self) -> list[str]:
        return [t.name for t in self.tasks if t.job == cluster.EVALUATOR]

    def as_cluster(self) -> cluster.Cluster:
        """The replay's cluster as the runner, the summary and make chaos read it: every replica a
        task, in the manifest's order, running its own command (role "script", watched from outside),
        with the TF_CONFIG the manifest or the operator gives it. No servers or evaluators of the
        lab's: the lab's rule for them (training is over once only they run) is not the operator's,
        whose rules (replay.run.ReplayRun.job_condition) end the job; so every replica is a trainer."""
        jobs: dict[str, int] = {}
        for task in self.tasks:
            jobs[task.job] = jobs.get(task.job, 0) + 1
        given = {task.name: task.tf_config or task.service["environment"].get("TF_CONFIG") for task in self.tasks}
        return cluster.Cluster(strategy="tfjob", jobs=jobs, evaluator=False, script=True, spec=self.spec,
                               replayed_from=self.setting,
                               given_tf_configs={name: parsed(text) for name, text in given.items()})


def parsed(tf_config: str | None) -> dict | None:
    """A replica's TF_CONFIG as config.json records it: None where it has none, or where the
    manifest's own is no JSON object (TensorFlow would refuse it at the replica's start, and says so)."""
    try:
        found = json.loads(tf_config) if tf_config else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None


def read_documents(path: Path) -> list[dict]:
    """The manifest's objects, read with bounds (manifest.read_documents); errors name the file."""
    try:
        return manifest.read_documents(path)
    except ManifestError as error:
        raise ManifestError(f"TFJOB={path} {error}") from None


def load(settings: Settings) -> Plan:
    """The manifest read and checked whole: ManifestError (one line, naming the file) for what
    cannot run. Nothing is planned before every object passed its schema and the API server's rules."""
    path = Path(settings.tfjob)
    documents = read_documents(path)
    try:
        return plan_of(path, documents, settings)
    except ManifestError as error:
        raise ManifestError(f"TFJOB={path}: {error}") from None


KIND = re.compile(r"[A-Z][A-Za-z0-9]{0,62}")
API_VERSION_FORMAT = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?v[0-9][a-z0-9]{0,20}")


def checked_object(document: dict, number: int) -> tuple[str, str]:
    """(kind, name) of a document that passed its schema: the TFJob the CRD's, a ConfigMap
    Kubernetes', any other kind (listed as not applied) Kubernetes' ObjectMeta; and every name a
    DNS-1123 subdomain, as the API server requires of these kinds."""
    where = f"document {number}"
    kind, version = document.get("kind"), document.get("apiVersion")
    if not isinstance(kind, str) or not KIND.fullmatch(kind):
        raise ManifestError(f"{where}: kind is {shown(kind)}, expected a Kubernetes kind such as TFJob or ConfigMap")
    if not isinstance(version, str) or not API_VERSION_FORMAT.fullmatch(version):
        raise ManifestError(f"{where} ({kind}): apiVersion is {shown(version)}, expected group/version or v1")
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        raise ManifestError(f"{where} ({kind}): metadata is {shown(metadata)}, expected a mapping with a name")
    manifest.check(metadata, "ObjectMeta", f"{kind}.metadata")
    name = manifest.dns1123_subdomain(metadata.get("name"), f"{kind}.metadata.name")
    if "namespace" in metadata:
        manifest.dns1123_label(metadata["namespace"], f"{kind} {name}: metadata.namespace")
    if kind == "TFJob":
        manifest.check(document, "TFJob")
    elif kind == "ConfigMap":
        manifest.check(document, "ConfigMap", f"ConfigMap {name}")
        for field_name in ("data", "binaryData"):
            for key in document.get(field_name) or {}:
                manifest.config_map_key(key, f"ConfigMap {name}: {field_name} key")
    return kind, name


def plan_of(path: Path, documents: list[dict], settings: Settings) -> Plan:
    """The plan of a read manifest: every object checked, then the TFJob's spec, its replica types,
    their pods and tasks, and its run policy last, in that order (the first error a bad manifest
    gets is the first of these steps' refusals)."""
    checked = [checked_object(document, number) for number, document in enumerate(documents, 1)]
    job = the_tfjob(documents)
    config_maps, not_applied, claim_documents = other_objects(documents, checked)
    metadata = job["metadata"]
    name = manifest.dns1123_label(metadata.get("name"), "TFJob.metadata.name")
    namespace = manifest.dns1123_label(metadata.get("namespace", "default"), "TFJob.metadata.namespace")
    replica_specs, run_policy, success_policy, extra = spec_of(job)
    not_applied += extra
    replicas, sizes, policy_of, extra = replicas_of(replica_specs)
    not_applied += extra
    training = cluster.tfjob_cluster_spec(name, namespace, sizes)
    tasks, volumes, extra = tasks_of(name, namespace, training, replicas, config_maps)
    not_applied += extra + claims_unapplied(claim_documents, volumes)
    backoff, deadline, clean = run_policy_of(run_policy)
    decided = {}
    if deadline:
        decided["TIMEOUT"] = (f"the TFJob's spec.runPolicy.activeDeadlineSeconds ({deadline}) sets the deadline; "
                              "edit it, or leave it out for TIMEOUT to apply")
    return Plan(path, name, namespace, tasks, training, backoff,
                float(deadline) if deadline else settings.timeout, grouped(not_applied), config_maps, volumes,
                decided, policies=policy_of, active_deadline=deadline, clean_pod_policy=clean,
                success_policy=success_policy)


def the_tfjob(documents: list[dict]) -> dict:
    """The file's one TFJob; refuses none or several, and one of another apiVersion than v1."""
    tfjobs = [d for d in documents if d.get("kind") == "TFJob"]
    if len(tfjobs) != 1:
        raise ManifestError(f"holds {len(tfjobs)} TFJobs, expected exactly one (kind: TFJob)")
    (job,) = tfjobs
    if job.get("apiVersion") != API_VERSION:
        raise ManifestError(f"TFJob.apiVersion is {shown(job.get('apiVersion'))}, expected {API_VERSION} "
                            "(training-operator v1)")
    return job


def other_objects(documents: list[dict],
                  checked: list[tuple[str, str]]) -> tuple[dict[str, dict[str, str]], list[str], list[str]]:
    """The file's objects besides the TFJob: its ConfigMaps' data by name (take_config_map refuses
    a non-string value and a name twice), what is not applied (the maps' other fields, every other
    kind) and the PersistentVolumeClaims' names, applied where a replica mounts one."""
    config_maps: dict[str, dict[str, str]] = {}
    not_applied: list[str] = []
    claim_documents: list[str] = []
    for document, (kind, name) in zip(documents, checked):
        if kind == "ConfigMap":
            not_applied += take_config_map(document, name, config_maps, "the file")
        elif kind == "PersistentVolumeClaim":
            claim_documents.append(name)  # applied where a replica mounts it: claims_unapplied
        elif kind != "TFJob":
            not_applied.append(f"{kind} {name}")
    return config_maps, not_applied, claim_documents


def spec_of(job: dict) -> tuple[dict, dict, str, list[str]]:
    """The TFJob's spec: its tfReplicaSpecs, runPolicy and successPolicy, and the fields of spec and
    runPolicy not applied. Refuses a missing spec, enableDynamicWorker, a successPolicy the operator
    does not read, and missing, empty or unknown replica types."""
    spec = field_of(job, "spec", dict, "TFJob")
    if spec is None:
        raise ManifestError("TFJob.spec is missing")
    if spec.get("enableDynamicWorker") is True:
        raise ManifestError("TFJob.spec.enableDynamicWorker is true: its sparse TF_CONFIG is not supported; "
                            "expected false or absent")
    not_applied = unapplied(spec, {"tfReplicaSpecs", "runPolicy", "enableDynamicWorker", "successPolicy"}, "spec")
    success_policy = field_of(spec, "successPolicy", str, "spec", "")
    if success_policy not in tfoperator.SUCCESS_POLICIES:
        raise ManifestError(f"spec.successPolicy is {shown(success_policy)}, expected {tfoperator.ALL_WORKERS} or "
                            "absent (the operator reads no other value, and would take this one as its default)")
    run_policy = field_of(spec, "runPolicy", dict, "spec", {})
    not_applied += unapplied(run_policy, APPLIED_RUN_POLICY, "spec.runPolicy")
    replica_specs = field_of(spec, "tfReplicaSpecs", dict, "spec")
    if not replica_specs:
        raise ManifestError("TFJob.spec.tfReplicaSpecs is missing or empty")
    for replica_type in replica_specs:
        if replica_type not in tfoperator.REPLICA_TYPES:
            raise ManifestError(f"{manifest.joined('spec.tfReplicaSpecs', replica_type)} is not a TFJob replica "
                                f"type; expected {', '.join(tfoperator.REPLICA_TYPES)}")
    return replica_specs, run_policy, success_policy, not_applied


Replicas = dict[str, tuple[int, dict, str]]  # replica type -> its count, pod template spec and where it is


def replicas_of(replica_specs: dict) -> tuple[Replicas, dict[str, tuple[int, int]], dict[str, str], list[str]]:
    """Each replica type in the operator's order: its count, pod template and where it is written;
    each job's (count, port) for TF_CONFIG, its restartPolicy, and the fields not applied. Refuses a
    count out of 0..64 (more than one chief, master or evaluator), an unknown restartPolicy, a
    missing template.spec, a bad tf-grpc port (port_of), and a job of no replica or over REPLAY_TASKS_MOST."""
    replicas: Replicas = {}
    sizes, policy_of, not_applied = {}, {}, []
    for replica_type in tfoperator.REPLICA_TYPES:
        if replica_type not in replica_specs:
            continue
        where = f"spec.tfReplicaSpecs.{replica_type}"
        replica = field_of(replica_specs, replica_type, dict, "spec.tfReplicaSpecs")
        count = field_of(replica, "replicas", int, where, 1)  # the operator's default
        if not 0 <= count <= 64:
            raise ManifestError(f"{where}.replicas is {count}, expected 0..64")
        if count > 1 and replica_type in ("Chief", "Master", "Evaluator"):
            # TF_CONFIG has one chief and one evaluator (the operator's webhook refuses more chiefs)
            raise ManifestError(f"{where}.replicas is {count}, expected 0 or 1 (a job has one {replica_type.lower()})")
        policy = field_of(replica, "restartPolicy", str, where, tfoperator.DEFAULT_RESTART_POLICY)
        if policy not in RESTART_POLICIES:
            raise ManifestError(f"{where}.restartPolicy is {shown(policy)}, expected {', '.join(RESTART_POLICIES)}")
        policy_of[replica_type.lower()] = policy
        not_applied += unapplied(replica, {"replicas", "restartPolicy", "template"}, where)
        pod = field_of(field_of(replica, "template", dict, where, {}), "spec", dict, f"{where}.template")
        if pod is None:
            raise ManifestError(f"{where}.template.spec is missing")
        replicas[replica_type] = (count, pod, f"{where}.template.spec")
        sizes[replica_type.lower()] = (count, port_of(pod, f"{where}.template.spec"))
    total = sum(count for count, _, _ in replicas.values())
    if total == 0:
        raise ManifestError("spec.tfReplicaSpecs has no replica at all")
    if total > REPLAY_TASKS_MOST:
        raise ManifestError(f"spec.tfReplicaSpecs has {total} replicas in all; a replay runs at most "
                            f"{REPLAY_TASKS_MOST} tasks")
    return replicas, sizes, policy_of, not_applied


def tasks_of(name: str, namespace: str, training: dict, replicas: Replicas,
             config_maps: dict) -> tuple[list[Task], dict[str, dict], list[str]]:
    """Every replica a task: its pod's service (pod.service_of refuses what it cannot run), with the
    hostname, Service aliases and TF_CONFIG the operator gives it; the folders of volumes/ they
    mount, and the pods' fields not applied. Refuses a host name that is no DNS-1123 label and two
    replica types that would hold different things in one folder (claim_folder)."""
    distributed = sum(count for count, _, _ in replicas.values()) != 1  # the operator's isDistributed
    volumes: dict[str, dict] = {}
    tasks, not_applied = [], []
    for replica_type, (count, pod, where) in replicas.items():
        job_name = replica_type.lower()
        template, pod_volumes, extra = service_of(pod, where, config_maps)
        not_applied += extra
        for folder, volume in pod_volumes.items():
            claim_folder(volumes, folder, volume, where)
        for index in range(count):
            task = f"{job_name}-{index}"
            host = manifest.dns1123_label(cluster.kubeflow_service(name, job_name, index),
                                          f"the host name of {task} (<metadata.name>-{job_name}-{index})")
            service = json.loads(json.dumps(template))
            if distributed:
                service["environment"]["TF_CONFIG"] = cluster.tfjob_tf_config(training, task)
            service["hostname"] = host
            service["networks"] = {"cluster": {"aliases": [host, f"{host}.{namespace}.svc"]}}
            non_root = service.pop("x-non-root")
            tasks.append(Task(task, job_name, index, host, service["image"], service, non_root))
    return tasks, volumes, not_applied


def claims_unapplied(claim_documents: list[str], volumes: dict[str, dict]) -> list[str]:
    """A claim the file declares is applied where a replica mounts it (a folder of the run's, or
    CLAIMS's), though not its size, class or access modes; one nothing mounts is not applied."""
    mounted = {volume["claim"] for volume in volumes.values() if "claim" in volume}
    return [f"PersistentVolumeClaim {claim}'s spec (mounted as a folder: no size, class or access mode)"
            if claim in mounted else f"PersistentVolumeClaim {claim} (no replica mounts it)"
            for claim in claim_documents]


def run_policy_of(run_policy: dict) -> tuple[int | None, int | None, str]:
    """The run policy's backoffLimit and activeDeadlineSeconds (None where unset) and cleanPodPolicy;
    refuses a negative limit, a deadline under a second and an unknown cleanPodPolicy."""
    backoff = field_of(run_policy, "backoffLimit", int, "spec.runPolicy", None)
    if backoff is not None and backoff < 0:
        raise ManifestError(f"spec.runPolicy.backoffLimit is {backoff}, expected 0 or more")
    deadline = field_of(run_policy, "activeDeadlineSeconds", int, "spec.runPolicy", None)
    if deadline is not None and deadline < 1:
        raise ManifestError(f"spec.runPolicy.activeDeadlineSeconds is {deadline}, expected 1 or more (seconds)")
    clean = field_of(run_policy, "cleanPodPolicy", str, "spec.runPolicy", tfoperator.DEFAULT_CLEAN_POD_POLICY)
    if clean not in CLEAN_POD_POLICIES:
        raise ManifestError(f"spec.runPolicy.cleanPodPolicy is {shown(clean)}, expected "
                            f"{', '.join(CLEAN_POD_POLICIES)}")
    return backoff, deadline, clean


def refuse_given(command: str, given: dict[str, str]) -> None:
    """Before anything is read: TFJOB is not for the commands that would ignore it (Setting.refused),
    and `up` takes with it no setting that the TFJob decides (DECIDED_BY_THE_TFJOB) nor a backend
    other than Compose. `given`: given_values'; `command`: what make check checks for, under check."""
    if "TFJOB" not in given:
        return
    tfjob = f"TFJOB={given['TFJOB']}"
    refuse_unhonoured(command, {"TFJOB": given["TFJOB"]})
    if command not in ("up", "k8s", "chaos", "matrix"):  # k8s: the TFJob turned into a TrainJob, as the TFJob says
        return
    for name, value in given.items():
        if name in DECIDED_BY_THE_TFJOB and not (command == "matrix" and name in MATRIX_VARIES):
            raise LabError(f"{name}={value} does not apply with {tfjob}: {DECIDED_BY_THE_TFJOB[name]}")
    if command == "matrix" and "STRATEGIES" in given:
        raise LabError(f"STRATEGIES={given['STRATEGIES']} does not apply with {tfjob}: the TFJob's replicas fix its "
                       "cluster (spec.tfReplicaSpecs); make matrix varies only TF and KERAS for a replay; leave "
                       "STRATEGIES out")
    if command == "matrix" and "PRECISIONS" in given:
        raise LabError(f"PRECISIONS={given['PRECISIONS']} does not apply with {tfjob}: "
                       f"{TRAINED_AS_THE_CONTAINERS_SAY}; leave PRECISIONS out")
    if command in ("up", "chaos", "matrix") and not replays_on(given.get("BACKEND", "compose").strip()):
        raise LabError(f"BACKEND={given['BACKEND']} does not apply with {tfjob}: the replay runs every replica "
                       "as a container on Compose; expected BACKEND=compose, or leave it out")


def refuse_decided(plan: Plan, given: dict[str, str]) -> None:
    """Once the TFJob is read: TIMEOUT where the TFJob sets its own deadline (RESTARTS never
    applies to a TFJob: settings.SETTINGS says so, and refuse_given refuses it)."""
    for name, why in plan.decided.items():
        if name in given:
            raise LabError(f"{name}={given[name]} does not apply with {plan.setting}="
                           f"{given.get(plan.setting, plan.path)}: {why}")


def grouped(fields: list[str]) -> list[str]:
    """spec.tfReplicaSpecs.Chief.x and .Worker.x -> spec.tfReplicaSpecs.{Chief,Worker}.x: one line stays short."""
    types: dict[str, list[str]] = {}
    for name in fields:
        match = re.fullmatch(r"spec\.tfReplicaSpecs\.(\w+)\.(.*)", name)
        key = match.group(2) if match else name
        types.setdefault(key, [])
        if match and match.group(1) not in types[key]:
            types[key].append(match.group(1))
    return [f"spec.tfReplicaSpecs.{{{','.join(kinds)}}}.{key}" if len(kinds) > 1 else
            f"spec.tfReplicaSpecs.{kinds[0]}.{key}" if kinds else key for key, kinds in types.items()]


def take_config_map(document: dict, name: str, config_maps: dict[str, dict[str, str]], where: str) -> list[str]:
    """A ConfigMap of the replayed file(s) into `config_maps` (its data: strings only, one map a
    name); returns its fields the replay does not apply."""
    data = document.get("data") or {}
    if not all(isinstance(v, str) for v in data.values()):
        raise ManifestError(f"ConfigMap {name}: every data value must be a string")
    if name in config_maps:
        raise ManifestError(f"ConfigMap {name} is in {where} twice")
    config_maps[name] = data
    return unapplied(document, {"apiVersion", "kind", "metadata", "data"}, f"ConfigMap {name}")


def describe(plan: Plan) -> str:
    counts: dict[str, int] = {}
    for task in plan.tasks:
        counts[task.job] = counts.get(task.job, 0) + 1
    return f"{plan.kind} {plan.name} ({', '.join(f'{n} {job}' for job, n in counts.items())}) from {plan.path.name}"


# What a lab config.json's settings may tell of the training (make k8s writes it into the TFJob's
# ConfigMap); the shape of the cluster comes from the TFJob itself.
TRAINING_SETTINGS = ("epochs", "global_batch", "examples", "seed", "model", "loop", "steps_per_execution",
                     "collective", "bytes_per_pack", "allreduce_probe", "peer_timeout", "backup", "strategy")


def lab_config(plan: Plan) -> dict:
    """The settings of the lab's config.json in a ConfigMap of the file, where its cluster is the
    TFJob's (so it is the config this job's trainers read, as make k8s writes it); else {}."""
    for data in plan.config_maps.values():
        text = data.get(runfolder.CONFIG)
        if not isinstance(text, str) or len(text) > 2**20:
            continue
        try:
            config = json.loads(text)
        except (ValueError, RecursionError):
            continue
        if isinstance(config, dict) and config.get("cluster") == plan.spec and isinstance(config.get("settings"), dict):
            return {key: value for key, value in config["settings"].items()
                    if key in TRAINING_SETTINGS and isinstance(value, (str, int, float, bool))}
    return {}


def replay_settings(plan: Plan, settings: Settings, run: str) -> dict:
    """A replay's settings as config.json and summary.json record them: what the TFJob says (its
    shape, deadline and backoffLimit as `restarts`, null where it sets none: no limit), what its
    lab config.json says of the training where it has one, and the replay's own; never a lab
    default that did not apply (10 epochs of a run that ran 3)."""
    counts = {job: sum(1 for task in plan.tasks if task.job == job)
              for job in ("chief", "master", "worker", "ps", "evaluator")}
    known = lab_config(plan)
    strategy = "parameter_server" if counts["ps"] else known.get("strategy", "multiworker")
    return {**known, "strategy": strategy, "workers": counts["worker"], "ps": counts["ps"],
            "chief": counts["chief"] + counts["master"], "evaluator": counts["evaluator"],
            "run": run, "runs_dir": settings.runs_dir, "compose": settings.compose, "backend": "compose",
            "timeout": plan.timeout, "restarts": plan.backoff_limit, "tfjob": str(plan.path),
            "network": settings.network, "data": settings.data, "claims": settings.claims,
            "backoff": settings.backoff}
