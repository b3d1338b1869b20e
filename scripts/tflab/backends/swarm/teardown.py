"""Removing swarm stacks: a run's own at its end, and `make down`'s, found by the run folder label."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from tflab.engine import docker, dockerswarm, labels

REMOVAL_SECONDS = 60


def stack_run_dirs(scope: Path) -> dict[str, Path]:
    """The stacks of the runs under `scope` (labels.py), each with the run folder its services are
    labelled with; none where this engine is no swarm manager."""
    ids = dockerswarm.service_ls(labels.RUN_DIR)
    if ids.returncode != 0 or not ids.stdout.split():
        return {}
    template = (labels.label_template(labels.RUN_DIR, of=".Spec.Labels") + "\t"
                + labels.label_template(labels.STACK_LABEL, of=".Spec.Labels"))
    found = dockerswarm.service_inspect(ids.stdout.split(), template)
    stacks = {}
    for line in found.stdout.splitlines():
        run_dir, _, stack = line.partition("\t")
        if stack and labels.within(run_dir, scope):
            stacks[stack] = Path(run_dir)
    return stacks


def stack_containers(stack: str, command: list[str] | None = None) -> list[str]:
    return docker.labelled_containers(f"{labels.STACK_LABEL}={stack}", engine=command)


def stack_networks(stack: str) -> list[str]:
    return docker.labelled_networks(f"{labels.STACK_LABEL}={stack}")


def remove_stack(stack: str, engines: Sequence[list[str]] = ()) -> bool:
    """`docker stack rm`, then waits until its containers (here, and on the other nodes' `engines`
    the lab can reach) and network are gone (False if they are not in time): stack rm returns
    before the engines have removed them, and a network can only go once nothing uses it."""
    dockerswarm.stack_remove(stack, timeout=120)
    deadline = time.monotonic() + REMOVAL_SECONDS
    while time.monotonic() < deadline:
        if not any(stack_containers(stack, command) for command in [None, *[e for e in engines if e]]):
            networks = stack_networks(stack)
            if not networks:
                return True
            docker.network_remove(*networks)  # stack rm gave up while tasks still used it
        time.sleep(1)
    return False

