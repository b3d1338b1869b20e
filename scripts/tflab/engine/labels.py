"""The labels and names that mark what a run creates on the engine, so the lab touches only its own.

Every container, network and swarm service of a run carries the run's id and its folder's absolute
path. `down` removes what lies under one runs folder (or one run, or one compare), never another
folder's runs or someone else's `tflab-*` Compose project; two labs (two checkouts, two CI jobs, two
compares) share one engine without touching each other. The Compose project and swarm stack names
add a digest of the run folder to its id: compare's sub-runs are called single, mirrored-2, ... in
every compare folder, and those names must still differ between two compares running at once.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

PREFIX = "tflab-"
# The engine's own labels, which the lab reads to find a Compose project's or a stack's objects.
PROJECT_LABEL = "com.docker.compose.project"  # Compose v1 and v2 label every container and network
SERVICE_LABEL = "com.docker.compose.service"
STACK_LABEL = "com.docker.stack.namespace"  # docker stack deploy labels every service, container and network
RUN = "tflab.run"  # the run id
RUN_DIR = "tflab.run-dir"  # the run folder's absolute path
MAX_NAME = 38  # of the run id in a project name: tflab-<38>-<8>_worker-31 is 63, swarm's most for a service


def run_labels(run_dir: Path) -> dict[str, str]:
    return {RUN: run_dir.name, RUN_DIR: str(run_dir)}


def digest(path: Path) -> str:
    return hashlib.sha256(str(path).encode()).hexdigest()[:8]


def project_name(run_dir: Path) -> str:
    """The run's Compose project (and swarm stack): tflab-<run id>-<digest of its folder>."""
    return f"{PREFIX}{run_dir.name[:MAX_NAME]}-{digest(run_dir)}"


def tensorboard_project(runs_dir: Path) -> str:
    return f"{PREFIX}tensorboard-{digest(runs_dir)}"


def within(run_dir: str, scope: Path) -> bool:
    """Whether a run folder (a label's value) is `scope` or lies under it."""
    return run_dir == str(scope) or run_dir.startswith(str(scope).rstrip("/") + "/")


def label_template(name: str, of: str = ".Config.Labels") -> str:
    """A `--format` template that prints one label's value: a container's (`.Config.Labels`) or a
    swarm service's (`.Spec.Labels`)."""
    return '{{index %s "%s"}}' % (of, name)
