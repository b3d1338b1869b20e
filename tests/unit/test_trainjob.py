"""Kubeflow Trainer v2: the TrainJob and TensorFlow runtime `make k8s` writes, the TF_CONFIG each
node builds in its pod (trainer/tfconfig.py), and `tflab up TRAINJOB=` reading one as Trainer v2.3.0
would run it (runtime/core/trainingruntime.go newRuntimeInfo, plugins/jobset/builder.go Trainer,
plugins/plainml/plainml.go, plugins/jobset/jobset.go IdentifyPodNetwork): what it cannot replay is
one line, what it does not apply is listed."""

import copy
import json
import socket

import pytest
import yaml
from labtest.cli import assert_refused, lab_env, run_lab
from tflab.core import cluster
from tflab.core.errors import LabError
from tflab.core.settings import Settings
from tflab.k8s import manifest, trainerreleases, trainjob
from tflab.k8s import writer as k8s
from tflab.trainer import tfconfig

IMAGE = "registry.example/tflab:test"


def written(settings: Settings) -> dict[str, list[dict]]:
    settings = settings.replace(k8s_image=IMAGE)
    rendered, _ = k8s.render(settings, "test", k8s.manifests_cluster(settings))
    return {name: list(yaml.safe_load_all(k8s.to_yaml_documents(documents))) for name, documents in rendered.items()}


def of_kind(documents, kind):
    return [document for document in documents if document["kind"] == kind]


def save(tmp_path, documents, name="trainjob.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    return path


def load(tmp_path, documents, runtime=None, **settings):
    path = save(tmp_path, documents)
    runtime_path = str(save(tmp_path, runtime, "runtime.yaml")) if runtime is not None else ""
    return trainjob.load(Settings(trainjob=str(path), runtime=runtime_path, **settings))


THREE = Settings(workers=3, global_batch=96)


@pytest.fixture
def three() -> list[dict]:
    return written(THREE)["trainjob.yaml"]


# --- TF_CONFIG from the pod's index and hostname -------------------------------------------------

def test_tf_config_from_index_and_hostname_is_jobsets_addresses():
    env = cluster.trainjob_tf_config_env("mnist-node-0-2", 2, 3)
    assert env["TFLAB_TASK"] == "worker-2"
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"worker": ["mnist-node-0-0.mnist:2222", "mnist-node-0-1.mnist:2222", "mnist-node-0-2.mnist:2222"]},
        "task": {"type": "worker", "index": 2}}
    # the JAX plugin's coordinator, node 0, as Trainer v2 writes it: <trainjob>-node-0-0.<trainjob>:<port>
    assert json.loads(env["TF_CONFIG"])["cluster"]["worker"][0] == f"{'mnist'}-{'node'}-0-0.{'mnist'}:2222"
    assert cluster.trainjob_name("a-node-0-node-0-1", 1) == "a-node-0"  # a name may hold -node-0 itself


@pytest.mark.parametrize("hostname, index, nodes, expected", [
    ("mnist-node-0-1", 2, 3, "is not <trainjob>-node-0-2"),
    ("-node-0-0", 0, 1, "is not <trainjob>-node-0-0"),
    ("mnist-node-0-3", 3, 3, "node 3 is not one of 3 nodes"),
    ("mnist-worker-0", 0, 2, "is not <trainjob>-node-0-0"),
])
def test_tf_config_refuses_what_jobset_would_not_give(hostname, index, nodes, expected):
    with pytest.raises(ValueError, match=expected):
        cluster.trainjob_tf_config_env(hostname, index, nodes)


def test_tfconfig_sets_tf_config_then_runs_the_command_as_given(monkeypatch, capsys):
    ran = {}
    monkeypatch.setattr(socket, "gethostname", lambda: "mnist-node-0-1")
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")
    monkeypatch.setenv("TFLAB_NUM_NODES", "2")
    monkeypatch.setattr(tfconfig.os, "execvpe", lambda file, argv, env: ran.update(file=file, argv=argv, env=env))
    assert tfconfig.main(["--", "python", "my train.py", "--epochs", "3"]) is None
    assert ran["file"] == "python" and ran["argv"] == ["python", "my train.py", "--epochs", "3"]
    assert ran["env"]["TF_CONFIG"] == cluster.trainjob_tf_config_env("mnist-node-0-1", 1, 2)["TF_CONFIG"]
    assert ran["env"]["TFLAB_TASK"] == "worker-1"
    assert "[worker-1] TF_CONFIG=" in capsys.readouterr().err


@pytest.mark.parametrize("env, argv, expected", [
    ({"TFLAB_NUM_NODES": "2"}, ["true"], "JOB_COMPLETION_INDEX is '', expected a number"),
    ({"JOB_COMPLETION_INDEX": "x", "TFLAB_NUM_NODES": "2"}, ["true"], "JOB_COMPLETION_INDEX is 'x'"),
    ({"JOB_COMPLETION_INDEX": "0"}, ["true"], "TFLAB_NUM_NODES is '', expected the TrainJob's numNodes"),
    ({"JOB_COMPLETION_INDEX": "0", "TFLAB_NUM_NODES": "0"}, ["true"], "TFLAB_NUM_NODES is '0'"),
    ({"JOB_COMPLETION_INDEX": "2", "TFLAB_NUM_NODES": "2"}, ["true"], "node 2 is not one of 2 nodes"),
    ({"JOB_COMPLETION_INDEX": "0", "TFLAB_NUM_NODES": "1"}, [], "expected the command to run after it"),
])
def test_tfconfig_refuses_a_wrong_environment_in_one_line(env, argv, expected, monkeypatch, capsys):
    monkeypatch.setattr(socket, "gethostname", lambda: "mnist-node-0-0")
    for name in ("JOB_COMPLETION_INDEX", "TFLAB_NUM_NODES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(tfconfig.os, "execvpe", lambda *args: pytest.fail("ran the command"))
    assert tfconfig.main(argv) == tfconfig.USAGE
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("tflab.trainer.tfconfig: ") and expected in error, error


# --- the writer ----------------------------------------------------------------------------------

def test_the_trainjob_for_three_workers(three):
    assert [d["kind"] for d in three] == ["ConfigMap", "NetworkPolicy", "ClusterTrainingRuntime", "TrainJob"]
    (runtime,) = of_kind(three, "ClusterTrainingRuntime")
    (job,) = of_kind(three, "TrainJob")
    assert job["spec"]["runtimeRef"] == {"name": "tflab-tensorflow", "apiGroup": "trainer.kubeflow.org",
                                         "kind": "ClusterTrainingRuntime"}
    assert job["spec"]["trainer"] == {"image": IMAGE, "args": ["python", "-m", "tflab.train"], "numNodes": 3,
                                      "env": [{"name": "TFLAB_NUM_NODES", "value": "3"}]}
    assert job["spec"]["activeDeadlineSeconds"] == 900
    assert runtime["spec"]["mlPolicy"] == {"numNodes": 3}  # no framework plugin: Trainer v2's PlainML
    assert runtime["metadata"]["labels"]["trainer.kubeflow.org/framework"] == "tensorflow"
    jobset = runtime["spec"]["template"]["spec"]
    assert jobset["failurePolicy"] == {"maxRestarts": THREE.restarts}
    (node,) = jobset["replicatedJobs"]
    assert node["name"] == "node"
    assert node["template"]["metadata"]["labels"] == {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    assert node["template"]["spec"]["backoffLimit"] == 0 and node["template"]["spec"]["completionMode"] == "Indexed"
    (container,) = node["template"]["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "node" and container["command"] == ["python", "-m", "tflab.trainer.tfconfig"]
    config = json.loads(of_kind(three, "ConfigMap")[0]["data"]["config.json"])
    assert config["cluster"] == cluster.trainjob_cluster_spec("tflab", 3)


def test_a_namespaced_runtime_and_limits():
    files = written(THREE.replace(k8s_runtime="namespaced", k8s_namespace="team-a", cpus=1.5, memory="2g"))
    (runtime,) = of_kind(files["trainjob.yaml"], "TrainingRuntime")
    (job,) = of_kind(files["trainjob.yaml"], "TrainJob")
    assert runtime["metadata"]["namespace"] == job["metadata"]["namespace"] == "team-a"
    assert job["spec"]["runtimeRef"]["kind"] == "TrainingRuntime"
    assert job["spec"]["trainer"]["resourcesPerNode"] == {"limits": {"cpu": "1500m", "memory": "2Gi"}}


@pytest.mark.parametrize("settings, expected", [
    (Settings(strategy="parameter_server", workers=2, ps=1), "STRATEGY=parameter_server has no TrainJob form"),
    (Settings(chief=1, workers=2, global_batch=96), "CHIEF=1 has no TrainJob form"),
    (Settings(evaluator=1, workers=2, k8s_pvc="shared"), "EVALUATOR=1 has no TrainJob form"),
])
def test_what_has_no_trainjob_form_is_one_line_and_no_file(settings, expected):
    settings = settings.replace(k8s_image=IMAGE)
    rendered, notes = k8s.render(settings, "test", k8s.manifests_cluster(settings))
    assert "trainjob.yaml" not in rendered and "tfjob.yaml" in rendered
    (note,) = [n for n in notes if "trainjob.yaml" in n]
    assert note.startswith(f"trainjob.yaml is not written: {expected}") and "\n" not in note


# --- the replay's plan ---------------------------------------------------------------------------

def test_the_written_trainjob_is_planned_as_its_pods_would_run(three, tmp_path):
    plan = load(tmp_path, three)
    assert (plan.kind, plan.name, plan.namespace, plan.backoff_limit, plan.timeout) == \
        ("TrainJob", "tflab", "default", THREE.restarts, 900.0)
    assert [t.name for t in plan.tasks] == ["worker-0", "worker-1", "worker-2"]
    assert [t.host for t in plan.tasks] == ["tflab-node-0-0", "tflab-node-0-1", "tflab-node-0-2"]
    assert plan.spec == cluster.trainjob_cluster_spec("tflab", 3)
    for task in plan.tasks:
        env = task.service["environment"]
        assert env["JOB_COMPLETION_INDEX"] == str(task.index) and "TF_CONFIG" not in env  # built in the container
        assert task.tf_config == cluster.trainjob_tf_config_env(task.host, task.index, 3)["TF_CONFIG"]
        assert task.service["entrypoint"] == ["python", "-m", "tflab.trainer.tfconfig"]
        assert task.service["command"] == ["python", "-m", "tflab.train"]
        assert f"{task.host}.tflab" in task.service["networks"]["cluster"]["aliases"]
        assert task.service["cap_drop"] == ["ALL"] and task.service["read_only"] is True
    assert plan.not_applied[0] == "NetworkPolicy tflab-tasks-only"
    assert plan.chief == ["worker-0", "worker-1", "worker-2"]  # JobSet's success: every node completed


def test_claims_for_a_trainjob_is_refused_in_the_trainjobs_words(three, tmp_path):
    """CLAIMS naming a claim no node mounts was refused naming TFJOB= and "the TFJob"."""
    from tflab.replay.volumes import host_folders

    plan = load(tmp_path, three)
    with pytest.raises(LabError) as refused:
        host_folders(plan, Settings(trainjob=str(plan.path), claims=f"data={tmp_path}"))
    assert str(refused.value) == (f"CLAIMS names the claim data, which no replica of TRAINJOB={plan.path} mounts; "
                                  "expected no CLAIMS: the TrainJob mounts no claim")


def test_the_trainjobs_settings_override_the_runtimes(three, tmp_path):
    documents = copy.deepcopy(three)
    (job,) = of_kind(documents, "TrainJob")
    job["spec"]["trainer"].update(numNodes=2, image="mine:2", command=["python", "train.py"], args=["--fast"],
                                  env=[{"name": "TFLAB_NUM_NODES", "value": "2"}, {"name": "TF_USE_LEGACY_KERAS",
                                                                                   "value": "0"}],
                                  resourcesPerNode={"limits": {"cpu": "500m"}, "requests": {"cpu": "100m"}})
    plan = load(tmp_path, documents)
    assert len(plan.tasks) == 2
    service = plan.tasks[0].service
    assert (service["image"], service["entrypoint"], service["command"]) == ("mine:2", ["python", "train.py"],
                                                                           ["--fast"])
    assert service["environment"]["TF_USE_LEGACY_KERAS"] == "0" and service["cpus"] == 0.5
    assert plan.tasks[0].tf_config == ""  # its own command: no tfconfig, no TF_CONFIG, as on a cluster
    assert any(line.startswith("TF_CONFIG: the node container's command is not") for line in plan.not_applied)
    assert any("resources.requests" in line for line in plan.not_applied)


def test_the_runtime_may_be_in_a_file_of_its_own(three, tmp_path):
    runtime = of_kind(three, "ClusterTrainingRuntime")
    rest = [d for d in three if d["kind"] != "ClusterTrainingRuntime"]
    assert len(load(tmp_path, rest, runtime=runtime).tasks) == 3
    with pytest.raises(manifest.ManifestError, match="an unknown runtime: it is in neither TRAINJOB's file nor "
                                                     "RUNTIME's; give RUNTIME="):
        load(tmp_path, rest)


def refused(tmp_path, documents, *expected, runtime=None):
    with pytest.raises(manifest.ManifestError) as error:
        load(tmp_path, documents, runtime=runtime)
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"TRAINJOB={tmp_path / 'trainjob.yaml'}"), message
    for part in expected:
        assert part in message, message
    return message


def edited(documents, kind, edit):
    documents = copy.deepcopy(documents)
    edit(of_kind(documents, kind)[0])
    return documents


def node_job(runtime):
    return runtime["spec"]["template"]["spec"]["replicatedJobs"][0]


@pytest.mark.parametrize("kind, edit, expected", [
    ("ClusterTrainingRuntime", lambda r: r["spec"]["mlPolicy"].update(torch={}),
     "ClusterTrainingRuntime tflab-tensorflow is a torch runtime (spec.mlPolicy.torch); the lab replays TensorFlow"),
    ("ClusterTrainingRuntime", lambda r: r["spec"]["mlPolicy"].update(jax={}), "is a jax runtime"),
    ("TrainJob", lambda j: j["spec"]["runtimeRef"].update(name="torch-distributed"),
     "spec.runtimeRef names ClusterTrainingRuntime \"torch-distributed\", an unknown runtime"),
    ("TrainJob", lambda j: j["spec"]["runtimeRef"].update(kind="TrainingRuntime"),
     "names TrainingRuntime \"tflab-tensorflow\" in namespace default, an unknown runtime"),
    ("TrainJob", lambda j: j["spec"]["runtimeRef"].update(apiGroup="example.com"), "an unknown runtime; expected"),
    ("TrainJob", lambda j: j["spec"].update(suspend=True), "spec.suspend is true"),
    ("TrainJob", lambda j: j["spec"].update(initializer={"dataset": {"storageUri": "hf://x"}}),
     "spec.initializer is not supported"),
    ("TrainJob", lambda j: j["spec"].update(runtimePatches=[{"manager": "me"}]),
     "spec.runtimePatches is not supported"),
    ("TrainJob", lambda j: j["spec"]["trainer"].update(numNodes=4),
     "TFLAB_NUM_NODES is \"3\" and the job has 4 nodes (spec.trainer.numNodes)"),
    ("TrainJob", lambda j: j["spec"]["trainer"].update(numNodes=0), "spec.trainer.numNodes is 0, expected 1..32"),
    ("TrainJob", lambda j: j["spec"]["trainer"].update(numNodes="3"), "spec.trainer.numNodes is \"3\", expected an "
                                                                     "integer"),
    ("TrainJob", lambda j: j.update(apiVersion="trainer.kubeflow.org/v1"),
     "TrainJob tflab: apiVersion is \"trainer.kubeflow.org/v1\", expected trainer.kubeflow.org/v1alpha1"),
    ("TrainJob", lambda j: j["metadata"].update(name="a" * 60), "the host name of node 0"),
    ("ClusterTrainingRuntime", lambda r: r["spec"]["template"]["spec"].update(network={"subdomain": "other"}),
     "network.subdomain is \"other\""),
    ("ClusterTrainingRuntime", lambda r: r["spec"]["template"]["spec"]["replicatedJobs"].insert(0, {
        "name": "dataset-initializer", "template": {"metadata": {"labels": {
            "trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}}, "spec": {"template": {"spec": {
                "containers": [{"name": "dataset-initializer", "image": "x"}]}}}}}),
     "replicatedJobs[0] (\"dataset-initializer\") is not the trainer's"),
    ("ClusterTrainingRuntime", lambda r: node_job(r).update(name="trainer"), "replicatedJobs[0].name is \"trainer\""),
    ("ClusterTrainingRuntime", lambda r: node_job(r)["template"]["spec"].update(completionMode="NonIndexed"),
     "completionMode is \"NonIndexed\""),
    ("ClusterTrainingRuntime", lambda r: node_job(r)["template"]["spec"]["template"]["spec"]["containers"][0].update(
        name="tensorflow"), "has no container named node"),
    ("ClusterTrainingRuntime", lambda r: (
        node_job(r)["template"]["spec"]["template"]["spec"]["volumes"].append(
            {"name": "host", "hostPath": {"path": "/"}}),
        node_job(r)["template"]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"].append(
            {"name": "host", "mountPath": "/host"})), "is a hostPath volume"),
])
def test_what_the_lab_cannot_replay_is_one_line(three, tmp_path, kind, edit, expected):
    refused(tmp_path, edited(three, kind, edit), expected)


def test_two_trainjobs_or_a_trainjob_in_the_runtimes_file_are_refused(three, tmp_path):
    (job,) = of_kind(three, "TrainJob")
    refused(tmp_path, three + [job], "holds 2 TrainJobs, expected exactly one")
    refused(tmp_path, three, "RUNTIME's file holds a TrainJob, expected only runtimes there", runtime=[job])


def test_runtime_naming_the_trainjobs_own_file_reads_it_once(three, tmp_path):
    """`make up TRAINJOB=f.yaml RUNTIME=f.yaml`, f.yaml as `make k8s` writes it (both in one file):
    the same file, by any name, is one file, not a second TrainJob."""
    path = save(tmp_path, three)
    (tmp_path / "link.yaml").symlink_to(path)
    for runtime in (path, tmp_path / "link.yaml", tmp_path / "." / "trainjob.yaml"):
        plan = trainjob.load(Settings(trainjob=str(path), runtime=str(runtime)))
        assert len(plan.tasks) == 3, runtime
    # a copy is another file: its TrainJob is a second one, refused as before
    (tmp_path / "copy.yaml").write_text(path.read_text())
    with pytest.raises(manifest.ManifestError, match="RUNTIME's file holds a TrainJob"):
        trainjob.load(Settings(trainjob=str(path), runtime=str(tmp_path / "copy.yaml")))


def test_what_it_reads_and_does_not_apply_is_listed(three, tmp_path):
    documents = edited(three, "ClusterTrainingRuntime", lambda r: (
        r["spec"].update(podGroupPolicy={"coscheduling": {"scheduleTimeoutSeconds": 60}}),
        r["spec"]["template"]["spec"].update(ttlSecondsAfterFinished=60),
        node_job(r)["template"]["spec"].update(backoffLimit=2, parallelism=5)))
    # A field no schema knows is listed, as a TFJob's is (tfjob.py): the API server's strict
    # validation would refuse it, and the replay says it ran without it.
    documents = edited(documents, "TrainJob", lambda j: j["spec"]["trainer"].update(numNode=3, numProcPerNode=2))
    plan = load(tmp_path, documents)
    lines = " | ".join(plan.not_applied)
    for field in ("spec.podGroupPolicy", "spec.template.spec.ttlSecondsAfterFinished",
                  "template.spec.parallelism (Trainer v2 sets it",
                  "spec.trainer.numNode |", "spec.trainer.numProcPerNode"):
        assert field in lines, lines
    # the node Job's backoffLimit is applied (jobcontroller.py), so not listed
    assert "backoffLimit" not in lines and plan.node_backoff_limit == 2


@pytest.mark.parametrize("job_spec, pod_policy, limit, policy", [
    ({}, None, 6, "OnFailure"),  # defaults.go SetDefaults_Job: 6; jobset_webhook.go Default: OnFailure
    ({"backoffLimitPerIndex": 1}, "Never", 2**31 - 1, "Never"),  # SetDefaults_Job: MaxInt32 with a per-index limit
    ({"backoffLimit": 0}, "Never", 0, "Never"),  # as make k8s writes it
])
def test_the_node_jobs_backoff_limit_and_restart_policy_as_the_api_server_defaults_them(three, tmp_path, job_spec,
                                                                                      pod_policy, limit, policy):
    """Neither Trainer v2.3.0 nor JobSet v0.12.0 sets the node Job's backoffLimit: Kubernetes'
    pkg/apis/batch/v1/defaults.go SetDefaults_Job makes it 6 (MaxInt32 where backoffLimitPerIndex
    is set); JobSet's pkg/webhooks/jobset_webhook.go Default makes the pod's restartPolicy OnFailure."""
    def edit(runtime):
        spec = node_job(runtime)["template"]["spec"]
        spec.pop("backoffLimit", None)
        spec.update(job_spec)
        spec["template"]["spec"].pop("restartPolicy", None)
        if pod_policy:
            spec["template"]["spec"]["restartPolicy"] = pod_policy
    plan = load(tmp_path, edited(three, "ClusterTrainingRuntime", edit))
    assert (plan.node_backoff_limit, plan.policies["worker"]) == (limit, policy)


def test_a_node_pod_under_always_or_a_negative_backoff_limit_is_refused(three, tmp_path):
    """The API server's Job validation: a Job's pod takes OnFailure or Never; backoffLimit >= 0."""
    always = edited(three, "ClusterTrainingRuntime",
                    lambda r: node_job(r)["template"]["spec"]["template"]["spec"].update(restartPolicy="Always"))
    with pytest.raises(manifest.ManifestError, match="restartPolicy is \"Always\": a Job.s pod takes OnFailure or"):
        load(tmp_path, always)
    negative = edited(three, "ClusterTrainingRuntime",
                      lambda r: node_job(r)["template"]["spec"].update(backoffLimit=-1))
    with pytest.raises(manifest.ManifestError, match="backoffLimit is -1, expected 0 or more"):
        load(tmp_path, negative)


def test_the_cli_refuses_settings_the_trainjob_decides(three, tmp_path):
    path = save(tmp_path, three)
    runs = tmp_path / "runs"
    for setting, expected in [("WORKERS=4", f"WORKERS=4 does not apply with TRAINJOB={path}: the TrainJob's "
                                            "spec.trainer.numNodes sets the nodes"),
                              ("RESTARTS=1", "RESTARTS=1 does not apply with TRAINJOB="),
                              ("EPOCHS=3", "EPOCHS=3 does not apply with TRAINJOB="),
                              (f"TFJOB={path}", f"TFJOB={path} and TRAINJOB={path} together"),
                              ("BACKEND=local", "BACKEND=local does not apply with TRAINJOB=")]:
        assert_refused(run_lab("up", f"TRAINJOB={path}", f"RUNS_DIR={runs}", setting, env=lab_env()), expected, runs)
    assert_refused(run_lab("up", f"RUNTIME={path}", f"RUNS_DIR={runs}", env=lab_env()),
                   f"RUNTIME={path} applies only with TRAINJOB=", runs)
    assert_refused(run_lab("compare", f"TRAINJOB={path}", f"RUNS_DIR={runs}", env=lab_env()),
                   f"TRAINJOB={path} is not allowed with make compare: only make up (tflab up), make chaos and "
                   "make matrix replay a TrainJob", runs)
    assert_refused(run_lab("chaos", f"TRAINJOB={path}", f"RUNS_DIR={runs}", "EPOCHS=3", env=lab_env()),
                   "EPOCHS=3 does not apply with TRAINJOB=", runs)


# --- a TFJob turned into a TrainJob: tflab k8s TFJOB= ---------------------------------------------

def test_a_tfjob_becomes_the_trainjob_make_k8s_writes(tmp_path):
    files = written(THREE)
    tfjob_path = save(tmp_path, files["tfjob.yaml"], "tfjob.yaml")
    runs = tmp_path / "runs"
    result = run_lab("k8s", f"TFJOB={tfjob_path}", f"RUNS_DIR={runs}", "RUN=converted", env=lab_env())
    assert result.returncode == 0, result.output
    said = [line for line in result.stdout.splitlines() if line.startswith("tflab: not carried over: ")]
    assert len(said) == 1 and "spec.runPolicy.cleanPodPolicy" in said[0] and "spec.successPolicy" in said[0]
    assert "config.json's cluster (the TFJob's addresses; now the TrainJob's)" in said[0]
    converted = list(yaml.safe_load_all((runs / "converted" / "trainjob.yaml").read_text()))
    ours = files["trainjob.yaml"]
    (job,), (expected_job,) = of_kind(converted, "TrainJob"), of_kind(ours, "TrainJob")
    assert job["spec"] == expected_job["spec"]
    (runtime,) = of_kind(converted, "ClusterTrainingRuntime")
    (expected_runtime,) = of_kind(ours, "ClusterTrainingRuntime")
    assert runtime["spec"]["mlPolicy"] == expected_runtime["spec"]["mlPolicy"]
    assert runtime["spec"]["template"]["spec"]["failurePolicy"] == expected_runtime["spec"]["template"]["spec"][
        "failurePolicy"]
    config = json.loads(of_kind(converted, "ConfigMap")[0]["data"]["config.json"])
    assert config["cluster"] == cluster.trainjob_cluster_spec("tflab", 3)
    plan = trainjob.load(Settings(trainjob=str(runs / "converted" / "trainjob.yaml")))
    assert [t.tf_config for t in plan.tasks] == [t.tf_config for t in load(tmp_path, ours).tasks]


def test_a_tfjob_with_a_chief_is_one_line_and_nothing_written(tmp_path):
    tfjob_path = save(tmp_path, written(Settings(chief=1, workers=2, global_batch=96))["tfjob.yaml"], "tfjob.yaml")
    runs = tmp_path / "runs"
    assert_refused(run_lab("k8s", f"TFJOB={tfjob_path}", f"RUNS_DIR={runs}", env=lab_env()),
                   f"TFJOB={tfjob_path}: spec.tfReplicaSpecs.Chief has no TrainJob form", runs)
    assert_refused(run_lab("k8s", f"TFJOB={tfjob_path}", f"RUNS_DIR={runs}", "WORKERS=3", env=lab_env()),
                   f"WORKERS=3 does not apply with TFJOB={tfjob_path}", runs)


# --- the Trainer releases checked: v2.4.0 (one stated rule), v2.3.0 and v2.2.1 (their CRDs) ----

def with_rule(action):
    return lambda r: r["spec"]["template"]["spec"]["failurePolicy"].update(rules=[{"name": "again", "action": action}])


def test_what_only_the_earlier_trainer_release_refuses_is_said(three, tmp_path):
    """Trainer v2.2.1's runtime CRD (built on JobSet v0.11.1) has no RestartJob action, and its
    TrainJob CRD caps each spec.trainer.args item at 65536 characters (v2.3.0's: 1048576): the replay
    runs the newer releases' rules and says, in one line, what v2.2.1 would refuse."""
    plan = load(tmp_path, edited(three, "ClusterTrainingRuntime", with_rule("RestartJob")))
    (line,) = [line for line in plan.not_applied if "v2.2.1" in line]
    assert line.startswith("ClusterTrainingRuntime tflab-tensorflow: Trainer v2.2.1 refuses it (v2.4.0 and v2.3.0 "
                           "take it): spec.template.spec.failurePolicy.rules[0].action is \"RestartJob\""), line
    plan = load(tmp_path, edited(three, "TrainJob", lambda j: j["spec"]["trainer"]["args"].append("x" * 65537)))
    assert any(line.startswith("TrainJob tflab: Trainer v2.2.1 refuses it (v2.4.0 and v2.3.0 take it): "
                               "spec.trainer.args[")
               for line in plan.not_applied), plan.not_applied
    assert not any("v2.2.1" in line for line in load(tmp_path, three).not_applied)


def test_what_the_newest_trainer_release_refuses_is_one_line(three, tmp_path):
    refused(tmp_path, edited(three, "ClusterTrainingRuntime", with_rule("RestartEverything")),
            "ClusterTrainingRuntime tflab-tensorflow: Trainer v2.4.0, v2.3.0 and v2.2.1 refuse it: "
            "spec.template.spec.failurePolicy.rules[0].action")



def named_jobs(*names):
    """A runtime edit: its node job named names[0], and a copy of it for each further name."""
    def edit(runtime):
        jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        jobs[:] = [{**copy.deepcopy(jobs[0]), "name": name} for name in names]
    return edit


@pytest.mark.parametrize("kind", ["ClusterTrainingRuntime", "TrainingRuntime"])
def test_trainer_v2_4_0_takes_replicated_job_names_of_at_most_20_characters(three, kind):
    """Trainer v2.4.0's one breaking rule, as its release note states it (kubeflow/trainer#4394; no
    v2.4.0 CRD is available to mirror): a runtime's ReplicatedJob names at most 20 characters.
    v2.3.0's and v2.2.1's CRDs bound them not at all, so only v2.4.0 refuses 21."""
    runtime = of_kind(three, "ClusterTrainingRuntime")[0]
    runtime = {**runtime, "kind": kind, "metadata": {**runtime["metadata"], "namespace": "default"}} \
        if kind == "TrainingRuntime" else runtime
    assert trainerreleases.trainer_refusals(runtime, kind) == {}
    assert trainerreleases.trainer_refusals(edited([runtime], kind, named_jobs("n" * 20))[0], kind) == {}
    refusals = trainerreleases.trainer_refusals(edited([runtime], kind, named_jobs("node", "n" * 21))[0], kind)
    assert list(refusals) == ["v2.4.0"]
    assert trainerreleases.refused_by(refusals) == (
        "Trainer v2.4.0 refuses it (v2.3.0 and v2.2.1 take it): spec.template.spec.replicatedJobs[1].name has 21 "
        "characters, expected at most 20 (the rule of v2.4.0's release note, kubeflow/trainer#4394; no v2.4.0 CRD "
        "is available here)")
    # a TrainJob has no ReplicatedJobs of its own: the rule is the runtime's
    assert trainerreleases.trainer_refusals(of_kind(three, "TrainJob")[0], "TrainJob") == {}


def test_a_replay_refuses_a_replicated_job_name_v2_4_0_refuses(three, tmp_path):
    """The replay refuses what the newest release checked refuses, v2.4.0's stated rule included,
    before reading the runtime (whose node job the lab wants named `node` anyway: 20 characters get
    past the releases to that line)."""
    refused(tmp_path, edited(three, "ClusterTrainingRuntime", named_jobs("n" * 21)),
            "ClusterTrainingRuntime tflab-tensorflow: Trainer v2.4.0 refuses it (v2.3.0 and v2.2.1 take it): "
            "spec.template.spec.replicatedJobs[0].name has 21 characters, expected at most 20 (the rule of "
            "v2.4.0's release note, kubeflow/trainer#4394")
    message = refused(tmp_path, edited(three, "ClusterTrainingRuntime", named_jobs("n" * 20)),
                      f"replicatedJobs[0].name is \"{'n' * 20}\", expected node")
    assert "Trainer v2.4.0" not in message, message

def test_make_k8s_writes_nothing_a_trainer_release_refuses(monkeypatch):
    """writer.render holds trainjob.yaml to every release checked before anything is written."""
    documents = k8s.trainjob_documents

    def too_long(settings, run, the_cluster):
        found = documents(settings, run, the_cluster)
        of_kind(found, "TrainJob")[0]["spec"]["trainer"]["args"].append("x" * 65537)
        return found

    monkeypatch.setattr(k8s, "trainjob_documents", too_long)
    with pytest.raises(LabError, match=r"^trainjob.yaml: TrainJob tflab: Trainer v2.2.1 refuses it \(v2.4.0 and "
                                       r"v2.3.0 take it\): spec.trainer.args\[3\].*; nothing was written$"):
        written(THREE)


def test_make_k8s_writes_nothing_trainer_v2_4_0_refuses(monkeypatch):
    """What `make k8s` writes passes v2.4.0's stated rule (its one ReplicatedJob is `node`), and a
    runtime whose ReplicatedJob name is over 20 characters is not written."""
    for settings in (THREE, THREE.replace(k8s_runtime="namespaced")):
        rendered = written(settings)["trainjob.yaml"]
        assert trainerreleases.first_refused(rendered) == ""
        assert [node_job(runtime)["name"] for runtime in rendered if runtime["kind"].endswith("TrainingRuntime")] \
            == ["node"]
    documents = k8s.trainjob_documents

    def long_name(settings, run, the_cluster):
        found = documents(settings, run, the_cluster)
        node_job(of_kind(found, "ClusterTrainingRuntime")[0])["name"] = "tensorflow-node-trainer"
        return found

    monkeypatch.setattr(k8s, "trainjob_documents", long_name)
    with pytest.raises(LabError, match=r"^trainjob.yaml: ClusterTrainingRuntime tflab-tensorflow: Trainer v2.4.0 "
                                       r"refuses it \(v2.3.0 and v2.2.1 take it\): spec.template.spec.replicatedJobs"
                                       r"\[0\].name has 23 characters, expected at most 20 .*; nothing was written$"):
        written(THREE)
