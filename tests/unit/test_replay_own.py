"""The replay of the lab's own image (what `make k8s` writes, TFJob or TrainJob) reports what a lab
run reports: its losses, step times and weights in each replica's row, and the audit over it.

The lab's program logs where its manifest says (a pod's emptyDir, which the host cannot see); the
replay's hooks have it copy each event to the replica's own hooks folder (replayhooks.LAB_MARK,
schema.COPY_ENV), which the watcher reads as a script's hooks' events and summary.own_attempt as the
program's own log. Issue 44: such a replay ended with `-` for every loss, step time and weight, and
"not audited: it runs the lab's own program"."""

import json
import os
import shutil
import textwrap
from pathlib import Path

import pytest
import yaml
from tflab.core.schema import EventLog, read_events
from tflab.core.settings import Settings
from tflab.k8s import tfjob
from tflab.replay.volumes import hooks_folder, write_hooks
from tflab.replay.watcher import Watcher, unaudited
from tflab.supervisor import audit, summary, table
from tflab.trainer import replayhooks

JOB = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: job}
spec:
  tfReplicaSpecs:
    Worker: {replicas: 2, restartPolicy: OnFailure,
             template: {spec: {containers: [{name: tensorflow, image: "tflab-trainer:cpu-1",
                                             command: [python, -m, tflab.train]}]}}}
"""
TASKS = ("worker-0", "worker-1")
WEIGHTS = "8a0ddb86fa3a" + "0" * 52
LOSSES = (22.64, 20.45, 18.63)


def lab_program_events(log: EventLog, losses=LOSSES, weights=WEIGHTS, end=True) -> None:
    """What the lab's trainer logs in one attempt (trainer/train.py), through the copy."""
    log.emit("start", role="trainer", strategy="multiworker", cluster={"worker": ["a:2222", "b:2222"]},
             versions={}, settings={"global_batch": 96, "epochs": len(losses)}, baseline_loss=24.0)
    log.emit("cluster_ready", seconds=4.5, replicas=2, devices=["CPU:0"])
    for number, loss in enumerate(losses, 1):
        log.emit("audit_weights", at="epoch", epoch=number, digest=f"{number}" * 64, parameters=341)
        log.emit("epoch", epoch=number, loss=loss, seconds=1.3, steps=43, examples_per_second=3000.0)
    if end:
        log.emit("end", role="trainer", total_seconds=30.0, peak_rss_bytes=700_000_000, final_loss=losses[-1],
                 first_step_seconds=2.25, first_step_at=5.0, steady_step_seconds=0.012, weights_sha256=weights,
                 parameters=341)


@pytest.fixture
def replay(tmp_path, monkeypatch):
    """A replay's run folder with its hooks (replay/volumes.py), and the watcher over it."""
    plan = tfjob.plan_of(tmp_path / "job.yaml", [yaml.safe_load(textwrap.dedent(JOB))], Settings())
    run_dir = tmp_path / "run"
    (run_dir / "tasks").mkdir(parents=True)
    write_hooks(plan, run_dir, Settings())
    return plan, run_dir, Watcher(plan, run_dir, dict)


def copied(run_dir, task, monkeypatch):
    """An EventLog of the lab's program in `task`'s replica: its own log a pod's emptyDir (here a
    folder the host never reads), each event copied to its hooks folder as replayhooks sets it."""
    emptydir = run_dir.parent / "emptydir" / task
    emptydir.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("TFLAB_EVENTS_COPY", str(hooks_folder(run_dir, task) / replayhooks.EVENTS))
    log = EventLog(emptydir / f"{task}.jsonl", task)
    monkeypatch.delenv("TFLAB_EVENTS_COPY")
    return log


def state(started: str, code: int | None = None) -> dict:
    if code is None:
        return {"StartedAt": started, "Running": True, "Id": "x"}
    return {"StartedAt": started, "FinishedAt": started.replace("10:00", "10:01"), "Status": "exited",
            "ExitCode": code, "Id": "x"}


def replayed(plan, notes) -> summary.Replayed:
    return summary.Replayed(tfjob="job.yaml", settings={}, not_applied=[],
                            hosts={task.name: task.host for task in plan.tasks},
                            images={task.name: task.image for task in plan.tasks}, unaudited=notes)


def test_the_copy_is_line_for_line_and_never_the_log_itself(tmp_path, monkeypatch):
    own, copy = tmp_path / "own.jsonl", tmp_path / "copy.jsonl"
    monkeypatch.setenv("TFLAB_EVENTS_COPY", str(copy))
    log = EventLog(own, "worker-0")
    log.emit("epoch", epoch=1, loss=1.5, seconds=1.0, steps=2)
    log.close()
    assert copy.read_bytes() == own.read_bytes() and own.read_bytes().count(b"\n") == 1
    monkeypatch.setenv("TFLAB_EVENTS_COPY", str(own))  # the same file: written once
    log = EventLog(own, "worker-0")
    log.emit("epoch", epoch=2, loss=1.0, seconds=1.0, steps=2)
    log.close()
    assert own.read_bytes().count(b"\n") == 2
    # a copy that cannot be opened (a folder there, as a hostile replica may leave) stops nothing
    monkeypatch.setenv("TFLAB_EVENTS_COPY", str(tmp_path))
    log = EventLog(own, "worker-0")
    log.emit("epoch", epoch=3, loss=0.5, seconds=1.0, steps=2)
    log.close()
    assert own.read_bytes().count(b"\n") == 3


def test_a_replay_of_the_labs_own_image_has_its_losses_step_times_weights_and_audit(replay, monkeypatch):
    plan, run_dir, watcher = replay
    for task in TASKS:
        (hooks_folder(run_dir, task) / replayhooks.MARK).write_text(replayhooks.LAB_MARK + "\n")
    watcher.record({task: state("2026-12-06T10:00:00.0Z") for task in TASKS})
    for task in TASKS:
        log = copied(run_dir, task, monkeypatch)
        lab_program_events(log)
        log.close()
    watcher.record({task: state("2026-12-06T10:00:00.0Z", 0) for task in TASKS})
    watcher.close()
    # the watcher copies what a script's hooks would log; the program's start and end are its own
    kinds = [r["event"] for r in read_events(run_dir / "tasks" / "worker-0.jsonl")]
    assert kinds == ["start"] + ["audit_weights", "epoch"] * 3 + ["end"], kinds
    notes = unaudited(plan, run_dir, {"tflab-trainer:cpu-1": {}})
    assert notes == []  # audited, as a script's replicas are
    rows = [summary.replay_row(run_dir, task, 0, False, replayed(plan, notes), False) for task in TASKS]
    for row in rows:
        assert row.losses == list(LOSSES) and row.epochs_done == 3 and row.final_loss == LOSSES[-1]
        assert (row.steady_step_seconds, row.first_step_seconds, row.cluster_ready_seconds) == (0.012, 2.25, 4.5)
        assert row.examples_per_second == pytest.approx(96 / 0.012)
        assert row.weights_sha256 == WEIGHTS and row.parameters == 341
    said = table.table(summary_of(rows))
    assert "8a0ddb86fa3a" in said and "18.6300" in said and "12.00" in said, said  # steady ms
    # the audit over the copied events, as summarise runs it: replicas that drifted apart are a finding
    records = {task: summary.task_records(run_dir, task) for task in TASKS}
    assert audit.audit(records, dict.fromkeys(TASKS, "script"), "worker-0") == ([], [])
    with open(run_dir / "tasks" / "worker-1.jsonl", "a") as log:
        log.write(json.dumps({"event": "audit_weights", "task": "worker-1", "time": 9e9, "at": "epoch", "epoch": 3,
                              "digest": "f" * 64, "parameters": 341}) + "\n")
    records["worker-1"] = summary.task_records(run_dir, "worker-1")
    findings, _ = audit.audit(records, dict.fromkeys(TASKS, "script"), "worker-0")
    assert [finding.kind for finding in findings] == ["replicas-differ"]


def summary_of(rows):
    from tflab.core.runsummary import Summary

    return Summary(run="r", strategy="tfjob", backend="compose", outcome="ok", ok=True, launched_at=0.0,
                   wall_seconds=40.0, settings={}, weights_agree=False, tasks=rows, tfjob="job.yaml")


def test_a_restart_that_died_before_the_programs_start_shows_no_earlier_weights(replay, monkeypatch):
    """worker-0's first attempt ended with its weights; the whole job restarted and its second
    attempt was stopped while importing TensorFlow: its row has no weights, and the epochs it
    trained (its first attempt's) stay its losses."""
    plan, run_dir, watcher = replay
    watcher.record({"worker-0": state("2026-12-06T10:00:00.0Z")})
    log = copied(run_dir, "worker-0", monkeypatch)
    lab_program_events(log)
    log.close()
    watcher.record({"worker-0": state("2026-12-06T10:00:00.0Z", 0)})
    watcher.record({"worker-0": state("2026-12-06T10:02:00.0Z")})  # restarted: a new StartedAt
    watcher.close()
    row = summary.replay_row(run_dir, "worker-0", 137, True, replayed(plan, []), False)
    assert row.attempts == 2 and row.status == "stopped"
    assert row.weights_sha256 is None and row.steady_step_seconds is None and row.final_loss is None
    assert row.losses == list(LOSSES)
    # once the second attempt's program has started, its own (here unfinished) attempt is the row's
    log = copied(run_dir, "worker-0", monkeypatch)
    lab_program_events(log, losses=(9.0,), end=False)
    log.close()
    row = summary.replay_row(run_dir, "worker-0", 137, True, replayed(plan, []), False)
    assert row.cluster_ready_seconds == 4.5 and row.weights_sha256 is None


def test_what_a_replica_leaves_in_its_hooks_folder_is_read_as_foreign(replay, monkeypatch, tmp_path):
    """The copy is the replica's to write: a link, a folder, fields of other types, lines that are
    no JSON are never followed or believed."""
    plan, run_dir, _ = replay
    folder = hooks_folder(run_dir, "worker-0")
    secret = tmp_path / "secret.jsonl"
    log = EventLog(secret, "worker-0")
    lab_program_events(log)
    log.close()
    os.symlink(secret, folder / replayhooks.EVENTS)
    assert summary.own_attempt(run_dir, "worker-0") == []
    os.unlink(folder / replayhooks.EVENTS)
    (folder / replayhooks.EVENTS).mkdir()
    assert summary.own_attempt(run_dir, "worker-0") == []
    (folder / replayhooks.EVENTS).rmdir()
    lines = secret.read_text().splitlines()
    end = json.loads(lines[-1])
    hostile = [lines[0], "not json", json.dumps({**end, "weights_sha256": 7, "steady_step_seconds": "fast"})]
    (folder / replayhooks.EVENTS).write_text("\n".join(hostile) + "\n")
    row = summary.replay_row(run_dir, "worker-0", 0, False, replayed(plan, []), False)
    assert row.weights_sha256 is None and row.steady_step_seconds is None and row.examples_per_second is None


def test_an_older_lab_image_that_copies_nothing_is_said_not_audited(replay):
    plan, run_dir, _ = replay
    for task in TASKS:
        (hooks_folder(run_dir, task) / replayhooks.MARK).write_text(
            "lab: the lab's own program runs here and logs itself\n")
    (note,) = unaudited(plan, run_dir, {"tflab-trainer:cpu-1": {}})
    assert note.startswith("not audited: worker-0, worker-1 (tflab-trainer:cpu-1): it runs the lab's own program, "
                           "which logs only where its TFLAB_OUTPUT says (an image older than this lab's"), note


RECORDED = Path(__file__).parent / "data" / "replay_own"
RECORDED_LOSSES = [22.64307403564453, 20.451229095458984, 18.635507583618164]


def test_a_recorded_replay_of_make_k8s_output_reports_what_a_lab_run_reports(tmp_path):
    """data/replay_own: a real TrainJob replay of `make k8s` output, its three nodes' rows rebuilt
    from what the run left, and the watcher's copying done again from the hooks' folders."""
    from tflab.k8s import trainjob

    run_dir = tmp_path / "run"
    shutil.copytree(RECORDED, run_dir, ignore=shutil.ignore_patterns("README.md", "trainjob.yaml"))
    plan = trainjob.load(Settings(trainjob=str(RECORDED / "trainjob.yaml")))
    tasks = [task.name for task in plan.tasks]
    assert tasks == ["worker-0", "worker-1", "worker-2"]
    images = {plan.tasks[0].image: {}}
    assert unaudited(plan, run_dir, images) == []
    rows = [summary.replay_row(run_dir, task, 0, False, replayed(plan, []), False) for task in tasks]
    for row in rows:
        assert row.status == "ok" and row.losses == RECORDED_LOSSES and row.final_loss == RECORDED_LOSSES[-1]
        assert 0 < row.steady_step_seconds < row.first_step_seconds < row.cluster_ready_seconds
        assert row.examples_per_second == pytest.approx(96 / row.steady_step_seconds)
        assert row.weights_sha256.startswith("bf8bfe1af58d") and row.parameters == 341
    records = {task: summary.task_records(run_dir, task) for task in tasks}
    assert audit.audit(records, dict.fromkeys(tasks, "script"), plan.tasks[0].name) == ([], [])
    # the watcher, over the same hooks' folders, copies what it copied in the run: every event
    # but the program's own start, cluster_ready and end, in its order
    (run_dir / "tasks").rename(run_dir / "recorded")
    (run_dir / "tasks").mkdir()
    watcher = Watcher(plan, run_dir, dict)
    for task in tasks:
        watcher.copy_hooks_events(task)
    watcher.close()
    for task in tasks:
        again = [r["event"] for r in read_events(run_dir / "tasks" / f"{task}.jsonl")]
        then = [r["event"] for r in read_events(run_dir / "recorded" / f"{task}.jsonl")]
        assert again == then[1:-1] and again.count("epoch") == 3 and "audit_batch" in again
        assert watcher.skipped[task] == 3  # start, cluster_ready, end: the program's own
