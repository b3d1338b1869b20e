"""make chaos AT=save[:N] and AT=restore (issue 43): the target's hooks (trainer/chaossave.py) as
pure logic told of TensorFlow's merges and restores, the host's refusals, and where the fault
landed in runs of the runner's own pipeline on a stand-in backend. TensorFlow itself:
test_chaos_checkpoint_hooks.py."""

import os

import pytest
from labtest.fakes import FakeBackend, FakeEngine
from test_chaos_landing import checked_fault, script
from tflab.core import cluster, moment, runfolder, schema
from tflab.core.runsummary import Summary
from tflab.core.settings import Settings
from tflab.faults import chaos, checkpointmoment
from tflab.supervisor import runner, table
from tflab.trainer import chaossave, inscript

pytestmark = pytest.mark.unit


# -- the target's hooks ------------------------------------------------------------------------

def shards(folder, prefix: str) -> list[str]:
    """A save's first phase on disk, as functional_saver leaves it: <prefix>_temp/part-00000-of-00001.*"""
    temp = folder / f"{prefix}_temp"
    temp.mkdir(parents=True)
    for name in ("part-00000-of-00001.index", "part-00000-of-00001.data-00000-of-00001"):
        (temp / name).write_bytes(b"x")
    return [str(temp / "part-00000-of-00001")]


def hooked(tmp_path, kind: str, count: int) -> tuple[chaossave.CheckpointMoment, list, list]:
    logged: list = []
    held: list = []
    found = chaossave.CheckpointMoment("worker-1", kind, count, str(tmp_path),
                                       lambda event, **fields: logged.append((event, fields)), sleep=held.append)
    return found, logged, held


def test_the_nth_merge_is_logged_once_with_its_shards_and_held(tmp_path):
    found, logged, held = hooked(tmp_path, "save", 2)
    found.merging(str(tmp_path / "backup/chief/ckpt-1"), [])
    assert (logged, held) == ([], [])  # the 1st save passes
    found.merging(str(tmp_path / "backup/chief/ckpt-2"), shards(tmp_path, "backup/chief/ckpt-2"))
    assert logged == [("saving", {"save": 2, "file": "backup/chief/ckpt-2.index", "index_exists": False,
                                  "written": ["backup/chief/ckpt-2_temp/part-00000-of-00001.data-00000-of-00001",
                                              "backup/chief/ckpt-2_temp/part-00000-of-00001.index"]})]
    assert held == [moment.HOLD_SECONDS]
    found.merging(str(tmp_path / "backup/chief/ckpt-3"), [])
    found.restoring(str(tmp_path / "backup/chief/ckpt-3"))  # AT=save's hooks hold at no restore
    assert len(logged) == 1 and held == [moment.HOLD_SECONDS] and found.saves == 3


def test_a_save_outside_the_run_folder_is_named_by_its_whole_path(tmp_path):
    found, logged, _ = hooked(tmp_path / "run", "save", 1)
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "ckpt.index").write_bytes(b"old")  # an older checkpoint of that name
    found.merging(str(tmp_path / "scratch" / "ckpt"), [])
    assert logged[0][1]["file"] == str(tmp_path / "scratch" / "ckpt.index") and logged[0][1]["index_exists"]
    assert found.named(str(tmp_path / "runner" / "x")) == str(tmp_path / "runner" / "x")  # a sibling, not inside


def test_the_first_restore_is_logged_with_its_files_and_held(tmp_path):
    found, logged, held = hooked(tmp_path, "restore", 0)
    (tmp_path / "backup").mkdir()
    for name in ("ckpt-1.index", "ckpt-1.data-00000-of-00001", "ckpt-10.index", "checkpoint"):
        (tmp_path / "backup" / name).write_bytes(b"x")
    found.merging(str(tmp_path / "backup/ckpt-2"), [])  # a save: no hold for AT=restore
    found.restoring(str(tmp_path / "backup/ckpt-1"))
    found.restoring(str(tmp_path / "backup/ckpt-1"))
    found.restoring(str(tmp_path / "backup/ckpt-10"))
    assert logged == [("restoring", {"restore": 1, "file": "backup/ckpt-1",
                                     "files": ["backup/ckpt-1.data-00000-of-00001", "backup/ckpt-1.index"]})]
    assert held == [moment.HOLD_SECONDS] and len(found.read) == 2


def test_the_evaluator_holds_at_its_nth_checkpoint_however_often_it_reads_each(tmp_path):
    """SidecarEvaluator reads each checkpoint twice (Checkpoint.restore, then load_weights)."""
    found, logged, held = hooked(tmp_path, "eval", 2)
    for prefix in ("checkpoints/ckpt-1", "checkpoints/ckpt-1", "checkpoints/ckpt-3", "checkpoints/ckpt-3",
                   "checkpoints/ckpt-4"):
        found.restoring(str(tmp_path / prefix))
    assert logged == [("restoring", {"restore": 2, "file": "checkpoints/ckpt-3", "files": []})]
    assert held == [moment.HOLD_SECONDS]


def test_paths_are_read_as_tensorflow_hands_them_over():
    class Tensor:
        def __init__(self, value):
            self.value = value

        def numpy(self):
            return self.value

    assert chaossave.texts(Tensor(b"a/b")) == ["a/b"]
    assert chaossave.texts([Tensor(b"a"), b"b", "c"]) == ["a", "b", "c"]


def test_only_the_target_of_at_save_or_restore_hooks_anything(tmp_path):
    the_cluster = cluster.build(Settings(workers=3, global_batch=63))

    def kind_for(task, **changes):
        found = chaossave.for_task(Settings(workers=3, global_batch=63, **changes), task, the_cluster, "r", print)
        return (found.kind, found.count) if found else None

    assert [kind_for(task, at="save:3") for task in the_cluster.tasks] == [None, None, ("save", 3)]
    assert [kind_for(task, at="save") for task in the_cluster.tasks] == [None, None, ("save", 1)]
    assert [kind_for(task, at="restore", target="worker-0") for task in the_cluster.tasks] == [
        ("restore", 0), None, None]
    assert [kind_for(task, at="step:3") for task in the_cluster.tasks] == [None, None, None]
    evaluated = cluster.build(Settings(workers=2, evaluator=1))
    assert [(found.kind, found.count) if (found := chaossave.for_task(
        Settings(workers=2, evaluator=1, at="eval:2"), task, evaluated, "r", print)) else None
        for task in evaluated.tasks] == [None, None, ("eval", 2)]  # the evaluator: AT=eval's default target


def test_a_scripts_process_reads_its_moment_from_config_json(tmp_path, monkeypatch):
    settings = Settings(workers=2, script=script(tmp_path), at="save:2")
    (tmp_path / "r1").mkdir()
    runfolder.write_config(tmp_path / "r1", settings, cluster.build(settings))
    monkeypatch.setenv("TFLAB_CONFIG", str(tmp_path / "r1" / "config.json"))
    monkeypatch.setenv("TFLAB_OUTPUT", str(tmp_path / "r1"))
    for task, expected in (("worker-1", 2), ("worker-0", None)):
        monkeypatch.setenv("TFLAB_TASK", task)
        inscript.run_config.cache_clear()
        found = chaossave.for_script(print)
        assert (found.count if found else None) == expected
    assert found is None or found.run_dir == os.path.abspath(tmp_path / "r1")
    inscript.run_config.cache_clear()


# -- what the host refuses ---------------------------------------------------------------------

@pytest.mark.parametrize("changes, refused", [
    (dict(at="save", backup="off"), "AT=save is not allowed: this run writes no checkpoint (BACKUP=off and no "
                                    "EVALUATOR); expected LOOP=fit with BACKUP=epoch or a number of steps, or "
                                    "EVALUATOR=1"),
    (dict(at="save:6"), "AT=save:6 is not allowed: this run writes 5 backups; expected save:1 to save:5"),
    (dict(at="save:11", evaluator=1), "AT=save:11 is not allowed: this run writes 5 backups and 5 checkpoints for "
                                         "the evaluator; expected save:1 to save:10"),
    (dict(at="save:2", backup="64"), "AT=save:2 is not allowed: this run writes 1 backup; expected save:1 to save:1"),
    (dict(at="save", loop="custom"), "AT=save is not allowed: this run writes no checkpoint (LOOP=custom: its "
                                      "preemptible loop saves only on a preemption notice); expected LOOP=fit"),
    (dict(at="save", target="evaluator-0", evaluator=1), "AT=save is not allowed with TARGET=evaluator-0: it "
                                                            "writes and restores no checkpoint of its own"),
    (dict(at="save", strategy="parameter_server", target="chief-0"), "AT=save is not allowed with "
                                                                     "STRATEGY=parameter_server: the hold"),
    (dict(at="restore", restarts=0), "AT=restore is not allowed with RESTARTS=0: a first attempt has nothing to "
                                     "restore, so the lab kills the target after its first backup and lands the fault "
                                     "as the restart restores it; expected RESTARTS=1 or more (2 to survive the fault "
                                     "too) and RESTART_POLICY=ExitCode or OnFailure"),
    (dict(at="restore", restart_policy="Never"), "AT=restore is not allowed with RESTART_POLICY=Never: "),
    (dict(at="restore", backup="off"), "AT=restore is not allowed with BACKUP=off: the restarted trainer restores no "
                                       "backup; expected BACKUP=epoch or a number of steps, and LOOP=fit"),
    (dict(at="restore", epochs=1), "AT=restore is not allowed with EPOCHS=1 and BACKUP=epoch: the first backup is "
                                   "written in epoch 1, and training must be left after it"),
    (dict(at="restore", backup="100"), "AT=restore is not allowed with EPOCHS=5 and BACKUP=100: the first backup is "
                                       "written in epoch 7"),
    (dict(at="eval"), "AT=eval is not allowed without EVALUATOR=1: no task of this run evaluates checkpoints; "
                      "expected EVALUATOR=1, or another moment"),
    (dict(at="eval:2", evaluator=1, target="worker-0"), "AT=eval:2 is not allowed with TARGET=worker-0: the "
                                                           "evaluator reads the checkpoints it evaluates; expected "
                                                           "TARGET=evaluator-0, or no TARGET"),
    (dict(at="eval:6", evaluator=1), "AT=eval:6 is not allowed with EPOCHS=5: the evaluator reads at most one "
                                        "checkpoint an epoch (it skips to the newest); expected eval:1 to eval:5"),
])
def test_a_moment_the_run_cannot_reach_is_refused_in_one_line(changes, refused):
    # 16 steps an epoch
    settings = Settings(**{"workers": 2, "epochs": 5, "examples": 1024, "global_batch": 64, **changes})
    with pytest.raises(chaos.LabError) as error:
        chaos.Chaos(settings).check(settings)
    assert str(error.value).startswith(refused) and "\n" not in str(error.value)


def test_a_reachable_moment_passes_and_a_scripts_is_taken_on_trust(tmp_path):
    for changes in (dict(at="save:10", evaluator=1), dict(at="save:5", backup="16"), dict(at="restore"),
                    dict(at="restore", backup="20"), dict(at="save:99", script=script(tmp_path)),
                    dict(at="restore", script=script(tmp_path), loop="custom"), dict(at="eval:5", evaluator=1),
                    dict(at="eval", evaluator=1, strategy="parameter_server")):
        settings = Settings(workers=2, epochs=5, examples=1024, global_batch=64, **changes)
        chaos.Chaos(settings).check(settings)
    assert checkpointmoment.prime_epoch(Settings(workers=2, examples=1024, global_batch=64, backup="20")) == 2


def test_checkpoint_moments_are_refused_on_a_replayed_job():
    from types import SimpleNamespace

    replicas = SimpleNamespace(tasks=["worker-0", "worker-1"], chief="worker-0", replayed_from="TFJOB",
                               trainers=["worker-0", "worker-1"], role=lambda task: "script")
    for at in ("save:2", "restore", "eval:2"):
        settings = Settings(workers=2, at=at)
        with pytest.raises(chaos.LabError, match=rf"^AT={at} is not allowed with TFJOB: the lab hooks the "
                                                 "checkpoints of its own trainer and of a SCRIPT"):
            chaos.Chaos(settings, replicas).check(settings)


# -- where it landed ---------------------------------------------------------------------------

def test_at_save_is_due_at_the_targets_saving_event_and_says_what_was_on_disk(tmp_path):
    fault = checked_fault(tmp_path, "save:2")
    assert fault.fault_words() == "kill on worker-1 while it writes checkpoint 2"
    assert not fault._due(tmp_path)
    schema.EventLog(runfolder.log_path(tmp_path, "worker-0"), "worker-0").emit(
        "saving", save=2, file="backup/chief/ckpt-2.index", written=[], index_exists=False)
    assert not fault._due(tmp_path)  # another task's
    written = [f"backup/workertemp_1/ckpt-2_temp/part-0000{i}-of-00006.index" for i in range(6)]
    seen = schema.EventLog(runfolder.log_path(tmp_path, "worker-1"), "worker-1").emit(
        "saving", save=2, file="backup/workertemp_1/ckpt-2.index", written=written, index_exists=False)
    assert fault._due(tmp_path)
    assert fault.landing(seen["time"] + 0.4) == (
        "while worker-1 wrote checkpoint 2, backup/workertemp_1/ckpt-2.index, 0.4 s after it began: on disk its "
        f"shards ({', '.join(written[:4])} and 2 more) and no index")
    assert fault.landing(seen["time"] + 6.5) == (
        "after worker-1 began writing checkpoint 2, backup/workertemp_1/ckpt-2.index: 6.5 s after, past the 5 s it "
        "waits there, so probably after its index was written")
    assert checked_fault(tmp_path / "x", "save:3").missed() == \
        "worker-1 never began writing checkpoint 3: it logged no epoch"


def test_at_restore_kills_the_target_after_its_first_backup_then_lands_at_the_restore(tmp_path, monkeypatch, offline):
    """Two attempts of a SCRIPT on a stand-in: the lab kills worker-1 after epoch 1 (the attempt then ends 137
    and the runner restarts it), the restarted worker-1 logs `restoring`, and the SCENARIO's kill
    lands there."""
    engine = FakeEngine(monkeypatch)
    settings = Settings(workers=2, script=script(tmp_path), at="restore", runs_dir=str(tmp_path), run="r1")

    def up(settings: Settings, link_latest: bool = True, observer=runner.NO_OBSERVER) -> int:
        run_dir = runfolder.planned(settings)
        the_cluster = cluster.build(settings)
        observer.check(settings)

        def logs(backend, attempt):
            for task in the_cluster.tasks:
                log = schema.EventLog(runfolder.log_path(runfolder.task_space(run_dir), task), task)
                log.emit("start", role="script", strategy=settings.strategy, cluster={}, versions={}, settings={})
                if attempt and task == "worker-1":
                    log.emit("restoring", restore=1, file="backup/chief/ckpt-1", files=["backup/chief/ckpt-1.index"])
                log.emit("epoch", epoch=attempt + 1, loss=1.0, seconds=0.1, steps=32)
                if attempt:
                    log.emit("end", role="script", total_seconds=1.0, peak_rss_bytes=1, exit_code=0)

        first = [{}] * 5 + [{"worker-0": 1, "worker-1": 137}]
        then = [{}] * 5 + [dict.fromkeys(the_cluster.tasks, 0)]
        backend = FakeBackend(the_cluster, run_dir, [first, then], on_start=logs)
        return runner.run(runner.LabRun(settings, backend, run_dir), link_latest, observer)

    monkeypatch.setattr(chaos.runner, "up", up)
    assert chaos.chaos(settings) == 0
    kills = [command for command in engine.commands if "kill" in command]
    assert len(kills) == 2  # the lab's, to make it restore, and the SCENARIO's
    result = Summary.read(tmp_path / "r1")
    assert result.chaos is not None and result.chaos["outcome"] == "survived" and result.chaos["restarts"] == 1
    assert result.chaos["landed"].startswith("as worker-1 began restoring backup/chief/ckpt-1 after its restart, ")
    assert "kill on worker-1 at restore: survived; landed as worker-1 began restoring" in table.table(result)
    chaos_log = [line for line in (tmp_path / "r1" / runfolder.CHAOS_LOG).read_text().splitlines()]
    assert '"event": "primed"' in chaos_log[0] and '"event": "injected"' in chaos_log[1]


def test_at_eval_is_due_at_the_evaluators_nth_checkpoint_and_says_which(tmp_path):
    fault = checked_fault(tmp_path, "eval:2", evaluator=1)
    assert fault.target == "evaluator-0"
    assert fault.fault_words() == "kill on evaluator-0 while it reads checkpoint 2 to evaluate it"
    log = schema.EventLog(runfolder.log_path(tmp_path, "evaluator-0"), "evaluator-0")
    log.emit("eval", epoch=1, step=64, loss=1.0, seconds=0.1)
    assert not fault._due(tmp_path)
    assert fault.missed() == "evaluator-0 never began reading checkpoint 2: it logged 1 evaluation"
    seen = log.emit("restoring", restore=2, file="checkpoints/ckpt-3", files=["checkpoints/ckpt-3.index"])
    assert fault._due(tmp_path)
    assert fault.landing(seen["time"] + 0.3) == ("as evaluator-0 began reading checkpoint 2, checkpoints/ckpt-3, "
                                                 "to evaluate it, 0.3 s after it reached it")


def test_at_restore_kills_once_the_target_and_the_chief_have_ended_the_backups_epoch(tmp_path, monkeypatch):
    engine = FakeEngine(monkeypatch)
    fault = checked_fault(tmp_path, "restore")
    backend = FakeBackend(cluster.build(fault.settings), tmp_path, [[{}]])
    target = schema.EventLog(runfolder.log_path(tmp_path, "worker-1"), "worker-1")
    target.emit("epoch", epoch=1, loss=1.0, seconds=0.1, steps=32)
    fault.tick(backend, {})
    assert fault.primed_at is None and engine.commands == []  # the chief may still be writing the backup
    schema.EventLog(runfolder.log_path(tmp_path, "worker-0"), "worker-0").emit(
        "epoch", epoch=1, loss=1.0, seconds=0.1, steps=32)
    fault.tick(backend, {})
    assert fault.primed_at is not None and fault.primed == "the lab killed worker-1 after epoch 1 to make it restore"
    assert [command for command in engine.commands if "kill" in command] and fault.injected_at is None
    target.emit("restoring", restore=1, file="backup/chief/ckpt-1", files=[])
    fault.tick(backend, {})
    assert fault.injected_at is not None and fault.landed.startswith("as worker-1 began restoring backup/chief/ckpt-1")


def test_at_restore_that_never_came_says_which_act_was_missing(tmp_path):
    fault = checked_fault(tmp_path, "restore")
    assert fault.missed() == ("worker-1 never reached the backup after which the lab kills it to make it restore: it "
                              "logged no epoch")
    fault.primed = "the lab killed worker-1 after epoch 1 to make it restore"
    assert fault.missed() == ("the lab killed worker-1 after epoch 1 to make it restore, and no restarted worker-1 "
                              "restored a checkpoint: it logged no epoch")
