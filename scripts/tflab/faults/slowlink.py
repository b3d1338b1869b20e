"""SCENARIO=slow-link: the target's inbound link, through its delay proxy (trainer/linkproxy.py),
gets SLOW_LINK; not undone."""

from __future__ import annotations

import subprocess

from tflab.core import runfolder
from tflab.core.cluster import Cluster
from tflab.core.errors import LabError
from tflab.core.settings import Settings
from tflab.faults.base import Fault, done


class SlowLink(Fault):
    """A slow network to one task: every connection to it delayed both ways and its rate limited."""

    name = "slow-link"
    not_on_replay = "a replayed job's replicas have no delay proxy in front of them"

    def check(self, settings: Settings, the_cluster: Cluster) -> None:
        if not the_cluster.spec:  # one process (single, mirrored): no job, no link
            raise LabError(f"SCENARIO=slow-link needs a cluster: STRATEGY={settings.strategy} has no network link")

    def proxied(self) -> frozenset[str]:
        return frozenset([self.target])

    def words(self) -> str:
        return f"slow-link ({self.settings.slow_link})"

    def inject(self, backend, container: str) -> subprocess.CompletedProcess:
        # the proxy in front of the target picks the profile up within 0.2 s
        runfolder.set_link(backend.run_dir, self.target, self.settings.slow_link)
        return done()
