import json
import os

import pytest
from tflab.core import runfolder, schema
from tflab.core.foreign import ForeignFile
from tflab.core.schema import EVENTS, EventLog, SchemaError, completeness, problems, read_events

GOOD = {
    "start": {"role": "trainer", "strategy": "single", "cluster": {}, "versions": {"tensorflow": "2.21.0"},
              "settings": {}, "baseline_loss": 21.0},
    "cluster_ready": {"seconds": 3.5, "replicas": 1, "devices": ["/device:CPU:0"]},
    "restored": {"epoch": 3, "step": 0},
    "fit": {"epoch": 1, "step": 0, "epochs": 5, "backup_dir": "/tmp/backup", "backup_kept": False},
    "checkpoint": {"found": True, "path": "/lab/run/ckpt/ckpt-2", "counters": {"epoch": 2}},
    "step": {"step": 40, "epoch": 2},
    "saving": {"save": 2, "file": "backup/chief/ckpt-2.index", "index_exists": False,
               "written": ["backup/chief/ckpt-2_temp/part-00000-of-00001.index"]},
    "restoring": {"restore": 1, "file": "backup/chief/ckpt-1", "files": ["backup/chief/ckpt-1.index"]},
    "epoch": {"epoch": 1, "loss": 20.0, "seconds": 0.4, "steps": 64, "examples_per_second": 10240.0},
    "eval": {"epoch": 2, "step": 128, "loss": 12.5, "seconds": 0.2},
    "allreduce": {"floats": 341, "calls": 100, "median_seconds": 0.0015},
    "end": {"role": "trainer", "final_loss": 1.0, "total_seconds": 5.0, "first_step_seconds": 0.3,
            "first_step_at": 1.5, "steady_step_seconds": 0.001, "peak_rss_bytes": 500_000_000,
            "weights_sha256": "ab" * 32, "parameters": 341},
    "error": {"message": "boom"},
    "imported": {"module": "keras", "version": "3.15.1"},
    "audit_batch": {"pass": 2, "step": 1, "examples": 32, "digest": "cd" * 32, "example_digests": ["0a1b2c3d4e5f"]},
    "audit_pass": {"pass": 2, "steps": 16, "examples": 1024, "policy": "DATA"},
    "audit_write": {"path": "/runs/r/model.keras", "writer": "Model.save", "bytes": 19428, "storage": "shared",
                    "during": "script", "seconds": 0.07, "caller": "train.py:40"},
    "audit_weights": {"at": "epoch", "epoch": 1, "digest": "ef" * 32, "parameters": 41},
}
SERVER_END = {"event": "end", "task": "ps-0", "time": 1.0, "role": "server", "total_seconds": 9.0,
              "peak_rss_bytes": 400_000_000}


def record(event, **changes):
    return {"event": event, "task": "single", "time": 1.0, **GOOD[event], **changes}


def test_the_examples_cover_every_event():
    assert GOOD.keys() == EVENTS.keys()


@pytest.mark.parametrize("event", EVENTS)
def test_good_records_have_no_problems(event):
    assert problems(record(event)) == []


@pytest.mark.parametrize("bad, expected", [
    ({"event": "epoch", "task": "single", "time": 1.0}, "epoch: missing epoch"),
    (record("epoch", loss="low"), "epoch: loss='low' is not a number"),
    (record("epoch", epoch=True), "epoch: epoch=True is not a int"),
    (record("epoch", loss=float("nan")), "epoch: loss=nan is not finite"),
    (record("end", peak_rss_bytes=1.5), "end: peak_rss_bytes=1.5 is not a int"),
    ({**record("error"), "event": "oops"}, "unknown event 'oops'"),
    (record("start", role="boss"), "start: role='boss' is not one of trainer, server"),
    ({**SERVER_END, "role": "trainer"}, "end: missing final_loss"),
    ("a string", "not a JSON object"),
])
def test_bad_records_are_named(bad, expected):
    assert any(expected in p for p in problems(bad)), problems(bad)


def test_optional_fields_may_be_left_out_and_are_checked_when_present():
    assert problems(record("epoch", examples_per_second=None)) != []
    bare = {key: value for key, value in record("epoch").items() if key != "examples_per_second"}
    assert problems(bare) == []  # Keras's own epochs (observe.py) know no batch size
    assert problems(record("fit", backup_kept="yes")) == ["fit: backup_kept='yes' is not a bool"]
    assert problems(record("fit", epochs=True)) == ["fit: epochs=True is not a int"]


def test_a_server_ends_without_training_figures():
    assert problems(SERVER_END) == []


def test_event_log_writes_valid_lines_and_refuses_bad_ones(tmp_path):
    log = EventLog(tmp_path / "single.jsonl", "single")
    log.emit("error", message="boom")
    with pytest.raises(SchemaError, match="missing message"):
        log.emit("error")
    log.close()
    lines = (tmp_path / "single.jsonl").read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["message"] == "boom"


def test_read_events_skips_a_torn_last_line_and_a_missing_file(tmp_path):
    path = tmp_path / "worker-0.jsonl"
    path.write_text(json.dumps(record("error")) + "\n" + '{"event": "epo')
    assert [r["event"] for r in read_events(path)] == ["error"]
    assert read_events(tmp_path / "absent.jsonl") == []


def test_completeness_wants_every_epoch_in_order_and_no_error():
    complete = [record("start"), record("cluster_ready"), record("epoch", epoch=1), record("epoch", epoch=2),
                record("end")]
    assert completeness(complete, epochs=2) == []
    assert completeness(complete, epochs=3) != []
    swapped = complete[:2] + [record("epoch", epoch=2), record("epoch", epoch=1)] + complete[4:]
    assert any("epochs [2, 1]" in p for p in completeness(swapped, epochs=2))
    assert any("error: boom" in p for p in completeness(complete + [record("error")], epochs=2))
    probed = complete[:4] + [record("allreduce")] + complete[4:]
    assert completeness(probed, epochs=2) == []


def test_a_restarted_task_is_complete_when_its_last_attempt_resumes_and_ends():
    first = [record("start"), record("cluster_ready"), record("epoch", epoch=1), record("epoch", epoch=2),
             record("error")]
    resumed = [record("start"), record("cluster_ready"), record("restored", epoch=3, step=0),
               record("epoch", epoch=3), record("epoch", epoch=4), record("end")]
    assert completeness(first + resumed, epochs=4) == []
    # The last attempt must carry on from where the backup was, and end.
    gap = resumed[:3] + [record("epoch", epoch=4), record("end")]
    assert any("epochs [4] are not 3..4" in p for p in completeness(first + gap, epochs=4))
    assert completeness(first + resumed[:-1], epochs=4) != []
    # An attempt that ended (`end`) and was started again is not a restart the lab makes.
    assert any("before the last one has an end" in p for p in completeness(resumed + resumed, epochs=4))


def test_a_scripts_resumed_attempt_is_complete_with_what_its_fit_logged():
    start = record("start", role="script", strategy="multiworker")
    end = {**SERVER_END, "task": "single", "role": "script", "exit_code": 0}
    resumed = [start, record("fit", epoch=3), record("restored", epoch=3, step=0), record("epoch", epoch=3), end]
    assert completeness(resumed, epochs=0, role="script") == []
    assert completeness([start, record("checkpoint"), end], epochs=0, role="script") == []  # a custom loop


def test_completeness_of_a_server_is_start_ready_end():
    server = [record("start", role="server"), record("cluster_ready", replicas=0), SERVER_END]
    assert completeness(server, epochs=5, role="server") == []
    assert completeness(server, epochs=5) != []  # not a trainer's log


def test_read_events_takes_only_json_objects_and_counts_what_it_skipped(tmp_path):
    path = tmp_path / "worker-0.jsonl"
    lines = [json.dumps(record("error")), "not json", "[1, 2]", "[" * 5000 + "]" * 5000, '{"a": 1e999}',
             "x" * (2 * 1024 * 1024), "\x00{}", "1" * 5000, json.dumps(record("epoch"))]
    path.write_bytes(("\n".join(lines) + "\n").encode() + b"\xff\xfe\n")
    events = read_events(path)
    assert [r.get("event") for r in events] == ["error", None, "epoch"]  # {"a": inf} is an object
    assert [skip.split(":")[0] for skip in events.skipped] == ["line 2", "line 3", "line 4", "line 6", "line 7",
                                                                "line 8", "line 10"]
    assert "nests deeper than 32 levels" in events.skipped[2] and "not UTF-8" in events.skipped[-1]


def test_read_events_refuses_a_folder_or_a_fifo_in_one_line_and_never_blocks(tmp_path):
    (tmp_path / "a.jsonl").mkdir()
    os.mkfifo(tmp_path / "b.jsonl")  # opened for reading without O_NONBLOCK, this waits for a writer forever
    with pytest.raises(ForeignFile, match=r"a.jsonl is a folder, not a file the lab wrote"):
        read_events(tmp_path / "a.jsonl")
    with pytest.raises(ForeignFile, match=r"b.jsonl is not a regular file"):
        read_events(tmp_path / "b.jsonl")


def test_a_tasks_log_hands_on_only_records_of_the_right_types(tmp_path):
    lines = [record("epoch", loss="low"), {"event": "error", "task": "w", "time": 1}, {"event": 3, "task": "w"},
             record("epoch", epoch=10**30), {"event": "start", "task": "w", "time": 1.0}, record("error")]
    (tmp_path / "w.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    events = runfolder.events(tmp_path, "w")
    assert events == [lines[4], lines[5]]  # a start without its fields is partial, not wrong
    assert len(events.skipped) == 4 and "loss='low' is not a number" in events.skipped[0]
    assert "error: missing message" in events.skipped[1] and "out of range" in events.skipped[3]
    with pytest.raises(ForeignFile, match="task name '../x' is not one the lab gives"):
        runfolder.events(tmp_path, "../x")


def test_problems_quote_a_hostile_value_escaped():
    found = problems(record("epoch", loss="\x1b[2J"))
    assert found == ["epoch: loss='\\x1b[2J' is not a number or one of nan, inf, -inf"]


@pytest.mark.parametrize("value, field", [(float("nan"), "nan"), (float("inf"), "inf"), (float("-inf"), "-inf"),
                                          (0.25, 0.25)])
def test_a_loss_that_is_not_finite_is_logged_as_a_word_json_can_carry(tmp_path, value, field):
    """JSON has no NaN (Python's json writes `NaN`, which jq refuses): an epoch whose loss went NaN is
    logged, strict JSON, and read back as the float it was."""
    log = EventLog(tmp_path / "w.jsonl", "w")
    log.emit("epoch", epoch=1, loss=schema.loss_field(value), seconds=0.1, steps=2)
    log.close()
    line = (tmp_path / "w.jsonl").read_text()
    json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} is no JSON"))
    [read] = read_events(tmp_path / "w.jsonl")
    assert read["loss"] == field and not problems(read)
    assert repr(schema.loss_value(read["loss"])) == repr(value) and schema.finite(read["loss"]) == (field == 0.25)


@pytest.mark.parametrize("legacy, package", [("1", "tf-keras"), ("", "keras")])
def test_the_start_events_versions_name_the_keras_tf_keras_really_is(monkeypatch, legacy, package):
    """The trainer and the launcher build the start event's versions alike (schema.start_versions):
    TF_USE_LEGACY_KERAS=1 makes tf.keras tf-keras, else Keras 3; a missing one says so."""
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", legacy)
    installed = {"tf-keras": "2.21.0", "keras-nightly": "3.16.0.dev2026"}

    def version(name):
        if name not in installed:
            raise schema.importlib.metadata.PackageNotFoundError(name)
        return installed[name]

    monkeypatch.setattr(schema.importlib.metadata, "version", version)
    versions = schema.start_versions("2.21.0")
    assert versions["keras"] == {"tf-keras": "tf-keras 2.21.0", "keras": "keras 3.16.0.dev2026"}[package]
    assert versions["tensorflow"] == "2.21.0" and set(versions) == {"tensorflow", "keras", "python", "machine"}
    assert schema.distribution_version("tensorflow-cpu", "tensorflow") == "not installed"
