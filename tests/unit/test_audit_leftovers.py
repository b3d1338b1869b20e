"""supervisor/strays.py (issue 45): what a non-chief task left in the folder where the chief saved
its model or checkpoints, looked for at the run's end in the run folder, read as foreign."""

import os
import re
import textwrap
from pathlib import Path

import pytest
import yaml
from tflab.core.runsummary import Summary
from tflab.core.schema import complete, read_events
from tflab.core.settings import Settings
from tflab.k8s import tfjob
from tflab.replay.run import ReplayRun
from tflab.supervisor import audit, strays
from tflab.supervisor.table import table

pytestmark = pytest.mark.unit
ROLES = {"worker-0": "script", "worker-1": "script", "worker-2": "script"}
STALLS = Path(__file__).parent / "data" / "stalls"


def write(task: str, path, writer: str = "Model.save", storage: str = "shared", caller: str = "train.py:88"):
    return {"event": "audit_write", "task": task, "time": 5.0, "path": path, "writer": writer, "bytes": 19428,
            "storage": storage, "during": "script", "seconds": 0.1, "caller": caller}


def saved_model(folder: Path) -> None:
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"pb")
    (folder / "variables" / "variables.index").write_bytes(b"ix")


def run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "tasks").mkdir(parents=True)
    return run


def found(run: Path, records: dict, tasks=("worker-0", "worker-1")):
    findings, _ = audit.audit(records, ROLES, "worker-0", None, run, strays.run_spaces(run, list(tasks)))
    return [f for f in findings if f.kind == strays.KIND]


def operator_example(run: Path) -> dict:
    """The training operator's distribution_strategy example: the chief saves to saved_model_dir,
    worker-1 to saved_model_dir + '/worker_tmp_1', never deleted."""
    saved_model(run / "tasks/saved_model")
    saved_model(run / "tasks/saved_model/worker_tmp_1")
    return {"worker-0": [write("worker-0", "/lab/run/saved_model")],
            "worker-1": [write("worker-1", "/lab/run/saved_model/worker_tmp_1", caller="train.py:91")]}


def test_the_operators_worker_tmp_left_in_the_chiefs_saved_model_is_a_finding_naming_who_and_how(tmp_path):
    run = run_folder(tmp_path)
    left = found(run, operator_example(run))
    assert [(f.kind, f.tasks) for f in left] == [("worker-leftover", ["worker-1"])]
    assert left[0].message.startswith(
        "worker-1 left /lab/run/saved_model/worker_tmp_1 (a folder, by Model.save at train.py:91) in "
        "/lab/run/saved_model: the folder where the chief (worker-0) saved its model or checkpoints still holds "
        "a non-chief's own save at the end of the run")
    assert "remove_temp_dirpath" in left[0].fix and "workertemp_<task id>" in left[0].fix
    # As the table and `make why` say it, and summary.json keeps it (its typed record checks the fields).
    summary = Summary(run="r", strategy="tfjob", backend="compose", tfjob=None, outcome="ok", ok=True,
                      launched_at=0.0, wall_seconds=1.0, settings={}, weights_agree=False, tasks=[],
                      findings=[f.to_dict() for f in left])
    assert f"finding (worker-leftover): {left[0].message}" in table(summary)
    assert Summary.from_dict(summary.to_dict()).findings == summary.findings


def test_its_name_alone_says_a_non_chiefs_temporary_where_the_save_was_not_audited(tmp_path):
    run = run_folder(tmp_path)
    saved_model(run / "tasks/export")
    (run / "tasks/export/workertemp_2").mkdir()
    left = found(run, {"worker-0": [write("worker-0", "/lab/run/export")], "worker-1": [], "worker-2": []},
                 tasks=("worker-0", "worker-1", "worker-2"))
    assert left[0].tasks == ["worker-2"]
    assert left[0].message.startswith("worker-2 left /lab/run/export/workertemp_2 (a folder, named as a "
                                      "non-chief's temporary save) in /lab/run/export:")


def test_the_tutorial_that_deletes_its_temporaries_and_checkpoints_written_so_are_no_finding(tmp_path):
    """TensorFlow's multi-worker tutorial: write_filepath's workertemp_<id>, then tf.io.gfile.rmtree;
    tf-keras's ModelCheckpoint under MWMS the same (distributed_file_utils.remove_temp_dirpath)."""
    run = run_folder(tmp_path)
    saved_model(run / "tasks/keras-model")
    (run / "tasks/ckpt").mkdir()
    (run / "tasks/ckpt/ckpt-1.index").write_bytes(b"ix")
    records = {"worker-0": [write("worker-0", "/lab/run/keras-model"),
                            write("worker-0", "/lab/run/ckpt/ckpt-1", "CheckpointManager.save")],
               "worker-1": [write("worker-1", "/lab/run/workertemp_1/keras-model"),
                            write("worker-1", "/lab/run/ckpt/workertemp_1/ckpt-1", "CheckpointManager.save")]}
    assert found(run, records) == []
    # Had it not deleted them, both are named.
    saved_model(run / "tasks/workertemp_1/keras-model")
    (run / "tasks/ckpt/workertemp_1").mkdir()
    (left,) = found(run, records)
    assert left.message.count(" left /lab/run/") == 2
    assert "/lab/run/workertemp_1 (a folder, by Model.save at train.py:88) in /lab/run" in left.message
    assert "/lab/run/ckpt/workertemp_1 (a folder, by CheckpointManager.save at train.py:88) in /lab/run/ckpt" \
        in left.message


def test_a_recorded_lab_run_with_its_backups_workertemp_is_no_finding(tmp_path):
    """The lab's own trainer (the recorded multiworker run of data/stalls/hang): the chief's
    BackupAndRestore saves to backup/chief, worker-1's to backup/workertemp_1 (which a restarted
    worker refills from the chief's: backups.adopt_chief_backup), its model to its own /tmp."""
    run = run_folder(tmp_path)
    records = {task: complete(read_events(STALLS / "hang" / f"{task}.jsonl")) for task in ("worker-0", "worker-1")}
    assert any(r["event"] == "audit_write" and "workertemp_1" in r["path"] for r in records["worker-1"])
    for folder in ("backup/chief", "backup/workertemp_1"):
        (run / "tasks" / folder).mkdir(parents=True)
        (run / "tasks" / folder / "ckpt-1.index").write_bytes(b"ix")
    (run / "tasks/model.keras").write_bytes(b"zip")
    (run / "tasks/worker-0.jsonl").write_bytes(b"")
    records["worker-0"].append(write("worker-0", "/lab/run/model.keras"))
    records["worker-1"].append(write("worker-1", "/tmp/tflab-worker-1-x/model.keras", storage="own"))
    assert found(run, records) == []


def test_local_processes_paths_and_a_replays_volume_map_to_the_run_folder(tmp_path):
    run = run_folder(tmp_path)
    saved_model(run / "tasks/m")
    saved_model(run / "tasks/m/worker_tmp_1")
    tasks = os.path.realpath(run / "tasks")
    records = {"worker-0": [write("worker-0", f"{tasks}/m")],
               "worker-1": [write("worker-1", f"{tasks}/m/worker_tmp_1")]}
    assert found(run, records)[0].tasks == ["worker-1"]
    # A replay: the chief mounts volumes/models at /models, worker-1 at /out.
    saved_model(run / "volumes/models/export")
    (run / "volumes/models/export/w1").mkdir()
    records = {"worker-0": [write("worker-0", "/models/export")], "worker-1": [write("worker-1", "/out/export/w1")]}
    spaces = {"worker-0": [strays.Space("/models", "volumes/models")],
              "worker-1": [strays.Space("/out", "volumes/models")]}
    (left,) = strays.leftovers(run, records, "worker-0", spaces)
    assert (left.path, left.task, left.folder) == ("/models/export/w1", "worker-1", "/models/export")


def test_a_link_where_the_folder_was_is_never_read_through(tmp_path):
    run = run_folder(tmp_path)
    outside = tmp_path / "outside"
    saved_model(outside)
    saved_model(outside / "worker_tmp_1")
    (run / "tasks/saved_model").symlink_to(outside)
    records = {"worker-0": [write("worker-0", "/lab/run/saved_model")],
               "worker-1": [write("worker-1", "/lab/run/saved_model/worker_tmp_1")]}
    assert found(run, records) == []
    # The tasks' space itself a link: nothing read either.
    elsewhere = run_folder(tmp_path / "elsewhere")
    records_elsewhere = operator_example(elsewhere)
    assert found(elsewhere, records_elsewhere) != []
    other = run_folder(tmp_path / "b")
    (other / "tasks").rmdir()
    (other / "tasks").symlink_to(elsewhere / "tasks")
    assert found(other, records_elsewhere) == []
    # A leftover that is itself a link is named, not followed.
    (run / "tasks/saved_model").unlink()
    saved_model(run / "tasks/saved_model")
    (run / "tasks/saved_model/worker_tmp_1").symlink_to("/etc")
    (left,) = found(run, records)
    assert "/lab/run/saved_model/worker_tmp_1 (a link, by Model.save" in left.message


def test_hostile_records_and_a_huge_folder_are_bounded_and_never_a_traceback(tmp_path, monkeypatch):
    run = run_folder(tmp_path)
    saved_model(run / "tasks/saved_model")
    for number in range(40):
        (run / "tasks/saved_model" / f"workertemp_{number}").mkdir()
    records = {"worker-0": [write("worker-0", "/lab/run/saved_model"), write("worker-0", 5),
                            write("worker-0", "/lab/run/../../etc"), write("worker-0", "relative/path"),
                            write("worker-0", "/lab/run/" + "x/" * 5000), {"event": "audit_write", "task": "worker-0"},
                            write("worker-0", "/lab/run/saved_model", writer=None)],
               "worker-1": [write("worker-1", ["/lab/run/saved_model/w"]), write("worker-1", "\0/lab/run")]}
    monkeypatch.setattr(strays, "MOST_ENTRIES", 30)
    found_ = strays.leftovers(run, records, "worker-0", strays.run_spaces(run, ["worker-0", "worker-1"]))
    assert 0 < len(found_) <= 30  # 30 names read of the 42, the temporaries among them
    monkeypatch.undo()
    (left,) = found(run, {task: complete(mine) for task, mine in records.items()})  # as the summary hands them
    assert left.message.count(" left ") == strays.SHOWN and "(and 35 more)" in left.message
    assert left.tasks == ["worker-1"]  # the others' names say workers this run does not have


def test_the_run_folder_page_and_the_audit_page_name_every_kind_of_finding():
    docs = Path(__file__).parents[2] / "docs"
    listed = re.search(r"are each a `kind` \(([^)]*)\)", (docs / "run-folder.md").read_text())
    assert listed and re.findall(r"`([a-z-]+)`", listed.group(1)) == list(audit.KINDS)
    rows = re.findall(r"^\| `([a-z-]+)`(?:, `([a-z-]+)`)? \|", (docs / "audit.md").read_text(), re.M)
    assert sorted(kind for row in rows for kind in row if kind) == sorted(audit.KINDS)


# The shape of the training operator's examples/tensorflow/distribution_strategy TFJob: a claim
# mounted at /train, --saved_model_dir /train/saved_model/ (and a read-only volume beside it).
OPERATOR_JOB = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: multi-worker}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: tensorflow
              image: "tflab-trainer:cpu-1"
              command: [python, /multi_worker_strategy-with-keras.py, --saved_model_dir, /train/saved_model/]
              volumeMounts: [{name: training, mountPath: /train}, {name: settings, mountPath: /etc/job,
                                                                    readOnly: true}]
          volumes:
            - {name: training, persistentVolumeClaim: {claimName: strategy-volume}}
            - {name: settings, persistentVolumeClaim: {claimName: settings, readOnly: true}}
"""


def test_a_replayed_tfjob_is_looked_in_at_its_claims_folder_as_each_replica_mounts_it(tmp_path):
    plan = tfjob.plan_of(tmp_path / "job.yaml", [yaml.safe_load(textwrap.dedent(OPERATOR_JOB))], Settings())
    run = run_folder(tmp_path)
    spaces = ReplayRun(plan, Settings(), None, run).spaces()
    assert spaces == {task: [strays.Space("/train", "volumes/strategy-volume")] for task in ("worker-0", "worker-1")}
    saved_model(run / "volumes/strategy-volume/saved_model")
    saved_model(run / "volumes/strategy-volume/saved_model/worker_tmp_1")
    records = {"worker-0": [write("worker-0", "/train/saved_model")],
               "worker-1": [write("worker-1", "/train/saved_model/worker_tmp_1")]}
    findings, _ = audit.audit(records, ROLES, "worker-0", None, run, spaces)
    assert [(f.kind, f.tasks) for f in findings] == [("worker-leftover", ["worker-1"])]
    assert findings[0].message.startswith("worker-1 left /train/saved_model/worker_tmp_1 (a folder, by Model.save")
