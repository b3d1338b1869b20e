"""BACKEND=swarm on a real engine: a multiworker training deployed with `docker stack deploy`,
followed to its end and checked through its logs. The lab never changes the engine's swarm
state, so this test does: it creates a one-node swarm where none is active and, whatever
happens, leaves the engine as it found it."""

import json

import pytest
from labtest.swarm import active_swarm, stack_leftovers
from tflab.backends.swarm import render as swarm_render
from tflab.core import cluster
from tflab.core.schema import completeness
from tflab.core.settings import Settings

# Every test that changes the engine's swarm state is in one xdist group: they run one after another.
pytestmark = pytest.mark.xdist_group("swarm")

# SWARM_PLACEMENT=local: this node only, whatever swarm is up (a simulated multi-node one included).
SETTINGS = dict(STRATEGY="multiworker", WORKERS=2, EPOCHS=3, EXAMPLES=2048, BACKEND="swarm", SWARM_PLACEMENT="local")


@pytest.fixture(scope="module")
def swarm_run(engine_lab):
    """The run, plus what was left of its stack after it, on a swarm that exists only as long
    as this module needs it (unless one was active before)."""
    with active_swarm():
        run = engine_lab.run("swarm-2", **SETTINGS)
        yield run, stack_leftovers(swarm_render.stack_name(run.run_dir))  # tflab-<run>-<digest>


def test_every_task_exited_0_and_the_lab_said_ok(swarm_run):
    run, _ = swarm_run
    assert run.finished.returncode == 0, run.why()
    assert "on swarm (engine " in run.finished.stdout
    assert run.summary["ok"] and run.summary["outcome"] == "ok", run.why()
    assert run.task_names == ["worker-0", "worker-1"]
    assert [row["exit_code"] for row in run.summary["tasks"]] == [0, 0], run.why()
    assert [row["status"] for row in run.summary["tasks"]] == ["ok", "ok"]


def test_the_stack_carried_cluster_pys_tf_config(swarm_run):
    run, _ = swarm_run
    stack = json.loads((run.run_dir / "stack.run.json").read_text())
    spec = cluster.cluster_spec(Settings(workers=2))
    assert run.config["cluster"] == spec == {"worker": ["worker-0:2222", "worker-1:2222"]}
    for task in run.task_names:
        tf_config = json.loads(stack["services"][task]["environment"]["TF_CONFIG"])
        assert tf_config == cluster.tf_config_for(spec, task)
        start = run.of(task, "start")[0]
        assert start["cluster"] == spec
        assert run.of(task, "cluster_ready")[0]["replicas"] == 2  # the service names resolved


def test_every_log_is_complete_and_the_weights_agree(swarm_run):
    run, _ = swarm_run
    for task in run.task_names:
        assert completeness(run.events(task), epochs=SETTINGS["EPOCHS"]) == [], run.why()
    digests = {run.of(task, "end")[0]["weights_sha256"] for task in run.task_names}
    assert len(digests) == 1 and len(digests.pop()) == 64
    assert run.summary["weights_agree"]
    losses = [run.losses(task) for task in run.task_names]
    assert losses[0] == losses[1] and all(b < a for a, b in zip(losses[0], losses[0][1:])), losses


def test_the_output_holds_every_task_and_the_stack_is_gone(swarm_run):
    run, left = swarm_run
    output = (run.run_dir / "output.log").read_text()
    for task in run.task_names:
        assert f"[{task}] done: final loss" in output, f"{task} missing from output.log"
    assert "--- swarm tasks ---" in output
    assert left == {"stacks": [], "containers": [], "networks": []}
