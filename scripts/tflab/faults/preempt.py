"""SCENARIO=preempt: a NOTICE (sigterm, gce, none), then SIGKILL once GRACE seconds have passed if
the target still runs (supervisor/preemption.py plays it and measures what it cost); not undone."""

from __future__ import annotations

import random
import subprocess

from tflab.core.backends import capabilities, those_with
from tflab.core.cluster import Cluster
from tflab.core.errors import LabError
from tflab.core.settings import NOTICES, Settings
from tflab.faults.base import Fault
from tflab.supervisor import preemption


class Preempt(Fault):
    """A preemption as platforms do it: a notice, a grace, a kill."""

    name = "preempt"
    backends = ("compose", "swarm")
    own_settings = ("NOTICE", "GRACE")
    own_settings_are = "the notice the target hears, the seconds from it to the kill"

    def __init__(self, chaos):
        super().__init__(chaos)
        self.preemption = preemption.Preemption(self.settings, self.target, chaos.record)

    def check(self, settings: Settings, the_cluster: Cluster) -> None:
        if settings.notice == "gce" and not capabilities(settings.backend).notice_gce:
            raise LabError(f"NOTICE=gce is not allowed with BACKEND={settings.backend}: its metadata stand-in is a "
                           f"service of the run's Compose project; expected BACKEND={those_with('notice_gce')}, or "
                           "NOTICE=sigterm or none")

    def check_replay(self, settings: Settings, setting: str) -> None:
        if settings.notice == "gce":
            raise LabError(f"NOTICE=gce is not allowed with {setting}: a replay has no GCE metadata stand-in beside "
                           "its replicas; expected NOTICE=sigterm (the kubelet's notice) or none")

    def words(self) -> str:
        return f"preempt (notice {self.settings.notice}, {self.settings.grace:g} s grace)"

    def inject(self, backend, container: str) -> subprocess.CompletedProcess:
        return self.preemption.notify(backend)

    def tick(self, backend, codes: dict) -> None:
        self.preemption.tick(backend, codes)

    def after_restart(self, backend) -> None:
        self.preemption.after_restart(backend)

    def result(self) -> dict:
        return {"preemptions": [self.preemption.result()]}

    @classmethod
    def drawn(cls, rng: random.Random, settings: Settings) -> dict:
        return {"notice": rng.choice(NOTICES)}
