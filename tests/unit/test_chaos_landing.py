"""Where a make chaos fault lands, and what the lab says of one that never did (issue 43): a run
whose fault was never injected ended `ok`, exit 0, `"outcome": "survived"`, so a chaos test in CI
passed without its fault. Runs here are the runner's own pipeline on a stand-in backend."""

import json
import subprocess

import pytest
from labtest.fakes import FakeBackend, FakeEngine
from tflab.core import cluster, runfolder, schema
from tflab.core.runsummary import Summary
from tflab.core.settings import Settings
from tflab.faults import chaos, soak
from tflab.supervisor import runner, table

pytestmark = pytest.mark.unit


class Guard:
    def release(self) -> None:
        pass


def fake_up(epochs_logged: int, codes_after: int = 3):
    """runner.up without an engine, for a SCRIPT: every task logs its start, `epochs_logged`
    epochs of 32 steps and its end, runs `codes_after` polls and exits 0."""
    def up(settings: Settings, link_latest: bool = True, observer=runner.NO_OBSERVER) -> int:
        run_dir = runfolder.planned(settings)
        the_cluster = cluster.build(settings)
        observer.check(settings)

        def logs(backend, attempt):
            for task in the_cluster.tasks:
                log = schema.EventLog(runfolder.log_path(runfolder.task_space(run_dir), task), task)
                log.emit("start", role="script", strategy=settings.strategy, cluster={}, versions={}, settings={})
                for epoch in range(1, epochs_logged + 1):
                    log.emit("epoch", epoch=epoch, loss=1.0, seconds=0.1, steps=32)
                log.emit("end", role="script", total_seconds=1.0, peak_rss_bytes=1, exit_code=0)

        polls = [{}] * codes_after + [dict.fromkeys(the_cluster.tasks, 0)]
        backend = FakeBackend(the_cluster, run_dir, [polls], on_start=logs)
        return runner.run(runner.LabRun(settings, backend, run_dir), link_latest, observer)
    return up


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(runner.reaper, "watch", lambda run_dir: Guard())


def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("")
    return str(path)


def test_a_fault_whose_moment_never_came_is_not_survived_and_make_chaos_fails(tmp_path, monkeypatch, capsys,
                                                                               offline):
    """A script that logs two epochs, and a kill after its third: the run succeeds without it."""
    settings = Settings(workers=2, script=script(tmp_path), at="epoch:3", runs_dir=str(tmp_path), run="r1")
    monkeypatch.setattr(chaos.runner, "up", fake_up(epochs_logged=2))
    assert chaos.chaos(settings) == 1  # the run itself ended ok
    result = Summary.read(tmp_path / "r1")
    missed = "worker-1 never reached the end of epoch 3: it logged 2 epochs (64 steps), the last epoch 2"
    assert result.ok and result.chaos is not None
    assert (result.chaos["injected"], result.chaos["outcome"], result.chaos["not_injected"]) == (
        False, "not injected", missed)
    shown = f"chaos: kill on worker-1 at epoch:3: not injected: {missed}"
    assert shown in table.table(result).splitlines() and "survived" not in table.table(result)
    assert table.why_lines(result)[0] == shown  # make why, and the fixture's why(), lead with it
    assert capsys.readouterr().out.splitlines()[-1] == f"tflab: chaos: not injected: {missed}"  # the last word


def test_a_fault_that_landed_is_survived_and_exits_as_the_run_did(tmp_path, monkeypatch, offline):
    settings = Settings(workers=2, script=script(tmp_path), at="epoch:2", scenario="pause", heal="5",
                        runs_dir=str(tmp_path), run="r1")
    monkeypatch.setattr(chaos.runner, "up", fake_up(epochs_logged=2))
    FakeEngine(monkeypatch)  # docker pause and unpause succeed
    assert chaos.chaos(settings) == 0
    result = Summary.read(tmp_path / "r1")
    assert result.chaos is not None and (result.chaos["injected"], result.chaos["outcome"]) == (True, "survived")
    assert "not_injected" not in result.chaos and not any("not injected" in line for line in table.why_lines(result))


def test_a_fault_whose_command_failed_never_landed(tmp_path):
    fault = chaos.Chaos(Settings(workers=2, epochs=5))
    failed = subprocess.CompletedProcess([], 1, "", "Error response from daemon: container abc is not running\n")
    backend = type("Backend", (), {"container": lambda self, task: f"id-{task}", "run_dir": tmp_path})()
    fault.run_dir = tmp_path
    fault.fault.inject = lambda backend, container: failed
    fault.inject(backend)
    assert fault.missed() == "the kill on worker-1 failed: Error response from daemon: container abc is not running"


def test_a_moment_in_seconds_says_how_long_the_run_lasted(tmp_path):
    fault = chaos.Chaos(Settings(workers=2, at="seconds:60"))
    fault.run_dir = tmp_path
    assert fault.missed() == "worker-1 never logged that it was ready"
    log = schema.EventLog(runfolder.log_path(tmp_path, "worker-1"), "worker-1")
    ready = log.emit("cluster_ready", seconds=1.0, replicas=2, devices=[])
    fault.ended_at = ready["time"] + 12.0
    assert fault.missed() == "the run ended 12.0 s after worker-1 was ready, before 60 s; it logged no epoch"


def test_a_scripts_missed_epoch_says_what_the_lab_counts(tmp_path):
    fault = chaos.Chaos(Settings(script=script(tmp_path), at="epoch:9"))
    fault.run_dir = tmp_path
    assert fault.missed() == ("worker-1 never reached the end of epoch 9: it logged no epoch (the lab counts a Keras "
                              "fit's epochs, and tflab's LabCallback's)")


def test_soak_counts_a_trial_never_injected_apart_and_fails(tmp_path, monkeypatch, capsys, offline):
    monkeypatch.setattr(soak.backends, "check_engine", lambda settings: None)
    monkeypatch.setattr(soak.runner, "up", fake_up(epochs_logged=0))
    settings = Settings(workers=2, script=script(tmp_path), epochs=3, soak=1, seed=0, runs_dir=str(tmp_path / "runs"),
                        run="s1")
    assert soak.soak(settings) == 1
    record = json.loads((tmp_path / "runs" / "s1" / "soak.json").read_text())
    assert record["counts"] == {"survived": 0, "ended cleanly": 0, "hung": 0, "not injected": 1}
    assert capsys.readouterr().out.count("soak of 1: survived 0, ended cleanly 0, hung 0, not injected 1\n") == 1
