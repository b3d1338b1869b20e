"""A user's script restarted by `make chaos` (issue 29, points 1 and 2): the multi-worker tutorial's
fault-tolerance cell, BackupAndRestore in /tmp as it writes it, then in $TFLAB_OUTPUT. Its faults
are timed by its own Keras epochs (it has no LabCallback: trainer/observe.py logs them), and the
lab says, measured from the script's own events, whether each task resumed or started over, and why.
Two small runs (2 workers, 8 epochs of 64 steps), each asserted once per test below."""

import pytest
from tflab.core.schema import attempts, by_event

SCRIPT = __import__("pathlib").Path(__file__).parent / "scripts/train_backup.py"
SIZE = dict(STRATEGY="multiworker", WORKERS=2, RESTARTS=1, SCRIPT=SCRIPT, SCENARIO="kill", TARGET="worker-1",
            AT="epoch:2")
TMP_WORDS = ("started over at epoch 1: its backup_dir /tmp/backup does not outlive a restart, as on a cluster; "
             "keep it in $TFLAB_OUTPUT, the run folder, which every task shares and a restart keeps (/tmp is each "
             "task's own, and the restart empties it)")


@pytest.fixture(scope="module")
def in_tmp(lab):
    return lab.run("resume-tmp", command="chaos", ARGS="--backup-dir /tmp/backup", **SIZE)


@pytest.fixture(scope="module")
def in_output(lab):
    return lab.run("resume-output", command="chaos", ARGS="--backup-dir output", **SIZE)


def tries(run, task):
    return attempts(run.events(task))


def test_chaos_takes_a_script_and_times_the_kill_by_its_own_epochs(in_tmp):
    assert in_tmp.finished.returncode == 0, in_tmp.why()
    chaos = in_tmp.summary["chaos"]
    assert chaos["injected"] and chaos["outcome"] == "survived" and chaos["restarts"] == 1, in_tmp.why()
    assert "chaos: kill on worker-1 after its script's epoch 2" in in_tmp.output
    injected = [line for line in (in_tmp.run_dir / "chaos.jsonl").read_text().splitlines() if '"injected"' in line]
    assert len(injected) == 1
    first = tries(in_tmp, "worker-1")[0]
    epochs = by_event(first, "epoch")
    # Keras's own epochs, 1-based, without a batch size; the kill came after the second.
    assert [e["epoch"] for e in epochs][:2] == [1, 2] and "examples_per_second" not in epochs[0]
    assert all(e["steps"] == 4096 // 64 for e in epochs)
    assert chaos["detection_seconds"] < 10 and chaos["recovery_seconds"] < 120
    assert any(note.startswith("weights: a script logs no digest") for note in chaos["unchecked"])


def test_a_backup_in_tmp_is_said_to_start_over_with_the_reason(in_tmp):
    output = in_tmp.output
    # Before the restart: no claim of a resume, only what the backup lets one expect.
    assert ("restarting every task (1 of 1): each runs the script again from its first line, and the lab will "
            "say where it resumed; worker-0: its backup_dir /tmp/backup does not outlive a restart: expect it to "
            "start over") in output, output
    assert "training resumes from the last backup" not in output
    for task in ("worker-0", "worker-1"):
        fits = by_event(tries(in_tmp, task)[1], "fit")
        assert [(f["epoch"], f["backup_dir"], f["backup_kept"]) for f in fits] == [(1, "/tmp/backup", False)]
        assert f"[{task}] after restart 1: {TMP_WORDS}" in output
        assert in_tmp.tasks[task].resumes == [{"attempt": 2, "resumed": False, "words": TMP_WORDS}]
    assert f"worker-0, worker-1: after restart 1, {TMP_WORDS}" in output
    # The fixture reads Keras's own losses; the last attempt ran all 8 epochs, and the table's final loss is its last.
    losses = [e["loss"] for e in by_event(tries(in_tmp, "worker-0")[1], "epoch")]
    assert len(losses) == 8 and in_tmp.tasks["worker-0"].final_loss == losses[-1]


def test_a_backup_in_the_run_folder_resumes_at_the_epoch_measured(in_output):
    assert in_output.finished.returncode == 0 and in_output.summary["chaos"]["outcome"] == "survived", in_output.why()
    reported = len(by_event(tries(in_output, "worker-0")[0], "epoch"))
    resumed = {task: [(f["epoch"], f["step"], f["backup_kept"]) for f in by_event(tries(in_output, task)[1], "fit")]
               for task in ("worker-0", "worker-1")}
    # Every worker restores the chief's backup: the same epoch, after the last the chief logged.
    epoch = resumed["worker-0"][0][0]
    assert resumed == {task: [(epoch, 0, True)] for task in resumed} and epoch >= max(3, reported + 1), resumed
    words = f"resumed at epoch {epoch}"
    for task in resumed:
        assert in_output.tasks[task].resumes == [{"attempt": 2, "resumed": True, "words": words}]
        assert f"[{task}] after restart 1: {words}" in in_output.output
        assert [e["epoch"] for e in by_event(tries(in_output, task)[1], "epoch")] == list(range(epoch, 9))
    assert f"worker-0, worker-1: after restart 1, {words}" in in_output.output
    assert "its BackupAndRestore keeps its backup in /lab/run/my-backup, which the restart keeps" in in_output.output
