"""SCENARIO=pause: freezes the target (`docker pause`), `docker unpause` after HEAL seconds."""

from __future__ import annotations

import subprocess

from tflab.engine import docker
from tflab.faults.base import Fault


class Pause(Fault):
    """A task that stops answering for a while and then carries on, as a long GC pause or a
    swapping machine does."""

    name = "pause"
    backends = ("compose", "swarm")
    heals = True

    def inject(self, backend, container: str) -> subprocess.CompletedProcess:
        return docker.pause(container, engine=backend.docker_for(self.target))

    def undo(self, backend) -> subprocess.CompletedProcess:
        return docker.unpause(backend.container(self.target), engine=backend.docker_for(self.target))

    def after_restart(self, backend) -> None:
        """A restart recreates the container running: the pause is over."""
        if self.chaos.pending:
            self.chaos.undone(by="the restart")

    def finish(self, backend) -> None:
        """Never leaves a container frozen behind it (so `down` can remove it cleanly)."""
        if self.chaos.pending:
            self.chaos.undo(backend)
