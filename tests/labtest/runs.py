"""One lab run as the tests see it: the CLI's result and everything the run left in its folder."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from tflab.schema import read_events

from labtest.cli import Finished


@dataclass
class LabRun:
    name: str
    settings: dict[str, str]
    finished: Finished
    run_dir: Path
    seconds: float

    @cached_property
    def config(self) -> dict:
        return json.loads((self.run_dir / "config.json").read_text())

    @cached_property
    def summary(self) -> dict:
        return json.loads((self.run_dir / "summary.json").read_text())

    @property
    def tasks(self) -> list[str]:
        return self.config["tasks"]

    def events(self, task: str) -> list[dict]:
        return read_events(self.run_dir / f"{task}.jsonl")

    def of(self, task: str, event: str) -> list[dict]:
        return [r for r in self.events(task) if r["event"] == event]

    def losses(self, task: str) -> list[float]:
        return [r["loss"] for r in self.of(task, "epoch")]

    def why(self) -> str:
        """What to read when an assertion about this run fails."""
        return (f"run {self.name} ({self.run_dir}), exit {self.finished.returncode}\n"
                f"--- lab output ---\n{self.finished.output[-4000:]}\n"
                f"--- tasks' output: {self.run_dir / 'output.log'}")


def lab_containers(project_prefix: str = "tflab-") -> list[str]:
    """Names of every container, running or not, of a lab Compose project."""
    found = subprocess.run(["docker", "ps", "--all", "--format",
                            '{{.Names}} {{.Label "com.docker.compose.project"}}'],
                           capture_output=True, text=True, check=True)
    return [line.split()[0] for line in found.stdout.splitlines()
            if len(line.split()) > 1 and line.split()[1].startswith(project_prefix)]
