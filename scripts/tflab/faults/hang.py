"""SCENARIO=hang: the target's training stops where it stands while its process, its heartbeats
and its network stay alive; it goes on after HEAL seconds, or never.

`docker kill --signal HANG_SIGNAL`: the task's main thread waits in trainer/signals.py's handler
from its next line of Python on (in Keras's fit, the next step's callbacks), while TensorFlow's
own threads (the coordination service's heartbeats, the gRPC server) run on; RELEASE_SIGNAL after
HEAL lets it go. The case `pause` cannot show: a frozen container stops its heartbeats too, and
TensorFlow notices that in seconds; a hang it never notices, and its peers wait in their
all-reduce for ever, as behind a stuck input pipeline or a callback that never returns.
"""

from __future__ import annotations

import subprocess

from tflab.core.task import HANG_SIGNAL, RELEASE_SIGNAL
from tflab.engine import docker
from tflab.faults.base import Fault


class Hang(Fault):
    """A task whose training stops and whose process does not: the stall the lab's watch is for."""

    name = "hang"
    backends = ("compose", "swarm")
    not_on_replay = ("a replica's program answers the lab's signals only where the lab's hooks are in it as its "
                     "init's child; elsewhere the signal would end it, a kill rather than a hang")
    heals = True
    lasting = True

    def inject(self, backend, container: str) -> subprocess.CompletedProcess:
        return docker.kill([container], HANG_SIGNAL, engine=backend.docker_for(self.target))

    def undo(self, backend) -> subprocess.CompletedProcess:
        return docker.kill([backend.container(self.target)], RELEASE_SIGNAL, engine=backend.docker_for(self.target))

    def after_restart(self, backend) -> None:
        """A restart starts the target's program again, not hung: the hang is over."""
        if self.chaos.pending:
            self.chaos.undone(by="the restart")
