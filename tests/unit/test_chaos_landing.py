"""Where a make chaos fault lands, and what the lab says of one that never did (issue 43): a run
whose fault was never injected ended `ok`, exit 0, `"outcome": "survived"`, so a chaos test in CI
passed without its fault. Runs here are the runner's own pipeline on a stand-in backend."""

import json
import subprocess

import pytest
from labtest.fakes import FakeBackend, FakeEngine
from tflab.core import cluster, moment, runfolder, schema
from tflab.core.runsummary import Summary
from tflab.core.settings import Settings
from tflab.faults import chaos, soak
from tflab.supervisor import runner, table
from tflab.trainer import chaosstep, inscript, observe

pytestmark = pytest.mark.unit


def fake_up(epochs_logged: int, codes_after: int = 3, step: tuple[int, int] | None = None):
    """runner.up without an engine, for a SCRIPT: every task logs its start, `epochs_logged`
    epochs of 32 steps and its end, runs `codes_after` polls and exits 0; the target, worker-1,
    logs `step` (step, epoch) first where one is given."""
    def up(settings: Settings, link_latest: bool = True, observer=runner.NO_OBSERVER) -> int:
        run_dir = runfolder.planned(settings)
        the_cluster = cluster.build(settings)
        observer.check(settings)

        def logs(backend, attempt):
            for task in the_cluster.tasks:
                log = schema.EventLog(runfolder.log_path(runfolder.task_space(run_dir), task), task)
                log.emit("start", role="script", strategy=settings.strategy, cluster={}, versions={}, settings={})
                if step and task == "worker-1":
                    log.emit("step", step=step[0], epoch=step[1])
                for epoch in range(1, epochs_logged + 1):
                    log.emit("epoch", epoch=epoch, loss=1.0, seconds=0.1, steps=32)
                log.emit("end", role="script", total_seconds=1.0, peak_rss_bytes=1, exit_code=0)

        polls = [{}] * codes_after + [dict.fromkeys(the_cluster.tasks, 0)]
        backend = FakeBackend(the_cluster, run_dir, [polls], on_start=logs)
        return runner.run(runner.LabRun(settings, backend, run_dir), link_latest, observer)
    return up


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
    # VERDICT=auto ran the undisturbed twin through the same runner, once, and judged against it (issue 43)
    judged = result.chaos["verdict"]
    twins = [path.name for path in tmp_path.iterdir() if path.name.startswith("twin-")]
    assert judged["kind"] == "equivalent" and [judged["twin"]] == twins, judged
    assert "weights unchecked: neither run logged them" in judged["words"]  # a script's
    assert f"chaos: verdict: equivalent: {judged['words']}" in table.why_lines(result)


def test_a_fault_whose_command_failed_never_landed(tmp_path):
    fault = chaos.Chaos(Settings(workers=2, epochs=5))
    failed = subprocess.CompletedProcess([], 1, "", "Error response from daemon: container abc is not running\n")
    backend = type("Backend", (), {"container": lambda self, task: f"id-{task}", "run_dir": tmp_path})()
    fault.run_dir = tmp_path
    fault.fault.inject = lambda backend, container: failed
    fault.inject(backend)
    assert fault.missed() == "the kill on worker-1 failed: Error response from daemon: container abc is not running"
    assert fault.landed is None  # it landed nowhere


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


# -- AT=step:N ---------------------------------------------------------------------------------

def counted(step: int, calls: list[tuple[int, list[tuple[int, int]]]], monkeypatch) -> tuple[list, list]:
    """A StepMoment for `step`, told of each epoch (0-based) and its calls (first, last batch), as
    fit's CallbackList and the custom loop tell StepTiming; returns what it logged and how long it held."""
    logged, held = [], []
    monkeypatch.setattr(chaosstep.time, "sleep", held.append)
    count = chaosstep.StepMoment("worker-1", step, lambda event, **fields: logged.append((event, fields)))
    for epoch, batches in calls:
        count.epoch_begin(epoch)
        for first, last in batches:
            count.batch_begin(first)
            count.batch_end(last)
    return logged, held


def test_the_nth_step_is_logged_once_and_held_for_the_fault(monkeypatch):
    one_each = [(epoch, [(batch, batch) for batch in range(4)]) for epoch in range(3)]
    assert counted(6, one_each, monkeypatch) == ([("step", {"step": 6, "epoch": 2})], [moment.HOLD_SECONDS])
    assert counted(1, one_each, monkeypatch) == ([("step", {"step": 1, "epoch": 1})], [moment.HOLD_SECONDS])
    assert counted(13, one_each, monkeypatch) == ([], [])  # 12 steps: never reached, never held


def test_a_call_of_several_steps_is_seen_at_its_last_and_a_resumed_fit_counts_from_its_first(monkeypatch):
    # STEPS_PER_EXECUTION=3 over 8 steps an epoch: the hooks see steps 3, 6, 8, 11, ...
    threes = [(epoch, [(0, 2), (3, 5), (6, 7)]) for epoch in range(2)]
    assert counted(10, threes, monkeypatch)[0] == [("step", {"step": 11, "epoch": 2})]
    # the custom loop's first call is one step (its tracing), then STEPS_PER_EXECUTION at a time
    custom = [(0, [(0, 0), (1, 3), (4, 6), (7, 7)]), (1, [(0, 2), (3, 5), (6, 7)])]
    assert counted(5, custom, monkeypatch)[0] == [("step", {"step": 7, "epoch": 1})]
    # a fit resumed by its backup at epoch 3, step 5 (8 steps an epoch): this process's first step is its 1st
    resumed = [(2, [(batch, batch) for batch in range(5, 8)]), (3, [(0, 0), (1, 1)])]
    assert counted(4, resumed, monkeypatch)[0] == [("step", {"step": 4, "epoch": 4})]
    # a second fit goes on counting
    two_fits = [(0, [(0, 3)]), (1, [(0, 3)]), (0, [(0, 3)])]
    assert counted(9, two_fits, monkeypatch)[0] == [("step", {"step": 12, "epoch": 1})]


def test_only_the_target_of_at_step_counts(tmp_path):
    the_cluster = cluster.build(Settings(workers=3, global_batch=63))
    def step_for(task, **changes):
        found = chaosstep.for_task(Settings(workers=3, global_batch=63, **changes), task, the_cluster, print)
        return found.step if found else None

    assert [step_for(task, at="step:7") for task in the_cluster.tasks] == [None, None, 7]
    assert [step_for(task, at="step:7", target="worker-0") for task in the_cluster.tasks] == [7, None, None]
    assert [step_for(task, at="epoch:2") for task in the_cluster.tasks] == [None, None, None]
    single = cluster.build(Settings(strategy="single"))
    assert chaosstep.for_task(Settings(strategy="single", at="step:3"), "single", single, print).step == 3


def test_a_scripts_process_reads_its_step_from_config_json(tmp_path, monkeypatch):
    settings = Settings(workers=2, script=script(tmp_path), at="step:9")
    (tmp_path / "r1").mkdir()
    runfolder.write_config(tmp_path / "r1", settings, cluster.build(settings))
    monkeypatch.setenv("TFLAB_CONFIG", str(tmp_path / "r1" / "config.json"))
    for task, expected in (("worker-1", 9), ("worker-0", None)):
        monkeypatch.setenv("TFLAB_TASK", task)
        inscript.run_config.cache_clear()
        found = chaosstep.for_script(print)
        assert (found.step if found else None) == expected
    inscript.run_config.cache_clear()


def test_a_scripts_keras_fit_is_counted_by_the_observer(monkeypatch):
    """observe.py's watch on a CallbackList (a stand-in with the methods fit calls) tells the count."""
    class Callbacks:
        callbacks: list = []
        params = {"epochs": 2}

        def on_train_begin(self, logs=None): ...
        def on_epoch_begin(self, epoch, logs=None): ...
        def on_train_batch_begin(self, batch, logs=None): ...
        def on_train_batch_end(self, batch, logs=None): ...
        def on_epoch_end(self, epoch, logs=None): ...

    logged = []
    monkeypatch.setattr(chaosstep.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(observe, "emit", lambda event, **fields: None)
    monkeypatch.setattr(observe, "_moment", chaosstep.StepMoment("worker-1", 5, lambda event, **f: logged.append(f)))
    observe.watch(Callbacks)
    fit = Callbacks()
    fit.on_train_begin()
    for epoch in range(2):
        fit.on_epoch_begin(epoch)
        for batch in range(3):
            fit.on_train_batch_begin(batch)
            fit.on_train_batch_end(batch, {"loss": 1.0})
        fit.on_epoch_end(epoch, {"loss": 1.0})
    assert logged == [{"step": 5, "epoch": 2}]


def checked_fault(tmp_path, at: str, **changes) -> chaos.Chaos:
    """make chaos's fault for AT=`at`, checked as make chaos checks it, reading the logs in tmp_path."""
    fault = chaos.Chaos(Settings(workers=2, at=at, **changes))
    fault.check(fault.settings)
    fault.run_dir = tmp_path
    return fault


def test_at_step_is_due_at_the_targets_step_event_and_lands_there_within_the_hold(tmp_path):
    fault = checked_fault(tmp_path, "step:40")
    assert fault.fault_words() == "kill on worker-1 at step 40"
    log = schema.EventLog(runfolder.log_path(tmp_path, "worker-1"), "worker-1")
    assert not fault._due(tmp_path)
    schema.EventLog(runfolder.log_path(tmp_path, "worker-0"), "worker-0").emit("step", step=40, epoch=1)
    assert not fault._due(tmp_path)  # another task's is no business of the target's
    seen = log.emit("step", step=40, epoch=1)
    assert fault._due(tmp_path)
    assert fault.landing(seen["time"] + 0.6) == "at step 40 (epoch 1), 0.6 s after worker-1 reached it"
    assert fault.landed_step == 40
    late = checked_fault(tmp_path, "step:40")
    assert late.landing(seen["time"] + 7.0) == ("after step 40: 7.0 s after worker-1 reached it, past the 5 s it "
                                                "waits there, so at a later step")
    assert late.landed_step is None
    coarse = checked_fault(tmp_path, "step:38", steps_per_execution=4)
    assert coarse.landing(seen["time"]).startswith("at step 40 (epoch 1), the first at or past 38 its hooks saw")


def test_a_step_never_reached_says_how_far_the_target_got(tmp_path):
    fault = checked_fault(tmp_path, "step:500")
    log = schema.EventLog(runfolder.log_path(tmp_path, "worker-1"), "worker-1")
    for epoch in (1, 2):
        log.emit("epoch", epoch=epoch, loss=1.0, seconds=0.1, steps=64)
    assert fault.missed() == "worker-1 never reached step 500: it logged 2 epochs (128 steps), the last epoch 2"
    customloop = checked_fault(tmp_path / "other", "step:5", script=script(tmp_path))
    assert customloop.missed() == ("worker-1 never reached step 5: it logged no epoch (the lab counts a Keras fit's "
                                   "steps)")


def test_a_kill_at_a_step_lands_there_and_the_summary_says_so(tmp_path, monkeypatch, offline):
    FakeEngine(monkeypatch)
    settings = Settings(workers=2, script=script(tmp_path), at="step:7", runs_dir=str(tmp_path), run="r1")
    monkeypatch.setattr(chaos.runner, "up", fake_up(epochs_logged=2, step=(7, 1)))
    assert chaos.chaos(settings) == 0
    result = Summary.read(tmp_path / "r1")
    assert result.chaos is not None and result.chaos["landed_step"] == 7 and result.chaos["outcome"] == "survived"
    assert result.chaos["landed"].startswith("at step 7 (epoch 1), ")
    assert "chaos: kill on worker-1 at step:7: survived; landed at step 7 (epoch 1), " in table.table(result)


def test_at_step_is_refused_on_a_replayed_job(tmp_path):
    from types import SimpleNamespace

    replicas = SimpleNamespace(tasks=["worker-0", "worker-1"], chief="worker-0", replayed_from="TFJOB",
                               trainers=["worker-0", "worker-1"], role=lambda task: "script")
    settings = Settings(workers=2, at="step:5")
    with pytest.raises(chaos.LabError, match=r"^AT=step:5 is not allowed with TFJOB: the lab counts the steps of "
                                             r"its own trainer and of a SCRIPT's Keras fit, not a replayed job's; "
                                             r"expected epoch:N or seconds:S$"):
        chaos.Chaos(settings, replicas).check(settings)


def test_a_replayed_jobs_fault_never_landed_fails_make_chaos_too(tmp_path, monkeypatch, offline):
    """`tflab chaos TFJOB=` whose job never reaches AT=epoch:2: the replay makes the observer once
    it has the replicas, and make chaos reads it after the replay's run (here, the runner's own on
    a stand-in, the lab's cluster in place of the replicas)."""
    from tflab import replay

    settings = Settings(workers=2, script=script(tmp_path), runs_dir=str(tmp_path), run="r1")
    monkeypatch.setattr(replay, "up", lambda settings, given, observer: fake_up(epochs_logged=1)(
        settings, observer=observer(cluster.build(settings))))
    assert chaos.chaos(settings.replace(tfjob="tfjob.yaml")) == 1
    assert Summary.read(tmp_path / "r1").chaos["outcome"] == "not injected"
    assert Summary.read(tmp_path / "r1").chaos["verdict"]["kind"] == "not injected"
