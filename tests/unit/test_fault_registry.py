"""The faults of make chaos as files (faults/): the registry is settings.SCENARIOS, neither can grow
without the other, and what each class declares is what make chaos refused before they were
classes (issue 37)."""

import pkgutil
from types import SimpleNamespace

import pytest
from tflab import faults
from tflab.core.settings import SCENARIOS, Settings, SettingsError
from tflab.faults import registry
from tflab.faults.base import Fault


def test_the_registry_is_settings_scenarios_in_order():
    """SCENARIOS (core/, the grammar of SCENARIO=) names each fault; the registry finds its class."""
    assert list(registry.FAULTS) == list(SCENARIOS)
    assert all(registry.FAULTS[name].name == name for name in SCENARIOS)


def test_every_fault_in_the_folder_is_in_the_registry():
    """A fault's file whose name is missing from SCENARIOS would never be offered: caught here."""
    found = {fault for module in pkgutil.iter_modules(faults.__path__)
             for fault in registry.classes_in(f"tflab.faults.{module.name}")}
    assert found == set(registry.FAULTS.values())


def test_every_fault_runs_on_compose_and_only_the_swarms_run_on_a_swarm():
    assert all("compose" in fault.backends for fault in registry.FAULTS.values())
    assert registry.offered("swarm") == ("kill", "stop", "pause", "partition", "preempt")
    assert registry.offered("local") == ()
    assert registry.REPLAY_SCENARIOS == ("kill", "stop", "pause", "partition", "slow-node", "preempt")


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
