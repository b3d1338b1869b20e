"""SCENARIO=kill: SIGKILL to the target's container (`docker kill`); nothing to undo."""

from __future__ import annotations

import subprocess

from tflab.engine import docker
from tflab.faults.base import Fault


class Kill(Fault):
    """A task that dies at once, as a crashed process or a lost machine does."""

    name = "kill"
    backends = ("compose", "swarm")
    signal: str | None = None  # docker kill's own: SIGKILL

    def inject(self, backend, container: str) -> subprocess.CompletedProcess:
        # On a swarm the target may run on another node: its engine's docker (backends/swarm/nodes.py).
        return docker.kill([container], self.signal, timeout=60, engine=backend.docker_for(self.target))
