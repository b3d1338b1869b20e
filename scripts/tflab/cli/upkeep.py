"""What the lab builds, serves and leaves behind, and the commands that remove it: images, wheels
and tensorboard; down, which removes what runs left on the engine (a live run's only with
FORCE=1), and clean, which removes all the lab can rebuild, never a run's outputs."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

from tflab import console, images
from tflab.backends import compose, leftovers
from tflab.cli.protocol import command_label
from tflab.core import runfolder, runowner, versions
from tflab.core.commands import lab_command
from tflab.core.errors import LabError
from tflab.core.settings import Settings
from tflab.engine import docker, labels
from tflab.home import LAB_HOME
from tflab.images import platforms
from tflab.reports import tensorboard
from tflab.supervisor import setid


def command_down(settings: Settings) -> int:
    """Removes what the runs under RUNS_DIR (RUN=<id>: that run, or that compare's runs) left on
    the engine, found by their labels (labels.py); never another folder's runs or project. A run
    whose lab still runs (its owner.json's process) is left alone, and named, unless FORCE=1."""
    docker.check()
    runs = runfolder.runs_dir(settings)
    scope = runs / settings.run if settings.run else runs
    found = leftovers.projects(scope, None if settings.run else labels.tensorboard_project(scope))
    found += leftovers.stacks(scope)
    for leftover in found:  # a run's project or stack alike: its lab, while alive, is asked first
        run_dir = leftover.run_dir
        proof = runowner.owner_of(run_dir) if run_dir else runowner.Owner()
        if proof.doubt:
            print(f"tflab: {proof.doubt}; no signal sent to any process")
        owner = proof.pid
        if owner is not None and not settings.force:
            again = lab_command(f"down RUN={run_name(run_dir, runs).split('/')[0]} FORCE=1")
            print(f"tflab: run {run_name(run_dir, runs)} is still running (pid {owner}); leaving it: `{again}` ends it")
            continue
        if owner is not None:
            end_live_run(run_dir, owner, proof.here)
        ended = f" (run {run_name(run_dir, runs)}, ended by tflab down)" if owner else ""
        kind = "stack " if leftover.kind == "stack" else ""
        removed = leftover.remove()
        print(f"tflab: removed {kind}{leftover.name}{ended}" if removed
              else f"tflab: {kind}{leftover.name} is still being removed")
        if removed and run_dir and owner is None:  # its lab died before its own set-ID check: done here
            check_dead_run(run_dir, runs)
    if not found:
        print(f"tflab: nothing of the runs in {console.display_path(scope)} is left on the engine")
    # A lab that died with nothing of its run left on the engine (its containers removed by hand,
    # the engine restarted) never made its set-ID check either: every such run is checked here.
    stripped = {leftover.run_dir for leftover in found}
    for run_dir in unsummarised_runs(scope, runs):
        if run_dir not in stripped and runowner.owner_of(run_dir).pid is None:
            check_dead_run(run_dir, runs)
    return 0


def check_dead_run(run_dir: Path, runs: Path) -> None:
    """The set-ID check of a run whose lab died before its own: the run folder and its writable
    CLAIMS stripped where the lab can prove it claimed the folder (runowner.unproven); else (no
    owner.json, a run from before the two spaces) nothing is changed, and what has a bit is said."""
    why = runowner.unproven(run_dir)
    lines = setid.look_run(run_dir, why) if why else setid.strip_run(run_dir, setid.outside_of(run_dir))
    for line in lines:
        print(f"tflab: run {run_name(run_dir, runs)}: {line}")


def unsummarised_runs(scope: Path, runs: Path) -> list[Path]:
    """The run folders in `scope` (a run, a compare's, or every run in RUNS_DIR) that seem the
    lab's (owner.json, config.json or a tasks' space) and were never checked: the lab strips set-ID
    bits and records it (setid.json) before it writes summary.json, so a run with neither had its
    lab die first (or is from before the check). Links are never followed; a compare folder's runs
    are one level further down."""
    def claimed(folder: Path) -> bool:
        return (any(os.path.lexists(folder / name) for name in (runfolder.OWNER, runfolder.CONFIG, runfolder.TASKS))
                and not any(os.path.lexists(folder / name) for name in (runfolder.SUMMARY, runfolder.SETID)))

    def folders(parent: Path) -> list[Path]:
        try:
            with os.scandir(parent) as entries:
                return sorted(parent / entry.name for entry in entries if entry.is_dir(follow_symlinks=False))
        except OSError:
            return []

    if scope.is_symlink():
        return []
    found = [scope] if claimed(scope) else []
    for child in folders(scope):
        found += [child] if claimed(child) else [inner for inner in folders(child) if claimed(inner)]
    return found


def refuse_an_empty_run(env, assignments: dict[str, str]) -> None:
    """`make down RUN=`, or `RUN=$id tflab down` with $id empty: left empty by accident, RUN would
    widen down from one run to every run in RUNS_DIR. So here, unlike elsewhere, an empty RUN is
    refused however it is given (an argument, a flag, make's command line, the environment);
    every run is meant by leaving RUN out."""
    value = assignments.get("RUN", env.get("RUN"))
    if value is not None and not value.strip():
        raise LabError(f"RUN={value!r} is not allowed with {command_label('down')}: an empty RUN would remove what "
                       "every run in RUNS_DIR left on the engine; expected a run id (RUN=<id>), or RUN left out "
                       "(unset) for every run")


def run_name(run_dir, runs) -> str:
    """A run as RUN names it: its path under RUNS_DIR (a compare's sub-run: <compare>/<label>)."""
    try:
        return str(run_dir.relative_to(runs))
    except ValueError:
        return run_dir.name


DOWN_WAIT_SECONDS = 60  # how long `down FORCE=1` lets a live run's lab stop and remove it itself


def end_live_run(run_dir, pid: int, here: bool) -> None:
    """Ends a run whose lab is alive the way the lab ends it itself: SIGTERM to the lab, which stops
    and removes its tasks and writes its summary, outcome interrupted. The mark in the run folder
    makes it say "ended by tflab down" (also where its lab is on another host and only the
    containers can be removed: the lab then sees them vanish). What it has not removed when the
    wait is over, `down` removes."""
    try:
        runowner.mark_ended_by_down(run_dir)
    except (OSError, LabError):
        pass  # the run is still ended; it may only call it "removed from outside the lab"
    if not here:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + DOWN_WAIT_SECONDS
    while time.monotonic() < deadline and runowner.live_owner(run_dir) == pid:
        time.sleep(0.2)


def command_images(settings: Settings, tag_only: bool = False) -> int:
    docker.check()
    if tag_only:  # stdout is the bare tag, for $(tflab images --tag) and a Dockerfile's FROM
        sys.stdout.flush()
        kept = os.dup(1)
        os.dup2(2, 1)  # the build's progress, the lab's and its subprocesses', goes to stderr meanwhile
        try:
            with contextlib.redirect_stdout(sys.stderr):
                name = images.ensure_image(settings.base_image, images.trainer_variant(settings))
        finally:
            sys.stdout.flush()
            os.dup2(kept, 1)
            os.close(kept)
        print(name)
        return 0
    name = images.ensure_image(settings.base_image, images.trainer_variant(settings))
    size = docker.image_inspect(name, "{{.Size}}").stdout.strip()
    print(f"tflab: {name} is up to date ({int(size) / 1e9:.2f} GB); its tag is a digest of what it is built from")
    return 0


def command_wheels(settings: Settings) -> int:
    image = images.keras_variant(settings.tf, settings.keras) if versions.is_keras_release(settings.keras) else \
        images.tf_variant(settings.tf) if settings.tf else images.variant_for(
            settings.gpus, settings.platform or platforms.machine_platform())
    images.ensure_wheels(image)
    print(f"tflab: {image.wheels.relative_to(LAB_HOME)}/ holds the pinned wheels")
    return 0


def command_clean(settings: Settings) -> int:
    """Removes what the lab can rebuild; never a run's outputs."""
    command_down(settings)
    images.remove_rebuildable()
    runs = runfolder.runs_dir(settings)
    kept = len([p for p in runs.iterdir() if p.is_dir() and not p.is_symlink()]) if runs.exists() else 0
    print(f"tflab: kept {kept} run folder(s) in {runs}: delete them yourself (rm -rf {runs}) if you mean to")
    return 0


def command_tensorboard(settings: Settings) -> int:
    docker.check()
    cli = compose.find_compose(settings.compose)
    runs = runfolder.runs_dir(settings)
    tensorboard.check_port(settings.tensorboard_port, runs)
    runs.mkdir(parents=True, exist_ok=True)
    url = tensorboard.serve(cli, runs, settings.tensorboard_port, images.ensure_image(settings.base_image,
                                                                                 images.trainer_variant(settings)))
    print(f"tflab: TensorBoard shows every run in {console.display_path(runs)}/ at {url} "
          f"(127.0.0.1 only; `{lab_command('down')}` stops it)")
    return 0
