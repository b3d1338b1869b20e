"""`tflab up TFJOB=`: the manifests `make k8s` writes, replayed on Compose as the training operator
would run them, train to the same losses as `make up` with the same settings."""

import json
import logging
import math
import re
import subprocess
import sys
import time

import pytest
from labtest.cli import REPO, lab_env, run_lab
from tflab.engine import labels

SAME = dict(STRATEGY="multiworker", CHIEF=1, WORKERS=2, SEED=0, GLOBAL_BATCH=96, EXAMPLES=4096, EPOCHS=3)
# The same program on the same cluster shape, seed and data: only the hostnames differ, so the
# losses should be identical; 1e-6 relative allows nothing but float printing.
LOSS_RTOL = 1e-6
log = logging.getLogger("tflab.tests")


@pytest.fixture(scope="module")
def direct(lab):
    return lab.run("roundtrip-up", **SAME)


@pytest.fixture(scope="module")
def manifest(lab, trainer_image):
    """`make k8s` as the README has it, K8S_IMAGE left to the lab: the manifests name the image
    `make images` built (once `tflab-trainer:latest`, which no image has)."""
    env = lab_env(RUNS_DIR=str(lab.runs_dir), RUN="roundtrip-k8s", K8S_PVC="out",
                  BACKUP="off", **{k: str(v) for k, v in SAME.items()})
    result = run_lab("k8s", env=env)
    assert result.returncode == 0, result.output
    path = lab.runs_dir / "roundtrip-k8s" / "tfjob.yaml"
    assert f'image: "{trainer_image}"' in path.read_text()
    return path


@pytest.fixture(scope="module")
def replay(lab, manifest):
    run = lab.run("roundtrip-replay", TFJOB=str(manifest))
    log.info("replay of a 1-chief, 2-worker TFJob took %.1f s (the lab's whole command)", run.seconds)
    return run


def own_losses(path):
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["loss"] for r in records if r["event"] == "epoch"]


def test_the_replay_runs_every_replica_with_the_operators_names(replay):
    assert replay.finished.returncode == 0, replay.why()
    assert replay.config["tasks"] == ["chief-0", "worker-0", "worker-1"]
    assert replay.config["hosts"] == {"chief-0": "tflab-chief-0", "worker-0": "tflab-worker-0",
                                      "worker-1": "tflab-worker-1"}
    workers = ["tflab-worker-0.default.svc:2222", "tflab-worker-1.default.svc:2222"]
    assert replay.config["cluster"] == {"chief": ["tflab-chief-0.default.svc:2222"], "worker": workers}
    assert replay.config["tf_config"]["worker-1"]["environment"] == "cloud"
    assert "not applied: NetworkPolicy tflab-tasks-only" in replay.finished.stdout
    rows = replay.summary["tasks"]
    assert [(r["task"], r["status"], r["exit_code"]) for r in rows] == \
        [("chief-0", "ok", 0), ("worker-0", "ok", 0), ("worker-1", "ok", 0)]
    for task in replay.task_names:  # watched from outside: a start and an end with the exit code, and
        kinds = [r["event"] for r in replay.events(task)]  # between them the program's epochs, copied
        assert (kinds[0], kinds[-1], kinds.count("start"), kinds.count("end")) == ("start", "end", 1, 1), kinds
        assert kinds.count("epoch") == SAME["EPOCHS"] and "audit_weights" in kinds, kinds
        assert replay.of(task, "end")[0]["exit_code"] == 0
    assert (replay.run_dir / "volumes" / "out" / "tflab" / "model.keras").is_file()
    # the TFJob's values, not the lab's defaults (multiworker, 10 epochs): its shape, and its config.json's
    recorded = replay.summary["settings"]
    assert {key: recorded.get(key) for key in ("strategy", "chief", "workers", "epochs", "global_batch")} == \
        {"strategy": "multiworker", "chief": 1, "workers": 2, "epochs": 3, "global_batch": 96}
    assert replay.config["settings"] == recorded
    # the lab's own trainer logs itself (to its claim here; a pod's emptyDir by default) and copies each
    # event to its replica's hooks folder (issue 44: its rows were blank, and it was "not audited")
    assert not [note for note in replay.summary["notes"] if note.startswith("not audited")], replay.summary["notes"]
    assert replay.summary["findings"] == []
    for row in rows:
        copy = replay.run_dir / "volumes" / "tflab-hooks" / row["task"] / "events.jsonl"
        assert own_losses(copy) == own_losses(replay.run_dir / "volumes" / "out" / "tflab" / f"{row['task']}.jsonl")
        assert row["losses"] == own_losses(copy) and len(row["losses"]) == SAME["EPOCHS"], row
        assert row["final_loss"] == row["losses"][-1] and row["steady_step_seconds"] > 0, row
        assert row["first_step_seconds"] > 0 and row["examples_per_second"] > 0 and row["cluster_ready_seconds"] > 0
    assert len({row["weights_sha256"] for row in rows}) == 1 and rows[0]["weights_sha256"], rows


def test_the_replay_trains_to_make_ups_losses(direct, replay):
    assert direct.finished.returncode == 0, direct.why()
    theirs = own_losses(replay.run_dir / "volumes" / "out" / "tflab" / "chief-0.jsonl")
    ours = direct.losses("chief-0")
    assert len(ours) == len(theirs) == SAME["EPOCHS"]
    for a, b in zip(ours, theirs):
        assert math.isclose(a, b, rel_tol=LOSS_RTOL), (ours, theirs)
    final = {row["task"]: row["final_loss"] for row in replay.summary["tasks"]}
    assert final["chief-0"] == pytest.approx(ours[-1], rel=LOSS_RTOL)


def test_a_killed_replay_restores_from_the_shared_backup_alone(lab, trainer_image):
    """The restore a cluster does: `make k8s K8S_PVC=... RESTART_POLICY=OnFailure RESTARTS=3`
    keeps BACKUP, a worker is killed after epoch 2, and the kubelet restarts it in place, alone
    (OnFailure: kuberuntime_manager.go doBackOff, at once the first time); its peer aborts with it
    (UNAVAILABLE) and is restarted in place too, at once: every worker adopts the chief's backup
    itself (backups.adopt_chief_backup) and the job resumes after the saved epoch and ends ok. The
    operator counts the killed worker's restart and its peer's: 2, under backoffLimit 3. (Under the
    default ExitCode the peer's exit 1 would fail the job:
    test_replay_loop.test_exit_code_fails_the_job_when_a_killed_workers_peer_exits_1.)"""
    settings = dict(STRATEGY="multiworker", WORKERS="2", EPOCHS="6", BACKUP="epoch", RESTARTS="3",
                    RESTART_POLICY="OnFailure")
    env = lab_env(RUNS_DIR=str(lab.runs_dir), RUN="restore-k8s", K8S_PVC="out", K8S_IMAGE=trainer_image, **settings)
    written = run_lab("k8s", env=env)
    assert written.returncode == 0 and "BACKUP=epoch is off" not in written.output, written.output
    run_dir = lab.runs_dir / "test-restore-replay"
    process = subprocess.Popen([sys.executable, "-m", "tflab", "up"], cwd=REPO, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=lab_env(RUNS_DIR=str(lab.runs_dir), RUN=run_dir.name,
                                           TFJOB=str(lab.runs_dir / "restore-k8s" / "tfjob.yaml")))
    own_log = run_dir / "volumes" / "out" / "tflab" / "worker-1.jsonl"
    # As long as the lab runs (its TIMEOUT bounds it), not a fixed 600 s: at load 12 on 2 cores
    # `import tensorflow` alone took 90 s.
    while not (own_log.exists() and len(own_losses(own_log)) >= 2):
        assert process.poll() is None, process.communicate()[0]
        time.sleep(0.5)
    found = subprocess.run(["docker", "ps", "--quiet", "--filter",
                            f"label=com.docker.compose.project={labels.project_name(run_dir)}",
                            "--filter", "label=com.docker.compose.service=worker-1"],
                           capture_output=True, text=True, check=True).stdout.split()
    subprocess.run(["docker", "kill", *found], capture_output=True, check=True)
    output, _ = process.communicate(timeout=900)
    assert process.returncode == 0, output
    assert "restarting worker-1 in place (its restart 1, " in output and "restarting every replica" not in output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ok"] and len(summary["restarts"]) == 2, output
    assert {row["task"]: row["restart_count"] for row in summary["tasks"]} == {"worker-0": 1, "worker-1": 1}, output
    for task in ("worker-0", "worker-1"):
        records = [json.loads(line) for line in (own_log.parent / f"{task}.jsonl").read_text().splitlines()]
        restored = [r for r in records if r["event"] == "restored"]
        assert restored and restored[-1]["epoch"] >= 3, (task, restored)  # resumed after the saved epoch 2+
        assert [r["epoch"] for r in records if r["event"] == "epoch"][-1] == 6


def test_make_chaos_kills_a_replica_of_a_replayed_job_and_it_restarts_as_its_policy_says(lab, trainer_image):
    """Issue 35: a replay is one kind of run, chaos included. `make chaos TFJOB=` kills worker-1 a
    few seconds after its container started (a replica's epochs are its own: AT=seconds:S); under
    OnFailure with backoffLimit 3 the kubelet restarts it in place, and its aborting peer too, each
    alone and at once (their first restarts; 2 counted), and the job resumes from the shared
    backup and ends ok."""
    settings = dict(STRATEGY="multiworker", WORKERS="2", EPOCHS="20", BACKUP="epoch", RESTARTS="3",
                    RESTART_POLICY="OnFailure")
    env = lab_env(RUNS_DIR=str(lab.runs_dir), RUN="chaos-k8s", K8S_PVC="out", K8S_IMAGE=trainer_image, **settings)
    assert run_lab("k8s", env=env).returncode == 0
    run_dir = lab.runs_dir / "chaos-replay"
    result = run_lab("chaos", env=lab_env(RUNS_DIR=str(lab.runs_dir), RUN=run_dir.name, SCENARIO="kill",
                                          TARGET="worker-1", AT="seconds:15",
                                          TFJOB=str(lab.runs_dir / "chaos-k8s" / "tfjob.yaml")))
    assert result.returncode == 0, result.output[-4000:]
    assert "chaos: kill on worker-1 15 s after its script started" in result.output, result.output[-4000:]
    assert "restarting worker-1 in place (its restart 1, " in result.output, result.output[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["ok"] and len(summary["restarts"]) == 2 and summary["strategy"] == "tfjob"
    chaos = summary["chaos"]
    assert chaos["injected"] and chaos["scenario"] == "kill" and chaos["detection_seconds"] is not None, chaos
    assert (run_dir / "chaos.jsonl").is_file()


def test_make_matrix_replays_the_tfjob_on_each_keras_of_the_labs_image(lab, trainer_image):
    """Issue 35: the matrix where the image allows. `make k8s` writes the lab's image into the TFJob;
    `make matrix TFJOB= TF=2.21 KERAS="tf-keras keras3"` replays it once per cell on that one image
    (no other TF built), TF_USE_LEGACY_KERAS as each cell's KERAS says: the lab's model.fit under
    MultiWorkerMirroredStrategy passes under tf-keras and fails under Keras 3, explained
    (keras#20585), as a SCRIPT's cells are. About 50 s here."""
    settings = dict(STRATEGY="multiworker", WORKERS="2", EPOCHS="2", EXAMPLES="1024", BACKUP="off")
    env = lab_env(RUNS_DIR=str(lab.runs_dir), RUN="matrix-k8s", K8S_IMAGE=trainer_image, **settings)
    assert run_lab("k8s", env=env).returncode == 0
    folder = lab.runs_dir / "matrix-replay"
    result = run_lab("matrix", env=lab_env(RUNS_DIR=str(lab.runs_dir), RUN=folder.name, TF="2.21",
                                           KERAS="tf-keras keras3",
                                           TFJOB=str(lab.runs_dir / "matrix-k8s" / "tfjob.yaml")), timeout=1200)
    assert result.returncode == 1, result.output[-4000:]  # a failed cell fails the matrix
    assert "tflab: verdict: 2.21: tfjob breaks under keras3 on 2.21: keras3-multiworker (keras#20585); with " \
           "tf-keras every cell passes" in result.output, result.output[-4000:]
    cells = json.loads((folder / "matrix.json").read_text())["cells"]
    assert [(c["keras"], c["strategy"], c["outcome"], c["signature"]) for c in cells] == [
        ("tf-keras", "tfjob", "ok", None), ("keras3", "tfjob", "failed", "keras3-multiworker")]
    for cell in cells:
        summary = json.loads((folder / cell["run"] / "summary.json").read_text())
        assert summary["strategy"] == "tfjob" and len(summary["tasks"]) == 2, summary


USER_SCRIPT = """
import json, os, pathlib, socket, time
config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
name = f"{task['type']}-{task['index']}"
out = pathlib.Path("/out")

def wait_for(suffix):  # a rendezvous on the shared claim, as TensorFlow's would be on the network
    deadline = time.monotonic() + 120
    while len(list(out.glob("*" + suffix))) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)

(out / f"{name}.ready").touch()
wait_for(".ready")
# Every training task's Service name resolves on the job's network, as on the cluster.
resolved = {address: socket.gethostbyname(address.split(":")[0])
            for addresses in config["cluster"].values() for address in addresses}
(out / f"{name}.json").write_text(json.dumps({
    "tf_config": config, "hostname": socket.gethostname(), "resolved": resolved,
    "greeting": os.environ["GREETING"], "file": open("/conf/greeting").read(), "cwd": os.getcwd()}))
wait_for(".json")
print("hello from", socket.gethostname(), flush=True)
"""

HAND_WRITTEN = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {{name: hand, namespace: lab}}
spec:
  runPolicy: {{backoffLimit: 0, activeDeadlineSeconds: 300}}
  tfReplicaSpecs:
{replicas}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: hello}}
data: {{greeting: "hi there"}}
"""
REPLICA = """    {kind}:
      replicas: {count}
      restartPolicy: Never
      template:
        spec:
          nodeSelector: {{pool: cpu}}
          containers:
          - name: tensorflow
            image: {image}
            command: [python3, /app/hello.py]
            workingDir: /app
            env:
            - name: GREETING
              valueFrom: {{configMapKeyRef: {{name: hello, key: greeting}}}}
            resources: {{limits: {{cpu: "1", memory: 512Mi}}}}
            volumeMounts: [{{name: conf, mountPath: /conf}}, {{name: out, mountPath: /out}}]
          volumes:
          - {{name: conf, configMap: {{name: hello}}}}
          - {{name: out, persistentVolumeClaim: {{claimName: out}}}}
"""


def test_a_hand_written_tfjob_on_a_user_image(lab, trainer_image, tmp_path):
    """A user's image (FROM the trainer image, with a script of its own) as a Chief, two Workers
    and an Evaluator: each replica gets the operator's TF_CONFIG, resolves its peers' Service names,
    reads the ConfigMap as env and as files, shares the claim; nodeSelector is listed as not applied."""
    image = "tflab-test-user:replay"
    (tmp_path / "hello.py").write_text(USER_SCRIPT)
    (tmp_path / "Dockerfile").write_text(f"FROM {trainer_image}\nCOPY hello.py /app/hello.py\n")
    built = subprocess.run(["docker", "build", "--quiet", "--tag", image, str(tmp_path)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    try:
        replicas = "".join(REPLICA.format(kind=kind, count=count, image=image)
                           for kind, count in (("Chief", 1), ("Worker", 2), ("Evaluator", 1)))
        manifest = tmp_path / "hand.yaml"
        manifest.write_text(HAND_WRITTEN.format(replicas=replicas))
        run = lab.run("hand-written", TFJOB=str(manifest))
    finally:
        subprocess.run(["docker", "rmi", "--force", image], capture_output=True)
    assert run.finished.returncode == 0, run.why()
    assert "not applied: spec.tfReplicaSpecs.{Chief,Worker,Evaluator}.template.spec.nodeSelector" in run.finished.stdout
    assert "hello from hand-chief-0" in run.finished.stdout  # the replicas' own output, as it comes
    cluster = {"chief": ["hand-chief-0.lab.svc:2222"],
               "worker": ["hand-worker-0.lab.svc:2222", "hand-worker-1.lab.svc:2222"]}
    for task in ("chief-0", "worker-0", "worker-1", "evaluator-0"):
        seen = json.loads((run.run_dir / "volumes" / "out" / f"{task}.json").read_text())
        job, index = task.rsplit("-", 1)
        assert seen["tf_config"] == {"cluster": cluster, "task": {"type": job, "index": int(index)},
                                     "environment": "cloud"}
        assert seen["hostname"] == f"hand-{task}"
        assert set(seen["resolved"]) == {a for addresses in cluster.values() for a in addresses}
        assert seen["greeting"] == seen["file"] == "hi there" and seen["cwd"] == "/app"
    rows = {row["task"]: row for row in run.summary["tasks"]}
    assert all(row["status"] == "ok" and row["exit_code"] == 0 for row in rows.values()), rows
    # the lab's hooks reached each replica's own Python through the replay's sitecustomize (issue 35)
    assert not [note for note in run.summary["notes"] if note.startswith("not audited")], run.summary["notes"]
    for task in rows:
        mark = (run.run_dir / "volumes" / "tflab-hooks" / task / "hooks").read_text()
        assert mark.startswith("hooked: python 3."), (task, mark)


RESTARTED_EMPTYDIR = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {{name: scratch}}
spec:
  runPolicy: {{backoffLimit: 3, activeDeadlineSeconds: 300}}
  tfReplicaSpecs:
    Worker:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          securityContext: {{runAsUser: 1000, runAsGroup: 1000}}
          containers:
          - name: tensorflow
            image: {image}
            command:
            - sh
            - -c
            - >-
              if [ -e /out/tried ]; then echo again > /scratch/note && cat /scratch/note;
              else touch /out/tried; exit 1; fi
            volumeMounts: [{{name: scratch, mountPath: /scratch}}, {{name: out, mountPath: /out}}]
          volumes:
          - {{name: scratch, emptyDir: {{}}}}
          - {{name: out, persistentVolumeClaim: {{claimName: out}}}}
"""


def test_a_replica_restarted_in_place_still_writes_its_emptydir(lab, trainer_image, tmp_path):
    """A non-root replica that fails once is restarted in place (OnFailure) and writes its emptyDir
    the second time, as a pod's container may: Docker 20.10 remounts a restarted container's tmpfs
    0755 root, which had killed every restarted make k8s replica at its first write (stack.owned_tmpfs)."""
    manifest = tmp_path / "scratch.yaml"
    manifest.write_text(RESTARTED_EMPTYDIR.format(image=trainer_image))
    run = lab.run("restarted-emptydir", TFJOB=str(manifest))
    assert run.finished.returncode == 0, run.why()
    assert "restarting worker-0 in place (its restart 1, " in run.finished.stdout, run.finished.stdout[-3000:]
    assert "again" in run.finished.stdout and "Permission denied" not in run.finished.stdout
    assert [row["restart_count"] for row in run.summary["tasks"]] == [1]


def test_a_parameter_server_tfjob_replay_ends_its_servers(lab, trainer_image):
    """make k8s STRATEGY=parameter_server replayed: the chief trains; its workers and ps serve until
    the replay ends them when the chief is done, as the operator's cleanPodPolicy Running (which
    make k8s writes where there are servers) does: common/job.go DeletePodsAndServices."""
    env = lab_env(RUNS_DIR=str(lab.runs_dir), RUN="ps-k8s", K8S_PVC="out", K8S_IMAGE=trainer_image,
                  STRATEGY="parameter_server", WORKERS="2", PS="1", EPOCHS="2")
    written = run_lab("k8s", env=env)
    assert written.returncode == 0, written.output
    run = lab.run("ps-replay", TFJOB=str(lab.runs_dir / "ps-k8s" / "tfjob.yaml"))
    assert run.finished.returncode == 0, run.why()
    assert run.task_names == ["chief-0", "worker-0", "worker-1", "ps-0"]
    assert "cleanPodPolicy Running: the operator deletes worker-0, worker-1, ps-0" in run.finished.stdout
    assert "the job is done; ending worker-0, worker-1, ps-0" in run.finished.stdout
    rows = {row["task"]: row for row in run.summary["tasks"]}
    assert rows["chief-0"]["exit_code"] == 0 and all(row["status"] == "ok" for row in rows.values()), rows
    assert len(own_losses(run.run_dir / "volumes" / "out" / "tflab" / "chief-0.jsonl")) == 2


BACKOFF_JOB = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {{name: backoff}}
spec:
  runPolicy: {{backoffLimit: 3}}
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
          - name: tensorflow
            image: {image}
            command: [python3, -c, "import sys; print('failing on purpose', flush=True); sys.exit(3)"]
"""


def test_a_tfjob_past_its_backoff_limit_fails_as_the_operator_names_it(lab, trainer_image, tmp_path):
    """Both OnFailure workers fail every time. core/job.go PastBackoffLimit sums each replica's
    restarts: the kubelet restarts each in place at once (its first failure), 2 counted, under
    backoffLimit 3; the next failure reaches 3 and the job has failed as common/job.go
    ReconcileJobs says it (TFJobFailed), before any back-off is waited out."""
    manifest = tmp_path / "backoff.yaml"
    manifest.write_text(BACKOFF_JOB.format(image=trainer_image))
    run = lab.run("backoff", TFJOB=str(manifest))
    assert run.finished.returncode == 1, run.why()
    assert len(run.summary["restarts"]) == 2 and run.summary["reason"] == "TFJobFailed: backoffLimit", run.why()
    assert re.search(r"restarting worker-[01] in place \(its restart 1, the job's 2; 2 counted of backoffLimit 3\)",
                     run.finished.stdout), run.finished.stdout
    assert [row["restart_count"] for row in run.summary["tasks"]] == [1, 1], run.why()
    assert re.search(r"the restarts the operator counts \([34]\) reach backoffLimit 3: the operator marks the job "
                     r"Failed \(TFJobFailed: Job backoff has failed because it has reached the specified backoff "
                     r"limit\)", run.finished.stdout), run.finished.stdout
    assert "run test-backoff: failed (TFJobFailed: backoffLimit)" in run.finished.stdout
