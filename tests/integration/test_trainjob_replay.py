"""`tflab up TRAINJOB=`: the Kubeflow Trainer v2 TrainJob and TensorFlow runtime `make k8s` writes,
replayed on Compose as Trainer v2 and JobSet would run them (each node's pod builds its TF_CONFIG
with tflab.trainer.tfconfig), train to the same losses as `make up` with the same settings; and a
TFJob turned into a TrainJob (`tflab k8s TFJOB=`) replays to them too; and a node's failure is
decided as JobSet v0.12.0's failure policy decides it."""

import json
import logging
import math

import pytest
import yaml
from labtest.cli import lab_env, run_lab
from tflab.core import cluster

SAME = dict(STRATEGY="multiworker", WORKERS=3, SEED=0, GLOBAL_BATCH=96, EXAMPLES=4096, EPOCHS=3)
# The same program on the same cluster shape, seed and data: only the hostnames differ, so the
# losses should be identical; 1e-6 relative allows nothing but float printing.
LOSS_RTOL = 1e-6
NODES = [f"worker-{i}" for i in range(3)]
log = logging.getLogger("tflab.tests")


def own_losses(path):
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["loss"] for r in records if r["event"] == "epoch"]


@pytest.fixture(scope="module")
def direct(lab):
    return lab.run("tj-up", **SAME)


@pytest.fixture(scope="module")
def written(lab, trainer_image):
    """`make k8s` as the README has it, K8S_IMAGE left to the lab; K8S_PVC so the nodes' own logs
    land in the replay's volumes/ folder, where the test reads them."""
    env = lab_env(RUNS_DIR=str(lab.runs_dir), RUN="tj-k8s", K8S_PVC="out", BACKUP="off",
                  **{k: str(v) for k, v in SAME.items()})
    result = run_lab("k8s", env=env)
    assert result.returncode == 0, result.output
    folder = lab.runs_dir / "tj-k8s"
    assert f'image: "{trainer_image}"' in (folder / "trainjob.yaml").read_text()
    return folder


@pytest.fixture(scope="module")
def replay(lab, written):
    run = lab.run("tj-replay", TRAINJOB=str(written / "trainjob.yaml"))
    log.info("replay of a 3-node TrainJob took %.1f s (the lab's whole command)", run.seconds)
    return run


def test_the_replay_runs_every_node_with_jobsets_names(replay):
    assert replay.finished.returncode == 0, replay.why()
    assert replay.config["tasks"] == NODES
    assert replay.config["hosts"] == {f"worker-{i}": f"tflab-node-0-{i}" for i in range(3)}
    assert replay.config["cluster"] == {"worker": [f"tflab-node-0-{i}.tflab:2222" for i in range(3)]}
    for i, task in enumerate(NODES):
        assert replay.config["tf_config"][task] == json.loads(
            cluster.trainjob_tf_config_env(f"tflab-node-0-{i}", i, 3)["TF_CONFIG"])
        # what the container's tfconfig printed is what the plan recorded: one builder, both sides
        assert f"[{task}] TF_CONFIG={json.dumps(replay.config['tf_config'][task], separators=(',', ':'))}" \
            in replay.finished.stdout + replay.finished.stderr
    assert "not applied: NetworkPolicy tflab-tasks-only" in replay.finished.stdout
    rows = replay.summary["tasks"]
    assert [(r["task"], r["status"], r["exit_code"]) for r in rows] == [(task, "ok", 0) for task in NODES]
    recorded = replay.summary["settings"]
    assert {key: recorded.get(key) for key in ("strategy", "workers", "epochs", "global_batch")} == \
        {"strategy": "multiworker", "workers": 3, "epochs": 3, "global_batch": 96}
    # issue 44: each node's row has what a lab run's has, from the events the lab's trainer copies to
    # its hooks folder (its own log is its pod's emptyDir, or here a claim), and it is audited
    assert not [note for note in replay.summary["notes"] if note.startswith("not audited")], replay.summary["notes"]
    assert replay.summary["findings"] == []
    for row in rows:
        copy = replay.run_dir / "volumes" / "tflab-hooks" / row["task"] / "events.jsonl"
        assert row["losses"] == own_losses(copy) and len(row["losses"]) == SAME["EPOCHS"], row
        assert row["final_loss"] == row["losses"][-1] and row["steady_step_seconds"] > 0, row
        assert "audit_weights" in [r["event"] for r in replay.events(row["task"])]
    assert len({row["weights_sha256"] for row in rows}) == 1 and rows[0]["weights_sha256"], rows


def test_the_replay_trains_to_make_ups_losses(direct, replay):
    assert direct.finished.returncode == 0, direct.why()
    ours = direct.losses("worker-0")
    assert len(ours) == SAME["EPOCHS"]
    for task in NODES:
        theirs = own_losses(replay.run_dir / "volumes" / "out" / "tflab" / f"{task}.jsonl")
        assert len(theirs) == len(ours)
        for a, b in zip(ours, theirs):
            assert math.isclose(a, b, rel_tol=LOSS_RTOL), (task, ours, theirs)
    log.info("make up and the TrainJob replay: %s", ours)


def test_a_tfjob_turned_into_a_trainjob_replays_to_the_same_losses(lab, written, direct):
    converted = lab.runs_dir / "tj-converted"
    result = run_lab("k8s", f"TFJOB={written / 'tfjob.yaml'}", f"RUNS_DIR={lab.runs_dir}", "RUN=tj-converted",
                     env=lab_env())
    assert result.returncode == 0, result.output
    assert "not carried over: " in result.stdout and "spec.runPolicy.cleanPodPolicy" in result.stdout
    run = lab.run("tj-converted-replay", TRAINJOB=str(converted / "trainjob.yaml"))
    assert run.finished.returncode == 0, run.why()
    theirs = own_losses(run.run_dir / "volumes" / "out" / "tflab" / "worker-0.jsonl")
    ours = direct.losses("worker-0")
    assert len(theirs) == len(ours) and all(math.isclose(a, b, rel_tol=LOSS_RTOL) for a, b in zip(ours, theirs))


def test_a_failjobset_rule_fails_the_replay_at_the_first_failure(lab, written):
    """JobSet v0.12.0's failure policy applied on a real stack (k8s/jobset.py; its rules pinned in
    tests/unit/test_jobset.py): a node exits 3, its Job fails as BackoffLimitExceeded, the rule
    FailJobSet matches it (pkg/controllers/failure_policy.go ruleIsApplicable,
    failJobSetActionApplier), so the job fails with no restart although maxRestarts is 2."""
    documents = list(yaml.safe_load_all((written / "trainjob.yaml").read_text()))
    for document in documents:
        if document["kind"].endswith("TrainingRuntime"):
            document["spec"]["template"]["spec"]["failurePolicy"] = {
                "maxRestarts": 2, "rules": [{"name": "stop", "action": "FailJobSet", "targetReplicatedJobs": ["node"],
                                             "onJobFailureReasons": ["BackoffLimitExceeded"]}]}
        if document["kind"] == "TrainJob":
            document["spec"]["trainer"]["args"] = ["python", "-c", "import sys; sys.exit(3)"]
    path = lab.runs_dir / "tj-failjobset.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
    run = lab.run("tj-failjobset", TRAINJOB=str(path))
    out = run.finished.stdout + run.finished.stderr
    assert run.finished.returncode == 1, run.why()
    assert run.summary["reason"] == "FailJobSetFailurePolicyAction" and run.summary["restarts"] == [], out
    assert "JobSet applies FailJobSet (rule stop; first failed Job node-0, BackoffLimitExceeded)" in out
    assert [(r["task"], r["exit_code"]) for r in run.summary["tasks"] if r["exit_code"] == 3], run.summary["tasks"]
