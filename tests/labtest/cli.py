"""Running the lab's host CLI (`python -m tflab`) the way the Makefile does, with a clean environment."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tflab.core.settings import SPECS

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def lab_env(**changes: str) -> dict[str, str]:
    """os.environ without any lab setting a developer may have exported (nor an outer make's
    variables, as under `make test`), plus `changes`."""
    env = {k: v for k, v in os.environ.items()
           if k not in SPECS and k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "TFLAB_MAKE_VARIABLES",
                                           "TFLAB_MAKE_OWN", "TFLAB_CHECK")}
    env.update({"PYTHONPATH": str(REPO / "scripts"), "TFLAB_PYTHON": sys.executable})
    env.update(changes)
    return env


def run_lab(*arguments: str, env: dict[str, str] | None = None, timeout: float = 900) -> Finished:
    result = subprocess.run([sys.executable, "-m", "tflab", *arguments], cwd=REPO, env=env or lab_env(),
                            capture_output=True, text=True, timeout=timeout)
    return Finished(result.returncode, result.stdout, result.stderr)


def assert_refused(result: Finished, expected: str, runs_dir: Path) -> None:
    """The lab's answer to bad input: exit 2, one line on stderr starting with `expected`, no
    traceback, and no run folder written."""
    assert result.returncode == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"tflab: {expected}"), lines[0]
    assert "Traceback" not in result.stderr
    assert not runs_dir.exists() or [p.name for p in runs_dir.iterdir()] == []
