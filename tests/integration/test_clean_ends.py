"""Runs always end clean: a signal to the lab (what `timeout`, a CI cancel, systemd or Ctrl-C send),
the fixture's own timeout, or a container removed from outside each end the run with nothing left
on the engine and a summary that says what happened; two labs share one engine untouched."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labtest.cli import REPO, lab_env
from tflab import labels
from tflab.pytest_plugin import run_lab as fixture_run
from tflab.schema import read_events

# A run long enough to be caught in the middle: about 30 s of epochs after a ready of 5-10 s.
LONG = {"EPOCHS": "200", "EXAMPLES": "1024", "RESTARTS": "0"}
CLEANUP_BOUND = 15  # seconds from the signal to no container left: the bound (measured: about 3 s)
START_BOUND = 120  # seconds until the tasks have started, on a loaded 2-core machine


def start_lab(runs: Path, run: str, *command: str, **settings: str) -> subprocess.Popen:
    env = lab_env(RUNS_DIR=str(runs), RUN=run, **{**LONG, **settings})
    return subprocess.Popen([sys.executable, "-m", "tflab", *(command or ["up"])], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_training(run_dir: Path, task: str = "worker-0") -> None:
    """Until the task has logged an epoch: its container runs and its peers are there."""
    deadline = time.monotonic() + START_BOUND
    while time.monotonic() < deadline:
        if any(r.get("event") == "epoch" for r in read_events(run_dir / f"{task}.jsonl")):
            return
        time.sleep(0.5)
    pytest.fail(f"{task} of {run_dir} logged no epoch in {START_BOUND} s")


def engine_objects(run_dir: Path) -> list[str]:
    """Containers and networks on the engine that belong to the run (or to runs under it)."""
    left = []
    for kind in (["ps", "--all"], ["network", "ls"]):
        found = subprocess.run(["docker", *kind, "--filter", f"label={labels.RUN_DIR}", "--format",
                                f'{{{{.Label "{labels.RUN_DIR}"}}}}'], capture_output=True, text=True, check=True)
        left += [value for value in found.stdout.split() if labels.within(value, run_dir)]
    return left


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda n: n.name)
def test_a_signal_removes_the_run_and_writes_its_summary(engine, trainer_image, tmp_path, number):
    lab = start_lab(tmp_path, "sig")
    try:
        wait_for_training(tmp_path / "sig")
        assert engine_objects(tmp_path / "sig")
        lab.send_signal(number)
        sent = time.monotonic()
        output, _ = lab.communicate(timeout=CLEANUP_BOUND)
        seconds = time.monotonic() - sent
    finally:
        if lab.poll() is None:
            lab.kill()
    assert lab.returncode == 128 + number, output
    assert engine_objects(tmp_path / "sig") == [], output
    summary = json.loads((tmp_path / "sig" / "summary.json").read_text())
    assert (summary["outcome"], summary["ok"]) == ("interrupted", False)
    assert f"interrupted by {number.name}: stopping every task" in output
    print(f"{number.name}: {seconds:.1f} s from the signal to the lab's exit, nothing left")


def test_sigterm_stops_a_compare_and_runs_nothing_after(engine, trainer_image, tmp_path):
    lab = start_lab(tmp_path, "cmp", "compare", COMPARE="multiworker-2 single")
    try:
        wait_for_training(tmp_path / "cmp" / "multiworker-2")
        lab.send_signal(signal.SIGTERM)
        output, _ = lab.communicate(timeout=CLEANUP_BOUND)
    finally:
        if lab.poll() is None:
            lab.kill()
    assert lab.returncode == 128 + signal.SIGTERM, output
    assert engine_objects(tmp_path / "cmp") == []
    summary = json.loads((tmp_path / "cmp" / "multiworker-2" / "summary.json").read_text())
    assert summary["outcome"] == "interrupted"
    assert not (tmp_path / "cmp" / "single").exists(), "the compare went on after SIGTERM"


def test_the_fixture_stops_a_run_that_overruns_its_timeout(engine, trainer_image, tmp_path):
    started = time.monotonic()
    run = fixture_run(tmp_path, "overrun", {"epochs": 200, "examples": 1024, "restarts": 0}, timeout=20)
    assert not run.ok and run.returncode == 128 + signal.SIGTERM, run.why()
    assert run.summary["outcome"] == "interrupted"
    assert "the lab overran 20 s and was stopped with SIGTERM" in run.output
    assert engine_objects(tmp_path / "overrun") == []
    print(f"the fixture's timeout run ended in {time.monotonic() - started:.1f} s")


def test_a_container_removed_from_outside_ends_the_run_naming_it(engine, trainer_image, tmp_path):
    lab = start_lab(tmp_path, "gone", RESTARTS="2")
    try:
        wait_for_training(tmp_path / "gone")
        project = labels.project_name(tmp_path / "gone")
        victim = subprocess.run(["docker", "ps", "--quiet", "--filter", f"label=com.docker.compose.project={project}",
                                 "--filter", "label=com.docker.compose.service=worker-1"],
                                capture_output=True, text=True, check=True).stdout.split()
        subprocess.run(["docker", "rm", "--force", *victim], check=True, capture_output=True)
        removed = time.monotonic()
        output, _ = lab.communicate(timeout=60)
        seconds = time.monotonic() - removed
    finally:
        if lab.poll() is None:
            lab.kill()
    assert lab.returncode == 1, output
    assert "worker-1 vanished: its container or service was removed from outside the lab" in output
    assert "restarting" not in output.replace("not restarting", ""), "the lab restarted a cluster it had lost"
    summary = json.loads((tmp_path / "gone" / "summary.json").read_text())
    assert not summary["ok"]
    assert engine_objects(tmp_path / "gone") == []
    print(f"a vanished container ended the run {seconds:.1f} s after its removal")


def test_two_compares_at_once_on_one_engine_do_not_touch_each_other(engine, trainer_image, tmp_path):
    """Both compares name their sub-runs single and multiworker-2; before runs were scoped, their
    Compose projects collided."""
    settings = {"COMPARE": "single multiworker-2", "EPOCHS": "2", "EXAMPLES": "1024"}
    labs = [start_lab(tmp_path / name, "cmp", "compare", **settings) for name in ("a", "b")]
    outputs = [lab.communicate(timeout=600)[0] for lab in labs]
    for lab, output in zip(labs, outputs):
        assert lab.returncode == 0, output
    losses = []
    for name in ("a", "b"):
        for entry in ("single", "multiworker-2"):
            summary = json.loads((tmp_path / name / "cmp" / entry / "summary.json").read_text())
            assert summary["ok"], (name, entry)
            losses.append((entry, [task["final_loss"] for task in summary["tasks"]]))
        assert engine_objects(tmp_path / name) == []
    assert losses[:2] == losses[2:], "the same settings trained to different losses side by side"
