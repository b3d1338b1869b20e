"""What a backend is: the written interface that Compose, local processes and Swarm implement.

runner.py supervises a run through this interface alone, so a new backend (another engine, a
cluster of machines) is one class that does these things, and one entry in backends/__init__.py (REGISTRY).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Protocol

from tflab.core.cluster import Cluster


class Backend(Protocol):
    @property
    def cluster(self) -> Cluster:
        """The run's cluster at this backend's addresses (Cluster.readdressed), or a replayed job's
        (tfjob.Plan.as_cluster)."""
    name: str  # its BACKEND name (core/backends.py's TABLE), as the summary records it
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

    def dump_stacks(self, tasks: list[str]) -> None:
        """Sends core/stacks.py's STACKS_SIGNAL to each named live task, which appends its Python
        stacks to `stacks_file(task)` in its space (trainer/signals.py); never raises for a task
        that is gone, and returns at once: the caller waits for the files, bounded."""

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


class RunObserver(Protocol):
    """What watches a run from beside the runner (make chaos's faults, a TFJob replay's watcher):
    the runner calls each of these at its moment, whatever the observer; NO_OBSERVER does nothing."""

    def check(self, settings) -> None:
        """Refuses (LabError) what it cannot do, before anything is written or started."""

    def proxied(self) -> frozenset[str]:
        """The tasks it needs behind a delay proxy."""

    def describe(self) -> str | None:
        """Its line for the run's start, after the outputs' line; None: nothing to say."""

    def tick(self, backend: Backend, codes: dict[str, int | None]) -> None:
        """At every poll of the run, with the exit codes just read."""

    def holds(self) -> bool:
        """Whether it holds the training on purpose now, and will let it go (make chaos's fault with
        a HEAL due): the stall watch counts none of that time."""

    def before_restart(self, backend: Backend) -> None:
        """Once the tasks of an attempt that restarts have ended, before they are started again."""

    def after_restart(self, backend: Backend) -> None:
        """After every task was started again."""

    def finish(self, backend: Backend) -> None:
        """Once the run ended, before its tasks are removed: undoes what it left behind."""

    def result(self, run_dir: Path, summary) -> dict | None:
        """Its section of summary.json (`chaos`), from the written summary; None: none."""


class NoObserver:
    """The RunObserver of a run that nobody watches but the runner."""

    def check(self, settings) -> None:
        pass

    def proxied(self) -> frozenset[str]:
        return frozenset()

    def describe(self) -> str | None:
        return None

    def tick(self, backend: Backend, codes: dict[str, int | None]) -> None:
        pass

    def holds(self) -> bool:
        return False

    def before_restart(self, backend: Backend) -> None:
        pass

    def after_restart(self, backend: Backend) -> None:
        pass

    def finish(self, backend: Backend) -> None:
        pass

    def result(self, run_dir: Path, summary) -> dict | None:
        return None


NO_OBSERVER = NoObserver()


class Observers:
    """Several RunObservers as one (a replay's watcher beside make chaos's fault): each is asked at
    every moment, in order; their start lines are joined, and the summary's section is the first
    one that has one."""

    def __init__(self, *observers: RunObserver):
        self.observers = [observer for observer in observers if observer is not NO_OBSERVER]

    def check(self, settings) -> None:
        for observer in self.observers:
            observer.check(settings)

    def proxied(self) -> frozenset[str]:
        return frozenset().union(*(observer.proxied() for observer in self.observers))

    def describe(self) -> str | None:
        lines = [line for observer in self.observers if (line := observer.describe())]
        return "\n".join(lines) or None

    def tick(self, backend: Backend, codes: dict[str, int | None]) -> None:
        for observer in self.observers:
            observer.tick(backend, codes)

    def holds(self) -> bool:
        return any(observer.holds() for observer in self.observers)

    def before_restart(self, backend: Backend) -> None:
        for observer in self.observers:
            observer.before_restart(backend)

    def after_restart(self, backend: Backend) -> None:
        for observer in self.observers:
            observer.after_restart(backend)

    def finish(self, backend: Backend) -> None:
        """Each, whatever the one before raised: what they left behind is undone by every one."""
        errors = []
        for observer in self.observers:
            try:
                observer.finish(backend)
            except Exception as error:  # noqa: BLE001 - re-raised below, once every one has finished
                errors.append(error)
        if errors:
            raise errors[0]

    def result(self, run_dir: Path, summary) -> dict | None:
        return next((found for observer in self.observers if (found := observer.result(run_dir, summary))), None)
