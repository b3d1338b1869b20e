"""SCRIPT=: a user's own training script, run unmodified by the launcher (launch.py) in every task."""

from __future__ import annotations

import shlex
from pathlib import Path

from tflab.settings import Settings

SCRIPT_DIR = "/lab/script"  # where a user's script folder is mounted, read-only


def script_command(settings: Settings, script_path: str, python: str = "python") -> list[str]:
    """The command of every task under SCRIPT: the launcher, which runs the script unmodified."""
    return [python, "-m", "tflab.launch", "--", python, script_path, *shlex.split(settings.args)]


def script_service(settings: Settings) -> dict:
    """SCRIPT in a container: the script's folder mounted read-only, and the launcher as the command."""
    script = Path(settings.script)
    return {"volumes": [f"{script.parent}:{SCRIPT_DIR}:ro"],
            "command": script_command(settings, f"{SCRIPT_DIR}/{script.name}"),
            "working_dir": SCRIPT_DIR}
