"""The backends, one module or folder each (compose.py, local.py, swarm/) under base.py's interface,
and the one registry BACKEND is chosen through (`REGISTRY`): each name's construction with every
check it needs done before anything is written or started, its engine checks, and the cluster
`make config` shows; and the image its tasks run. Each name and what it can do are core/backends.py's
`TABLE`, which settings' validation reads too; a Kind here refers to its entry. A TFJob's replay
runs on compose's stack from its own folder above the supervisor (tflab/replay/)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tflab import images
from tflab.backends import compose, local, swarm, userscript
from tflab.backends.base import Backend
from tflab.backends.swarm import nodes as swarm_nodes
from tflab.core import backends as table
from tflab.core import cluster
from tflab.core.cluster import Cluster
from tflab.core.errors import LabError
from tflab.core.grammars import MEMORY_FACTORS
from tflab.core.settings import Settings
from tflab.engine import docker, gpus


@dataclass(frozen=True)
class Kind:
    """What the lab does with one BACKEND name: the run's backend (its checks passed, nothing
    written or started yet), the engine checks of `make compare`/`soak`, and `make config`'s cluster;
    `capabilities`, its entry in core/backends.py's table, names it."""
    capabilities: table.Capabilities
    make: Callable[[Settings, Path, Cluster, frozenset[str]], Backend]
    check_engine: Callable[[Settings], None]
    config_cluster: Callable[[Settings, Cluster], tuple[Cluster, str]]


def make(settings: Settings, run_dir: Path, the_cluster: Cluster, proxied: frozenset[str] = frozenset()) -> Backend:
    """The backend for BACKEND, its checks passed; nothing is written or started yet."""
    if settings.link and not table.capabilities(settings.backend).link:
        raise LabError(f"LINK={settings.link} needs BACKEND={table.those_with('link')}: the delay proxies are Compose "
                       "services")
    return REGISTRY[settings.backend].make(settings, run_dir, the_cluster, proxied)


def _check_docker(settings: Settings) -> None:
    """What every backend on the engine checks first."""
    docker.check()
    docker.check_cpus("CPUS", settings.cpus)
    userscript.check(settings)


def _make_local(settings: Settings, run_dir: Path, the_cluster: Cluster, proxied: frozenset[str]) -> Backend:
    check_memory(settings, the_cluster, host_memory(), "this host")
    return local.LocalProcesses(settings, run_dir, the_cluster, local.find_python())


def _make_swarm(settings: Settings, run_dir: Path, the_cluster: Cluster, proxied: frozenset[str]) -> Backend:
    _check_docker(settings)
    return swarm.make_stack(run_dir, settings, the_cluster, lambda: task_image(settings))


def _make_compose(settings: Settings, run_dir: Path, the_cluster: Cluster, proxied: frozenset[str]) -> Backend:
    _check_docker(settings)
    cli = compose.find_compose(settings.compose)
    host_gpus = gpus.check_gpus(settings, the_cluster)  # before the image: the GPU one is several GB
    check_memory(settings, the_cluster, docker.engine_memory(), "this Docker engine")  # a swarm's: its nodes'
    image = task_image(settings)
    if settings.link:
        proxied = frozenset(the_cluster.tasks)
    return compose.ComposeStack(cli, run_dir, settings, image, the_cluster, proxied, host_gpus)


# What the lab's trainer takes, WORKERS=8 in steady training on this 2-core, 24 GiB machine
# (2026-12-07, /proc/<pid>/smaps_rollup): 592 MB resident a task, of which 297 MB are TensorFlow's
# mapped libraries and 295 MB its own (unique set size). Compose's tasks share those libraries' pages
# (images/libraries.py: 332 MB proportional each) and so do local processes (one venv's files):
# N tasks need about N x 320 MB plus 300 MB once. A user's SCRIPT costs about the same: nearly all
# of it is TensorFlow's import. Rounded up.
TASK_MEMORY_BYTES = 320 * 10**6
SHARED_LIBRARIES_BYTES = 300 * 10**6


def check_memory(settings: Settings, the_cluster: Cluster, total: int | None, where: str) -> None:
    """Refuses, before anything is written or started, a run whose tasks cannot all fit in the
    memory they share: they would thrash, or be killed half-way. MEMORY caps a task below the
    estimate (its container cannot take more). None: the memory is unknown; nothing is refused."""
    if not total:
        return
    per_task, source = TASK_MEMORY_BYTES, "the lab's trainer's measured own memory"
    if settings.memory != "0":
        limit = int(settings.memory[:-1]) * MEMORY_FACTORS[settings.memory[-1]]
        if limit < per_task:
            per_task, source = limit, f"MEMORY={settings.memory}"
    tasks = len(the_cluster.tasks)
    need = memory_needed(tasks, per_task)
    if need > total:
        raise LabError(f"{tasks} tasks need about {need / 1e9:.1f} GB of memory ({per_task / 1e6:.0f} MB each, "
                       f"{source}, and {SHARED_LIBRARIES_BYTES / 1e6:.0f} MB of TensorFlow's libraries they share), "
                       f"more than {where}'s {total / 1e9:.1f} GB; at most {most_tasks(total, per_task)} fit: "
                       "use fewer WORKERS (or PS), or a machine with more memory")


def memory_needed(tasks: int, per_task: int = TASK_MEMORY_BYTES) -> int:
    """What `tasks` tasks need together: each its own memory, and the libraries' pages once."""
    return SHARED_LIBRARIES_BYTES + tasks * per_task


def most_tasks(total: int, per_task: int = TASK_MEMORY_BYTES) -> int:
    """The most tasks that fit in `total` bytes."""
    return max(0, (total - SHARED_LIBRARIES_BYTES) // per_task)


def host_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def task_image(settings: Settings) -> str:
    """The image every task runs: the trainer's (CPU or GPU, for PLATFORM), plus a user script's
    requirements where it has them."""
    variant = images.trainer_variant(settings)
    image = images.ensure_image(settings.base_image, variant)
    return images.ensure_script_image(Path(settings.script), image, variant) if settings.script else image


def check_engine(settings: Settings) -> None:
    """What make checks of the engine, for the commands that make several runs in one folder
    (compare, soak): once, before that folder is written."""
    REGISTRY[settings.backend].check_engine(settings)


def _check_local(settings: Settings) -> None:
    local.find_python()


def _check_swarm(settings: Settings) -> None:
    _check_docker(settings)
    swarm_nodes.check_swarm()
    task_image(settings)


def _check_compose(settings: Settings) -> None:
    _check_docker(settings)
    compose.find_compose(settings.compose)
    gpus.check_gpus(settings, cluster.build(settings))  # the runs' own clusters come later, one each
    task_image(settings)


def config_cluster(settings: Settings) -> tuple[Cluster, str]:
    """The cluster `make config` shows for BACKEND, and a note on its addresses."""
    return REGISTRY[settings.backend].config_cluster(settings, cluster.build(settings))


def _local_cluster(settings: Settings, the_cluster: Cluster) -> tuple[Cluster, str]:
    ports = local.free_ports(len(the_cluster.tasks))
    note = "local: ports are picked afresh when a run starts"
    return the_cluster.readdressed(cluster.local_addresses(ports)), note


def _swarm_cluster(settings: Settings, the_cluster: Cluster) -> tuple[Cluster, str]:
    return the_cluster, "swarm: service names in the stack's network, port 2222"


def _compose_cluster(settings: Settings, the_cluster: Cluster) -> tuple[Cluster, str]:
    return the_cluster, "compose: stable hostnames, port 2222"


KINDS = (  # a new backend: its Kind here, and its entry in core/backends.py's TABLE
    Kind(table.COMPOSE, _make_compose, _check_compose, _compose_cluster),
    Kind(table.LOCAL, _make_local, _check_local, _local_cluster),
    Kind(table.SWARM, _make_swarm, _check_swarm, _swarm_cluster),
)
REGISTRY: dict[str, Kind] = {kind.capabilities.name: kind for kind in KINDS}
