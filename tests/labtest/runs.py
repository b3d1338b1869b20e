"""One lab run as the tests see it: the CLI's result and everything the run left in its folder."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import tflab.pytest_plugin
from tflab.engine import labels

from labtest.cli import Finished


@dataclass
class LabRun(tflab.pytest_plugin.LabRun):
    """The fixture's LabRun (what users' tests get), with what the lab's own tests add: the run's
    name and settings, how long it took, and its task names in start order (config.json's)."""

    name: str = ""
    settings: dict[str, str] = field(default_factory=dict)
    finished: Finished | None = field(default=None, repr=False)  # the CLI's stdout and stderr apart
    seconds: float = 0.0

    @property
    def task_names(self) -> list[str]:
        return self.config["tasks"]

    def why(self) -> str:
        return (f"run {self.name}: {super().why()}\n"
                f"--- tasks' output: {self.run_dir / 'output.log'}")

    # This machine's pace as the lab measured it in this run, for tests to bound their waits by
    # (a machine shared with other work can be ten times slower than an idle one: `import
    # tensorflow` took 90 s at load 12 on 2 cores, 3 s idle), never by a wall-clock guess.

    @property
    def ready_seconds(self) -> float:
        """The longest any task took from its start to a formed cluster (importing TensorFlow, the
        rendezvous): its cluster_ready events' `seconds`."""
        return max(record["seconds"] for task in self.task_names for record in self.of(task, "cluster_ready"))

    @property
    def epoch_seconds(self) -> float:
        """The longest epoch of any task."""
        return max(record["seconds"] for task in self.task_names for record in self.of(task, "epoch"))


def engine_objects(scope: Path) -> list[str]:
    """The containers and networks on the engine of the runs under `scope` (a RUNS_DIR, or one run),
    found by the run-folder label every one of them carries (labels.py): another lab's runs on the
    same engine (another test, another CI job) are not counted."""
    found = []
    for kind, name in ((["ps", "--all"], ".Names"), (["network", "ls"], ".Name")):
        listed = subprocess.run(["docker", *kind, "--filter", f"label={labels.RUN_DIR}", "--format",
                                 f'{kind[0]} {{{{{name}}}}} {{{{.Label "{labels.RUN_DIR}"}}}}'],
                                capture_output=True, text=True, check=True)
        found += [line for line in listed.stdout.splitlines()
                  if len(line.split(" ", 2)) == 3 and labels.within(line.split(" ", 2)[2], scope)]
    return found


def lab_containers(project_prefix: str = "tflab-") -> list[str]:
    """Names of every container, running or not, of a lab Compose project."""
    found = subprocess.run(["docker", "ps", "--all", "--format",
                            '{{.Names}} {{.Label "com.docker.compose.project"}}'],
                           capture_output=True, text=True, check=True)
    return [line.split()[0] for line in found.stdout.splitlines()
            if len(line.split()) > 1 and line.split()[1].startswith(project_prefix)]
