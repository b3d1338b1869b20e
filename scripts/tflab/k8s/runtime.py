"""A Kubeflow Trainer v2 runtime (TrainingRuntime or ClusterTrainingRuntime) as a TrainJob's replay
reads it (trainjob.py): the runtime spec.runtimeRef names, its JobSet's one replicated job of nodes
and that JobSet's failure policy (jobset.py), the node Job's backoffLimit and its pod's restartPolicy
as the API server defaults them (jobcontroller.py), and the node's pod with the TrainJob's spec.trainer
applied, as Trainer v2 builds them (runtime/core/trainingruntime.go newRuntimeInfo,
runtime/framework/plugins/jobset/builder.go Trainer, plainml.go). What the lab cannot replay is
refused in one line; what it reads and does not apply is returned to be named.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

from tflab.core import cluster
from tflab.k8s import jobcontroller, jobset
from tflab.k8s.manifest import ManifestError, shown
from tflab.k8s.pod import field_of, unapplied
from tflab.k8s.writer import ANCESTOR_LABEL, RUNTIME_KINDS, TRAINER_API

API_GROUP = TRAINER_API.partition("/")[0]
KINDS = tuple(RUNTIME_KINDS.values())
APPLIED_JOBSET = {"replicatedJobs", "failurePolicy", "network"}
APPLIED_JOB = {"template", "completionMode", "backoffLimit", "parallelism", "completions"}


@dataclass
class NodeJob:
    ml_policy: dict | None  # the runtime's spec.mlPolicy (numNodes only)
    job_spec: dict  # the node Job's spec
    pod: dict  # the node pod, spec.trainer applied, restartPolicy taken out
    pod_where: str
    failure_policy: jobset.Policy | None  # the JobSet's; None: it fails at the first failed Job
    not_applied: list[str]
    restart_policy: str = "OnFailure"  # the pod's, as JobSet's webhook defaults it (jobset_webhook.go Default)
    backoff_limit: int = jobcontroller.DEFAULT_BACKOFF_LIMIT  # the Job's, as SetDefaults_Job leaves it


def node_job(runtime: dict, runtime_name: str, name: str, node_trainer: dict) -> NodeJob:
    """The runtime's node Job, its pod and its JobSet's failure policy, checked; ManifestError, one
    line, for what the lab cannot replay."""
    not_applied: list[str] = []
    runtime_spec = runtime.get("spec") or {}
    ml_policy = runtime_spec.get("mlPolicy")
    frameworks = sorted(set(ml_policy or {}) - {"numNodes"})
    if frameworks:
        raise ManifestError(f"{runtime_name} is a {frameworks[0]} runtime (spec.mlPolicy.{frameworks[0]}); the lab "
                            "replays TensorFlow runtimes: no framework plugin, mlPolicy with numNodes only")
    not_applied += [f"{runtime_name}: {field}" for field in unapplied(runtime_spec, {"mlPolicy", "template"}, "spec")]
    template = runtime_spec.get("template") or {}
    not_applied += [f"{runtime_name}: {field}" for field in unapplied(template, {"spec"}, "spec.template")]
    jobset_spec = template.get("spec") or {}
    where = f"{runtime_name}: spec.template.spec"
    network = jobset_spec.get("network") or {}
    if network.get("subdomain") not in (None, name):
        raise ManifestError(f"{where}.network.subdomain is {shown(network['subdomain'])}: tflab.trainer.tfconfig "
                            f"addresses nodes as <trainjob>-node-0-<i>.<trainjob>; expected it absent")
    if network.get("enableDNSHostnames") is False:
        raise ManifestError(f"{where}.network.enableDNSHostnames is false: the nodes could not reach each other by "
                            "name; expected true or absent")
    not_applied += [f"{runtime_name}: {field}" for field in unapplied(network, {"subdomain", "enableDNSHostnames"},
                                                                   "spec.template.spec.network")]
    not_applied += [f"{runtime_name}: {field}"
                    for field in unapplied(jobset_spec, APPLIED_JOBSET, "spec.template.spec")]
    replicated, job_where = trainer_job(jobset_spec.get("replicatedJobs") or [], where)
    policy, said = jobset.policy_of(jobset_spec, [replicated["name"]], where)
    not_applied += said
    not_applied += [f"{runtime_name}: {field}" for field in unapplied(replicated, {"name", "template"}, job_where)]
    job_template = replicated.get("template") or {}
    not_applied += [f"{runtime_name}: {field}" for field in unapplied(job_template, {"spec", "metadata"}, job_where
                                                                   + ".template")]
    job_spec = job_template.get("spec") or {}
    if job_spec.get("completionMode", "Indexed") != "Indexed":
        raise ManifestError(f"{job_where}.template.spec.completionMode is {shown(job_spec['completionMode'])}: a "
                            "node finds its index in JOB_COMPLETION_INDEX, which only an Indexed Job sets; expected "
                            "Indexed or absent")
    not_applied += [f"{runtime_name}: {field}"
                    for field in unapplied(job_spec, APPLIED_JOB, f"{job_where}.template.spec")]
    for count in ("parallelism", "completions"):
        if count in job_spec:
            not_applied.append(f"{runtime_name}: {job_where}.template.spec.{count} (Trainer v2 sets it to the nodes)")
    given_limit = field_of(job_spec, "backoffLimit", int, f"{job_where}.template.spec", None)
    if given_limit is not None and given_limit < 0:
        raise ManifestError(f"{runtime_name}: {job_where}.template.spec.backoffLimit is {given_limit}, expected 0 or "
                            "more")
    backoff_limit = jobcontroller.backoff_limit_of(job_spec)
    pod_template = job_spec.get("template") or {}
    pod = pod_template.get("spec")
    if not isinstance(pod, dict):
        raise ManifestError(f"{job_where}.template.spec.template.spec is missing")
    pod_where = f"{runtime_name}: {job_where}.template.spec.template.spec"
    pod = node_pod(pod, node_trainer, pod_where)
    restart_policy = pod.pop("restartPolicy", None) or "OnFailure"  # jobset_webhook.go Default
    if restart_policy not in jobcontroller.RESTART_POLICIES:
        raise ManifestError(f"{pod_where}.restartPolicy is {shown(restart_policy)}: a Job's pod takes "
                            f"{' or '.join(jobcontroller.RESTART_POLICIES)} (the API server refuses the JobSet)")
    return NodeJob(ml_policy, job_spec, pod, pod_where, policy, not_applied, restart_policy, backoff_limit)


def runtime_of(spec: dict, namespace: str, every: list[tuple[dict, tuple[str, str]]]) -> dict:
    """The runtime spec.runtimeRef names (kind defaults to ClusterTrainingRuntime, apiGroup to
    trainer.kubeflow.org, as the CRD has them), from either file; a TrainingRuntime must be in the
    TrainJob's namespace, as Trainer v2 looks it up there."""
    reference = spec.get("runtimeRef") or {}
    group = reference.get("apiGroup", API_GROUP)
    kind = reference.get("kind", "ClusterTrainingRuntime")
    wanted = reference.get("name")
    if group != API_GROUP or kind not in KINDS:
        raise ManifestError(f"spec.runtimeRef is {shown(group)} {shown(kind)}, an unknown runtime; expected apiGroup "
                            f"{API_GROUP} and kind {' or '.join(KINDS)}")
    found = [document for document, (object_kind, name) in every if object_kind == kind and name == wanted
             and (kind == "ClusterTrainingRuntime" or document["metadata"].get("namespace", "default") == namespace)]
    if not found:
        where = "" if kind == "ClusterTrainingRuntime" else f" in namespace {namespace}"
        raise ManifestError(f"spec.runtimeRef names {kind} {shown(wanted)}{where}, an unknown runtime: it is in "
                            "neither TRAINJOB's file nor RUNTIME's; give RUNTIME=<the file that holds it>")
    if len(found) > 1:
        raise ManifestError(f"{kind} {wanted} is in the files twice")
    return found[0]


def trainer_job(replicated_jobs: list, where: str) -> tuple[dict, str]:
    """The one replicated job Trainer v2 runs the nodes in: labelled as the trainer's ancestor,
    named `node` (its plugins address nodes as <trainjob>-node-0-<i>). Any other (a dataset or model
    initializer, a launcher) is refused: the lab replays the nodes alone."""
    trainers: list[tuple[int, dict]] = []
    others: list[tuple[int, dict]] = []
    for number, replicated in enumerate(replicated_jobs):
        labels = ((replicated.get("template") or {}).get("metadata") or {}).get("labels") or {}
        (trainers if labels.get(ANCESTOR_LABEL) == "trainer" else others).append((number, replicated))
    if others:
        number, replicated = others[0]
        raise ManifestError(f"{where}.replicatedJobs[{number}] ({shown(replicated.get('name'))}) is not the trainer's "
                            f"(label {ANCESTOR_LABEL}: trainer); the lab replays a runtime of the trainer's nodes "
                            "alone, without initializers or launchers")
    if len(trainers) != 1:
        raise ManifestError(f"{where}.replicatedJobs has {len(trainers)} jobs labelled {ANCESTOR_LABEL}: trainer, "
                            "expected exactly one")
    number, replicated = trainers[0]
    job_where = f"spec.template.spec.replicatedJobs[{number}]"
    if replicated.get("name") != cluster.TRAINJOB_NODE:
        raise ManifestError(f"{where}.replicatedJobs[{number}].name is {shown(replicated.get('name'))}, expected "
                            f"{cluster.TRAINJOB_NODE} (Trainer v2's plugins and tflab.trainer.tfconfig address nodes "
                            "as <trainjob>-node-0-<i>)")
    if replicated.get("replicas", 1) != 1:
        raise ManifestError(f"{where}.replicatedJobs[{number}].replicas is {replicated['replicas']}, expected 1 "
                            "(Trainer v2 runs the trainer's nodes as one Job; numNodes counts them)")
    return replicated, job_where


def node_pod(pod: dict, node_trainer: dict, where: str) -> dict:
    """The pod with the TrainJob's spec.trainer applied to the container `node`, as Trainer v2 does:
    image, command and args replaced where given, env upserted by name, resourcesPerNode merged
    over the container's resources (a resource given in both: the TrainJob's)."""
    pod = copy.deepcopy(pod)
    containers = field_of(pod, "containers", list, where) or []
    for container in containers:
        if not isinstance(container, dict) or container.get("name") != cluster.TRAINJOB_NODE:
            continue
        for key in ("image", "command", "args"):
            if node_trainer.get(key) is not None:
                container[key] = copy.deepcopy(node_trainer[key])
        env = container.setdefault("env", [])
        for entry in node_trainer.get("env") or []:
            same = [number for number, old in enumerate(env)
                    if isinstance(old, dict) and old.get("name") == entry["name"]]
            if same:
                env[same[0]] = copy.deepcopy(entry)
            else:
                env.append(copy.deepcopy(entry))
        per_node = node_trainer.get("resourcesPerNode")
        if per_node:
            resources = container.setdefault("resources", {})
            for key, value in per_node.items():
                if isinstance(value, dict) and isinstance(resources.get(key), dict):
                    resources[key] = {**resources[key], **value}
                else:
                    resources[key] = copy.deepcopy(value)
        break
    return pod


