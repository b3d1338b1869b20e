"""resume.py and its readers: after a restart, where a script's tasks resumed, measured from their
own `fit` and `checkpoint` events, never claimed before (issue 29, point 1)."""

import json

import pytest
from tflab.core import cluster
from tflab.core.settings import Settings
from tflab.supervisor import labrun, progress, summary, table
from tflab.supervisor.resume import UNSEEN, resumes

pytestmark = pytest.mark.unit

START = {"event": "start", "role": "script", "strategy": "multiworker", "cluster": {}, "versions": {},
         "settings": {}}
TMP = {"backup_dir": "/tmp/backup", "backup_kept": False}
KEPT = {"backup_dir": "/lab/run/backup", "backup_kept": True}


def log(task: str, *attempts: list[dict]) -> list[dict]:
    """A task's records: each attempt a start, then its events (at increasing times)."""
    records = []
    for attempt in attempts:
        records += [{**START, "task": task}] + [{"task": task, **record} for record in attempt]
    return [{**record, "time": float(number)} for number, record in enumerate(records)]


def fit(epoch: int, step: int = 0, **backup) -> dict:
    return {"event": "fit", "epoch": epoch, "step": step, "epochs": 5, **backup}


def epoch(number: int) -> dict:
    return {"event": "epoch", "epoch": number, "loss": 1.0 / number, "seconds": 0.1, "steps": 8}


@pytest.mark.parametrize("first, second, resumed, words", [
    ([fit(1, **KEPT), epoch(1), epoch(2)], [fit(3, **KEPT), {"event": "restored", "epoch": 3, "step": 0}],
     True, "resumed at epoch 3"),
    ([fit(1, **KEPT), epoch(1)], [fit(2, 5, **KEPT)], True, "resumed at epoch 2, step 5"),
    ([fit(1, **TMP), epoch(1), epoch(2)], [fit(1, **TMP)], False,
     "started over at epoch 1: its backup_dir /tmp/backup does not outlive a restart, as on a cluster; keep it in "
     "$TFLAB_OUTPUT, the run folder, which every task shares and a restart keeps (/tmp is each task's own, and the "
     "restart empties it)"),
    ([fit(1), epoch(1)], [fit(1)], False,
     "started over at epoch 1: its fit has no BackupAndRestore, so Keras counts its epochs from 1 again (weights "
     "the script loads itself, the lab cannot see); to resume, add tf.keras.callbacks.BackupAndRestore("
     "backup_dir=...) with the folder in $TFLAB_OUTPUT"),
    ([fit(1, **KEPT)], [fit(1, **KEPT)], False,
     "started over at epoch 1: no backup was in /lab/run/backup yet: the attempt before ended before its first "
     "epoch did"),
    # A script's first fit without a backup, then the one with it: the one with it says.
    ([fit(1), fit(1, **KEPT), epoch(1)], [fit(1), fit(2, **KEPT)], True, "resumed at epoch 2"),
    ([{"event": "checkpoint", "found": False, "path": "/tmp/ckpt"}],
     [{"event": "checkpoint", "found": False, "path": "/tmp/ckpt"}], False,
     "started over: tf.train.latest_checkpoint found none in /tmp/ckpt, which does not outlive a restart, as on a "
     "cluster; keep it in $TFLAB_OUTPUT, the run folder, which every task shares and a restart keeps"),
    ([], [{"event": "checkpoint", "found": False, "path": "/lab/run/ckpt"},
          {"event": "checkpoint", "found": True, "path": "/lab/run/ckpt/ckpt-2", "counters": {"epoch": 2}}],
     True, "resumed from its checkpoint /lab/run/ckpt/ckpt-2 (epoch=2)"),
    ([], [], None, UNSEEN),
    ([epoch(1)], [epoch(1), epoch(2)], None, UNSEEN),  # a script's epochs (its callback's) with no fit
])
def test_each_restarted_attempt_says_where_it_resumed_and_why_it_started_over(first, second, resumed, words):
    assert resumes(log("worker-0", first)) == []
    assert resumes(log("worker-0", first, second)) == [{"attempt": 2, "resumed": resumed, "words": words}]


TRAINER = {**START, "role": "trainer"}


@pytest.mark.parametrize("second, resumed, words", [
    ([{"event": "restored", "epoch": 3, "step": 0}, epoch(3)], True, "resumed at epoch 3"),
    ([epoch(1), epoch(2)], False, "started over at epoch 1: it restored no backup (the lab's trainer keeps one with "
                                  "BACKUP=epoch, in a folder a restart keeps)"),
    ([{"event": "cluster_ready"}], None, UNSEEN),  # ended before an epoch: nothing to say
])
def test_the_labs_own_trainer_says_where_it_resumed_in_its_own_words(second, resumed, words):
    """A replay of what make k8s writes runs the lab's trainer, which logs no fit: its `restored`
    event says it resumed, its epochs from 1 again that it started over (the summary had said the
    lab could not see, beside a verdict that said "resumed at 0")."""
    records = [{**TRAINER, "task": "worker-0", "time": 0.0}, {**epoch(1), "task": "worker-0", "time": 1.0},
               {**TRAINER, "task": "worker-0", "time": 2.0}] + \
        [{**record, "task": "worker-0", "time": 3.0 + n} for n, record in enumerate(second)]
    assert resumes(records) == [{"attempt": 2, "resumed": resumed, "words": words}]


def script_run(tmp_path, logs: dict) -> tuple[Settings, cluster.Cluster]:
    script = tmp_path / "train.py"
    script.write_text("")
    settings = Settings(script=str(script))
    for task, records in logs.items():
        (tmp_path / f"{task}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return settings, cluster.build(settings)


def test_the_restart_line_claims_no_resume_and_says_what_the_backup_lets_one_expect(tmp_path):
    script_run(tmp_path, {"worker-0": log("worker-0", [fit(1, **TMP), epoch(1)])})
    assert labrun.script_restart(tmp_path, "worker-0") == (
        "each runs the script again from its first line, and the lab will say where it resumed; worker-0: its "
        "backup_dir /tmp/backup does not outlive a restart: expect it to start over")
    assert labrun.script_restart(tmp_path, "worker-1") == (
        "each runs the script again from its first line, and the lab will say where it resumed")


def test_the_live_lines_and_the_table_say_it_measured(tmp_path, capsys):
    logs = {"worker-0": log("worker-0", [fit(1, **TMP), epoch(1), epoch(2)], [fit(1, **TMP), epoch(1)]),
            "worker-1": log("worker-1", [fit(1, **TMP), epoch(1), epoch(2)], [fit(1, **TMP), epoch(1)])}
    settings, the_cluster = script_run(tmp_path, logs)
    progress.ProgressPrinter(settings, the_cluster, tmp_path).print_new()
    lines = capsys.readouterr().out.splitlines()
    started_over = ("started over at epoch 1: its backup_dir /tmp/backup does not outlive a restart, as on a "
                    "cluster; keep it in $TFLAB_OUTPUT, the run folder, which every task shares and a restart "
                    "keeps (/tmp is each task's own, and the restart empties it)")
    assert "[worker-0] epoch 2  loss 0.5000  0.10 s  8 steps" in lines
    assert [line for line in lines if "restart" in line] == [
        f"[worker-0] after restart 1: {started_over}", f"[worker-1] after restart 1: {started_over}"]
    result = summary.summarise(tmp_path, summary.lab_rows(settings, the_cluster, tmp_path,
                                                         {"worker-0": 0, "worker-1": 0}, [], "ok"), "ok", 0.0, 1.0,
                               restarts=[0.5])
    assert result.tasks[0].resumes == [{"attempt": 2, "resumed": False, "words": started_over}]
    assert f"worker-0, worker-1: after restart 1, {started_over}" in table.table(result).splitlines()
