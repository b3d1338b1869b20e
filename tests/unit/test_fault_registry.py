"""The faults of make chaos as files (faults/): the registry is settings.SCENARIOS, neither can grow
without the other, and what each class declares is what make chaos refused before they were
classes (issue 37)."""

import pkgutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from tflab import faults
from tflab.core import cluster
from tflab.core.errors import LabError
from tflab.core.settings import SCENARIOS, Settings, SettingsError
from tflab.faults import registry
from tflab.faults.base import Fault
from tflab.faults.chaos import Chaos


def test_the_registry_is_settings_scenarios_in_order():
    """SCENARIOS (core/, the grammar of SCENARIO=) names each fault; the registry finds its class."""
    assert list(registry.FAULTS) == list(SCENARIOS)
    assert all(registry.FAULTS[name].name == name for name in SCENARIOS)


def test_every_fault_in_the_folder_is_in_the_registry():
    """A fault's file whose name is missing from SCENARIOS would never be offered: caught here."""
    found = {fault for module in pkgutil.iter_modules(faults.__path__)
             for fault in registry.classes_in(f"tflab.faults.{module.name}")}
    assert found == set(registry.FAULTS.values())


def test_every_fault_runs_on_compose_and_each_where_it_ran_before_it_was_a_class():
    """The lists the old module wrote by hand (SWARM_SCENARIOS, REPLAY_SCENARIOS), now declared by
    each class; a fault added later declares its own."""
    assert all("compose" in fault.backends for fault in registry.FAULTS.values())
    swarm, replay = set(registry.offered("swarm")), set(registry.REPLAY_SCENARIOS)
    assert {"kill", "stop", "pause", "partition", "preempt", "hang"} <= swarm and not {"slow-link", "slow-node"} & swarm
    assert {"kill", "stop", "pause", "partition", "slow-node", "preempt"} <= replay
    assert not {"slow-link", "hang"} & replay
    assert registry.offered("local") == ()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_heal_never_is_allowed_where_a_fault_may_last(scenario):
    """settings.py (core/) refuses HEAL=never itself; the classes say the same, and make soak reads them."""
    fault = registry.FAULTS[scenario]
    assert fault.lasting <= fault.heals
    given = {"SCENARIO": scenario, "HEAL": "never"}
    if fault.lasting:
        Settings.from_env({}, given)
    else:
        with pytest.raises(SettingsError, match=f"^HEAL=never is not allowed with SCENARIO={scenario}"):
            Settings.from_env({}, given)


def test_a_base_fault_says_its_name_and_adds_nothing():
    class Quiet(Fault):
        name = "quiet"

    quiet = Quiet(SimpleNamespace(settings=Settings(), target="worker-1"))
    assert (quiet.words(), quiet.proxied(), quiet.result(), Quiet.drawn(None, Settings())) == \
        ("quiet", frozenset(), {}, {})


class ReplayedCluster:
    """A replayed job's cluster as the driver reads it (tfjob.Plan.as_cluster)."""

    def __init__(self, settings: Settings, setting: str):
        built = cluster.build(settings)
        self.tasks, self.chief, self.replayed_from = built.tasks, built.chief, setting


@pytest.mark.parametrize("changes, expected", [
    ({"scenario": "slow-link"}, "SCENARIO=slow-link is not allowed with TFJOB: a replayed job's replicas have no "
                                "delay proxy in front of them; expected one of "
                                + ", ".join(registry.REPLAY_SCENARIOS)),
    ({"scenario": "preempt", "notice": "gce", "target": "worker-7"},
     "NOTICE=gce is not allowed with TFJOB: a replay has no GCE metadata stand-in beside its replicas; expected "
     "NOTICE=sigterm (the kubelet's notice) or none"),
])
def test_what_a_replay_cannot_take_is_refused_before_anything_else(changes, expected):
    """What replay/ refused itself before it made the observer: now the fault's (a bad
    TARGET too is refused after it, as it was)."""
    settings = Settings().replace(**changes)
    with pytest.raises(LabError) as refused:
        Chaos(settings, ReplayedCluster(settings, "TFJOB")).check(settings)
    assert str(refused.value) == expected


REPLAYED_JOB = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: job}
spec:
  tfReplicaSpecs:
    Worker: {replicas: 2, template: {spec: {containers: [{name: tensorflow, image: "img:1"}]}}}
"""


def test_chaos_asks_the_cluster_what_it_replays(tmp_path):
    """Issue 46: the driver told a replay from the lab's run by getattr(cluster, "plan", None);
    now every kind's cluster declares it (cluster.Cluster.replayed_from), mypy holding both."""
    import yaml
    from tflab.k8s import tfjob

    settings = Settings(scenario="slow-link")
    plan = tfjob.plan_of(tmp_path / "job.yaml", [yaml.safe_load(REPLAYED_JOB)], Settings())
    assert (cluster.build(settings).replayed_from, Chaos(settings).replayed) == (None, None)
    replayed = Chaos(settings, plan.as_cluster())
    assert replayed.replayed == "TFJOB" and replayed.target == "worker-1"
    with pytest.raises(LabError, match="^SCENARIO=slow-link is not allowed with TFJOB: "):
        replayed.check(settings)


@pytest.mark.parametrize("module", [f"faults.{m.name}" for m in pkgutil.iter_modules(faults.__path__)]
                         + ["faults", "replay"])
def test_each_module_imports_alone(module):
    code = f"import tflab.{module}"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                            cwd=Path(faults.__file__).parents[2])
    assert result.returncode == 0, result.stderr


def test_the_replay_imports_nothing_of_faults():
    """faults/chaos.py runs a replayed job through replay/, which hands the observer it
    is given the job's replicas; it imported the replay's scenarios from faults/ (lazily, a cycle)
    and now asks nothing of it: the fault refuses what a replay cannot take (Chaos.check)."""
    from tflab import replay

    modules = sorted(Path(replay.__file__).parent.glob("*.py"))
    assert len(modules) > 1  # the package's modules, all of them
    assert [path.name for path in modules if "tflab.faults" in path.read_text()] == []
