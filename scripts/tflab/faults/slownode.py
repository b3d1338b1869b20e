"""SCENARIO=slow-node: caps the target's CPUs at SLOW_CPUS (`docker update --cpus`); not undone."""

from __future__ import annotations

import subprocess

from tflab.core.cluster import Cluster
from tflab.core.settings import Settings
from tflab.engine import docker
from tflab.faults.base import Fault


class SlowNode(Fault):
    """A straggler: one task on a slower machine than its peers (not tried on a swarm)."""

    name = "slow-node"

    def check(self, settings: Settings, the_cluster: Cluster) -> None:
        docker.check_cpus("SLOW_CPUS", settings.slow_cpus)

    def words(self) -> str:
        return f"slow-node ({self.settings.slow_cpus:g} CPUs)"

    def inject(self, backend, container: str) -> subprocess.CompletedProcess:
        return docker.update_cpus(container, self.settings.slow_cpus)
