"""SCENARIO=partition: cuts the target off the network (`docker network disconnect`; on a swarm its
overlay interface set down, backends/swarm/link.py), reconnected after HEAL seconds, or never."""

from __future__ import annotations

import subprocess
import time

from tflab.core.errors import LabError
from tflab.faults.base import Fault

CUT_AGAIN_SECONDS = 60  # a swarm gives a restarted task its container within seconds


class Partition(Fault):
    """A task its peers cannot reach. Never undone (HEAL=never), it stays cut off across restarts,
    as a node that stays unreachable would."""

    name = "partition"
    backends = ("compose", "swarm")
    heals = True
    lasting = True

    def __init__(self, chaos):
        super().__init__(chaos)
        self.cut_again: float | None = None  # since when a partition never undone waits to be cut again

    def inject(self, backend, container: str) -> subprocess.CompletedProcess:
        return backend.cut_off(self.target)

    def undo(self, backend) -> subprocess.CompletedProcess:
        return backend.reconnect(self.target)

    def tick(self, backend, codes: dict) -> None:
        if self.cut_again is not None:
            self._cut_again(backend, self.cut_again)

    def after_restart(self, backend) -> None:
        """A restart reconnects the recreated container (Compose does): one never undone is cut again."""
        if self.chaos.pending and self.chaos.heal is None:
            self.cut_again = time.time()
            self._cut_again(backend, self.cut_again)

    def _cut_again(self, backend, since: float) -> None:
        """Cuts the restarted target off; until a swarm has given it a container (Compose has at
        once), it is tried again at every tick, for CUT_AGAIN_SECONDS at most."""
        try:
            result = backend.cut_off(self.target)
        except LabError as error:
            result = subprocess.CompletedProcess([], 1, "", str(error))
        if result.returncode == 0 or time.time() > since + CUT_AGAIN_SECONDS:
            self.cut_again = None
            self.chaos.record("cut again after the restart", ok=result.returncode == 0,
                              **({"error": result.stderr.strip()} if result.returncode else {}))
