"""`tflab up TFJOB=`: a TFJob read as the training operator v1.9 would run it; what the lab cannot
run is one line naming the field, what it does not apply is listed."""

import json
import re
import textwrap
from pathlib import Path

import pytest
import yaml
from labtest.cli import REPO, assert_refused, lab_env, run_lab
from tflab.core.errors import LabError
from tflab.core.settings import SPECS, Settings
from tflab.k8s import tfjob
from tflab.k8s import writer as k8s


def plan_of(tmp_path, text: str, **settings):
    path = tmp_path / "tfjob.yaml"
    path.write_text(textwrap.dedent(text))
    return tfjob.load(Settings(tfjob=str(path), **settings))


JOB = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mnist, namespace: team}
spec:
  runPolicy: {backoffLimit: 3, activeDeadlineSeconds: 120, cleanPodPolicy: Running}
  tfReplicaSpecs:
    Chief:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          nodeSelector: {gpu: "yes"}
          containers:
          - name: tensorflow
            image: mine:1
            command: [python, train.py]
            args: [--epochs, "2"]
            workingDir: /app
            ports: [{name: tfjob-port, containerPort: 3333}]
            env:
            - {name: PLAIN, value: "a b"}
            - name: FROM_MAP
              valueFrom: {configMapKeyRef: {name: settings, key: lr}}
            resources: {limits: {cpu: 500m, memory: 1Gi}, requests: {cpu: 100m}}
            volumeMounts:
            - {name: conf, mountPath: /conf}
            - {name: scratch, mountPath: /scratch}
            - {name: shared, mountPath: /out}
          - {name: sidecar, image: busybox}
          volumes:
          - {name: conf, configMap: {name: settings}}
          - {name: scratch, emptyDir: {}}
          - {name: shared, persistentVolumeClaim: {claimName: outputs}}
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          tolerations: [{key: x}]
          containers:
          - {name: tensorflow, image: mine:1}
    Evaluator:
      replicas: 1
      template:
        spec:
          containers:
          - {name: tensorflow, image: mine:1}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {lr: "0.01"}
"""


def operator_tf_config(name, namespace, types: dict, task_type: str, index: int) -> str:
    """A port of the operator's genClusterSpec + genTFConfigJSONStr (pkg/controller.v1/tensorflow,
    v1.9): per replica type but the Evaluator, `<name>-<type>-<i>.<namespace>.svc:<port>`, marshalled
    by Go (map keys sorted, struct fields in order) with "environment": "cloud"."""
    cluster = {rtype.lower(): [f"{name}-{rtype.lower()}-{i}.{namespace}.svc:{port}" for i in range(count)]
               for rtype, (count, port) in sorted(types.items(), key=lambda kv: kv[0].lower())
               if rtype != "Evaluator"}
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}, "environment": "cloud"},
                      separators=(",", ":"))


def test_every_replica_is_a_task_with_the_operators_hostname_and_tf_config(tmp_path):
    plan = plan_of(tmp_path, JOB)
    assert [t.name for t in plan.tasks] == ["chief-0", "worker-0", "worker-1", "evaluator-0"]
    assert [t.host for t in plan.tasks] == ["mnist-chief-0", "mnist-worker-0", "mnist-worker-1", "mnist-evaluator-0"]
    types = {"Chief": (1, 3333), "Worker": (2, 2222), "Evaluator": (1, 2222)}
    for task in plan.tasks:
        expected = operator_tf_config("mnist", "team", types, task.job, task.index)
        assert task.service["environment"]["TF_CONFIG"] == expected
        assert task.service["networks"]["cluster"]["aliases"] == [task.host, f"{task.host}.team.svc"]
    assert plan.chief == ["chief-0"] and plan.evaluators == ["evaluator-0"] and plan.servers == []


def test_the_container_is_applied(tmp_path):
    plan = plan_of(tmp_path, JOB)
    chief = plan.tasks[0].service
    assert chief["entrypoint"] == ["python", "train.py"] and chief["command"] == ["--epochs", "2"]
    assert chief["working_dir"] == "/app"
    assert chief["environment"]["PLAIN"] == "a b" and chief["environment"]["FROM_MAP"] == "0.01"
    assert chief["cpus"] == 0.5 and chief["mem_limit"] == 2**30
    assert chief["tmpfs"] == ["/scratch"]
    assert chief["x-mounts"] == [["configmaps/settings", "/conf", True], ["outputs", "/out", False]]
    assert chief["cap_drop"] == ["ALL"] and chief["security_opt"] == ["no-new-privileges:true"]
    assert "user" not in chief  # the image's own user
    assert "entrypoint" not in plan.tasks[1].service and "command" not in plan.tasks[1].service
    assert (plan.backoff_limit, plan.timeout, plan.clean_pod_policy) == (3, 120.0, "Running")


def test_what_is_not_applied_is_listed(tmp_path):
    listed = plan_of(tmp_path, JOB).not_applied
    assert "spec.tfReplicaSpecs.Chief.template.spec.nodeSelector" in listed
    assert "spec.tfReplicaSpecs.Worker.template.spec.tolerations" in listed
    assert "spec.tfReplicaSpecs.Chief.template.spec.containers[sidecar] (a sidecar)" in listed
    assert "spec.tfReplicaSpecs.Chief.template.spec.containers[tensorflow].resources.requests" in listed


def test_one_replica_in_all_gets_no_tf_config_and_the_operators_defaults(tmp_path):
    """tensorflow_defaults.go SetDefaults_TFJob: restartPolicy Never (TFJobDefaultRestartPolicy),
    cleanPodPolicy None, successPolicy ""; no backoffLimit is no limit (core/job.go PastBackoffLimit),
    and the lab's RESTARTS does not stand in for it."""
    plan = plan_of(tmp_path, """
        apiVersion: kubeflow.org/v1
        kind: TFJob
        metadata: {name: one}
        spec:
          tfReplicaSpecs:
            Worker:
              template: {spec: {containers: [{name: tensorflow, image: mine:1}]}}
        """, restarts=5)
    (task,) = plan.tasks
    assert "TF_CONFIG" not in task.service["environment"]
    assert plan.policies == {"worker": "Never"} and plan.backoff_limit is None and plan.timeout == 900
    assert (plan.clean_pod_policy, plan.success_policy, plan.active_deadline) == ("None", "", None)
    assert not any("cleanPodPolicy" in field for field in plan.not_applied)


@pytest.mark.parametrize("change, named", [
    (("apiVersion: kubeflow.org/v1", "apiVersion: kubeflow.org/v2"), "TFJob.apiVersion"),
    (("Evaluator:", "Sidecar:"), "spec.tfReplicaSpecs.Sidecar"),
    (("replicas: 2", "replicas: two"), "spec.tfReplicaSpecs.Worker.replicas"),
    (("- {name: tensorflow, image: mine:1}\n    Evaluator", "- {name: tf, image: mine:1}\n    Evaluator"),
     "spec.tfReplicaSpecs.Worker.template.spec.containers has no container named tensorflow"),
    (("configMapKeyRef: {name: settings, key: lr}", "secretKeyRef: {name: s, key: k}"), "valueFrom.secretKeyRef"),
    (("emptyDir: {}", "hostPath: {path: /etc}"),
     "hostPath volume; .*give it the folder with CLAIMS=<claim>=/host/folder"),
    (("cpu: 500m", "cpu: lots"), "resources.limits.cpu"),
    (("memory: 1Gi", "memory: 1e9"), "resources.limits.memory"),
    (("{name: conf, mountPath: /conf}", "{name: conf, mountPath: /conf, subPath: a}"), "subPath"),
    (("{name: conf, mountPath: /conf}", "{name: conf, mountPath: /proc/x}"), "/proc/x would cover or lie in /proc"),
    (("{name: conf, mountPath: /conf}", "{name: conf, mountPath: /sys}"), "mountPath /sys would cover or lie in /sys"),
    (("{name: conf, mountPath: /conf}", "{name: conf, mountPath: /lab}"), "/lab would cover or lie in /lab/run"),
    (("{name: conf, mountPath: /conf}", "{name: conf, mountPath: /opt/tflab/tflab}"), "lie in /opt/tflab"),
    (("key: lr", "key: nope"), "configMapKeyRef"),
    (("restartPolicy: OnFailure", "restartPolicy: Sometimes"), "restartPolicy"),
    (("cleanPodPolicy: Running", "cleanPodPolicy: Some"), "cleanPodPolicy"),
    (("spec:\n  runPolicy", "spec:\n  successPolicy: AllWorker\n  runPolicy"),
     "spec.successPolicy is .AllWorker., expected AllWorkers or absent"),
    (("kind: TFJob", "kind: PyTorchJob"), "0 TFJobs"),
    (("metadata: {name: mnist, namespace: team}", "metadata: {name: Mnist_1}"), "metadata.name"),
    (("spec:\n  runPolicy", "spec:\n  enableDynamicWorker: true\n  runPolicy"), "enableDynamicWorker"),
    (("tfReplicaSpecs:", "tfReplicaSpecs: [\n"), "not YAML"),
])
def test_what_cannot_run_is_one_line_naming_the_field(tmp_path, change, named):
    old, new = change
    text = textwrap.dedent(JOB)
    assert old in text
    with pytest.raises(tfjob.ManifestError, match=named.replace("[", r"\[").replace("{", r"\{")) as error:
        plan_of(tmp_path, text.replace(old, new, 1))
    assert "\n" not in str(error.value)


def test_make_k8s_output_loads_with_the_same_cluster_as_its_config_map(tmp_path):
    settings = Settings(strategy="multiworker", chief=1, workers=2, global_batch=96, k8s_pvc="out", k8s_image="t:1")
    manifests, _ = k8s.render(settings, "test", k8s.manifests_cluster(settings))
    path = tmp_path / "tfjob.yaml"
    path.write_text(k8s.to_yaml_documents(manifests["tfjob.yaml"]))
    plan = tfjob.load(Settings(tfjob=str(path)))
    config = json.loads(next(d for d in yaml.safe_load_all(path.read_text()) if d["kind"] == "ConfigMap")
                        ["data"]["config.json"])
    assert plan.spec == config["cluster"]
    for task in plan.tasks:
        assert json.loads(task.service["environment"]["TF_CONFIG"])["cluster"] == config["cluster"]
        assert task.service["user"] == "1000:1000" and task.service["read_only"] is True
    assert plan.not_applied[0] == "NetworkPolicy tflab-tasks-only"


def test_the_cli_refuses_a_bad_manifest_in_one_line_before_anything(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent(JOB).replace("image: mine:1\n            command", "command"))
    result = run_lab("up", env=lab_env(TFJOB=str(path), RUNS_DIR=str(tmp_path / "runs"), RUN="never"))
    assert result.returncode != 0
    assert result.stderr.strip().count("\n") == 0 and "spec.tfReplicaSpecs.Chief" in result.stderr, result.output
    assert "image is missing" in result.stderr
    assert not (tmp_path / "runs" / "never").exists()


def test_the_cli_refuses_an_image_the_engine_lacks(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(JOB).replace("mine:1", "tflab-no-such-image:never"))
    result = run_lab("up", env=lab_env(TFJOB=str(path), RUNS_DIR=str(tmp_path / "runs"), RUN="never"))
    assert result.returncode != 0
    assert "image tflab-no-such-image:never is not on this Docker engine" in result.output
    # how to build an example's Dockerfile on the lab's image, without a registry (docs/images.md)
    assert "ARG BASE" in result.output and "images --tag) -t tflab-no-such-image:never" in result.output
    assert not (tmp_path / "runs" / "never").exists()


# `tflab up TFJOB=` with the settings the TFJob decides: refused in one line before anything.
EXAMPLE_SCRIPT = str(REPO / "examples/multiworker-tutorial/train.py")
DECIDED = {
    "STRATEGY": "parameter_server", "WORKERS": "3", "REPLICAS": "4", "PS": "2", "CHIEF": "1", "EVALUATOR": "1",
    "SCRIPT": EXAMPLE_SCRIPT, "ARGS": "--epochs 3", "SCRIPT_ENV": "KERAS_HOME=/lab/data",
    "EPOCHS": "3", "GLOBAL_BATCH": "96", "EXAMPLES": "8192",
    "SEED": "7", "MODEL": "cnn", "LOOP": "custom", "PRECISION": "mixed_float16", "STEPS_PER_EXECUTION": "8",
    "COLLECTIVE": "ring",
    "BYTES_PER_PACK": "1024", "ALLREDUCE_PROBE": "10", "AUDIT": "strict", "PEER_TIMEOUT": "30", "BACKUP": "off",
    "CPUS": "1", "MEMORY": "1g", "GPUS": "all", "BASE_IMAGE": "python:3.11-slim", "PLATFORM": "linux/amd64",
    "TF": "2.15", "KERAS": "tf-keras",
    "RESTART_POLICY": "Never", "RESTARTS": "1", "LINK": "1ms,1000mbit", "K8S_NAME": "mnist",
    "K8S_NAMESPACE": "team-a", "K8S_IMAGE": "registry.example/tflab:1", "K8S_PVC": "out",
}
OTHER_COMMANDS = ("COMPARE", "STRATEGIES", "PRECISIONS", "SCENARIO", "SCENARIOS", "MOMENTS", "TARGET", "AT", "HEAL",
                  "NOTICE", "GRACE", "SLOW_LINK", "SLOW_CPUS", "SOAK", "TENSORBOARD_PORT", "BENCH", "BENCH_STALLS",
                  "BENCH_PAIRS", "VERDICT", "TWIN",
                  # BACKEND=swarm's, which a replay refuses, and make swarm-sim's
                  "SWARM_PLACEMENT", "REGISTRY", "SHARED_RUNS_DIR", "NODE_ENGINES", "NODES", "FORCE", "K8S_RUNTIME",
                  # the TrainJob replay's, refused with TFJOB by trainjob.refuse_given (tests/unit/test_trainjob.py)
                  "TRAINJOB", "RUNTIME")


def test_every_setting_is_decided_by_the_tfjob_applied_or_another_commands():
    """A setting added later must be placed: refused with TFJOB, read by the replay, or not `up`'s."""
    assert set(tfjob.DECIDED_BY_THE_TFJOB) == set(DECIDED)
    assert sorted([*DECIDED, *tfjob.APPLIED_SETTINGS, *OTHER_COMMANDS]) == sorted(SPECS)


@pytest.fixture
def job_file(tmp_path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(JOB))
    return path


@pytest.mark.parametrize("name", DECIDED)
def test_a_setting_the_tfjob_decides_is_refused_naming_its_field(name, job_file, tmp_path):
    runs = tmp_path / "runs"
    result = run_lab("up", f"TFJOB={job_file}", f"RUNS_DIR={runs}", f"{name}={DECIDED[name]}")
    assert_refused(result, f"{name}={DECIDED[name]} does not apply with TFJOB={job_file}: ", runs)
    assert re.search(r": the (TFJob's|replay)\b.*; (edit (spec\.|metadata\.)|leave \w+ out)", result.stderr), \
        result.stderr


@pytest.mark.parametrize("how", ["environment", "flag", "make"])
def test_the_environment_flags_and_make_count_as_given(how, job_file, tmp_path):
    runs = tmp_path / "runs"
    if how == "environment":
        result = run_lab("up", env=lab_env(TFJOB=str(job_file), RUNS_DIR=str(runs), WORKERS="3"))
    elif how == "flag":
        result = run_lab("up", "--tfjob", str(job_file), "--runs-dir", str(runs), "--workers", "3")
    else:  # make hands its command-line variables on as environment, and names them
        result = run_lab("up", env=lab_env(TFJOB=str(job_file), RUNS_DIR=str(runs), WORKERS="3",
                                           TFLAB_MAKE_VARIABLES="TFJOB RUNS_DIR WORKERS"))
    assert_refused(result, f"WORKERS=3 does not apply with TFJOB={job_file}: the TFJob's Worker replicas "
                           "set the workers; edit spec.tfReplicaSpecs.Worker.replicas", runs)


def test_an_empty_environment_variable_is_not_given(job_file, tmp_path):
    """from_env takes an empty variable as unset, and so does the refusal: the run goes on to the
    engine's check of the image, which this one lacks."""
    path = tmp_path / "missing.yaml"
    path.write_text(job_file.read_text().replace("mine:1", "tflab-no-such-image:never"))
    result = run_lab("up", env=lab_env(TFJOB=str(path), RUNS_DIR=str(tmp_path / "runs"), WORKERS="", EPOCHS=""))
    assert "does not apply" not in result.output
    assert "image tflab-no-such-image:never is not on this Docker engine" in result.output


def test_backends_other_than_compose_are_refused(job_file, tmp_path):
    runs = tmp_path / "runs"
    for backend in ("local", "swarm"):
        assert_refused(run_lab("up", f"TFJOB={job_file}", f"RUNS_DIR={runs}", f"BACKEND={backend}"),
                       f"BACKEND={backend} does not apply with TFJOB={job_file}: the replay runs every replica "
                       "as a container on Compose; expected BACKEND=compose", runs)
    # make up BACKEND=local checks before it builds .venv: refused there already
    check = run_lab("check", f"TFJOB={job_file}", f"RUNS_DIR={runs}", "BACKEND=local",
                    env=lab_env(TFLAB_CHECK="up"))
    assert_refused(check, "BACKEND=local does not apply with TFJOB=", runs)


@pytest.mark.parametrize("name, value, expected", [
    ("TIMEOUT", "60", "TIMEOUT=60 does not apply with TFJOB={job}: the TFJob's spec.runPolicy.activeDeadlineSeconds "
                      "(120) sets the deadline; edit it, or leave it out for TIMEOUT to apply"),
    ("RESTARTS", "1", "RESTARTS=1 does not apply with TFJOB={job}: the TFJob's spec.runPolicy.backoffLimit bounds "
                      "its restarts as the operator counts them, and without one there is no limit"),
])
def test_timeout_and_restarts_are_refused_where_the_tfjob_sets_them(name, value, expected, job_file, tmp_path):
    runs = tmp_path / "runs"
    result = run_lab("up", f"TFJOB={job_file}", f"RUNS_DIR={runs}", f"{name}={value}")
    assert_refused(result, expected.format(job=job_file), runs)


def test_timeout_applies_where_the_tfjob_sets_no_deadline_and_restarts_never(tmp_path):
    """core/job.go PastActiveDeadline: no activeDeadlineSeconds, no deadline; the lab's TIMEOUT bounds
    the run there. PastBackoffLimit: no backoffLimit, no limit; RESTARTS is refused with any TFJob."""
    text = JOB.replace("runPolicy: {backoffLimit: 3, activeDeadlineSeconds: 120, cleanPodPolicy: Running}",
                       "runPolicy: {cleanPodPolicy: Running}")
    plan = plan_of(tmp_path, text, timeout=60.0, restarts=1)
    assert (plan.timeout, plan.backoff_limit, plan.decided) == (60.0, None, {})
    tfjob.refuse_decided(plan, {"TFJOB": "job.yaml", "TIMEOUT": "60"})
    with pytest.raises(LabError, match=r"^RESTARTS=1 does not apply with TFJOB=job.yaml: the TFJob's "
                                       r"spec\.runPolicy\.backoffLimit bounds its restarts"):
        tfjob.refuse_given("up", {"TFJOB": "job.yaml", "RESTARTS": "1"})
    # the replay's own settings and other commands' pass the first check
    tfjob.refuse_given("up", {"TFJOB": "job.yaml", "RUN": "r", "RUNS_DIR": "runs", "COMPOSE": "v2",
                              "BACKEND": "compose", "TIMEOUT": "60", "SCENARIO": "kill"})


def test_the_applied_settings_reach_the_engine_check(tmp_path):
    """Through the CLI, RUN, COMPOSE, BACKEND=compose and TIMEOUT pass the refusals (this TFJob
    leaves the deadline to the lab): the run goes on to the image check."""
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(JOB).replace("mine:1", "tflab-no-such-image:never").replace(
        "backoffLimit: 3, activeDeadlineSeconds: 120, ", ""))
    result = run_lab("up", f"TFJOB={path}", f"RUNS_DIR={tmp_path / 'runs'}", "RUN=never", "COMPOSE=auto",
                     "BACKEND=compose", "TIMEOUT=60")
    assert "does not apply" not in result.output
    assert "image tflab-no-such-image:never is not on this Docker engine" in result.output
    assert not (tmp_path / "runs" / "never").exists()


@pytest.mark.parametrize("command", ["stack-up", "soak", "compare", "bench", "config"])
def test_tfjob_is_refused_by_the_commands_that_would_ignore_it(command, job_file, tmp_path):
    runs = tmp_path / "runs"
    assert_refused(run_lab(command, f"TFJOB={job_file}", f"RUNS_DIR={runs}"),
                   f"TFJOB={job_file} is not allowed with make {command}: only make up (tflab up), make chaos "
                   "and make matrix replay a TFJob, and make k8s turns one into a TrainJob; leave TFJOB out", runs)


@pytest.mark.parametrize("setting, expected", [
    ("SCENARIO=slow-link", "SCENARIO=slow-link is not allowed with TFJOB: a replayed job's replicas have no delay"),
    ("NOTICE=gce", "NOTICE=gce is not allowed with TFJOB: a replay has no GCE metadata stand-in"),
    ("WORKERS=3", "WORKERS=3 does not apply with TFJOB="),
])
def test_chaos_on_a_replay_refuses_what_it_cannot_do_before_anything_starts(setting, expected, job_file, tmp_path):
    runs = tmp_path / "runs"
    extra = ["SCENARIO=preempt"] if setting.startswith("NOTICE") else []
    assert_refused(run_lab("chaos", f"TFJOB={job_file}", f"RUNS_DIR={runs}", *extra, setting), expected, runs)


def test_a_replays_settings_are_the_tfjobs_not_the_labs_defaults(tmp_path):
    """summary.json and config.json of a replay once said multiworker, 10 epochs, whatever ran:
    now the TFJob's shape and, from the lab's config.json in its ConfigMap, what the trainers read."""
    settings = Settings(strategy="parameter_server", workers=2, ps=1, epochs=3, global_batch=96, k8s_image="t:1")
    manifests, _ = k8s.render(settings, "test", k8s.manifests_cluster(settings))
    path = tmp_path / "tfjob.yaml"
    path.write_text(k8s.to_yaml_documents(manifests["tfjob.yaml"]))
    plan = tfjob.load(Settings(tfjob=str(path)))
    recorded = tfjob.replay_settings(plan, Settings(tfjob=str(path), timeout=60.0), "r1")
    assert {key: recorded[key] for key in ("strategy", "workers", "ps", "chief", "epochs", "global_batch")} == \
        {"strategy": "parameter_server", "workers": 2, "ps": 1, "chief": 1, "epochs": 3, "global_batch": 96}
    assert (recorded["run"], recorded["backend"], recorded["tfjob"]) == ("r1", "compose", str(path))
    # a hand-written TFJob: its shape, and nothing of the training it cannot know
    hand = plan_of(tmp_path, JOB)
    recorded = tfjob.replay_settings(hand, Settings(), "r2")
    assert recorded["strategy"] == "multiworker" and recorded["workers"] == 2 and recorded["chief"] == 1
    assert recorded["evaluator"] == 1 and recorded["timeout"] == 120.0 and recorded["restarts"] == 3
    assert not {"epochs", "global_batch", "examples", "model", "k8s_image"} & set(recorded)
