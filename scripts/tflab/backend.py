"""What a backend is: the written interface that Compose, local processes and Swarm implement.

runner.py supervises a run through this interface alone, so a new backend (another engine, a
cluster of machines) is one class that does these things, and one line in backends.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Protocol

from tflab.cluster import Cluster


class Backend(Protocol):
    cluster: Cluster  # the run's cluster at this backend's addresses (Cluster.readdressed)
    run_dir: Path  # the run's folder, claimed (runfolder.make) before the backend starts anything
    tasks: list[str]  # the cluster's tasks, in start order
    description: str  # for the run's first line: what runs it, and where
    proxied: frozenset[str]  # the tasks behind a delay proxy (LINK, slow-link); empty where there are none
    # task -> whether the kernel killed it for memory (the engine's State.OOMKilled), as far as
    # exit_codes() has read it; empty where the backend cannot tell (processes).
    oom_killed: dict[str, bool]

    def start(self) -> None:
        """Starts every task (and its proxy); LabError if it cannot."""

    def restart(self) -> None:
        """Starts every task again, after all have ended: the same config, logs appended."""

    def exit_codes(self) -> dict[str, int | None]:
        """task -> its exit code, None while it runs (or has not started), explain.VANISHED once gone."""

    def terminate(self, tasks: list[str]) -> None:
        """SIGTERM to these tasks."""

    def stop(self, tasks: list[str]) -> None:
        """SIGKILL to these tasks (none: nothing)."""

    def save_output(self) -> None:
        """Every task's output, merged and timestamped, into the run folder's output.log."""

    def close(self) -> None:
        """Removes everything the run started; nothing is left on the engine. Called in a `finally`
        whatever failed before, so it writes nothing to the run folder (the disk may be full)."""


class ContainerBackend(Backend, Protocol):
    """A backend whose tasks are containers, which make chaos reaches through the engine."""

    def container(self, task: str) -> str:
        """The id of a task's container; LabError if it has none."""

    def network(self) -> str:
        """The name of the run's cluster network."""

    def docker_for(self, task: str) -> list[str]:
        """The docker command that reaches a task's container: `docker`, or `docker -H <its node>`."""

    def cut_off(self, task: str) -> subprocess.CompletedProcess:
        """Takes a task's container off the cluster network (make chaos's partition); the result
        of the engine's command, whose exit code says whether it was done."""

    def reconnect(self, task: str) -> subprocess.CompletedProcess:
        """Puts a task cut off by cut_off back on the cluster network, under its name."""
