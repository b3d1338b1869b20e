"""`tflab k8s TFJOB=tfjob.yaml`: a TFJob as the equivalent Kubeflow Trainer v2 TrainJob and runtime,
for a cluster that has moved to Trainer v2. Only what has a TrainJob form is turned; the rest is
said, one line each. `convert` is the one conversion: `tflab k8s TFJOB=` writes its text, and
`tflab migrate TFJOB=` (reports/migrate.py) writes the same text and replays both jobs.

Apart from trainjob.py, which reads a TrainJob for its replay; this turns a TFJob into one.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

from tflab.core import cluster
from tflab.core.errors import LabError
from tflab.core.settings import Settings
from tflab.engine import docker
from tflab.k8s import manifest, tfjob, tfoperator, trainerreleases, writer
from tflab.k8s.manifest import ManifestError
from tflab.k8s.pod import port_of
from tflab.k8s.tfjob import Plan
from tflab.k8s.trainjob import API_GROUP, API_VERSION, TFCONFIG_COMMANDS, plan_of
from tflab.k8s.writer import ANCESTOR_LABEL

TRAINJOB_FILE = "trainjob.yaml"


@dataclasses.dataclass(frozen=True)
class Conversion:
    """A TFJob and the TrainJob that stands for it: the TFJob's plan and objects, the TrainJob's
    objects and trainjob.yaml's text, and what did not carry over."""

    plan: Plan
    tfjob_documents: list
    documents: list
    text: str
    said: list

    def trainjob_plan(self, path: Path, settings: Settings) -> Plan:
        """The TrainJob's replay plan, from the objects in memory, with every check its replay makes
        (trainjob.plan_of): so that nothing is written for a TrainJob that could not be replayed."""
        try:
            return plan_of(path, copy.deepcopy(self.documents), [], settings)
        except ManifestError as error:
            raise ManifestError(f"TFJOB={self.plan.path}: its TrainJob {error}") from None


def convert(settings: Settings) -> Conversion:
    """Reads TFJOB, checked as the replay checks it, and turns it; ManifestError (one line, naming
    the file) where it has no TrainJob form. Writes nothing."""
    path = Path(settings.tfjob)
    plan = tfjob.load(settings)  # every check the replay makes, before anything is turned
    documents = tfjob.read_documents(path)
    try:
        converted, said = converted_documents(plan, documents, settings)
        refused = trainerreleases.first_refused(converted)  # nothing a checked Trainer release refuses
        if refused:
            raise ManifestError(refused)
    except ManifestError as error:
        raise ManifestError(f"TFJOB={path}: {error}; nothing was written") from None
    text = writer.to_yaml_documents(converted, "".join(f"# {line}\n" for line in (
        f"trainjob.yaml: the TFJob {plan.name} of {path.name} as a Kubeflow Trainer v2 TrainJob and its runtime.",
        "Written by `tflab k8s TFJOB=` (scripts/tflab/k8s/fromtfjob.py). Each node builds its TF_CONFIG itself "
        "(python -m tflab.trainer.tfconfig),",
        f"then runs the TrainJob's args: change args, not command, and keep numNodes and {cluster.NUM_NODES_ENV} "
        "equal.")))
    return Conversion(plan, documents, converted, text, said)


def from_tfjob(settings: Settings) -> int:
    """Reads TFJOB (checked as the replay checks it), writes RUNS_DIR/<RUN>/trainjob.yaml whole, and
    says what did not carry over; one line and nothing written where the TFJob has no TrainJob form."""
    from tflab import console
    from tflab.core import runfolder

    conversion = convert(settings)
    plan = conversion.plan
    folder = runfolder.planned(settings.replace(run=settings.run or f"k8s-{runfolder.new_run_id()}"))
    try:
        runfolder.make(folder, link_latest=False)
    except OSError as error:
        raise LabError(f"cannot make {folder}: {error.strerror or error}") from None
    try:
        writer.write_manifest(folder / TRAINJOB_FILE, conversion.text)
    except LabError:
        writer.remove_empty(folder)
        raise
    console.say(f"wrote {console.display_path(folder)}/{TRAINJOB_FILE}: TrainJob {plan.name} of {len(plan.tasks)} "
                f"node{'s' * (len(plan.tasks) != 1)} in namespace {plan.namespace}, from TFJob {plan.name}")
    console.say("not carried over: " + ("; ".join(conversion.said) if conversion.said else "nothing"))
    print(f"  kubectl apply -f {console.display_path(folder / TRAINJOB_FILE)}")
    return 0


def effective_command(image: str, command: list, args: list, said: list[str]) -> list:
    """What the tensorflow container runs, as the TrainJob's args (its command is tfconfig's): the
    TFJob's command and args, or, where it gives no command, the image's entrypoint before its args
    (or before the image's Cmd, where it gives none either), as the kubelet runs them, read from the
    image on this Docker engine, the image a replay runs."""
    if command:
        return command + args
    found = image_command(image)
    if found is None:
        raise ManifestError(f"the tensorflow container has no command, so a pod runs the entrypoint of {image}, and "
                            "that image is not on this Docker engine to read it from; the TrainJob's args are what "
                            "tflab.trainer.tfconfig runs: give the TFJob a command, or build or pull the image here")
    entrypoint, default_args = found
    if not entrypoint and not args and not default_args:
        raise ManifestError(f"the tensorflow container has no command, and {image} has neither an entrypoint nor a "
                            "Cmd: its pod would run nothing; expected a command")
    said.append(f"the tensorflow container's command, none: written out as {image}'s entrypoint "
                f"{manifest.shown(entrypoint, 120)}{'' if args else f' and Cmd {manifest.shown(default_args, 120)}'}"
                ", read from this Docker engine (the same image on a cluster runs the same)")
    return entrypoint + (args or default_args)


def image_command(image: str) -> tuple[list[str], list[str]] | None:
    """(Entrypoint, Cmd) of `image` on this Docker engine; None where it is not there (or no engine
    answers), or its config is not lists of strings."""
    try:
        result = docker.image_inspect(image, "{{json .Config}}")
        config = json.loads(result.stdout) if result.returncode == 0 else None
    except (LabError, OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    parts = [config.get("Entrypoint") or [], config.get("Cmd") or []]
    if not all(isinstance(part, list) and all(isinstance(word, str) for word in part) for part in parts):
        return None
    return parts[0], parts[1]


def converted_documents(plan: Plan, documents: list[dict], settings: Settings) -> tuple[list[dict], list[str]]:
    """(trainjob.yaml's objects, what did not carry over). The Worker replicas become the nodes; the
    container `tensorflow` the runtime's `node`, running tfconfig before the TFJob's command and args
    (the TrainJob's args). A lab config.json whose cluster is the TFJob's gets the TrainJob's."""

    (job,) = [d for d in documents if d.get("kind") == "TFJob"]
    replica_specs = job["spec"]["tfReplicaSpecs"]
    others = [kind for kind, replica in replica_specs.items() if kind != "Worker" and replica.get("replicas", 1)]
    if others:
        raise ManifestError(f"spec.tfReplicaSpecs.{others[0]} has no TrainJob form (a TrainJob's nodes share one pod "
                            "template and every node is a worker); expected Worker replicas only")
    worker = replica_specs.get("Worker") or {}
    nodes = worker.get("replicas", 1)
    if not nodes:
        raise ManifestError("spec.tfReplicaSpecs.Worker has no replica")
    name, namespace = plan.name, plan.namespace
    manifest.dns1123_label(cluster.trainjob_host(name, nodes - 1), f"the host name of node {nodes - 1}")
    said: list[str] = []
    template = copy.deepcopy(worker.get("template") or {})
    pod = template.get("spec") or {}
    port = port_of(pod, "pod")
    (container,) = [c for c in pod["containers"] if c.get("name") == tfoperator.CONTAINER]
    image = container["image"]
    args = effective_command(image, list(container.pop("command", None) or []),
                             list(container.pop("args", None) or []), said)
    container.update(name=cluster.TRAINJOB_NODE, command=list(TFCONFIG_COMMANDS[0]))
    env = [entry for entry in container.get("env") or [] if entry.get("name") != "TF_CONFIG"]
    if len(env) != len(container.get("env") or []):
        said.append("the tensorflow container's env TF_CONFIG (each node builds its own)")
    container["env"] = env
    if port != cluster.PORT:
        said.append(f"the tfjob-port {port} (tflab.trainer.tfconfig addresses every node at {cluster.PORT})")
    said.append(f"the image {image} must have tflab (python -m tflab.trainer.tfconfig): the lab's image has it")
    policy = worker.get("restartPolicy", "Never")
    run_policy = job["spec"].get("runPolicy") or {}
    # Neither a Job nor JobSet has "no limit": a TFJob without backoffLimit (the operator's no limit) takes RESTARTS.
    limit = plan.backoff_limit if plan.backoff_limit is not None else settings.restarts
    # OnFailure (Always) restarts a failed container in place, alone, on either side: the node Job's
    # backoffLimit counts those restarts (job_controller.go pastBackoffLimitOnFailure) as the
    # operator's counts them (core/job.go PastBackoffLimit), and JobSet restarts nothing more.
    # ExitCode: the Job fails at its first failed pod, and JobSet's maxRestarts restarts the job.
    # Never: the operator fails the job at its first failed pod (UpdateJobStatus), so nothing does.
    in_place = policy in ("Always", "OnFailure")
    job_limit, max_restarts = (limit, 0) if in_place else (0, 0 if policy == "Never" else limit)
    if policy == "ExitCode":
        said.append("restartPolicy ExitCode's permanent codes 1-127 (JobSet restarts the whole job on any failure)")
    if policy == "Always":
        said.append("restartPolicy Always (a Job's pod takes OnFailure or Never: OnFailure restarts a failed container "
                    "as Always does, and leaves a node that succeeded done)")
    pod["restartPolicy"] = "OnFailure" if in_place else "Never"
    for key in sorted(set(run_policy) - {"backoffLimit", "activeDeadlineSeconds"}):
        said.append(f"spec.runPolicy.{key}")
    said += [f"spec.{key}" for key in sorted(set(job["spec"]) - {"tfReplicaSpecs", "runPolicy"})]
    if "backoffLimit" not in run_policy and policy != "Never":
        where = "the node Job's backoffLimit" if in_place else "maxRestarts"
        said.append(f"no backoffLimit (no limit to the operator): {where} is {limit}, RESTARTS's")
    config_maps = []
    for document in documents:
        if document.get("kind") == "TFJob":
            continue
        document = copy.deepcopy(document)
        data = document.get("data") or {}
        if document.get("kind") == "ConfigMap" and isinstance(data.get("config.json"), str):
            data["config.json"] = readdressed_config(data["config.json"], plan.spec, name, nodes, said)
        config_maps.append(document)
    runtime_kind = writer.RUNTIME_KINDS[settings.k8s_runtime]
    runtime_metadata: dict[str, Any] = {"name": writer.runtime_name(name), "labels": dict(writer.FRAMEWORK_LABEL)}
    if runtime_kind == "TrainingRuntime":
        runtime_metadata["namespace"] = namespace
    job_template = {"metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                    "spec": {"backoffLimit": job_limit, "completionMode": "Indexed", "template": template}}
    runtime = {"apiVersion": API_VERSION, "kind": runtime_kind, "metadata": runtime_metadata,
               "spec": {"mlPolicy": {"numNodes": nodes},
                        "template": {"spec": {"failurePolicy": {"maxRestarts": max_restarts},
                                              "replicatedJobs": [{"name": cluster.TRAINJOB_NODE,
                                                                  "template": job_template}]}}}}
    spec = {"runtimeRef": {"name": runtime_metadata["name"], "apiGroup": API_GROUP, "kind": runtime_kind}}
    if run_policy.get("activeDeadlineSeconds"):
        spec["activeDeadlineSeconds"] = run_policy["activeDeadlineSeconds"]
    spec["trainer"] = {"image": image, "args": args, "numNodes": nodes,
                       "env": [{"name": cluster.NUM_NODES_ENV, "value": str(nodes)}]}
    metadata = {key: value for key, value in job["metadata"].items() if key in ("name", "namespace", "labels")}
    trainjob_ = {"apiVersion": API_VERSION, "kind": "TrainJob", "metadata": metadata, "spec": spec}
    return config_maps + [runtime, trainjob_], said


def readdressed_config(text: str, tfjob_spec: dict, name: str, nodes: int, said: list[str]) -> str:
    """A lab config.json recording the TFJob's cluster, with the TrainJob's instead (the trainer
    checks TF_CONFIG against it); any other text as it is."""
    try:
        config = json.loads(text)
    except ValueError:
        return text
    if not isinstance(config, dict) or config.get("cluster") != tfjob_spec:
        return text
    spec = cluster.trainjob_cluster_spec(name, nodes)
    config["cluster"] = spec
    if isinstance(config.get("tf_config"), dict):
        config["tf_config"] = {task: cluster.tf_config_for(spec, task) for task in config["tf_config"]}
    said.append("config.json's cluster (the TFJob's addresses; now the TrainJob's)")
    return json.dumps(config, indent=2) + "\n"
