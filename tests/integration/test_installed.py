"""The lab as a user's project gets it: a wheel built from this repository, installed into a fresh
virtual environment outside it, a project copied from examples/ to a folder of its own, and that
project's own `pytest` and `tflab up` run there, on real Compose, with no conftest line, no
PYTHONPATH and no checkout in sight."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labtest.cli import REPO
from tflab.core.settings import SPECS

log = logging.getLogger("tflab.tests")
EXAMPLE = REPO / "examples/multiworker-tutorial"
PYTEST_PIN = next(line for line in (REPO / "requirements/test.txt").read_text().splitlines()
                  if line.startswith("pytest=="))


def run(command: list, cwd: Path, env: dict, timeout: float = 900) -> subprocess.CompletedProcess:
    result = subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=timeout)
    output = result.stdout[-3000:] + result.stderr[-3000:]
    assert result.returncode == 0, f"{command} exited {result.returncode}:\n{output}"
    return result


def size_mb(folder: Path) -> float:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 1e6


@pytest.fixture(scope="module")
def installed(tmp_path_factory, trainer_image) -> dict:
    """A wheel of this repository in a fresh venv with pytest; returns the venv and a clean env."""
    root = tmp_path_factory.mktemp("installed")
    env = {key: value for key, value in os.environ.items()
           if key not in SPECS and key not in ("PYTHONPATH", "MAKEFLAGS", "MAKELEVEL", "MFLAGS", "TFLAB_PYTHON")}
    env["TFLAB_HOME"] = str(root / "cache")  # the installed lab's laid-out files, away from the user's ~/.cache
    started = time.monotonic()
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", root / "dist", REPO], root, env)
    wheel = next((root / "dist").glob("tflab-*.whl"))
    built = time.monotonic()
    run([sys.executable, "-m", "venv", root / "venv"], root, env)
    bare = size_mb(root / "venv")
    run([root / "venv/bin/pip", "install", "--quiet", "--disable-pip-version-check", wheel], root, env)
    with_tflab = size_mb(root / "venv")
    run([root / "venv/bin/pip", "install", "--quiet", "--disable-pip-version-check", PYTEST_PIN], root, env)
    log.info("wheel %s built in %.1f s; installed in %.1f s, adding %.2f MB to a bare venv (%.1f MB); pytest added",
             wheel.name, built - started, time.monotonic() - built, with_tflab - bare, bare)
    env["PATH"] = f"{root / 'venv/bin'}{os.pathsep}{env['PATH']}"
    project = root / "project"
    shutil.copytree(EXAMPLE, project)
    return {"root": root, "venv": root / "venv", "env": env, "project": project}


def test_the_install_pulls_nothing_heavy(installed):
    listed = run([installed["venv"] / "bin/pip", "list", "--format", "json"], installed["root"], installed["env"])
    names = {package["name"].lower() for package in json.loads(listed.stdout)}
    assert {"tflab", "pyyaml"} <= names  # PyYAML, for TFJob manifests, is its one dependency
    assert not {"tensorflow", "tensorflow-cpu", "numpy", "docker", "requests"} & names, names


def test_the_command_and_its_help_come_from_the_settings_table(installed):
    helped = run(["tflab", "up", "--help"], installed["project"], installed["env"]).stdout
    for name in SPECS:
        assert f"--{name.lower().replace('_', '-')} ({name})" in helped
    config = run(["tflab", "config", "--workers", "3", "GLOBAL_BATCH=96"], installed["project"], installed["env"])
    assert 'worker-2: TF_CONFIG={"cluster": {"worker": ["worker-0:2222", "worker-1:2222", "worker-2:2222"]}' \
        in config.stdout


def test_a_home_it_cannot_write_stops_only_the_commands_that_need_its_files(installed):
    """The installed command once crashed on import, --help too, where it could not make its cache."""
    env = {key: value for key, value in installed["env"].items() if key not in ("TFLAB_HOME", "XDG_CACHE_HOME")}
    blocker = installed["root"] / "home-is-a-file"
    blocker.write_text("")
    env["HOME"] = str(blocker)  # ~/.cache cannot be made under a file, by root either
    assert "usage: tflab" in run(["tflab", "--help"], installed["project"], env).stdout
    run(["tflab", "config"], installed["project"], env)
    images = subprocess.run(["tflab", "images"], cwd=installed["project"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert images.returncode == 2 and images.stderr.splitlines() == [
        f"tflab: cannot make the lab's cache folder {blocker / '.cache/tflab'} (Not a directory); set TFLAB_HOME to "
        "a folder you can write (else XDG_CACHE_HOME/tflab, else ~/.cache/tflab is used)"], images.stderr
    assert not (blocker.parent / ".cache").exists()


def test_it_uses_the_same_image_as_the_checkout_without_building(installed, trainer_image):
    """Same inputs, same digest, same tag: the installed lab reuses the image a checkout of the same
    version built, and would build its own for any other version."""
    shown = run(["tflab", "images"], installed["project"], installed["env"]).stdout
    assert re.search(rf"^tflab: {re.escape(trainer_image)} is up to date", shown, re.M), shown


def test_the_projects_own_pytest_passes_with_the_fixture_from_the_entry_point(installed):
    started = time.monotonic()
    result = run(["pytest", "-q", "-p", "no:cacheprovider"], installed["project"], installed["env"])
    assert re.search(r"^2 passed", result.stdout, re.M), result.stdout
    log.info("the example project's own suite: %.1f s", time.monotonic() - started)


def test_tflab_up_writes_its_runs_in_the_projects_folder(installed):
    result = run(["tflab", "up", "SCRIPT=train.py", "ARGS=--epochs 2", "WORKERS=2", "RUN=here"],
                 installed["project"], installed["env"])
    summary = json.loads((installed["project"] / "runs/here/summary.json").read_text())
    assert summary["ok"] and [task["status"] for task in summary["tasks"]] == ["ok", "ok"], result.stdout
    assert (installed["project"] / "runs/latest").resolve() == installed["project"] / "runs/here"
