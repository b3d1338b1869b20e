"""`tflab up TFJOB=`: the manifests `make k8s` writes, replayed on Compose as the training operator
would run them, train to the same losses as `make up` with the same settings."""

import json
import logging
import math

import pytest
from labtest.cli import lab_env, run_lab

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
    env = lab_env(RUNS_DIR=str(lab.runs_dir), RUN="roundtrip-k8s", K8S_PVC="out", K8S_IMAGE=trainer_image,
                  BACKUP="off", **{k: str(v) for k, v in SAME.items()})
    result = run_lab("k8s", env=env)
    assert result.returncode == 0, result.output
    return lab.runs_dir / "roundtrip-k8s" / "tfjob.yaml"


@pytest.fixture(scope="module")
def replay(lab, manifest):
    run = lab.run("roundtrip-replay", TFJOB=str(manifest))
    log.info("replay of a 1-chief, 2-worker TFJob took %.1f s (the lab's whole command)", run.seconds)
    return run


def own_losses(path):
    return [json.loads(line)["loss"] for line in path.read_text().splitlines() if '"epoch"' in line]


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
    for task in replay.tasks:  # watched from outside: a start and an end with the exit code
        kinds = [r["event"] for r in replay.events(task)]
        assert kinds == ["start", "end"], kinds
        assert replay.of(task, "end")[0]["exit_code"] == 0
    assert (replay.run_dir / "volumes" / "out" / "tflab" / "model.keras").is_file()


def test_the_replay_trains_to_make_ups_losses(direct, replay):
    assert direct.finished.returncode == 0, direct.why()
    theirs = own_losses(replay.run_dir / "volumes" / "out" / "tflab" / "chief-0.jsonl")
    ours = direct.losses("chief-0")
    assert len(ours) == len(theirs) == SAME["EPOCHS"]
    for a, b in zip(ours, theirs):
        assert math.isclose(a, b, rel_tol=LOSS_RTOL), (ours, theirs)
    final = {row["task"]: row["final_loss"] for row in replay.summary["tasks"]}
    assert final["chief-0"] == pytest.approx(ours[-1], rel=LOSS_RTOL)
