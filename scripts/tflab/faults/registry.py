"""The faults make chaos and make soak offer, by SCENARIO= name, and what follows from their classes:
which can run on which backend and on a replay, and which settings only one of them reads.

settings.SCENARIOS (core/, which cannot import faults/) is the grammar of SCENARIO= and its order;
each name's class is found in the module named for it without hyphens (slow-link: slowlink.py).
tests/unit/test_fault_registry.py keeps the two the same.
"""

from __future__ import annotations

import importlib

from tflab.core.backends import capabilities
from tflab.core.errors import LabError
from tflab.core.settings import SCENARIOS, Settings, refuse_unhonoured
from tflab.faults.base import Fault


def module_of(scenario: str) -> str:
    """The module that holds a scenario's class: `tflab.faults.slowlink` for slow-link."""
    return f"tflab.faults.{scenario.replace('-', '')}"


def classes_in(module_name: str) -> list[type[Fault]]:
    """The faults a module defines (not those it imports, as stop.py imports Kill; nor base.py's Fault)."""
    module = importlib.import_module(module_name)
    return [found for found in vars(module).values() if isinstance(found, type) and issubclass(found, Fault)
            and found is not Fault and found.__module__ == module.__name__]


FAULTS: dict[str, type[Fault]] = {fault.name: fault for scenario in SCENARIOS
                                  for fault in classes_in(module_of(scenario))}


def offered(backend: str) -> tuple[str, ...]:
    """The scenarios make chaos can do on a backend (BACKEND=swarm: each through the target's node)."""
    return tuple(name for name, fault in FAULTS.items() if backend in fault.backends)


REPLAY_SCENARIOS = tuple(name for name, fault in FAULTS.items() if fault.not_on_replay is None)


def check_backend(settings: Settings, scenarios: tuple[str, ...] = SCENARIOS) -> None:
    """Refuses a backend the scenarios cannot act on. A stack's tasks are containers too, on this
    node or another, so kill, stop and pause are the same docker commands through the target's
    node, and a partition sets its overlay interface down (backends/swarm/link.py: the engine refuses a network
    disconnect there); slow-link needs the Compose project's delay proxies, and slow-node was not
    tried on a stack."""
    if not capabilities(settings.backend).containers:
        raise LabError(f"make chaos needs BACKEND=compose, not BACKEND={settings.backend}: its faults act on "
                       "containers")
    refuse_unhonoured("chaos", settings)
    can = offered(settings.backend)
    refused = [scenario for scenario in scenarios if scenario not in can]
    if refused:
        raise LabError(f"SCENARIO={refused[0]} needs BACKEND=compose; with BACKEND={settings.backend} make chaos "
                       f"offers {', '.join(can)} (make soak draws from every scenario, so it needs compose)")


def refuse_unread(settings: Settings, given: dict[str, str]) -> None:
    """`make chaos SCENARIO=kill NOTICE=gce`: NOTICE and GRACE given (by name, or in the
    environment) to a scenario that never reads them were ignored without a word. (make soak reads
    them for the preemptions it draws.)"""
    for fault in FAULTS.values():
        for name in fault.own_settings:
            if name in given and settings.scenario != fault.name:
                raise LabError(f"{name}={given[name]} is not allowed with SCENARIO={settings.scenario}: "
                               f"{' and '.join(fault.own_settings)} are SCENARIO={fault.name}'s "
                               f"({fault.own_settings_are}); expected SCENARIO={fault.name}, or {name} left out")
