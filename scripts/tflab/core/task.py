"""The task contract: what every trainer task is, whichever backend starts it.

    task.COMMAND       ("python", "-m", "tflab.train")   the trainer's command
    task.RUN_MOUNT     /lab/run            the run's tasks' space (runs/<RUN>/tasks/), the one writable mount
    task.CONFIG        /lab/config.json    the run's config.json, one read-only file
    task.ENV           TFLAB_CONFIG, TFLAB_OUTPUT, TF_USE_LEGACY_KERAS   the environment every trainer gets

Compose (docker-compose.yml's `x-trainer`), the swarm stack (swarm_render.TRAINER), BACKEND=local,
`make k8s` and the image's own CMD and ENV are each built from these, so a change lands in every
backend at once. docker-compose.yml keeps them as literals, since Compose reads the file itself: a
unit test (test_task_contract.py) holds the file to this module. Stdlib only, importing nothing of
the lab, so either side of the walls may read it.
"""

from __future__ import annotations

from dataclasses import dataclass

COMMAND = ("python", "-m", "tflab.train")
# A task sees of its run folder only the tasks' space (runs/<RUN>/tasks/, writable: logs, output,
# backups, the model) and its config.json (read-only, one file). The lab's own records (owner,
# summary, merged output, chaos events, link profiles, notices) are mounted into no task: a task
# runs a pull request's code, and the lab may run as root (runfolder.TASKS says why).
RUN_MOUNT = "/lab/run"  # the tasks' space, the only writable path besides /tmp ($TFLAB_OUTPUT)
CONFIG = "/lab/config.json"  # the run's config.json, as a container sees it: read-only
LINKS_MOUNT = "/lab/links"  # the delay proxies' profiles (runs/<RUN>/links/), read-only, in the proxies only
METADATA_MOUNT = "/lab/metadata"  # the GCE notices (runs/<RUN>/metadata/), read-only, in the stand-in only
TMPFS_MOUNT = "/tmp"  # HOME and scratch space
# make chaos SCENARIO=hang: the signal that stops a task's training where it stands (its process,
# heartbeats and network alive), and the one that lets it go on (HEAL). The names `docker kill
# --signal` takes; trainer/signals.py answers both. SIGCONT, whose default does nothing to a
# running process, so a release that reaches a process without the handler harms nothing.
HANG_SIGNAL = "SIGUSR2"
RELEASE_SIGNAL = "SIGCONT"
# tf-keras: Keras 3's fit fails under MultiWorkerMirroredStrategy (tensorflow#72388, keras#20585).
LEGACY_KERAS = {"TF_USE_LEGACY_KERAS": "1"}
ENV = {"TFLAB_CONFIG": CONFIG, "TFLAB_OUTPUT": RUN_MOUNT, **LEGACY_KERAS}


def link_control(task: str) -> str:
    """Where a task's delay proxy reads its link profile (slow links): the lab's links/, read-only."""
    return f"{LINKS_MOUNT}/{task}.json"


def metadata_control() -> str:
    """Where the GCE metadata stand-in reads each task's notice (SCENARIO=preempt NOTICE=gce)."""
    return METADATA_MOUNT


@dataclass(frozen=True)
class LinkProfile:
    """A slow link's profile: what the lab writes into links/<task>.json and the delay proxy reads."""

    latency_ms: float = 0.0
    mbit: float = 0.0  # 0: no rate limit

    @classmethod
    def parse(cls, text: str) -> "LinkProfile":
        """From the LINK form, '20ms,10mbit'."""
        latency, rate = text.split(",")
        return cls(float(latency.removesuffix("ms")), float(rate.removesuffix("mbit")))

    def to_dict(self) -> dict:
        return {"latency_ms": self.latency_ms, "mbit": self.mbit}
