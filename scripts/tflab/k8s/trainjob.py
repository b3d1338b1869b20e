"""`tflab up TRAINJOB=path/to/trainjob.yaml`: a Kubeflow Trainer v2 TrainJob's nodes as local containers.

    python3 -m tflab up TRAINJOB=runs/k8s-<id>/trainjob.yaml                     # what `make k8s` wrote
    python3 -m tflab up TRAINJOB=mine/trainjob.yaml RUNTIME=platform/runtime.yaml  # the runtime in a file of its own

The file holds one TrainJob (trainer.kubeflow.org/v1alpha1, what Trainer v2.3.0 runs), the ConfigMaps
its pods read and, unless RUNTIME names another file (naming this one, it is read once), the
TrainingRuntime or ClusterTrainingRuntime its spec.runtimeRef names. Trainer v2 ships no TensorFlow
runtime; the lab replays one with no framework plugin (mlPolicy with numNodes only, its PlainML
path), whose trainer replicated job `node` JobSet runs as one Indexed Job. So node i becomes one
task on Compose, named `worker-<i>` as in the lab (its log, its row), with the pod's hostname
`<trainjob>-node-0-<i>`, the address `<trainjob>-node-0-<i>.<trainjob>`, JOB_COMPLETION_INDEX=i, and
the container `node` as Trainer v2 builds it (runtime/core/trainingruntime.go newRuntimeInfo, jobset/builder.go Trainer,
plainml.go): the TrainJob's image, command and args replace the runtime's, its env is upserted,
its resourcesPerNode merged over the runtime's resources, its numNodes over mlPolicy.numNodes.

TF_CONFIG is built where the pod builds it: inside the container, by the runtime's command
`python -m tflab.trainer.tfconfig` (cluster.trainjob_tf_config_env); the plan records what that
function gives each node. A node whose command is another gets no TF_CONFIG, as on a cluster.

The runtime is read by runtime.py, and its JobSet's failure policy by jobset.py, which the replay
applies as JobSet v0.12.0 (Trainer v2.3.0's) decides a node's failure.

The result is the TFJob replay's own Plan (tfjob.py), so the replay (replay/__init__.py) runs it
through the same pipeline. The manifest is untrusted input as a TFJob is: the same bounded reader,
each object against its CRD's schema (Trainer v2.3.0's, and v2.2.1's: schemas/) and v2.4.0's
stated rule (trainerreleases.py), the same rules for the pod (pod.service_of). What the lab cannot
replay (another framework's runtime, initializers, runtime patches, a suspended job, a second
replicated job) is refused in one line; what it reads and does not apply is named in one line
before anything starts.
"""

from __future__ import annotations

import copy
from pathlib import Path

from tflab.core import cluster
from tflab.core.backends import replays_on
from tflab.core.commands import MATRIX_VARIES
from tflab.core.errors import LabError
from tflab.core.grammars import REPLAY_TASKS_MOST
from tflab.core.settings import SETTINGS, Settings, refuse_unhonoured
from tflab.k8s import manifest, trainerreleases, writer
from tflab.k8s import runtime as runtime_mod
from tflab.k8s.manifest import ManifestError, shown
from tflab.k8s.pod import claim_folder, field_of, service_of, unapplied
from tflab.k8s.runtime import runtime_of
from tflab.k8s.tfjob import Plan, Task, checked_object, take_config_map

API_VERSION = writer.TRAINER_API
API_GROUP = writer.TRAINER_API.partition("/")[0]
RUNTIME_KINDS = tuple(writer.RUNTIME_KINDS.values())
TFCONFIG_COMMANDS = (writer.TFCONFIG_COMMAND, ("python3", *writer.TFCONFIG_COMMAND[1:]))
WHY_NODE = "the one Trainer v2 gives the TrainJob's image, command, args and env, and the one the lab runs"
# Fields the lab applies; any other present is listed as not applied (or refused below).
APPLIED_SPEC = {"runtimeRef", "trainer", "activeDeadlineSeconds", "suspend"}
APPLIED_TRAINER = {"image", "command", "args", "env", "numNodes", "resourcesPerNode"}
# Settings a TrainJob decides where a TFJob would too (Setting.tfjob), said in the TrainJob's words.
DECIDED = {"WORKERS": "the TrainJob's spec.trainer.numNodes sets the nodes; edit it (and TFLAB_NUM_NODES beside it)",
           "STRATEGY": "a TrainJob's nodes are multi-worker workers",
           "RESTARTS": "the runtime's spec.template.spec.failurePolicy.maxRestarts sets the restarts (JobSet's default "
                       "0); edit it"}
NOT_DECIDED = ("", "read by the replay")


def read_documents(path: Path, setting: str) -> list[dict]:
    try:
        return manifest.read_documents(path)
    except ManifestError as error:
        raise ManifestError(f"{setting}={path} {error}") from None


def load(settings: Settings) -> Plan:
    """The TrainJob and its runtime read and checked whole, as the TFJob replay's Plan: ManifestError
    (one line, naming the file) for what cannot run; nothing is planned before every object passed
    its schema and the API server's rules."""
    path = Path(settings.trainjob)
    documents = read_documents(path, "TRAINJOB")
    runtime_path = Path(settings.runtime) if settings.runtime else None
    # RUNTIME may name TRAINJOB's own file (`make k8s` writes both in one): read once, not as a second TrainJob
    same = runtime_path is not None and manifest.same_file(path, runtime_path)
    others = read_documents(runtime_path, "RUNTIME") if runtime_path and not same else []
    try:
        return plan_of(path, documents, others, settings)
    except ManifestError as error:
        raise ManifestError(f"TRAINJOB={path}: {error}") from None


def checked(documents: list[dict], where: str, said: list[str]) -> list[tuple[str, str]]:
    """(kind, name) of each document: tfjob.checked_object's checks, and Trainer v2's kinds against
    each release trainerreleases checks (v2.4.0's stated rule, v2.3.0's and v2.2.1's CRD schemas):
    what the newest, v2.4.0, refuses is one line, what only an earlier one refuses is added to
    `said`."""
    found = []
    for number, document in enumerate(documents, 1):
        try:
            kind, name = checked_object(document, number)
            if kind == "TrainJob" or kind in RUNTIME_KINDS:
                if document.get("apiVersion") != API_VERSION:
                    raise ManifestError(f"{kind} {name}: apiVersion is {shown(document.get('apiVersion'))}, expected "
                                        f"{API_VERSION} (Kubeflow Trainer v2)")
                refusals = trainerreleases.trainer_refusals(document, kind)
                if trainerreleases.TRAINER_RELEASES[0] in refusals:
                    raise ManifestError(f"{kind} {name}: {trainerreleases.refused_by(refusals)}")
                if refusals:
                    said.append(f"{where}{kind} {name}: {trainerreleases.refused_by(refusals)}")
        except ManifestError as error:
            raise ManifestError(f"{where}{error}") from None
        found.append((kind, name))
    return found


def plan_of(path: Path, documents: list[dict], others: list[dict], settings: Settings) -> Plan:
    """The plan, in Trainer v2's order: the TrainJob, the runtime it names, the node Job (runtime.py,
    with its JobSet's failure policy: jobset.py), the nodes."""
    job, every, config_maps, not_applied = trainjob_of(documents, others)
    name = manifest.dns1123_label(job["metadata"]["name"], "TrainJob.metadata.name")
    namespace = manifest.dns1123_label(job["metadata"].get("namespace", "default"), "TrainJob.metadata.namespace")
    spec = job.get("spec")
    if not isinstance(spec, dict):
        raise ManifestError("TrainJob.spec is missing")
    if spec.get("suspend") is True:
        raise ManifestError("spec.suspend is true: Trainer v2 starts no pod of a suspended TrainJob; expected false "
                            "or absent")
    for refused, why in (("initializer", "the lab runs no dataset or model initializer; give the data to the "
                                         "nodes through a volume"),
                         ("runtimePatches", "the lab replays the runtime as written; edit the runtime instead")):
        if spec.get(refused):
            raise ManifestError(f"spec.{refused} is not supported: {why}")
    not_applied += unapplied(spec, APPLIED_SPEC, "spec")
    runtime = runtime_of(spec, namespace, every)
    runtime_name = f"{runtime['kind']} {runtime['metadata']['name']}"
    node_trainer = field_of(spec, "trainer", dict, "spec", {})
    not_applied += unapplied(node_trainer, APPLIED_TRAINER, "spec.trainer")
    node_job = runtime_mod.node_job(runtime, runtime_name, name, node_trainer)
    not_applied += node_job.not_applied

    nodes = node_trainer.get("numNodes")
    if nodes is None:  # newRuntimeInfo: mlPolicy.numNodes where the runtime has an mlPolicy, else parallelism
        nodes = (node_job.ml_policy.get("numNodes", 1) if node_job.ml_policy is not None
                 else node_job.job_spec.get("parallelism", 1))
    if not 1 <= nodes <= REPLAY_TASKS_MOST:
        raise ManifestError(f"spec.trainer.numNodes is {nodes}, expected 1..{REPLAY_TASKS_MOST} (a replay's most "
                            "tasks)")
    template_service, pod_volumes, extra = service_of(node_job.pod, node_job.pod_where, config_maps,
                                                      cluster.TRAINJOB_NODE, WHY_NODE)
    not_applied += extra
    volumes: dict[str, dict] = {}
    for folder, volume in pod_volumes.items():
        claim_folder(volumes, folder, volume, node_job.pod_where)
    tasks = node_tasks(name, namespace, nodes, template_service, not_applied)

    policy = node_job.failure_policy
    restarts = policy.max_restarts if policy else 0
    deadline = field_of(spec, "activeDeadlineSeconds", int, "spec", None)
    decided = {"RESTARTS": (f"{runtime_name}'s spec.template.spec.failurePolicy.maxRestarts ({restarts}, JobSet's "
                            "default 0) sets the restarts; edit it")}
    if deadline:
        decided["TIMEOUT"] = (f"the TrainJob's spec.activeDeadlineSeconds ({deadline}) sets the deadline; edit it, or "
                              "leave it out for TIMEOUT to apply")
    return Plan(path, name, namespace, tasks, cluster.trainjob_cluster_spec(name, nodes), restarts,
                float(deadline) if deadline else settings.timeout, grouped(not_applied), config_maps, volumes,
                decided, policies={cluster.TRAINJOB_JOB: node_job.restart_policy}, active_deadline=deadline,
                kind="TrainJob", setting="TRAINJOB", failure_policy=policy, node_backoff_limit=node_job.backoff_limit)


def trainjob_of(documents: list[dict], others: list[dict]) -> tuple[dict, list, dict[str, dict[str, str]], list[str]]:
    """(the one TrainJob, every object with its (kind, name), the ConfigMaps' files, the objects
    not applied), every object checked against its schema first."""
    not_applied: list[str] = []
    kinds = checked(documents, "", not_applied) + checked(others, "RUNTIME's ", not_applied)
    every = list(zip(documents + others, kinds))
    if any(kind == "TrainJob" for kind, _ in kinds[len(documents):]):
        raise ManifestError("RUNTIME's file holds a TrainJob, expected only runtimes there (or TRAINJOB's own file)")
    trainjobs = [document for document, (kind, _) in every if kind == "TrainJob"]
    if len(trainjobs) != 1:
        raise ManifestError(f"holds {len(trainjobs)} TrainJobs, expected exactly one (kind: TrainJob), in "
                            "TRAINJOB's file")
    config_maps: dict[str, dict[str, str]] = {}
    for document, (kind, object_name) in every:
        if kind == "ConfigMap":
            not_applied += take_config_map(document, object_name, config_maps, "the files")
        elif kind not in ("TrainJob", *RUNTIME_KINDS):
            not_applied.append(f"{kind} {object_name}")
    return trainjobs[0], every, config_maps, not_applied


def node_tasks(name: str, namespace: str, nodes: int, template_service: dict, not_applied: list[str]) -> list[Task]:
    """Node i as the lab's task worker-<i>: the pod's hostname and addresses, JOB_COMPLETION_INDEX,
    and the TF_CONFIG tflab.trainer.tfconfig builds in it (where its command runs that)."""
    builds_tf_config = tuple(template_service.get("entrypoint", ())[:3]) in TFCONFIG_COMMANDS
    if builds_tf_config:
        given = template_service["environment"].get(cluster.NUM_NODES_ENV)
        if given != str(nodes):
            raise ManifestError(f"the node container's {cluster.NUM_NODES_ENV} is {shown(given)} and the job has "
                                f"{nodes} nodes (spec.trainer.numNodes): tflab.trainer.tfconfig would build a "
                                f"cluster of another size; set spec.trainer.env {cluster.NUM_NODES_ENV} to "
                                f"\"{nodes}\"")
    else:
        not_applied.append("TF_CONFIG: the node container's command is not python -m tflab.trainer.tfconfig, so no "
                           "node gets one (nor would it on the cluster)")
    if "TF_CONFIG" in template_service["environment"] and builds_tf_config:
        not_applied.append("the node container's env TF_CONFIG (tflab.trainer.tfconfig replaces it)")
    tasks = []
    for index in range(nodes):
        host = manifest.dns1123_label(cluster.trainjob_host(name, index),
                                      f"the host name of node {index} (<metadata.name>-node-0-{index})")
        service = copy.deepcopy(template_service)
        service["environment"]["JOB_COMPLETION_INDEX"] = str(index)  # as Kubernetes sets it in an Indexed Job
        service["hostname"] = host
        service["networks"] = {"cluster": {"aliases": [host, f"{host}.{name}", f"{host}.{name}.{namespace}.svc"]}}
        non_root = service.pop("x-non-root")
        tf_config = cluster.trainjob_tf_config_env(host, index, nodes)["TF_CONFIG"] if builds_tf_config else ""
        tasks.append(Task(f"{cluster.TRAINJOB_JOB}-{index}", cluster.TRAINJOB_JOB, index, host, service["image"],
                          service, non_root, tf_config))
    return tasks


def grouped(fields: list[str]) -> list[str]:
    return list(dict.fromkeys(fields))


def refuse_given(command: str, given: dict[str, str]) -> None:
    """Before anything is read: TRAINJOB not with TFJOB, RUNTIME only with TRAINJOB, and `up` takes
    with TRAINJOB no setting the TrainJob decides (those a TFJob would decide: Setting.tfjob) nor a
    backend other than Compose."""
    if "TRAINJOB" not in given:
        if "RUNTIME" in given:
            raise LabError(f"RUNTIME={given['RUNTIME']} applies only with TRAINJOB=<a TrainJob manifest> (the runtime "
                           "that TrainJob names); leave RUNTIME out")
        return
    trainjob = f"TRAINJOB={given['TRAINJOB']}"
    if "TFJOB" in given:
        raise LabError(f"TFJOB={given['TFJOB']} and {trainjob} together: expected one manifest to replay")
    refuse_unhonoured(command, {"TRAINJOB": given["TRAINJOB"]})
    if command not in ("up", "chaos", "matrix"):
        return
    for name, fixed in (("STRATEGIES", "its cluster (spec.trainer.numNodes)"), ("PRECISIONS", "how it trains")):
        if command == "matrix" and name in given:
            raise LabError(f"{name}={given[name]} does not apply with {trainjob}: the TrainJob and its runtime fix "
                           f"{fixed}; make matrix varies only TF and KERAS for a replay; leave {name} out")
    for spec in SETTINGS:
        if spec.name in given and spec.tfjob not in NOT_DECIDED and spec.name not in ("TRAINJOB", "RUNTIME") \
                and not (command == "matrix" and spec.name in MATRIX_VARIES):
            why = DECIDED.get(spec.name) or ("the TrainJob and its runtime decide it (the runtime's node container, "
                                             "the TrainJob's spec.trainer); edit them")
            raise LabError(f"{spec.name}={given[spec.name]} does not apply with {trainjob}: {why}")
    if not replays_on(given.get("BACKEND", "compose").strip()):
        raise LabError(f"BACKEND={given['BACKEND']} does not apply with {trainjob}: the replay runs every node as a "
                       "container on Compose; expected BACKEND=compose, or leave it out")
