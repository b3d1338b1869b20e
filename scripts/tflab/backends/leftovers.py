"""What runs left on the engine, across backends, found by the labels every run puts on what it
creates (labels.py): Compose projects (with TensorBoard's) and swarm stacks. `make down` lists them
here and removes each through its backend; nothing else on the engine is ever listed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tflab.backends.swarm import teardown
from tflab.engine import docker


@dataclass(frozen=True)
class Leftover:
    kind: str  # "project" (Compose) or "stack" (swarm)
    name: str
    run_dir: Path | None  # the run folder its labels name; None for TensorBoard's project

    def remove(self) -> bool:
        """Removes it; False for a stack that is still being removed when the wait is over."""
        if self.kind == "stack":
            return teardown.remove_stack(self.name)
        docker.remove_project(self.name)
        return True


def projects(scope: Path, tensorboard_project: str | None = None) -> list[Leftover]:
    """The Compose projects of the runs under `scope` (and TensorBoard's, where given)."""
    return [Leftover("project", project, docker.project_run_dir(project))
            for project in docker.lab_projects(scope, tensorboard_project)]


def stacks(scope: Path) -> list[Leftover]:
    """The swarm stacks of the runs under `scope`; none where this engine is no swarm manager."""
    return [Leftover("stack", stack, run_dir) for stack, run_dir in sorted(teardown.stack_run_dirs(scope).items())]
