"""BACKEND=swarm across nodes, on a 3-node swarm simulated on this host (`tflab swarm-sim`): this
host's engine and two engines in network namespaces, a registry on the sim's bridge. The module
sets the sim up and tears it down, and checks that the host engine's swarm is left as it was
found and that nothing of the sim or of the runs is left on any node.

The same run on Compose is the reference: one worker per node must train to the same losses and
the same final weights. Tolerance: the losses of both are equal to float rounding, 1e-6 relative
(the same data, seed, global batch and all-reduce order; 2.5e-7 relative was measured between
strategies, and the runs here agreed exactly); the weights digest must be equal."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from labtest.cli import lab_env, run_lab
from tflab.core.schema import completeness
from tflab.tools import swarmsim

pytestmark = pytest.mark.xdist_group("swarm")  # one swarm change at a time (test_swarm.py)

SIZE = dict(STRATEGY="multiworker", WORKERS=3, GLOBAL_BATCH=96, EPOCHS=3, EXAMPLES=2048)
LOSS_RTOL = 1e-6


def docker(*args: str, engine: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *(["-H", engine] if engine else []), *args], capture_output=True, text=True,
                          timeout=120)


def swarm_state() -> str:
    return docker("info", "--format", "{{.Swarm.LocalNodeState}}").stdout.strip()


def sim_leftovers() -> dict:
    """Everything of the sim's that could outlive it on this host."""
    netns = [name for name in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
             if name.startswith("tflab-sim-")]
    links = [line.split(":")[1].strip().split("@")[0] for line in
             subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout.splitlines()
             if "tflabsim" in line]
    rules = [line for line in subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True,
                                             text=True).stdout.splitlines() if swarmsim.BRIDGE in line]
    return {"netns": netns, "links": links, "rules": rules, "state": swarmsim.STATE.exists(),
            "root": swarmsim.SIM_ROOT.exists(), "certs": swarmsim.CERTS_D.exists()}


@pytest.fixture(scope="module")
def sim(engine):
    if os.geteuid() != 0:
        pytest.fail("the simulated swarm needs root (network namespaces, a bridge, engines)", pytrace=False)
    before = swarm_state()
    assert not swarmsim.STATE.exists(), f"a simulated swarm is up already ({swarmsim.STATE}): make swarm-sim-down"
    up = run_lab("swarm-sim", "NODES=3", timeout=600)
    try:
        assert up.returncode == 0, up.output
        registry = re.search(r"REGISTRY=(\S+)", up.stdout).group(1)
        nodes = swarmsim.read_state()["nodes"]
        yield {"registry": registry, "nodes": nodes, "up": up, "names before": registry_names(registry)}
    finally:
        down = run_lab("swarm-sim-down", timeout=600)
        assert down.returncode == 0, down.output
        assert swarm_state() == before, "swarm-sim-down did not leave the engine's swarm as it found it"
        assert sim_leftovers() == {"netns": [], "links": [], "rules": [], "state": False, "root": False,
                                   "certs": False}


def left_on_nodes(sim, stack: str) -> dict:
    """The stack's containers and networks on every node, this one included, and this engine's
    names of the image pushed to the registry (the lab takes them off after the run)."""
    label = f"label=com.docker.stack.namespace={stack}"
    left = {}
    for engine in [None] + [node["socket"] for node in sim["nodes"]]:
        left[engine or "this node"] = (docker("ps", "--all", "--quiet", "--filter", label, engine=engine).stdout.split()
                                       + docker("network", "ls", "--quiet", "--filter", label,
                                                engine=engine).stdout.split())
    left["registry names here"] = sorted(set(registry_names(sim["registry"])) - set(sim["names before"]))
    return left


def registry_names(registry: str) -> list[str]:
    """This engine's names of images in `registry` (tags and digests)."""
    return docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}@{{.Digest}}", "--filter",
                  f"reference={registry}/*").stdout.split()


@pytest.fixture(scope="module")
def reference(lab):
    run = lab.run("sim-reference", **SIZE)
    assert run.finished.returncode == 0, run.why()
    return run


@pytest.fixture(scope="module")
def spread_run(sim, engine_lab):
    run = engine_lab.run("sim-spread", BACKEND="swarm", REGISTRY=sim["registry"], SHARED_RUNS_DIR=1, **SIZE)
    return run, left_on_nodes(sim, f"tflab-{run.run_dir.name}")


def test_one_worker_per_node_trains_as_on_compose(spread_run, reference, sim):
    run, _ = spread_run
    assert run.finished.returncode == 0, run.why()
    assert run.summary["ok"], run.why()
    stack = (run.run_dir / "stack.run.json").read_text()
    constraints = re.findall(r'"node\.id == (\w+)"', stack)
    assert len(set(constraints)) == 3, constraints  # one node each, visible in the stack file
    assert {node["node_id"] for node in sim["nodes"]} < set(constraints)
    assert "across 3 nodes (worker-0 on" in run.finished.stdout
    assert f"image {sim['registry']}/tflab-trainer@sha256:" in run.finished.stdout  # by digest
    for task in run.task_names:
        assert run.losses(task) == pytest.approx(reference.losses("worker-0"), rel=LOSS_RTOL)
    digests = {run.of(task, "end")[0]["weights_sha256"] for task in run.task_names}
    assert digests == {reference.of("worker-0", "end")[0]["weights_sha256"]}


def test_the_run_folder_is_complete_whichever_node_wrote_it(spread_run):
    run, _ = spread_run
    for task in run.task_names:
        assert completeness(run.events(task), epochs=SIZE["EPOCHS"]) == [], run.why()
    assert (run.run_dir / "summary.json").exists() and (run.tasks_dir / "backup").is_dir()
    output = (run.run_dir / "output.log").read_text()
    for task in run.task_names:  # read through each node's engine
        assert f"[{task}] done: final loss" in output, f"{task} missing from output.log"


def test_nothing_is_left_on_any_node(spread_run):
    _, left = spread_run
    assert left == {name: [] for name in left}


def test_without_a_registry_across_nodes_nothing_starts(sim, tmp_path):
    runs = tmp_path / "runs"
    result = run_lab("up", "BACKEND=swarm", f"RUNS_DIR={runs}", "SHARED_RUNS_DIR=1",
                     *[f"{k}={v}" for k, v in SIZE.items()], env=lab_env())
    assert result.returncode == 2
    assert result.stderr.startswith("tflab: BACKEND=swarm would run tasks on 3 nodes, and the image is on this "
                                    "one only: give REGISTRY=host:port"), result.output
    assert len(result.stderr.strip().splitlines()) == 1 and not Path(runs).exists()


def test_a_kill_on_another_node_is_detected_and_recovered(sim, engine_lab):
    """worker-2 runs on tflab-sim-2: the lab kills it through that node's engine."""
    run = engine_lab.run("sim-kill", command="chaos", BACKEND="swarm", REGISTRY=sim["registry"], SHARED_RUNS_DIR=1,
                         SCENARIO="kill", TARGET="worker-2", AT="epoch:2", **{**SIZE, "EPOCHS": 5})
    assert run.finished.returncode == 0, run.why()
    result = run.summary["chaos"]
    assert result["outcome"] == "survived" and result["restarts"] == 1, run.why()
    assert result["detection_seconds"] < 20  # as on one node: within a poll or two, plus the swarm's report
    assert result["recovery_seconds"] < 180  # restart (pulls nothing now), imports, rendezvous, one epoch
    injected = [line for line in (run.run_dir / "chaos.jsonl").read_text().splitlines() if '"injected"' in line]
    assert '"ok": true' in injected[0], injected
    for task in run.task_names:
        assert completeness(run.events(task), epochs=5) == [], run.why()
    assert run.summary["weights_agree"]


@pytest.mark.parametrize("scenario, heal", [("pause", 40), ("partition", 20)])
def test_a_pause_or_partition_on_another_node_is_detected_by_the_heartbeat_and_restarted(sim, engine_lab,
                                                                                        scenario, heal):
    """worker-2 runs on tflab-sim-2. A pause goes through that node's engine; a partition sets the
    task's overlay interface down inside its own namespace (the engine refuses to disconnect a
    service's container from a swarm network). Either way its peers hear nothing, as with a paused
    or cut-off container under Compose: the heartbeat gives up, the run restarts and finishes."""
    run = engine_lab.run(f"sim-{scenario}", command="chaos", BACKEND="swarm", REGISTRY=sim["registry"],
                         SHARED_RUNS_DIR=1, SCENARIO=scenario, TARGET="worker-2", AT="epoch:2", HEAL=heal,
                         **{**SIZE, "EPOCHS": 5})
    assert run.finished.returncode == 0, run.why()
    result = run.summary["chaos"]
    assert result["outcome"] == "survived" and result["restarts"] == 1, run.why()
    assert 3 < result["detection_seconds"] < 30, run.why()  # heartbeats, not an instant error (test_chaos.py)
    injected = [line for line in (run.run_dir / "chaos.jsonl").read_text().splitlines() if '"injected"' in line]
    assert '"ok": true' in injected[0], injected
    for task in run.task_names:
        assert completeness(run.events(task), epochs=5) == [], run.why()
    assert run.summary["weights_agree"]
