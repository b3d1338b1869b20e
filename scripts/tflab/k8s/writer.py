"""`make k8s`: the lab's settings as Kubernetes manifests, to take the same run to a real cluster.

    python3 -m tflab k8s STRATEGY=multiworker WORKERS=4    # writes runs/k8s-<id>/tfjob.yaml, jobs.yaml

Two ways to run the same cluster, each a file of its own that `kubectl apply -f` takes whole:

- tfjob.yaml: a Kubeflow TFJob (kubeflow.org/v1). The training operator v1 makes a headless
  Service per task and puts TF_CONFIG into each pod itself; `cluster.kubeflow_address` builds the
  very spec it will, so the ConfigMap's config.json agrees with it (the trainer checks).
- trainjob.yaml: a Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1; what Trainer v2.4.0,
  v2.3.0 and v2.2.1 all take, checked before it is written: trainerreleases.py) and the TensorFlow
  runtime it names, which Trainer v2 does not ship: a ClusterTrainingRuntime (or, with
  K8S_RUNTIME=namespaced, a TrainingRuntime) with no framework plugin, whose one replicated job
  `node` runs `python -m tflab.trainer.tfconfig` before the TrainJob's args: each pod builds its
  TF_CONFIG from its JobSet index and hostname (cluster.trainjob_tf_config_env). multiworker without
  a chief or an evaluator only: a TrainJob's nodes share one pod template.
- jobs.yaml: plain batch/v1 Jobs, one per task, each with a headless Service of the operator's
  name for it and its TF_CONFIG written out, from `cluster.tf_config_for`: for clusters with
  neither operator.

Both carry the ConfigMap with config.json (the settings and that cluster spec) and, unless
NETWORK=bridge, a NetworkPolicy that lets the tasks reach only each other and DNS, as the Compose
network does. Pods
run as in Compose: uid 1000, no capabilities, no privilege escalation, a read-only root
filesystem with an emptyDir /tmp. single and mirrored are one process: jobs.yaml only, one Job.

Host side: stdlib only (no TensorFlow, no PyYAML), so the YAML comes from the small emitter below.
Each file is written whole or not at all (a temporary file, then os.replace): a cut jobs.yaml
would still parse, and `kubectl apply` would make half of the job.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from tflab import console
from tflab.core import cluster, runfolder
from tflab.core import task as task_contract
from tflab.core.cluster import Cluster
from tflab.core.errors import LabError
from tflab.core.settings import Settings, refuse_unhonoured
from tflab.k8s import sizes, trainerreleases
from tflab.k8s.pod import memory_quantity
from tflab.k8s.tfoperator import CONTAINER, PORT_NAME, TYPE_NAMES

CONFIG_DIR = "/lab/config"  # the ConfigMap, read-only
OUTPUT_DIR = "/lab/out"  # the outputs' volume; each job writes in <K8S_NAME>/ under it
TRAINER_API = "trainer.kubeflow.org/v1alpha1"  # Kubeflow Trainer v2's (v2.3.0)
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"  # how Trainer v2 finds the trainer's replicated job
TFCONFIG_COMMAND = ("python", "-m", "tflab.trainer.tfconfig")  # the runtime's: TF_CONFIG, then the TrainJob's args
RUNTIME_KINDS = {"cluster": "ClusterTrainingRuntime", "namespaced": "TrainingRuntime"}
FRAMEWORK_LABEL = {"trainer.kubeflow.org/framework": "tensorflow"}  # on the lab's TensorFlow runtime
UID = 1000  # the image's user, as in Compose


def write(settings: Settings) -> int:
    """Writes the manifests into RUNS_DIR/<RUN> (a fresh k8s-<id> if RUN is empty), never over
    an existing folder, and says how to apply them. K8S_IMAGE empty: the lab's trainer image,
    built here if it is not yet, as `make images` would (so the manifests name an image that is)."""
    given_image = bool(settings.k8s_image)
    # What the manifests cannot carry is refused, not dropped: the pods would run other code.
    refuse_unhonoured("k8s", settings)
    if settings.evaluator and not settings.k8s_pvc:
        raise LabError(f"EVALUATOR={settings.evaluator} is not allowed without K8S_PVC in make k8s: expected "
                       "K8S_PVC=<a ReadWriteMany claim> (the evaluator reads the chief's checkpoints, and "
                       "each pod's own emptyDir shares nothing), or EVALUATOR=0")
    if settings.gpus:
        raise LabError(f"GPUS={settings.gpus} is not allowed with make k8s: expected GPUS empty (the manifests "
                       "request no GPUs yet; add nvidia.com/gpu limits to the pod templates yourself)")
    sizes.check(settings, trainjob=not trainjob_refusal(settings))  # before the image is built
    folder = runfolder.planned(settings.replace(run=settings.run or f"k8s-{runfolder.new_run_id()}"))
    if not given_image:
        settings = settings.replace(k8s_image=lab_image(settings))
    the_cluster = manifests_cluster(settings)  # built once: the manifests, their headers and this command's lines
    manifests, notes = render(settings, folder.name, the_cluster)
    texts = {name: to_yaml_documents(documents, header(name, settings, the_cluster))
             for name, documents in manifests.items()}
    try:
        runfolder.make(folder, link_latest=False)  # os.mkdir: the folder is this command's, or it stops here
    except OSError as error:
        raise LabError(f"cannot make {folder}: {error.strerror or error}") from None
    written: list[Path] = []
    try:
        for name, text in texts.items():
            write_manifest(folder / name, text)
            written.append(folder / name)
    except LabError:
        for path in written:  # the files go together: one without the other would mislead
            path.unlink(missing_ok=True)
        remove_empty(folder)
        raise
    shape = console.describe_run(settings, the_cluster)
    console.say(f"wrote {console.display_path(folder)}/ for {shape}, as "
                f"{settings.k8s_name} in namespace {settings.k8s_namespace}, image {settings.k8s_image}")
    for name in manifests:
        print(f"  {name:<13} {about(name, the_cluster)}")
    if not given_image:
        notes.append(f"K8S_IMAGE={settings.k8s_image} is what `make images` builds here (and what `make up TFJOB=` "
                     "replays on this engine): push it to a registry the cluster can pull from and name it in "
                     "K8S_IMAGE")
    for note in notes:
        console.say(note)
    console.say("apply one file, not more (they name the same objects):" if len(manifests) > 1 else "apply it:")
    for name in manifests:
        print(f"  kubectl apply -f {console.display_path(folder / name)}")
    return 0


def lab_image(settings: Settings) -> str:
    """The trainer image `make images` builds for these settings: its digest tag."""
    from tflab import images  # the engine's: only where K8S_IMAGE is left to the lab

    return images.ensure_image(settings.base_image, images.trainer_variant(settings))


def write_manifest(path: Path, text: str) -> None:
    """`path` holds `text` whole, or is not there (runfolder.write_whole), and the lab's one line
    (LabError) says why not, where runfolder.write_whole raises the OSError."""
    try:
        runfolder.write_whole(path, text)
    except OSError as error:
        raise LabError(f"cannot write {path}: {error.strerror or error}; nothing of it was written") from None


def remove_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def about(name: str, the_cluster: Cluster) -> str:
    if name == "tfjob.yaml":
        return "a Kubeflow TFJob (kubeflow.org/v1), for a cluster with the training operator v1"
    if name == "trainjob.yaml":
        return "a Kubeflow Trainer v2 TrainJob and its TensorFlow runtime (trainer.kubeflow.org/v1alpha1)"
    if not the_cluster.jobs:
        return "one plain Job, for any cluster"
    return "plain Jobs and headless Services, TF_CONFIG given explicitly, for any cluster"


def manifests_cluster(settings: Settings) -> Cluster:
    """The run's cluster at the addresses the training operator gives its tasks (kubeflow_address)."""
    return cluster.build(settings, cluster.kubeflow_address(settings.k8s_name, settings.k8s_namespace))


def render(settings: Settings, run: str, the_cluster: Cluster) -> tuple[dict[str, list[dict]], list[str]]:
    """(file name -> its objects, notes for the user), for `the_cluster` (manifests_cluster's). The
    cluster strategies get both files, single and mirrored only jobs.yaml."""
    notes = []
    if not settings.k8s_image:
        settings = settings.replace(k8s_image=lab_image(settings))
    if settings.strategy == "multiworker" and len(the_cluster.replicas) > 1 and settings.backup != "off" \
            and not settings.k8s_pvc:
        # Every worker restores from the chief's backup (backups.adopt_chief_backup), so the folder
        # must be shared: each pod's own emptyDir is not.
        notes.append(f"BACKUP={settings.backup} is off in the manifests: a multi-worker restore needs the "
                     "chief's backup on every worker, and each pod's own emptyDir shares nothing; give "
                     "K8S_PVC=<a ReadWriteMany claim> to keep it")
        settings = settings.replace(backup="off")
    spec = the_cluster.spec
    shared = [config_map(settings, run, the_cluster)]
    if settings.network == "internal":
        shared.append(network_policy(settings))
    if settings.link:
        notes.append(f"LINK={settings.link} has no counterpart in the manifests: the tasks talk directly")
    jobs = list(shared)
    for task in the_cluster.tasks:
        if spec:
            jobs.append(service(settings, *cluster.parse_task(task)))
        jobs.append(job(settings, task, spec))
    if settings.strategy == "parameter_server":
        chief_job = f"{settings.k8s_name}-{the_cluster.chief}"
        notes.append("the workers and ps never exit by themselves: the TFJob ends them when the chief is done; "
                     f"with jobs.yaml, delete them once Job {chief_job} has completed (or TIMEOUT ends them)")
    if not spec:
        notes.append(f"STRATEGY={settings.strategy} is one process: one Job, no TFJob or TrainJob needed")
        return {"jobs.yaml": jobs}, notes
    files = {"tfjob.yaml": shared + [tfjob(settings, the_cluster)]}
    no_trainjob = trainjob_refusal(settings)
    if no_trainjob:
        notes.append(f"trainjob.yaml is not written: {no_trainjob}")
    else:
        files["trainjob.yaml"] = trainjob_documents(settings, run, the_cluster)
        refused = trainerreleases.first_refused(files["trainjob.yaml"])  # nothing a checked release refuses
        if refused:
            raise LabError(f"trainjob.yaml: {refused}; nothing was written")
    return {**files, "jobs.yaml": jobs}, notes


def trainjob_refusal(settings: Settings) -> str:
    """Why these settings have no TrainJob form, or "" where they have one. A TrainJob's nodes are
    one replicated job of one pod template, and Trainer v2 gives them no roles: every node is a
    worker, so only multiworker without a chief or an evaluator fits."""
    if settings.strategy == "parameter_server":
        return ("STRATEGY=parameter_server has no TrainJob form (a TrainJob's nodes share one pod template, "
                "and a PS cluster needs a chief, workers and ps); use tfjob.yaml or jobs.yaml")
    if settings.chief:
        return "CHIEF=1 has no TrainJob form (every node is a worker); use tfjob.yaml or jobs.yaml, or CHIEF=0"
    if settings.evaluator:
        return ("EVALUATOR=1 has no TrainJob form (an evaluator is a second pod template); use tfjob.yaml or "
                "jobs.yaml, or EVALUATOR=0")
    return ""


def trainjob_cluster(settings: Settings, the_cluster: Cluster) -> Cluster:
    """The run's cluster at the addresses JobSet gives a TrainJob's nodes (cluster.trainjob_address)."""
    return the_cluster.readdressed(cluster.trainjob_address(settings.k8s_name))


def runtime_name(job_name: str) -> str:
    """The TensorFlow runtime a TrainJob of this name names (make k8s's, and a TFJob's turned)."""
    return f"{job_name}-tensorflow"


def trainjob_documents(settings: Settings, run: str, the_cluster: Cluster) -> list[dict]:
    """trainjob.yaml's objects: its ConfigMap (config.json with the TrainJob's cluster, which the
    trainer checks TF_CONFIG against), the NetworkPolicy, the runtime and the TrainJob."""
    documents = [config_map(settings, run, trainjob_cluster(settings, the_cluster))]
    if settings.network == "internal":
        documents.append(network_policy(settings))
    return documents + [training_runtime(settings), trainjob(settings)]


def training_runtime(settings: Settings) -> dict:
    """The TensorFlow runtime Trainer v2 does not ship: no framework plugin in mlPolicy (its PlainML
    path: numNodes only), one replicated job `node` of the lab's locked-down pod whose container
    `node` runs tfconfig before the TrainJob's args. JobSet's failurePolicy restarts the whole job,
    as the lab does: a multi-worker cluster's other workers abort when one goes."""
    kind = RUNTIME_KINDS[settings.k8s_runtime]
    metadata_ = metadata(settings, runtime_name(settings.k8s_name), **FRAMEWORK_LABEL)
    if kind == "ClusterTrainingRuntime":
        del metadata_["namespace"]  # cluster-scoped
    pod = pod_template(settings, {}, "Never", task=None)
    (container,) = pod["spec"]["containers"]
    container.pop("resources", None)  # the TrainJob's resourcesPerNode
    node = {"name": cluster.TRAINJOB_NODE, "image": container.pop("image"), "command": list(TFCONFIG_COMMAND),
            "args": list(task_contract.COMMAND)}  # a TrainJob without args: the lab's trainer
    del container["name"], container["command"]
    container["ports"] = [{"name": "tf-grpc", "containerPort": cluster.PORT}]
    pod["spec"]["containers"] = [{**node, **container}]
    node_job = {"name": cluster.TRAINJOB_NODE,
                "template": {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                             "spec": {"backoffLimit": 0, "completionMode": "Indexed", "template": pod}}}
    return {"apiVersion": TRAINER_API, "kind": kind, "metadata": metadata_,
            "spec": {"mlPolicy": {"numNodes": settings.workers},
                     "template": {"spec": {"failurePolicy": {"maxRestarts": settings.restarts},
                                           "replicatedJobs": [node_job]}}}}


def trainjob(settings: Settings) -> dict:
    """The TrainJob: what a user edits. Its args are the command (the runtime's tfconfig runs them),
    numNodes and TFLAB_NUM_NODES say the node count together, resourcesPerNode the limits."""
    node = {"image": settings.k8s_image, "args": list(task_contract.COMMAND), "numNodes": settings.workers,
            "env": [{"name": cluster.NUM_NODES_ENV, "value": str(settings.workers)}]}
    limits = resource_limits(settings)
    if limits:
        node["resourcesPerNode"] = {"limits": limits}
    runtime_ref = {"name": runtime_name(settings.k8s_name), "apiGroup": TRAINER_API.partition("/")[0],
                   "kind": RUNTIME_KINDS[settings.k8s_runtime]}
    return {"apiVersion": TRAINER_API, "kind": "TrainJob", "metadata": metadata(settings, settings.k8s_name),
            "spec": {"runtimeRef": runtime_ref, "activeDeadlineSeconds": deadline(settings), "trainer": node}}


def labels(settings: Settings) -> dict[str, str]:
    return {"app.kubernetes.io/name": "tflab", "app.kubernetes.io/instance": settings.k8s_name}


def metadata(settings: Settings, name: str, **extra_labels: str) -> dict:
    return {"name": name, "namespace": settings.k8s_namespace, "labels": {**labels(settings), **extra_labels}}


def config_map(settings: Settings, run: str, the_cluster: Cluster) -> dict:
    """The pods' config.json, without every task's TF_CONFIG: each pod's is in its own environment,
    the spec gives them all, and N of them each N addresses long would pass the 1 MiB a ConfigMap
    may hold (ValidateConfigMap's MaxSecretSize) at about 150 workers."""
    config = runfolder.run_config(settings, run, the_cluster)
    del config["tf_config"]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(settings, f"{settings.k8s_name}-config"),
            "data": {runfolder.CONFIG: json.dumps(config, indent=2) + "\n"}}


def network_policy(settings: Settings) -> dict:
    """The Compose network's `internal: true`, where the cluster's network plugin enforces policies:
    TensorFlow's gRPC servers are unauthenticated, so only the job's own pods may reach them, and
    the pods reach nothing but each other and DNS."""
    own_pods = {"podSelector": {"matchLabels": labels(settings)}}
    dns = [{"protocol": protocol, "port": 53} for protocol in ("UDP", "TCP")]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": metadata(settings, f"{settings.k8s_name}-tasks-only"),
            "spec": {"podSelector": {"matchLabels": labels(settings)}, "policyTypes": ["Ingress", "Egress"],
                     "ingress": [{"from": [own_pods]}],
                     "egress": [{"to": [own_pods]}, {"ports": dns}]}}


def service(settings: Settings, job_name: str, index: int) -> dict:
    """A task's headless Service, as the operator makes it for a TFJob: its DNS name is the
    task's address in the cluster spec, and no ClusterIP exposes it."""
    task = f"{job_name}-{index}"
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": metadata(settings, cluster.kubeflow_service(settings.k8s_name, job_name, index)),
            "spec": {"clusterIP": "None", "selector": {**labels(settings), "tflab/task": task},
                     "ports": [{"name": PORT_NAME, "port": cluster.PORT, "targetPort": cluster.PORT}]}}


def job(settings: Settings, task: str, spec: dict) -> dict:
    """A plain Job for one task, its TF_CONFIG written out."""
    name = f"{settings.k8s_name}-{task}"  # a cluster task's is its Service's name too
    env = cluster.tf_config_env(spec, task)  # TFLAB_TASK, and TF_CONFIG where there is a cluster
    spec = {"backoffLimit": settings.restarts, "activeDeadlineSeconds": deadline(settings)}
    if settings.restart_policy == "ExitCode":
        spec["podFailurePolicy"] = exit_code_policy()
    spec["template"] = pod_template(settings, env, pod_restart_policy(settings), task)
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata(settings, name, **{"tflab/task": task}),
            "spec": spec}


def tfjob(settings: Settings, the_cluster: Cluster) -> dict:
    """The TFJob: one replica spec per job of the cluster spec. The operator sets TF_CONFIG per pod,
    except where the job has one pod in all ("not distributed": no TF_CONFIG at all), while the
    trainer expects the cluster of config.json; there the template carries it."""
    replica_specs = {}
    spec = the_cluster.spec
    sizes = {**{job_name: len(addresses) for job_name, addresses in spec.items()},
             **{cluster.EVALUATOR: len(the_cluster.evaluators)}}
    for job_name, size in sizes.items():
        if not size:
            continue
        env = {}
        if sum(sizes.values()) == 1:
            env = {"TF_CONFIG": cluster.tf_config_env(spec, f"{job_name}-0")["TF_CONFIG"]}
        replica_specs[TYPE_NAMES[job_name]] = {
            "replicas": size,
            "restartPolicy": settings.restart_policy,
            "template": pod_template(settings, env, None, task=None),
        }
    # Running where servers would serve forever once the chief is done (parameter_server's workers
    # and ps); elsewhere the operator's default, None, which lets the other workers and the evaluator
    # finish their own ends after the chief's (Running would delete them mid-save).
    clean = "Running" if "ps" in spec else "None"
    run_policy = {"cleanPodPolicy": clean, "backoffLimit": settings.restarts,
                  "activeDeadlineSeconds": deadline(settings)}
    body: dict[str, object] = {"runPolicy": run_policy}
    if "chief" not in spec:
        body["successPolicy"] = "AllWorkers"  # not worker-0 alone: the others' ends would be cut off
    body["tfReplicaSpecs"] = replica_specs
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": metadata(settings, settings.k8s_name),
            "spec": body}


def pod_restart_policy(settings: Settings) -> str:
    """A plain Job's pod restartPolicy for RESTART_POLICY: a pod takes only OnFailure or Never, so
    ExitCode is a Never pod, as the training operator makes it (core/pod.go SetRestartPolicy), whose
    Job recreates it up to backoffLimit unless exit_code_policy fails the Job."""
    return "OnFailure" if settings.restart_policy == "OnFailure" else "Never"


def exit_code_policy() -> dict:
    """ExitCode for a plain Job: exit codes 1-127 fail the Job at once, any other is retried, as
    the operator's IsRetryableExitCode (`exitCode >= 128`) has it for a TFJob."""
    # onPodConditions: empty, but Kubernetes' schema requires it up to 1.28 (optional from 1.29)
    return {"rules": [{"action": "FailJob", "onPodConditions": [],
                       "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": list(range(1, 128))}}]}


def deadline(settings: Settings) -> int:
    return math.ceil(settings.timeout)


def pod_template(settings: Settings, env: dict[str, str], restart: str | None, task: str | None) -> dict:
    """One task's pod (task=None: a TFJob replica type's, where the task comes from TF_CONFIG)."""
    output = {"name": "output", "persistentVolumeClaim": {"claimName": settings.k8s_pvc}} if settings.k8s_pvc \
        else {"name": "output", "emptyDir": {}}
    container = {
        "name": CONTAINER,
        "image": settings.k8s_image,
        "command": list(task_contract.COMMAND),
        "env": [{"name": key, "value": value} for key, value in {
            "TFLAB_CONFIG": f"{CONFIG_DIR}/config.json",
            "TFLAB_OUTPUT": f"{OUTPUT_DIR}/{settings.k8s_name}",
            **task_contract.LEGACY_KERAS,  # tf-keras: Keras 3's fit fails under MultiWorkerMirroredStrategy
            **env,
        }.items()],
        "ports": [{"name": PORT_NAME, "containerPort": cluster.PORT}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID,
                            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
                         {"name": "output", "mountPath": OUTPUT_DIR},
                         {"name": "tmp", "mountPath": "/tmp"}],
    }
    limits = resource_limits(settings)
    if limits:
        container["resources"] = {"limits": limits}
    pod = {
        "automountServiceAccountToken": False,  # the trainers never talk to the API server
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": f"{settings.k8s_name}-config"}},
                    output,
                    {"name": "tmp", "emptyDir": {}}],
    }
    if restart:
        pod = {"restartPolicy": restart, **pod}
    pod_labels = labels(settings) if task is None else {**labels(settings), "tflab/task": task}
    return {"metadata": {"labels": pod_labels}, "spec": pod}


def resource_limits(settings: Settings) -> dict[str, str]:
    """CPUS and MEMORY as Kubernetes quantities."""
    limits = {}
    if settings.cpus:
        limits["cpu"] = f"{round(settings.cpus * 1000)}m"
    if settings.memory != "0":
        limits["memory"] = memory_quantity(settings.memory)
    return limits


def header(name: str, settings: Settings, the_cluster: Cluster) -> str:
    lines = [f"{name}: {about(name, the_cluster)}.",
             "Written by `make k8s` (scripts/tflab/k8s/writer.py) for "
             f"{console.describe_run(settings, the_cluster)}.",
             f"Apply with `kubectl apply -f {name}`; the image {settings.k8s_image} must be pullable by the cluster."]
    if name == "tfjob.yaml":
        lines.append("The operator sets TF_CONFIG in each pod; the trainer takes its task from it.")
    if name == "trainjob.yaml":
        lines += ["Each node's pod builds its TF_CONFIG itself (python -m tflab.trainer.tfconfig, the runtime's "
                  "command),",
                  "then runs the TrainJob's args: change args, not command, and keep numNodes and "
                  f"{cluster.NUM_NODES_ENV} equal."]
    if not settings.k8s_pvc:
        lines.append("Outputs go to each pod's emptyDir and are gone with the pod (K8S_PVC keeps them).")
    return "".join(f"# {line}\n" for line in lines)


# The YAML emitter: block style for mappings and lists; text plain where it cannot read back as
# anything else (a letter or / first, no ':' or '#', not a YAML 1.1 boolean), else as JSON (a JSON
# string is a valid YAML double-quoted scalar); numbers and booleans as JSON; multi-line text such
# as config.json as a literal block.
PLAIN = re.compile(r"[A-Za-z/][A-Za-z0-9_./-]*")
YAML_11_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}  # would not read back as text


def to_yaml_documents(documents: list[dict], comment: str = "") -> str:
    return comment + "".join("---\n" + "\n".join(yaml_lines(document, 0)) + "\n" for document in documents)


def yaml_lines(value, indent: int) -> list[str]:
    pad = " " * indent
    lines = []
    if isinstance(value, dict):
        for key, item in value.items():
            lines.extend(_entry(f"{pad}{_text(key)}:", item, indent + 2))
    else:
        for item in value:
            lines.extend(_entry(f"{pad}-", item, indent + 2, inline=True))
    return lines


def _entry(prefix: str, item, indent: int, inline: bool = False) -> list[str]:
    if isinstance(item, (dict, list)) and item:
        nested = yaml_lines(item, indent)
        if inline:  # "- first: ..." on the dash's line, the rest under it
            return [f"{prefix} {nested[0].lstrip()}", *nested[1:]]
        return [prefix, *nested]
    if isinstance(item, str) and _literal_block(item):
        return [f"{prefix} |" + ("" if item.endswith("\n") else "-"),
                *(" " * indent + line if line else "" for line in item.rstrip("\n").split("\n"))]
    return [f"{prefix} {_scalar(item)}"]


def _literal_block(text: str) -> bool:
    lines = text.rstrip("\n").split("\n")
    return (len(lines) > 1 and not text.endswith("\n\n") and not text.startswith((" ", "\n"))
            and all(line.isprintable() and line == line.rstrip() for line in lines))


def _text(text: str) -> str:
    plain = PLAIN.fullmatch(text) and text.lower() not in YAML_11_WORDS
    return text if plain else json.dumps(text)


def _scalar(value) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    if isinstance(value, float) and not math.isfinite(value):
        raise LabError(f"{value} has no place in a manifest")
    return _text(value) if isinstance(value, str) else json.dumps(value)  # null, true/false, numbers
