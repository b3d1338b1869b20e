"""The task contract: what every trainer task is, whichever backend starts it.

    task.COMMAND       ("python", "-m", "tflab.train")   the trainer's command
    task.RUN_MOUNT     /lab/run                          where the run folder is mounted in a container
    task.ENV           TFLAB_CONFIG, TF_USE_LEGACY_KERAS  the environment every trainer gets

Compose (docker-compose.yml's `x-trainer`), the swarm stack (swarm_render.TRAINER), BACKEND=local,
`make k8s` and the image's own CMD and ENV are each built from these, so a change lands in every
backend at once. docker-compose.yml keeps them as literals, since Compose reads the file itself: a
unit test (test_task_contract.py) holds the file to this module. Stdlib only, importing nothing of
the lab, so either side of the walls may read it.
"""

from __future__ import annotations

COMMAND = ("python", "-m", "tflab.train")
RUN_MOUNT = "/lab/run"  # the run folder, the only writable path besides /tmp
CONFIG = f"{RUN_MOUNT}/config.json"  # the run's config.json, as a container sees it
TMPFS_MOUNT = "/tmp"  # HOME and scratch space
# tf-keras: Keras 3's fit fails under MultiWorkerMirroredStrategy (tensorflow#72388, keras#20585).
LEGACY_KERAS = {"TF_USE_LEGACY_KERAS": "1"}
ENV = {"TFLAB_CONFIG": CONFIG, **LEGACY_KERAS}


def link_control(task: str) -> str:
    """Where a task's delay proxy reads its link profile (slow links), inside the run folder."""
    return f"{RUN_MOUNT}/links/{task}.json"


def metadata_control() -> str:
    """Where the GCE metadata stand-in reads each task's notice (SCENARIO=preempt NOTICE=gce)."""
    return f"{RUN_MOUNT}/metadata"
