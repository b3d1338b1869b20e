"""CHIEF=1 and EVALUATOR=1 on real Compose: a TFJob's Chief trains as one more replica, and a
sidecar evaluator outside the cluster evaluates each checkpoint the chief writes; the evaluator
again on BACKEND=local and on BACKEND=swarm."""

import math
from pathlib import Path

import pytest
from labtest.swarm import active_swarm, stack_leftovers
from tflab.backends.swarm import render as swarm_render
from tflab.core.schema import completeness

EPOCHS = 3
SAME = dict(SEED=0, GLOBAL_BATCH=96, EXAMPLES=4096, EPOCHS=EPOCHS)  # 96 splits over 3 replicas
STEPS_PER_EPOCH = 4096 // 96
# The same three replicas, the same global batch and seed: TensorFlow gives chief-0, worker-0,
# worker-1 the collective ids 0, 1, 2 that worker-0..2 have, so the shards and the sums are the
# same. Measured here: identical; 1e-4 relative is the tolerance the other strategies get
# (test_training.py), for float summation order only.
LOSS_RTOL = 1e-4


@pytest.fixture(scope="module")
def with_chief(lab):
    return lab.run("chief-1-workers-2", STRATEGY="multiworker", CHIEF=1, WORKERS=2, EVALUATOR=1, **SAME)


@pytest.fixture(scope="module")
def three_workers(lab):
    return lab.run("workers-3", STRATEGY="multiworker", WORKERS=3, **SAME)


@pytest.fixture(scope="module")
def parameter_server(lab):
    return lab.run("ps-evaluator", STRATEGY="parameter_server", WORKERS=2, PS=1, EVALUATOR=1, EPOCHS=2)


def test_the_chief_is_one_more_replica(with_chief):
    assert with_chief.finished.returncode == 0, with_chief.why()
    assert with_chief.task_names == ["chief-0", "worker-0", "worker-1", "evaluator-0"]
    assert with_chief.config["cluster"] == {"chief": ["chief-0:2222"], "worker": ["worker-0:2222", "worker-1:2222"]}
    assert with_chief.config["tf_config"]["evaluator-0"]["task"] == {"type": "evaluator", "index": 0}
    rows = {row["task"]: row for row in with_chief.summary["tasks"]}
    assert [rows[t]["role"] for t in with_chief.task_names] == ["trainer", "trainer", "trainer", "evaluator"]
    assert all(row["status"] == "ok" for row in rows.values()), rows
    assert with_chief.summary["weights_agree"]
    for task in ("chief-0", "worker-0", "worker-1"):
        assert completeness(with_chief.events(task), epochs=EPOCHS) == [], with_chief.why()
        assert with_chief.of(task, "cluster_ready")[0]["replicas"] == 3
    assert (with_chief.tasks_dir / "model.keras").is_file()  # written by chief-0


def test_chief_and_2_workers_train_as_3_workers(with_chief, three_workers):
    assert three_workers.finished.returncode == 0, three_workers.why()
    ours, theirs = with_chief.losses("chief-0"), three_workers.losses("worker-0")
    assert len(ours) == len(theirs) == EPOCHS
    for a, b in zip(ours, theirs):
        assert math.isclose(a, b, rel_tol=LOSS_RTOL), (ours, theirs)


def check_the_evaluator(run) -> None:
    """evaluator-0 logged an eval per checkpoint, with the checkpoint's step and a falling loss,
    and ended by itself with training, exit 0, in a run that ended ok."""
    assert run.finished.returncode == 0 and run.summary["ok"], run.why()
    events = run.events("evaluator-0")
    assert completeness(events, epochs=EPOCHS, role="evaluator") == [], run.why()
    evals = run.of("evaluator-0", "eval")
    assert [e["epoch"] for e in evals][-1] == EPOCHS
    for e in evals:
        assert e["step"] == e["epoch"] * STEPS_PER_EPOCH  # the optimizer's step, restored from the checkpoint
    baseline = run.of("evaluator-0", "start")[0]["baseline_loss"]
    assert evals[-1]["loss"] < baseline
    if len(evals) > 1:
        assert evals[-1]["loss"] < evals[0]["loss"]
    row = next(r for r in run.summary["tasks"] if r["task"] == "evaluator-0")
    assert (row["status"], row["exit_code"], row["evals"][-1]["epoch"]) == ("ok", 0, EPOCHS), row
    assert f"[evaluator-0] eval of epoch {EPOCHS}" in run.finished.stdout


def test_the_evaluator_logs_an_eval_per_checkpoint_and_ends_with_training(with_chief):
    check_the_evaluator(with_chief)


EVALUATOR_ON = dict(STRATEGY="multiworker", WORKERS=2, EVALUATOR=1, **SAME)


def processes_of(run_dir: Path) -> list[int]:
    """Processes still running with the run's config: a local task left behind."""
    marker = f"TFLAB_CONFIG={run_dir / 'config.json'}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if marker in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def test_the_evaluator_on_local_processes(lab):
    run = lab.run("evaluator-local", BACKEND="local", **EVALUATOR_ON)
    check_the_evaluator(run)
    assert run.task_names == ["worker-0", "worker-1", "evaluator-0"]
    assert processes_of(run.run_dir) == []


@pytest.mark.xdist_group("swarm")  # one swarm change at a time (test_swarm.py)
def test_the_evaluator_on_a_swarm(engine_lab):
    with active_swarm():
        run = engine_lab.run("evaluator-swarm", BACKEND="swarm", **EVALUATOR_ON)
        left = stack_leftovers(swarm_render.stack_name(run.run_dir))
    check_the_evaluator(run)
    assert run.task_names == ["worker-0", "worker-1", "evaluator-0"]
    assert left == {"stacks": [], "containers": [], "networks": []}


def test_parameter_server_with_an_evaluator(parameter_server):
    run = parameter_server
    assert run.finished.returncode == 0, run.why()
    assert run.task_names == ["chief-0", "worker-0", "worker-1", "ps-0", "evaluator-0"]
    assert "evaluator" not in run.config["cluster"]
    assert completeness(run.events("evaluator-0"), epochs=2, role="evaluator") == [], run.why()
    assert run.of("evaluator-0", "eval")[-1]["epoch"] == 2
