"""What a fault of make chaos is: one class a scenario, one file each in faults/ (named for its
SCENARIO= value without hyphens: slow-link is slowlink.py), found by faults/registry.py.

A fault only acts: what it injects, how it is undone, the words it says for itself, where it can
run, what it refuses. When it acts, and what is recorded of it, is the chaos driver's
(faults/chaos.py), which makes one fault for one run and hands itself over as `chaos`.
"""

from __future__ import annotations

import random
import subprocess

from tflab.core.cluster import Cluster
from tflab.core.settings import Settings


class Fault:
    """One scenario, its class attributes declaring it and its methods acting for one run. `chaos`
    is the driver (chaos.Chaos): its settings, target and record, and whether the fault is
    pending (injected and not undone)."""

    name = ""  # its SCENARIO= value, as settings.SCENARIOS spells it and in that order
    backends: tuple[str, ...] = ("compose",)  # where make chaos can do it; "swarm": through the target's node
    not_on_replay: str | None = None  # why a replayed TFJob's or TrainJob's replicas cannot take it; None: they can
    heals = False  # HEAL undoes it that many seconds later
    lasting = False  # HEAL=never is allowed: it stays until the run ends (make soak draws that one time in four)
    own_settings: tuple[str, ...] = ()  # settings only it reads: given with another SCENARIO, make chaos refuses them
    own_settings_are = ""  # what those are, in the words of that refusal

    def __init__(self, chaos):
        self.chaos = chaos
        self.settings: Settings = chaos.settings
        self.target: str = chaos.target

    def check(self, settings: Settings, the_cluster: Cluster) -> None:
        """Refuses what it cannot do to this run, in one line, before anything starts."""

    def check_replay(self, settings: Settings, setting: str) -> None:
        """Refuses what it cannot do to a replayed job (`setting`: TFJOB or TRAINJOB, the one that
        named it), before every other check."""

    def proxied(self) -> frozenset[str]:
        """The tasks it needs a delay proxy in front of (backends/compose.py puts them there)."""
        return frozenset()

    def words(self) -> str:
        """What it is, as chaos prints it: its name, and the setting that sizes it if one does."""
        return self.name

    def inject(self, backend, container: str) -> subprocess.CompletedProcess:
        """Does it to the target (`container`: the target's); the result says whether that worked."""
        raise NotImplementedError

    def undo(self, backend) -> subprocess.CompletedProcess:
        """Undoes it, HEAL seconds after it was injected (only where `heals`)."""
        raise NotImplementedError

    def tick(self, backend, codes: dict) -> None:
        """At every poll of the runner once it is injected (`codes`: each task's exit code, or None)."""

    def after_restart(self, backend) -> None:
        """After the runner restarted the run, which recreates every container."""

    def finish(self, backend) -> None:
        """When the run ends, before the containers are removed."""

    def result(self) -> dict:
        """What it adds to summary.json's chaos section."""
        return {}

    @classmethod
    def drawn(cls, rng: random.Random, settings: Settings) -> dict:
        """For make soak: the settings it reads that a trial draws (after its target and AT)."""
        return {}


def done() -> subprocess.CompletedProcess:
    """The result of a fault that runs no command, and cannot fail short of an exception."""
    return subprocess.CompletedProcess([], 0, "", "")
