"""`make k8s`: the manifests parse, have the lab's shape, carry the TF_CONFIG the lab's one generator
makes (and the training operator would make), run locked down, and are written only where nothing is."""

import json
import os
import re
from pathlib import Path

import pytest
import yaml
from labtest.cli import lab_env, run_lab
from tflab.core import cluster
from tflab.core.settings import Settings, SettingsError
from tflab.k8s import runtime as trainer_runtime
from tflab.k8s import writer as k8s

# A cluster's image, as a user names it: K8S_IMAGE left empty is the image `make images` builds,
# which would take the engine (and on a fresh machine, a build) into these tests.
IMAGE = "K8S_IMAGE=registry.example/tflab:test"


def manifests(settings: Settings) -> dict[str, list[dict]]:
    """What `make k8s` writes, read back by a real YAML parser."""
    settings = settings if settings.k8s_image else settings.replace(k8s_image=IMAGE.partition("=")[2])
    the_cluster = k8s.manifests_cluster(settings)
    rendered, _ = k8s.render(settings, "test", the_cluster)
    return {name: list(yaml.safe_load_all(k8s.to_yaml_documents(documents, k8s.header(name, settings, the_cluster))))
            for name, documents in rendered.items()}


def of_kind(documents: list[dict], kind: str) -> list[dict]:
    return [document for document in documents if document["kind"] == kind]


def env_of(pod_template: dict) -> dict[str, str]:
    (container,) = pod_template["spec"]["containers"]
    return {entry["name"]: entry["value"] for entry in container["env"]}


def config_of(documents: list[dict]) -> dict:
    (config_map,) = of_kind(documents, "ConfigMap")
    return json.loads(config_map["data"]["config.json"])


def pod_templates(files: dict[str, list[dict]]) -> list[dict]:
    templates = [job["spec"]["template"] for job in of_kind(files["jobs.yaml"], "Job")]
    for tfjob in of_kind(files.get("tfjob.yaml", []), "TFJob"):
        templates += [replica["template"] for replica in tfjob["spec"]["tfReplicaSpecs"].values()]
    for trainjob_ in of_kind(files.get("trainjob.yaml", []), "TrainJob"):
        # the node's pod as Trainer v2 makes it: the runtime's, the TrainJob's spec.trainer applied
        (runtime,) = [d for d in files["trainjob.yaml"] if d["kind"].endswith("TrainingRuntime")]
        (node,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        template = node["template"]["spec"]["template"]
        pod = trainer_runtime.node_pod(template["spec"], trainjob_["spec"]["trainer"], "")
        templates.append({**template, "spec": pod})
    return templates


def operator_cluster_spec(tfjob: dict) -> dict[str, list[str]]:
    """The cluster spec the Kubeflow training operator v1 puts into a TFJob's pods, by its own rule
    (genClusterSpec and GetPortFromTFJob, pkg/controller.v1/tensorflow, release 1.9): per replica
    type, `<name>-<type lowercased>-<i>.<namespace>.svc:<port>`, the port being the `tfjob-port`
    of the container named `tensorflow`, else 2222; the Evaluator is left out ("not part of training
    cluster")."""
    spec = {}
    for replica_type, replica in tfjob["spec"]["tfReplicaSpecs"].items():
        if replica_type == "Evaluator":
            continue
        ports = [port["containerPort"] for container in replica["template"]["spec"]["containers"]
                 if container["name"] == "tensorflow" for port in container.get("ports", [])
                 if port["name"] == "tfjob-port"]
        port = ports[0] if ports else 2222
        spec[replica_type.lower()] = [
            f"{tfjob['metadata']['name']}-{replica_type.lower()}-{i}.{tfjob['metadata']['namespace']}.svc:{port}"
            for i in range(replica["replicas"])]
    return spec


def multiworker(workers: int, **changes) -> Settings:
    return Settings(strategy="multiworker", workers=workers, global_batch=64 * workers, **changes)


PARAMETER_SERVER = Settings(strategy="parameter_server", workers=3, ps=2)


def test_the_files_and_their_kinds():
    files = manifests(multiworker(2))
    assert [(d["apiVersion"], d["kind"]) for d in files["tfjob.yaml"]] == [
        ("v1", "ConfigMap"), ("networking.k8s.io/v1", "NetworkPolicy"), ("kubeflow.org/v1", "TFJob")]
    assert [(d["apiVersion"], d["kind"]) for d in files["jobs.yaml"]] == [
        ("v1", "ConfigMap"), ("networking.k8s.io/v1", "NetworkPolicy"),
        ("v1", "Service"), ("batch/v1", "Job"), ("v1", "Service"), ("batch/v1", "Job")]
    assert [(d["apiVersion"], d["kind"]) for d in files["trainjob.yaml"]] == [
        ("v1", "ConfigMap"), ("networking.k8s.io/v1", "NetworkPolicy"),
        ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"), ("trainer.kubeflow.org/v1alpha1", "TrainJob")]
    for documents in files.values():  # a ClusterTrainingRuntime is cluster-scoped: no namespace
        assert {d["metadata"].get("namespace") for d in documents if d["kind"] != "ClusterTrainingRuntime"} == \
            {"default"}
    assert "namespace" not in of_kind(files["trainjob.yaml"], "ClusterTrainingRuntime")[0]["metadata"]


def test_addresses_are_the_operators_service_names():
    settings = multiworker(2, k8s_name="mnist", k8s_namespace="team-a")
    spec = cluster.cluster_spec(settings, cluster.kubeflow_address("mnist", "team-a"))
    assert spec == {"worker": ["mnist-worker-0.team-a.svc:2222", "mnist-worker-1.team-a.svc:2222"]}
    files = manifests(settings)
    assert config_of(files["tfjob.yaml"])["cluster"] == spec
    assert operator_cluster_spec(of_kind(files["tfjob.yaml"], "TFJob")[0]) == spec


@pytest.mark.tensorflow
@pytest.mark.parametrize("settings", [multiworker(n) for n in (*range(1, 33), 64)] + [PARAMETER_SERVER],
                         ids=[f"multiworker-{n}" for n in (*range(1, 33), 64)] + ["parameter_server"])
def test_tf_config_is_the_generators_and_what_tensorflow_resolves(settings, monkeypatch):
    import tensorflow as tf

    spec = cluster.cluster_spec(settings, cluster.kubeflow_address(settings.k8s_name, settings.k8s_namespace))
    files = manifests(settings)

    # The TFJob: a replica type per job of the lab's, as many replicas as the lab has tasks in it,
    # and the operator's own spec for it is the ConfigMap's.
    (tfjob,) = of_kind(files["tfjob.yaml"], "TFJob")
    replicas = {kind.lower(): spec_["replicas"] for kind, spec_ in tfjob["spec"]["tfReplicaSpecs"].items()}
    assert replicas == cluster.job_sizes(settings)
    assert operator_cluster_spec(tfjob) == spec
    for name, documents in files.items():  # a TrainJob's nodes have JobSet's addresses
        expected = cluster.trainjob_cluster_spec(settings.k8s_name, settings.workers) if name == "trainjob.yaml" \
            else spec
        assert config_of(documents)["cluster"] == expected
        # Each pod's TF_CONFIG is its environment's (below): N of them in the ConfigMap would be
        # N squared addresses, past the ConfigMap's 1 MiB at about 150 workers.
        assert "tf_config" not in config_of(documents)

    # The plain Jobs: one per task, each with the generator's TF_CONFIG, which TensorFlow resolves
    # to the same spec and to the task itself.
    jobs = of_kind(files["jobs.yaml"], "Job")
    assert [job["metadata"]["labels"]["tflab/task"] for job in jobs] == cluster.build(settings).tasks
    for job in jobs:
        task = job["metadata"]["labels"]["tflab/task"]
        env = env_of(job["spec"]["template"])
        assert env["TFLAB_TASK"] == task
        assert json.loads(env["TF_CONFIG"]) == cluster.tf_config_for(spec, task)
        monkeypatch.setitem(os.environ, "TF_CONFIG", env["TF_CONFIG"])
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        assert resolver.cluster_spec().as_dict() == spec
        assert cluster.task_of(json.loads(env["TF_CONFIG"])) == task == f"{resolver.task_type}-{resolver.task_id}"


def test_the_tfjob_carries_tf_config_only_where_the_operator_sets_none():
    """The operator sets no TF_CONFIG for a job of one pod in all (its isDistributed), while the
    trainer expects config.json's cluster: there the template carries it."""
    (single,) = of_kind(manifests(multiworker(1))["tfjob.yaml"], "TFJob")
    (worker,) = single["spec"]["tfReplicaSpecs"].values()
    spec = cluster.cluster_spec(multiworker(1), cluster.kubeflow_address("tflab", "default"))
    assert json.loads(env_of(worker["template"])["TF_CONFIG"]) == cluster.tf_config_for(spec, "worker-0")
    for settings in (multiworker(2), PARAMETER_SERVER):
        (tfjob,) = of_kind(manifests(settings)["tfjob.yaml"], "TFJob")
        for replica in tfjob["spec"]["tfReplicaSpecs"].values():
            assert {"TF_CONFIG", "TFLAB_TASK"}.isdisjoint(env_of(replica["template"]))


def test_run_and_success_policies():
    (tfjob,) = of_kind(manifests(PARAMETER_SERVER)["tfjob.yaml"], "TFJob")
    assert tfjob["spec"]["runPolicy"] == {"cleanPodPolicy": "Running", "backoffLimit": 2, "activeDeadlineSeconds": 900}
    assert list(tfjob["spec"]["tfReplicaSpecs"]) == ["Chief", "Worker", "PS"]
    assert "successPolicy" not in tfjob["spec"]  # the chief's success is the job's
    (tfjob,) = of_kind(manifests(multiworker(2, restarts=0, timeout=60.5))["tfjob.yaml"], "TFJob")
    assert tfjob["spec"]["successPolicy"] == "AllWorkers"
    assert tfjob["spec"]["runPolicy"]["backoffLimit"] == 0
    assert tfjob["spec"]["runPolicy"]["activeDeadlineSeconds"] == 61
    # cleanPodPolicy Running only where servers would serve on (common/job.go DeletePodsAndServices)
    assert tfjob["spec"]["runPolicy"]["cleanPodPolicy"] == "None"


@pytest.mark.parametrize("policy, pod_policy", [("ExitCode", "Never"), ("OnFailure", "OnFailure"),
                                                ("Never", "Never")])
@pytest.mark.parametrize("restarts", [0, 3])
def test_restart_policy_and_restarts_are_written_as_they_are_set(policy, pod_policy, restarts):
    """RESTART_POLICY is every replica type's restartPolicy, ExitCode included (the operator's own
    policy: pkg/apis/kubeflow.org/v1/common_types.go RestartPolicyExitCode), and RESTARTS the
    backoffLimit, whatever either is: RESTART_POLICY=Never once came out OnFailure, and the
    default ExitCode too. A plain Job's pod takes only OnFailure or Never: ExitCode is a Never pod
    (as core/pod.go SetRestartPolicy makes it) whose podFailurePolicy fails the Job on 1-127."""
    files = manifests(multiworker(2, restart_policy=policy, restarts=restarts))
    (tfjob,) = of_kind(files["tfjob.yaml"], "TFJob")
    assert {r["restartPolicy"] for r in tfjob["spec"]["tfReplicaSpecs"].values()} == {policy}
    assert tfjob["spec"]["runPolicy"]["backoffLimit"] == restarts
    for job in of_kind(files["jobs.yaml"], "Job"):
        assert job["spec"]["backoffLimit"] == restarts
        assert job["spec"]["template"]["spec"]["restartPolicy"] == pod_policy
        rules = job["spec"].get("podFailurePolicy", {}).get("rules")
        if policy == "ExitCode":
            assert rules == [{"action": "FailJob", "onPodConditions": [], "onExitCodes": {
                "containerName": "tensorflow", "operator": "In", "values": list(range(1, 128))}}]
        else:
            assert rules is None


def test_the_default_restart_policy_is_exit_code():
    (tfjob,) = of_kind(manifests(multiworker(2))["tfjob.yaml"], "TFJob")
    assert {r["restartPolicy"] for r in tfjob["spec"]["tfReplicaSpecs"].values()} == {"ExitCode"}


def test_every_task_has_a_headless_service_of_its_address_selecting_its_pod_alone():
    files = manifests(PARAMETER_SERVER)
    spec = config_of(files["jobs.yaml"])["cluster"]
    hosts = {address.split(".")[0] for addresses in spec.values() for address in addresses}
    services = of_kind(files["jobs.yaml"], "Service")
    assert {s["metadata"]["name"] for s in services} == hosts
    pods = [job["spec"]["template"]["metadata"]["labels"] for job in of_kind(files["jobs.yaml"], "Job")]
    for service in services:
        assert service["spec"]["clusterIP"] == "None"
        assert "type" not in service["spec"]  # no NodePort, no LoadBalancer
        selector = service["spec"]["selector"].items()
        assert len([labels for labels in pods if selector <= labels.items()]) == 1
        assert service["spec"]["ports"] == [{"name": "tfjob-port", "port": 2222, "targetPort": 2222}]


def test_the_network_policy_admits_only_the_jobs_own_pods_and_dns():
    for documents in manifests(PARAMETER_SERVER).values():
        (policy,) = of_kind(documents, "NetworkPolicy")
        own = policy["spec"]["podSelector"]
        assert own == {"matchLabels": {"app.kubernetes.io/name": "tflab", "app.kubernetes.io/instance": "tflab"}}
        assert policy["spec"]["ingress"] == [{"from": [{"podSelector": own}]}]
        assert policy["spec"]["egress"][0] == {"to": [{"podSelector": own}]}
        assert {p["port"] for p in policy["spec"]["egress"][1]["ports"]} == {53}
    for template in pod_templates(manifests(PARAMETER_SERVER)):
        assert own["matchLabels"].items() <= template["metadata"]["labels"].items()
    for documents in manifests(PARAMETER_SERVER.replace(network="bridge")).values():
        assert not of_kind(documents, "NetworkPolicy")  # as NETWORK=bridge lifts Compose's internal network


@pytest.mark.parametrize("settings", [multiworker(3), PARAMETER_SERVER, Settings(strategy="mirrored")],
                         ids=["multiworker", "parameter_server", "mirrored"])
def test_every_pod_runs_locked_down(settings):
    templates = pod_templates(manifests(settings))
    assert templates
    for template in templates:
        pod = template["spec"]
        (container,) = pod["containers"]
        assert pod["automountServiceAccountToken"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1000
        assert container["securityContext"] == {
            "runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000, "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}
        mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        assert volumes[mounts["/tmp"]] == {"name": "tmp", "emptyDir": {}}
        assert volumes[mounts["/lab/config"]]["configMap"] == {"name": "tflab-config"}
        assert volumes[mounts["/lab/out"]] == {"name": "output", "emptyDir": {}}
        assert "hostNetwork" not in pod and "hostPort" not in json.dumps(container)
        env = env_of(template)
        assert env["TFLAB_CONFIG"] == "/lab/config/config.json"
        assert env["TFLAB_OUTPUT"] == "/lab/out/tflab"


def test_one_process_strategies_are_one_job_without_tf_config():
    for strategy in ("single", "mirrored"):
        files = manifests(Settings(strategy=strategy))
        assert list(files) == ["jobs.yaml"]
        assert [d["kind"] for d in files["jobs.yaml"]] == ["ConfigMap", "NetworkPolicy", "Job"]
        (job,) = of_kind(files["jobs.yaml"], "Job")
        assert job["metadata"]["name"] == f"tflab-{strategy}"
        env = env_of(job["spec"]["template"])
        assert env["TFLAB_TASK"] == strategy and "TF_CONFIG" not in env
        assert config_of(files["jobs.yaml"])["cluster"] == {}


def test_multiworker_backups_are_off_and_others_kept():
    """A multi-worker restore needs the chief's backup on every worker (backups.adopt_chief_backup):
    kept on a shared claim, off on each pod's own emptyDir."""
    assert config_of(manifests(multiworker(2))["jobs.yaml"])["settings"]["backup"] == "off"
    assert config_of(manifests(multiworker(2, k8s_pvc="out"))["tfjob.yaml"])["settings"]["backup"] == "epoch"
    assert config_of(manifests(multiworker(1))["jobs.yaml"])["settings"]["backup"] == "epoch"
    assert config_of(manifests(PARAMETER_SERVER)["tfjob.yaml"])["settings"]["backup"] == "epoch"


def test_limits_and_the_output_claim():
    files = manifests(multiworker(2, cpus=0.5, memory="512m", k8s_pvc="shared-runs"))
    for template in pod_templates(files):
        (container,) = template["spec"]["containers"]
        assert container["resources"] == {"limits": {"cpu": "500m", "memory": "512Mi"}}
        assert {"name": "output", "persistentVolumeClaim": {"claimName": "shared-runs"}} in template["spec"]["volumes"]
    for template in pod_templates(manifests(multiworker(2))):
        assert "resources" not in template["spec"]["containers"][0]


@pytest.mark.parametrize("cpus, memory, quantities", [
    ("0.01", "6m", {"cpu": "10m", "memory": "6Mi"}), ("0.015", "6144k", {"cpu": "15m", "memory": "6144Ki"}),
    ("64", "2g", {"cpu": "64000m", "memory": "2Gi"}),
])
def test_every_limit_the_settings_take_is_a_kubernetes_quantity(cpus, memory, quantities):
    """CPUS below a millicore (cpu: "0m") and memory in other scripts' digits ("\u0663Gi") are
    refused by the settings (tests/unit/test_settings.py); what they take renders as Kubernetes reads it."""
    settings = Settings.from_env({}, {"CPUS": cpus, "MEMORY": memory})
    for template in pod_templates(manifests(settings)):
        limits = template["spec"]["containers"][0]["resources"]["limits"]
        assert limits == quantities
        assert re.fullmatch(r"[1-9][0-9]*m", limits["cpu"]) and re.fullmatch(r"[1-9][0-9]*[KMG]i", limits["memory"])


@pytest.mark.parametrize("value", [
    "yes", "No", "on", "null", "true", "1", "0.5", "1e3", "-m", "a: b", "#x", "[x]", "{x}", "*x", "&x", "!x",
    "tflab-trainer:latest", "x #y", "", " lead", "trail ", "é", "line\nnext\n", "line\nnext", "two\n\n", "\tx",
    "1:20", "~", "%x", "@x", "`x", "'x'", '"x"', "|", ">",
])
def test_the_emitter_reads_back_as_written(value):
    document = {value or "k": value, "list": [value, {"k": value}, [], {}], "n": 3, "f": 0.25, "b": False, "z": None}
    assert yaml.safe_load(k8s.to_yaml_documents([document])) == document


@pytest.mark.parametrize("name, value, expected", [
    ("K8S_NAME", "My_Job", "K8S_NAME=My_Job is not allowed: expected lowercase letters, digits and '-'"),
    ("K8S_NAME", "1job", "K8S_NAME=1job is not allowed"),
    ("K8S_NAME", "job-", "K8S_NAME=job- is not allowed"),
    ("K8S_NAME", "a" * 54, f"K8S_NAME={'a' * 54} is not allowed: expected lowercase letters"),
    ("K8S_NAMESPACE", "Team", "K8S_NAMESPACE=Team is not allowed: expected a DNS-1123 label"),
    ("K8S_NAMESPACE", "a.b", "K8S_NAMESPACE=a.b is not allowed"),
    ("K8S_PVC", "-data", "K8S_PVC=-data is not allowed: expected the name of a PersistentVolumeClaim"),
    ("K8S_IMAGE", "my image", "K8S_IMAGE='my image' is not allowed: expected an image reference"),
])
def test_bad_names_are_refused(name, value, expected, tmp_path):
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({}, {name: value})
    assert str(refused.value).startswith(expected)
    runs = tmp_path / "runs"
    result = run_lab("k8s", f"RUNS_DIR={runs}", f"{name}={value}")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.splitlines() == [f"tflab: {refused.value}"]
    assert not runs.exists()


def test_good_names_are_taken():
    settings = Settings.from_env({}, {"K8S_NAME": "a" * 53, "K8S_NAMESPACE": "team-a", "K8S_PVC": "runs.shared"})
    assert (settings.k8s_name, settings.k8s_namespace, settings.k8s_pvc) == ("a" * 53, "team-a", "runs.shared")
    longest = cluster.kubeflow_service(settings.k8s_name, "worker", 31)
    assert len(longest) == 63


def test_the_cli_writes_the_files_and_refuses_an_existing_target(tmp_path):
    runs = tmp_path / "runs"
    arguments = ("k8s", f"RUNS_DIR={runs}", "RUN=mw3", "WORKERS=3", "GLOBAL_BATCH=66",
                 "K8S_IMAGE=registry.example/tflab:1")
    result = run_lab(*arguments, env=lab_env())
    assert result.returncode == 0, result.output
    folder = runs / "mw3"
    assert sorted(p.name for p in folder.iterdir()) == ["jobs.yaml", "tfjob.yaml", "trainjob.yaml"]
    assert f"kubectl apply -f {folder / 'tfjob.yaml'}" in result.stdout
    assert f"kubectl apply -f {folder / 'trainjob.yaml'}" in result.stdout
    assert f"kubectl apply -f {folder / 'jobs.yaml'}" in result.stdout
    assert "BACKUP=epoch is off in the manifests" in result.stdout
    jobs = list(yaml.safe_load_all((folder / "jobs.yaml").read_text()))
    assert len(of_kind(jobs, "Job")) == 3
    assert {t["spec"]["containers"][0]["image"] for t in pod_templates({"jobs.yaml": jobs})} == {
        "registry.example/tflab:1"}
    assert not (runs / "latest").exists()  # not a run: `make summary` keeps pointing at the last one

    written = {p.name: p.read_text() for p in folder.iterdir()}
    again = run_lab(*arguments, env=lab_env())
    assert (again.returncode, again.stdout) == (2, "")
    assert again.stderr.startswith("tflab: RUN=mw3 already exists")
    assert {p.name: p.read_text() for p in folder.iterdir()} == written


def test_a_fresh_folder_each_time_without_run(tmp_path):
    runs = tmp_path / "runs"
    for _ in range(2):
        assert run_lab("k8s", f"RUNS_DIR={runs}", "STRATEGY=single", IMAGE).returncode == 0
    folders = sorted(runs.iterdir())
    assert len(folders) == 2 and all(f.name.startswith("k8s-") for f in folders)
    assert [p.name for p in folders[0].iterdir()] == ["jobs.yaml"]


@pytest.mark.parametrize("setting, expected", [
    ("SCRIPT={script}", "SCRIPT={script} is not allowed with make k8s: the manifests run the lab's own trainer"),
    ("GPUS=all", "GPUS=all is not allowed with make k8s: expected GPUS empty"),
])
def test_what_the_manifests_cannot_carry_is_refused(tmp_path, setting, expected):
    script = Path(__file__).resolve().parents[2] / "examples/multiworker-tutorial/train.py"
    runs = tmp_path / "runs"
    result = run_lab("k8s", f"RUNS_DIR={runs}", setting.format(script=script))
    assert result.returncode == 2 and result.stderr.startswith(f"tflab: {expected.format(script=script)}")
    assert len(result.stderr.splitlines()) == 1 and not runs.exists()


def test_chief_and_evaluator_are_tfjob_replica_types_with_the_operators_cluster(tmp_path):
    settings = Settings(strategy="multiworker", chief=1, evaluator=1, workers=2, global_batch=96, k8s_pvc="out")
    files = manifests(settings)
    (tfjob,) = of_kind(files["tfjob.yaml"], "TFJob")
    replicas = tfjob["spec"]["tfReplicaSpecs"]
    assert {name: replica["replicas"] for name, replica in replicas.items()} == \
        {"Chief": 1, "Worker": 2, "Evaluator": 1}
    assert "successPolicy" not in tfjob["spec"]  # the chief's success is the job's
    spec = operator_cluster_spec(tfjob)
    assert spec == config_of(files["tfjob.yaml"])["cluster"]
    assert set(spec) == {"chief", "worker"}
    jobs = {job["metadata"]["name"]: job for job in of_kind(files["jobs.yaml"], "Job")}
    assert sorted(jobs) == ["tflab-chief-0", "tflab-evaluator-0", "tflab-worker-0", "tflab-worker-1"]
    evaluator_config = json.loads(env_of(jobs["tflab-evaluator-0"]["spec"]["template"])["TF_CONFIG"])
    assert evaluator_config == {"cluster": spec, "task": {"type": "evaluator", "index": 0}}
    with pytest.raises(Exception, match="EVALUATOR=1 is not allowed without K8S_PVC"):
        k8s.write(settings.replace(k8s_pvc="", runs_dir=str(tmp_path)))


def test_a_file_that_cannot_be_written_whole_is_not_written_at_all(tmp_path, monkeypatch, capsys):
    """A full disk once left jobs.yaml cut at 4 KiB, still valid objects for a partial apply: now
    each file is a temporary renamed over when whole, and the files go together or not at all."""
    import errno

    from tflab.core import runfolder
    from tflab.core.errors import LabError

    real_fsync, calls = os.fsync, []

    def full_on_the_second(descriptor):
        calls.append(descriptor)
        if len(calls) == 3:  # tfjob.yaml and trainjob.yaml written whole, then jobs.yaml
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(descriptor)

    monkeypatch.setattr(runfolder.os, "fsync", full_on_the_second)
    settings = Settings(runs_dir=str(tmp_path / "runs"), run="full", workers=2, k8s_image="registry.example/t:1")
    with pytest.raises(LabError, match=r"^cannot write .*/full/jobs\.yaml: No space left on device; nothing of it "
                                       r"was written$"):
        k8s.write(settings)
    assert len(calls) == 3
    assert not (tmp_path / "runs" / "full").exists()  # tfjob.yaml and trainjob.yaml, whole, went with it


def test_the_folder_is_claimed_exclusively(tmp_path, monkeypatch):
    """Another command that made the same RUN between the check and the write: refused in one line,
    and its folder left as it was."""
    from tflab.core import runfolder
    from tflab.core.errors import LabError

    runs = tmp_path / "runs"
    (runs / "taken").mkdir(parents=True)
    (runs / "taken" / "theirs.txt").write_text("theirs")
    monkeypatch.setattr(runfolder, "planned", lambda settings: runs / "taken")
    with pytest.raises(LabError, match=r"^RUN=taken already exists .*another run claimed it first"):
        k8s.write(Settings(runs_dir=str(runs), run="taken", workers=2, k8s_image="registry.example/t:1"))
    assert [p.name for p in (runs / "taken").iterdir()] == ["theirs.txt"]


def test_the_default_image_is_the_one_make_images_builds(tmp_path, monkeypatch, capsys):
    """K8S_IMAGE left empty names the trainer image's digest tag, as `make images` builds it (and
    builds it if need be), so that `make up TFJOB=` finds it; never a tag no image has."""
    asked = []
    tag = "tflab-trainer:cpu-0123456789ab"
    monkeypatch.setattr(k8s, "lab_image", lambda settings: asked.append(settings.gpus) or tag)
    assert k8s.write(Settings(runs_dir=str(tmp_path / "runs"), run="k", workers=2)) == 0
    text = (tmp_path / "runs/k/tfjob.yaml").read_text()
    assert 'image: "tflab-trainer:cpu-0123456789ab"' in text and "latest" not in text
    assert asked == [""]
    assert "K8S_IMAGE=tflab-trainer:cpu-0123456789ab is what `make images` builds here" in capsys.readouterr().out
    from tflab import images

    assert images.REPOSITORY == "tflab-trainer"  # the tag lab_image returns is images.ensure_image's
