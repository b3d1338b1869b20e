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

The result is the TFJob replay's own Plan (tfjob.py), so the replay (replay/__init__.py) runs it
through the same pipeline. The manifest is untrusted input as a TFJob is: the same bounded reader,
each object against its CRD's schema (Trainer v2.3.0's, schemas/), the same rules for the pod
(pod.service_of). What the lab cannot replay (another framework's runtime, initializers, runtime
patches, a suspended job, a second replicated job) is refused in one line; what it reads and does
not apply is named in one line before anything starts.
"""

from __future__ import annotations

import copy
from pathlib import Path

from tflab.core import cluster
from tflab.core.backends import replays_on
from tflab.core.commands import MATRIX_VARIES
from tflab.core.errors import LabError
from tflab.core.grammars import MAX_TASKS
from tflab.core.settings import SETTINGS, Settings, refuse_unhonoured
from tflab.k8s import manifest, writer
from tflab.k8s.manifest import ManifestError, shown
from tflab.k8s.pod import claim_folder, field_of, service_of, unapplied
from tflab.k8s.tfjob import Plan, Task, checked_object, take_config_map
from tflab.k8s.writer import ANCESTOR_LABEL

API_VERSION = writer.TRAINER_API
API_GROUP = writer.TRAINER_API.partition("/")[0]
RUNTIME_KINDS = tuple(writer.RUNTIME_KINDS.values())
TFCONFIG_COMMANDS = (writer.TFCONFIG_COMMAND, ("python3", *writer.TFCONFIG_COMMAND[1:]))
WHY_NODE = "the one Trainer v2 gives the TrainJob's image, command, args and env, and the one the lab runs"
# Fields the lab applies; any other present is listed as not applied (or refused below).
APPLIED_SPEC = {"runtimeRef", "trainer", "activeDeadlineSeconds", "suspend"}
APPLIED_TRAINER = {"image", "command", "args", "env", "numNodes", "resourcesPerNode"}
APPLIED_JOBSET = {"replicatedJobs", "failurePolicy", "network"}
APPLIED_JOB = {"template", "completionMode", "backoffLimit", "parallelism", "completions"}
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


def checked(documents: list[dict], where: str) -> list[tuple[str, str]]:
    """(kind, name) of each document: tfjob.checked_object's checks, and Trainer v2's kinds against
    their CRDs' schemas."""
    found = []
    for number, document in enumerate(documents, 1):
        try:
            kind, name = checked_object(document, number)
            if kind == "TrainJob" or kind in RUNTIME_KINDS:
                if document.get("apiVersion") != API_VERSION:
                    raise ManifestError(f"{kind} {name}: apiVersion is {shown(document.get('apiVersion'))}, expected "
                                        f"{API_VERSION} (Kubeflow Trainer v2)")
                manifest.check(document, kind)
        except ManifestError as error:
            raise ManifestError(f"{where}{error}") from None
        found.append((kind, name))
    return found


def plan_of(path: Path, documents: list[dict], others: list[dict], settings: Settings) -> Plan:
    kinds = checked(documents, "") + checked(others, "RUNTIME's ")
    every = list(zip(documents + others, kinds))
    if any(kind == "TrainJob" for kind, _ in kinds[len(documents):]):
        raise ManifestError("RUNTIME's file holds a TrainJob, expected only runtimes there (or TRAINJOB's own file)")
    trainjobs = [document for document, (kind, _) in every if kind == "TrainJob"]
    if len(trainjobs) != 1:
        raise ManifestError(f"holds {len(trainjobs)} TrainJobs, expected exactly one (kind: TrainJob), in "
                            "TRAINJOB's file")
    (job,) = trainjobs
    name = manifest.dns1123_label(job["metadata"]["name"], "TrainJob.metadata.name")
    namespace = manifest.dns1123_label(job["metadata"].get("namespace", "default"), "TrainJob.metadata.namespace")
    not_applied: list[str] = []
    config_maps: dict[str, dict[str, str]] = {}
    for document, (kind, object_name) in every:
        if kind == "ConfigMap":
            not_applied += take_config_map(document, object_name, config_maps, "the files")
        elif kind not in ("TrainJob", *RUNTIME_KINDS):
            not_applied.append(f"{kind} {object_name}")

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

    runtime_spec = runtime.get("spec") or {}
    ml_policy = runtime_spec.get("mlPolicy")
    frameworks = sorted(set(ml_policy or {}) - {"numNodes"})
    if frameworks:
        raise ManifestError(f"{runtime_name} is a {frameworks[0]} runtime (spec.mlPolicy.{frameworks[0]}); the lab "
                            "replays TensorFlow runtimes: no framework plugin, mlPolicy with numNodes only")
    not_applied += [f"{runtime_name}: {field}" for field in unapplied(runtime_spec, {"mlPolicy", "template"}, "spec")]
    template = runtime_spec.get("template") or {}
    not_applied += [f"{runtime_name}: {field}" for field in unapplied(template, {"spec"}, "spec.template")]
    jobset = template.get("spec") or {}
    where = f"{runtime_name}: spec.template.spec"
    network = jobset.get("network") or {}
    if network.get("subdomain") not in (None, name):
        raise ManifestError(f"{where}.network.subdomain is {shown(network['subdomain'])}: tflab.trainer.tfconfig "
                            f"addresses nodes as <trainjob>-node-0-<i>.<trainjob>; expected it absent")
    if network.get("enableDNSHostnames") is False:
        raise ManifestError(f"{where}.network.enableDNSHostnames is false: the nodes could not reach each other by "
                            "name; expected true or absent")
    not_applied += [f"{runtime_name}: {field}" for field in unapplied(network, {"subdomain", "enableDNSHostnames"},
                                                                   "spec.template.spec.network")]
    not_applied += [f"{runtime_name}: {field}" for field in unapplied(jobset, APPLIED_JOBSET, "spec.template.spec")]
    failure = jobset.get("failurePolicy") or {}
    not_applied += [f"{runtime_name}: {field}" for field in unapplied(failure, {"maxRestarts"},
                                                                   "spec.template.spec.failurePolicy")]
    replicated, job_where = trainer_job(jobset.get("replicatedJobs") or [], where)
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
    if job_spec.get("backoffLimit"):
        not_applied.append(f"{runtime_name}: {job_where}.template.spec.backoffLimit={job_spec['backoffLimit']} (a "
                           "pod retried alone; the replay restarts the whole job, failurePolicy.maxRestarts times)")
    pod_template = job_spec.get("template") or {}
    pod = pod_template.get("spec")
    if not isinstance(pod, dict):
        raise ManifestError(f"{job_where}.template.spec.template.spec is missing")
    pod_where = f"{runtime_name}: {job_where}.template.spec.template.spec"
    pod = node_pod(pod, node_trainer, pod_where)
    if pod.get("restartPolicy") == "OnFailure":
        not_applied.append(f"{pod_where}.restartPolicy=OnFailure (a container restarted in its pod; the replay "
                           "restarts the whole job, failurePolicy.maxRestarts times)")
    pod.pop("restartPolicy", None)

    nodes = node_trainer.get("numNodes")
    if nodes is None:  # newRuntimeInfo: mlPolicy.numNodes where the runtime has an mlPolicy, else parallelism
        nodes = (ml_policy.get("numNodes", 1) if ml_policy is not None else job_spec.get("parallelism", 1))
    if not 1 <= nodes <= MAX_TASKS:
        raise ManifestError(f"spec.trainer.numNodes is {nodes}, expected 1..{MAX_TASKS} (the lab's most tasks)")
    template_service, pod_volumes, extra = service_of(pod, pod_where, config_maps, cluster.TRAINJOB_NODE, WHY_NODE)
    not_applied += extra
    volumes: dict[str, dict] = {}
    for folder, volume in pod_volumes.items():
        claim_folder(volumes, folder, volume, pod_where)
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

    restarts = field_of(failure, "maxRestarts", int, f"{where}.failurePolicy", 0)
    if restarts < 0:
        raise ManifestError(f"{where}.failurePolicy.maxRestarts is {restarts}, expected 0 or more")
    deadline = field_of(spec, "activeDeadlineSeconds", int, "spec", None)
    decided = {"RESTARTS": (f"{runtime_name}'s spec.template.spec.failurePolicy.maxRestarts ({restarts}, JobSet's "
                            "default 0) sets the restarts; edit it")}
    if deadline:
        decided["TIMEOUT"] = (f"the TrainJob's spec.activeDeadlineSeconds ({deadline}) sets the deadline; edit it, or "
                              "leave it out for TIMEOUT to apply")
    return Plan(path, name, namespace, tasks, cluster.trainjob_cluster_spec(name, nodes), restarts,
                float(deadline) if deadline else settings.timeout, grouped(not_applied), config_maps, volumes,
                decided, policies={cluster.TRAINJOB_JOB: "OnFailure"}, active_deadline=deadline,
                kind="TrainJob", setting="TRAINJOB")


def runtime_of(spec: dict, namespace: str, every: list[tuple[dict, tuple[str, str]]]) -> dict:
    """The runtime spec.runtimeRef names (kind defaults to ClusterTrainingRuntime, apiGroup to
    trainer.kubeflow.org, as the CRD has them), from either file; a TrainingRuntime must be in the
    TrainJob's namespace, as Trainer v2 looks it up there."""
    reference = spec.get("runtimeRef") or {}
    group = reference.get("apiGroup", API_GROUP)
    kind = reference.get("kind", "ClusterTrainingRuntime")
    wanted = reference.get("name")
    if group != API_GROUP or kind not in RUNTIME_KINDS:
        raise ManifestError(f"spec.runtimeRef is {shown(group)} {shown(kind)}, an unknown runtime; expected apiGroup "
                            f"{API_GROUP} and kind {' or '.join(RUNTIME_KINDS)}")
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
    if command == "matrix" and "STRATEGIES" in given:
        raise LabError(f"STRATEGIES={given['STRATEGIES']} does not apply with {trainjob}: the TrainJob and its runtime "
                       "fix its cluster (spec.trainer.numNodes); make matrix varies only TF and KERAS for a replay; "
                       "leave STRATEGIES out")
    for spec in SETTINGS:
        if spec.name in given and spec.tfjob not in NOT_DECIDED and spec.name not in ("TRAINJOB", "RUNTIME") \
                and not (command == "matrix" and spec.name in MATRIX_VARIES):
            why = DECIDED.get(spec.name) or ("the TrainJob and its runtime decide it (the runtime's node container, "
                                             "the TrainJob's spec.trainer); edit them")
            raise LabError(f"{spec.name}={given[spec.name]} does not apply with {trainjob}: {why}")
    if not replays_on(given.get("BACKEND", "compose").strip()):
        raise LabError(f"BACKEND={given['BACKEND']} does not apply with {trainjob}: the replay runs every node as a "
                       "container on Compose; expected BACKEND=compose, or leave it out")
