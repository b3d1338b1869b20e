"""tflab/supervisor/audit.py: the host's judgement of the tasks' audit events (AUDIT, issue 25), on records
as the trainer's instruments write them."""

import pytest
from tflab.core.runsummary import Summary
from tflab.supervisor import audit
from tflab.supervisor.table import table

pytestmark = pytest.mark.unit
ROLES = {"worker-0": "trainer", "worker-1": "trainer", "ps-0": "server", "evaluator-0": "evaluator"}


def batches(task: str, epochs: int = 2, steps: int = 16, offset: int = 0, examples: int = 4, first_pass: int = 2):
    """A worker's sampled steps: each example digest names its epoch and example number."""
    found = []
    for epoch in range(epochs):
        for step in range(1, steps + 1):
            ids = [f"{epoch}-{(step - 1) * examples + i + offset:08d}" for i in range(examples)]
            found.append({"event": "audit_batch", "task": task, "time": 1.0, "pass": first_pass + epoch, "step": step,
                          "examples": examples, "digest": "|".join(ids), "example_digests": ids})
        found.append({"event": "audit_pass", "task": task, "time": 2.0, "pass": first_pass + epoch,
                      "steps": 64, "examples": 256, "policy": "OFF"})
    return found


def write(task: str, path: str, at: float, writer: str = "Model.save", storage: str = "shared", during="script"):
    return {"event": "audit_write", "task": task, "time": at, "path": path, "writer": writer, "bytes": 19428,
            "storage": storage, "during": during, "seconds": 0.1, "caller": "train.py:40"}


def weights(task: str, *digests: str, end: str | None = None):
    found = [{"event": "audit_weights", "task": task, "time": 1.0, "at": "epoch", "epoch": n + 1, "digest": digest,
              "parameters": 41} for n, digest in enumerate(digests)]
    if end:
        found.append({"event": "audit_weights", "task": task, "time": 1.0, "at": "end", "epoch": len(digests),
                      "digest": end, "parameters": 41})
    return found


END = {"event": "end", "task": "worker-0", "time": 9.0, "role": "trainer"}


def findings(records: dict, outputs: dict | None = None):
    found, notes = audit.audit(records, ROLES, "worker-0", outputs)
    return [(f.kind, f.tasks) for f in found], found, notes


def test_workers_on_the_same_batches_are_unsharded_with_the_fix_for_sharding_off():
    kinds, found, _ = findings({"worker-0": batches("worker-0"), "worker-1": batches("worker-1")})
    assert kinds == [("unsharded", ["worker-0", "worker-1"])]
    assert found[0].message == ("worker-0 and worker-1 trained on the same examples in 32 of 32 sampled steps: the "
                                "dataset is not sharded, and each consumed 256 examples in epoch 1, so 2 workers did "
                                "one worker's work 2 times over")
    assert found[0].fix.startswith("its AutoShardPolicy is OFF: set options.experimental_distribute.auto_shard_policy")


def test_disjoint_shards_are_no_finding_even_with_passes_numbered_apart():
    """A worker that made one iterator more before training (a peek) numbers its passes on."""
    apart = {"worker-0": batches("worker-0"), "worker-1": batches("worker-1", offset=10_000, first_pass=3)}
    assert findings(apart)[0] == []


def test_shards_that_overlap_beyond_chance_are_a_finding_and_repeats_a_worker_sees_of_itself_are_chance():
    mine = batches("worker-0")
    theirs = batches("worker-1", offset=32)  # half of what worker-0 sampled, again
    kinds, found, _ = findings({"worker-0": mine, "worker-1": theirs})
    assert kinds == [("overlapping-shards", ["worker-0", "worker-1"])]
    assert found[0].message.startswith("worker-0 and worker-1 trained on 32 of the same examples among the 64 each "
                                       "sampled in epoch 1 (disjoint shards share none): their shards overlap")
    assert "seed" in found[0].fix
    # A data set full of repeats: each worker sees its own examples twice as often as the other's.
    for records in (mine, theirs):
        for record in records:
            if record["event"] == "audit_batch":
                record["example_digests"] = record["example_digests"][:2] * 2
    assert findings({"worker-0": mine, "worker-1": theirs})[0] == []


def test_two_tasks_writing_one_shared_path_is_a_finding_and_their_own_tmp_is_not():
    records = {"worker-0": [write("worker-0", "/runs/r/model.keras", 5.0), write("worker-0", "/tmp/m.keras", 5.0,
                                                                                  storage="own"), END],
               "worker-1": [write("worker-1", "/runs/r/model.keras", 4.0), write("worker-1", "/tmp/m.keras", 5.0,
                                                                                  storage="own")]}
    kinds, found, _ = findings(records)
    assert kinds == [("shared-write", ["worker-0", "worker-1"])]
    assert found[0].message.startswith("worker-0 and worker-1 all wrote /runs/r/model.keras, on storage every task "
                                       "shares: the last to write wins")
    assert "by Model.save at train.py:40" in found[0].message and "write_filepath" in found[0].fix


def test_a_non_chief_writing_after_the_chief_overwrote_it_and_checkpoints_are_one_finding():
    records = {"worker-0": [write("worker-0", f"/runs/r/ckpt-{n}", 5.0 + n, "CheckpointManager.save", during="fit")
                            for n in range(3)],
               "worker-1": [write("worker-1", f"/runs/r/ckpt-{n}", 6.5 + n, "CheckpointManager.save", during="fit")
                            for n in range(3)]}
    kinds, found, _ = findings(records)
    assert kinds == [("overwrote-chief", ["worker-0", "worker-1"])]
    assert found[0].message.startswith("worker-1 overwrote the chief's (worker-0) /runs/r/ckpt-0 (and 2 more paths)")


def test_a_final_model_saved_by_a_worker_and_not_by_the_chief_is_a_finding():
    records = {"worker-0": [END], "worker-1": [write("worker-1", "/runs/r/model.keras", 4.0)]}
    kinds, found, _ = findings(records)
    assert kinds == [("no-final-model", ["worker-0", "worker-1"])]
    assert found[0].message.startswith("worker-1 saved the final model (Model.save to /runs/r/model.keras) and the "
                                       "chief, worker-0, saved none")
    # the chief saving too, to its own path: nothing to say
    records["worker-0"].append(write("worker-0", "/runs/r/chief.keras", 4.0))
    assert findings(records)[0] == []


def test_weights_that_differ_name_the_first_epoch_and_servers_and_evaluators_are_not_compared():
    records = {"worker-0": weights("worker-0", "a" * 64, "b" * 64, end="b" * 64),
               "worker-1": weights("worker-1", "a" * 64, "c" * 64, end="c" * 64),
               "evaluator-0": weights("evaluator-0", "z" * 64), "ps-0": weights("ps-0", "y" * 64)}
    kinds, found, _ = findings(records)
    assert kinds == [("replicas-differ", ["worker-0", "worker-1"])]
    assert found[0].message.startswith("worker-0 and worker-1 hold different weights from epoch 2 on "
                                       "(worker-0 bbbbbbbbbbbb, worker-1 cccccccccccc)")
    only_at_the_end = {"worker-0": weights("worker-0", end="a" * 64), "worker-1": weights("worker-1", end="b" * 64)}
    assert "at the end of training" in findings(only_at_the_end)[1][0].message
    agree = {"worker-0": weights("worker-0", "a" * 64), "worker-1": weights("worker-1", "a" * 64)}
    assert findings(agree)[0] == []


def test_the_auto_to_data_fallback_is_a_note_not_a_finding():
    line = ("W0000 auto_shard.cc:553] AUTO sharding policy will apply DATA sharding policy as it failed to apply "
            "FILE sharding policy because of the following reason: Found an unshardable source dataset")
    kinds, _, notes = findings({"worker-0": [], "worker-1": []}, {"worker-0": line, "worker-1": line})
    assert kinds == [] and len(notes) == 1
    assert notes[0].startswith("worker-0 and worker-1: TensorFlow's AUTO sharding found no files to shard and used "
                               "DATA: every worker reads and preprocesses the whole data set")


def summary(audit_setting: str, found: list) -> Summary:
    return Summary(run="r", strategy="multiworker", backend="compose", outcome="ok", ok=True, launched_at=1.0,
                   wall_seconds=9.0, settings={"audit": audit_setting}, weights_agree=True, tasks=[],
                   findings=[f.to_dict() for f in found])


def test_findings_are_the_tables_last_lines_and_a_summary_keeps_them_typed():
    _, found, _ = findings({"worker-0": batches("worker-0"), "worker-1": batches("worker-1")})
    lines = table(summary("strict", found)).splitlines()
    assert lines[-3].startswith("finding (unsharded): worker-0 and worker-1 trained on the same examples")
    assert lines[-2].startswith("  fix: its AutoShardPolicy is OFF")
    assert lines[-1] == "run r: ok in 9.0 s; 1 audit finding (AUDIT=strict fails the run)"
    again = Summary.from_dict(summary("on", found).to_dict())
    assert again.findings == [found[0].to_dict()]
    bad = summary("on", found).to_dict()
    bad["findings"][0]["tasks"] = [3]
    with pytest.raises(ValueError, match=r"findings\[0\]\.tasks\[0\]"):
        Summary.from_dict(bad)


def test_a_path_is_shared_on_the_run_folder_a_bind_mount_or_a_local_run_and_own_in_the_containers_files(tmp_path):
    from tflab.trainer.audit import Audit, mount_of

    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "600 500 0:50 / / rw,relatime - overlay overlay rw,lowerdir=/var/lib/docker/l\n"
        "601 600 0:51 / /tmp rw,nosuid - tmpfs tmpfs rw\n"
        "602 600 8:1 /work/runs/r /lab/run rw,relatime - overlay /dev/root rw\n"
        "603 600 8:1 /data /mnt/my\\040data rw,relatime - ext4 /dev/sda1 rw\n")
    assert mount_of("/tmp/model.keras", str(mountinfo)) == ("/tmp", "tmpfs")
    assert mount_of("/mnt/my data/ckpt", str(mountinfo)) == ("/mnt/my data", "ext4")
    assert mount_of("/home/user/model.keras", str(mountinfo)) == ("/", "overlay")
    compose = Audit(log=None, backend="compose", output="/lab/run")
    assert compose.storage("/lab/run/model.keras") == "shared"
    assert compose.storage("gs://bucket/model.keras") == "shared"
    assert Audit(log=None, backend="local").storage("/tmp/model.keras") == "shared"  # one machine's processes


def test_after_a_restart_batches_and_weights_are_compared_within_the_last_attempt():
    start = {"event": "start", "task": "worker-0", "time": 0.0, "role": "trainer"}
    before = weights("worker-0", "a" * 64)  # the attempt that died: its weights never compared
    records = {"worker-0": [start, *before, start, *weights("worker-0", "b" * 64)],
               "worker-1": [start, *weights("worker-1", "b" * 64)]}
    assert findings(records)[0] == []
    records["worker-1"] = [start, *weights("worker-1", "c" * 64)]
    assert findings(records)[0] == [("replicas-differ", ["worker-0", "worker-1"])]


def test_a_batch_is_fingerprinted_by_its_values_strings_too_and_a_failure_never_reaches_the_step(capsys):
    import numpy as np
    from tflab.trainer.audit import Audit

    class Log(list):
        def emit(self, event, **fields):
            self.append((event, fields))

    log = Log()
    watcher = Audit(log)
    watcher.new_pass("DATA")
    for _ in range(2):  # the same values in new arrays: the same digests
        watcher.batch(1, [np.array([[1.0, 2.0], [3.0, 4.0]], "float32"), np.array([b"cat", b"dog"], dtype=object)])
    (_, first), (_, second) = log
    assert first["examples"] == 2 and len(set(first["example_digests"])) == 2
    assert (first["digest"], first["example_digests"]) == (second["digest"], second["example_digests"])
    assert first["step"] == 1 and second["step"] == 2
    assert watcher.batch_or_complain(1, [object()]) == [] and watcher.batch_or_complain(1, [object()]) == []
    assert capsys.readouterr().err.count("the audit's batch fingerprint failed, and the script runs on") == 1


def epochs(task: str, *losses):
    """A task's `epoch` events as they are logged: a loss that is not finite as its word (schema.loss_field)."""
    return [{"event": "epoch", "task": task, "time": 1.0, "epoch": n + 1, "loss": loss, "seconds": 0.5, "steps": 32}
            for n, loss in enumerate(losses)]


def test_a_loss_gone_nan_is_a_finding_naming_its_first_epoch_its_tasks_and_what_to_check():
    """The issue-36 run: an MWMS fit whose loss was nan every epoch ended `ok`."""
    kinds, found, _ = findings({"worker-0": epochs("worker-0", "nan", "nan", "nan"),
                                "worker-1": epochs("worker-1", "nan", "nan", "nan")})
    assert kinds == [("non-finite", ["worker-0", "worker-1"])]
    assert found[0].message.startswith("worker-0 and worker-1: the loss was nan from epoch 1 on (every epoch)")
    assert "STRATEGY=single" in found[0].fix and "tensorflow#90686" in found[0].fix
    kinds, found, _ = findings({"worker-0": epochs("worker-0", 3.5, 2.25, "inf", "nan")})
    assert kinds == [("non-finite", ["worker-0"])]
    assert "the loss was inf from epoch 3 on (each of the 2 epochs since)" in found[0].message
    assert findings({"worker-0": epochs("worker-0", 3.5, 2.25), "ps-0": epochs("ps-0", "nan")})[0] == []


def test_weights_gone_nan_are_a_finding_where_the_loss_said_nothing():
    records = weights("worker-0", "aa", "bb", end="bb")
    records[1]["nonfinite"] = 41
    kinds, found, _ = findings({"worker-0": records})
    assert kinds == [("non-finite", ["worker-0"])]
    assert found[0].message == ("worker-0: 41 of the 41 trainable weights were NaN or infinite from epoch 2 on: "
                                "the model the run keeps is broken")
    assert findings({"worker-0": weights("worker-0", "aa", end="aa")})[0] == []
