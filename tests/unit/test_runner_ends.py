"""runner.run's words where a run ends in failure: each failed task's exit code is said, also where
every task ended between two of the lab's looks (a killed worker and its aborting peer, on a busy
machine), which once printed no exit code at all (test_failures.py's kill, CI of 2026-12-07)."""

import pytest
from labtest.fakes import FakeBackend
from tflab.core import cluster
from tflab.core.settings import Settings
from tflab.supervisor import runner
from tflab.supervisor.labrun import LabRun

pytestmark = pytest.mark.unit


class Guard:
    def release(self) -> None:
        pass


def ended(tmp_path, monkeypatch, polls) -> None:
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(runner.reaper, "watch", lambda run_dir: Guard())
    settings = Settings(workers=2, restarts=0, backup="off", runs_dir=str(tmp_path / "runs"), run="r1")
    run_dir = tmp_path / "runs" / "r1"
    the_cluster = cluster.build(settings)
    assert runner.run(LabRun(settings, FakeBackend(the_cluster, run_dir, [polls]), run_dir)) == 1


def test_tasks_that_failed_between_two_looks_are_each_said(tmp_path, monkeypatch, capsys):
    ended(tmp_path, monkeypatch, [{}, {"worker-0": 1, "worker-1": 137}])
    out = capsys.readouterr().out
    assert "tflab: worker-0 exited with code 1; worker-1 exited with code 137; no task was left running" in out
    assert "to end by themselves" not in out


def test_a_failure_seen_while_another_runs_gives_it_the_grace(tmp_path, monkeypatch, capsys):
    ended(tmp_path, monkeypatch, [{}, {"worker-1": 137}, {"worker-0": 1, "worker-1": 137}])
    out = capsys.readouterr().out
    assert f"worker-1 exited with code 137; the other tasks get {runner.FAILURE_GRACE_SECONDS} s to end" in out
    assert "no task was left running" not in out
