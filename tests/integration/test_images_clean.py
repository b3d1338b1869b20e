"""A build, a run and `make clean` leave the engine as they found it, and no build leaves an
untagged image behind.

It runs in a copy of the checkout whose code has one comment more, so the trainer image it builds
is its own (a new digest) and its `make clean` removes only what that copy built: the packages
image and the base, which the copy finds already there, stay, as they would for any checkout that
did not build them. Only what carries the lab's labels (`tflab.image` on images, the run folder's
on containers, networks and volumes) is looked at, so other tests and checkouts on the same engine
neither disturb it nor are disturbed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from labtest.cli import REPO, lab_env
from tflab import images
from tflab.engine import labels


def listed(*command: str) -> set[str]:
    found = subprocess.run(["docker", *command], capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stderr
    return set(found.stdout.split())


def lab_images() -> set[str]:
    """Every image a lab build made, tagged (by name) or not (by id)."""
    return listed("image", "ls", "--all", "--filter", "label=tflab.image",
                  "--format", "{{.Repository}}:{{.Tag}}@{{.ID}}")


def untagged_lab_images() -> set[str]:
    return listed("image", "ls", "--quiet", "--filter", "dangling=true", "--filter", "label=tflab.image")


def run_objects(runs: Path) -> set[str]:
    """Containers, networks and volumes of the runs under `runs`."""
    found = set()
    for kind in (["ps", "--all"], ["network", "ls"], ["volume", "ls"]):
        found |= {f"{kind[0]}:{name}" for name in listed(*kind, "--filter", f"label={labels.RUN_DIR}",
                                                         "--format", f'{{{{.Label "{labels.RUN_DIR}"}}}}')
                  if labels.within(name, runs)}
    return found


def copy_checkout(target: Path) -> None:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    for name in filter(None, tracked.stdout.split("\0")):
        if (REPO / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target / name)
    wheels = target / images.WHEELS.relative_to(REPO)
    for wheel in [*images.WHEELS.glob("*.whl"), images.WHEEL_STAMP]:
        if wheel.exists():
            os.link(wheel, wheels / wheel.name)  # hard links: the copy's clean unlinks its own names only
    init = target / "scripts/tflab/__init__.py"
    init.write_text(init.read_text() + f"# a copy for {__name__}\n")


@pytest.fixture
def checkout(trainer_image, tmp_path) -> Path:
    """A copy of the checkout, with the shared packages image and base already on the engine."""
    copy = tmp_path / "checkout"
    copy_checkout(copy)
    return copy


@pytest.mark.alone  # no other test's image may appear or go while it compares the engine's images
def test_a_build_a_run_and_make_clean_leave_the_engine_as_they_found_it(checkout):
    runs = checkout / "runs"
    before_images, before_untagged = lab_images(), untagged_lab_images()
    env = lab_env(PYTHONPATH=str(checkout / "scripts"), STRATEGY="multiworker", WORKERS="2", EPOCHS="1",
                  EXAMPLES="1024")
    up = subprocess.run([sys.executable, "-m", "tflab", "up"], cwd=checkout, env=env, capture_output=True,
                        text=True, timeout=900)
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
    built = json.loads((checkout / "images/trainer/.built.json").read_text())
    trainer = [tag for tag in built["images"] if tag.startswith(f"{images.REPOSITORY}:")]
    assert len(trainer) == 1 and trainer[0] in up.stdout  # the copy built its own trainer image
    assert untagged_lab_images() <= before_untagged, "the build left untagged images"
    clean = subprocess.run(["make", "--no-print-directory", "clean", f"PYTHON={sys.executable}"], cwd=checkout,
                           env={k: v for k, v in env.items() if k != "PYTHONPATH"}, capture_output=True, text=True,
                           timeout=600)
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-3000:]
    assert f"removed image {trainer[0]}" in clean.stdout
    assert run_objects(runs) == set()
    assert lab_images() - before_images == set()
    assert untagged_lab_images() <= before_untagged
    assert [run for run in runs.iterdir() if run.is_dir() and not run.is_symlink()]  # never a run's outputs
