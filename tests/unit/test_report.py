"""Reports built from recorded logs: the numbers are the logs' numbers, and a failed or missing
task is a row that says so."""

import csv
import io
import json

import pytest
from tflab.core.foreign import ForeignFile
from tflab.core.schema import EventLog
from tflab.reports import report

GB = 64


def record_run(folder, label, strategy, tasks, steady=None, loss=1.0, replicas=1, exit_codes=None,
               summary=True, silent=(), error=None, parameters=341, rss=500_000_000, workers=None, precision=None):
    """Writes a run folder as the lab leaves one: config.json, summary.json and each task's JSONL."""
    run_dir = folder / label
    run_dir.mkdir(parents=True)
    settings = {"strategy": strategy, "global_batch": GB, "workers": workers or len(tasks), "model": "mlp",
                "loop": "fit", "steps_per_execution": 1, "collective": "auto", "bytes_per_pack": 0,
                "backend": "compose", "epochs": 2, "examples": 1024, "seed": 0,
                **({"precision": precision} if precision else {})}  # none: a run from before PRECISION
    (run_dir / "config.json").write_text(json.dumps({"settings": settings, "tasks": tasks}))
    codes = exit_codes or {task: 0 for task in tasks}
    for i, task in enumerate(tasks):
        if task in silent:
            continue
        log = EventLog(run_dir / f"{task}.jsonl", task)
        log.emit("cluster_ready", seconds=3.0, replicas=replicas, devices=[])
        for epoch, value in enumerate([loss * 2, loss], start=1):
            log.emit("epoch", epoch=epoch, loss=value, seconds=0.5, steps=16, examples_per_second=2048.0)
        if task == error:
            log.emit("error", message="UnavailableError: worker-1 went away\nmore")
        elif i == 0 and steady:
            log.emit("end", role="trainer", final_loss=loss, total_seconds=9.0, first_step_seconds=0.8,
                     first_step_at=1005.0, steady_step_seconds=steady, peak_rss_bytes=rss,
                     weights_sha256="ab" * 32, parameters=parameters)
        else:
            log.emit("end", role="server", total_seconds=9.0, peak_rss_bytes=rss)
        log.close()
    if summary:
        rows = [{"task": t, "status": "ok" if codes[t] == 0 and t != error else "failed", "exit_code": codes[t],
                 "error": "UnavailableError: worker-1 went away" if t == error else None} for t in tasks]
        ok = all(row["status"] == "ok" for row in rows)
        (run_dir / "summary.json").write_text(json.dumps({
            "run": label, "strategy": strategy, "backend": "compose", "settings": settings, "weights_agree": ok,
            "ok": ok, "outcome": "ok" if ok else "failed", "launched_at": 1000.0, "wall_seconds": 12.5,
            "tasks": rows}))
    return run_dir


@pytest.fixture
def compare_folder(tmp_path):
    folder = tmp_path / "cmp"
    record_run(folder, "single", "single", ["single"], steady=0.001, replicas=1, loss=0.84)
    record_run(folder, "mirrored-2", "mirrored", ["mirrored"], steady=0.002, replicas=2, loss=0.84)
    record_run(folder, "multiworker-2", "multiworker", ["worker-0", "worker-1"], steady=0.010, replicas=2,
               loss=0.84, rss=600_000_000)
    record_run(folder, "multiworker-4", "multiworker", ["worker-0", "worker-1", "worker-2", "worker-3"],
               replicas=4, exit_codes={"worker-0": 1, "worker-1": 137, "worker-2": 1, "worker-3": 1},
               error="worker-0", silent=("worker-3",))
    record_run(folder, "parameter-server-2", "parameter_server", ["chief-0", "worker-0", "worker-1", "ps-0"],
               steady=0.008, replicas=2, workers=2, loss=0.9)
    record_run(folder, "unfinished", "multiworker", ["worker-0"], steady=0.01, summary=False)
    labels = ["single", "mirrored-2", "multiworker-2", "multiworker-4", "parameter-server-2", "unfinished"]
    (folder / "compare.json").write_text(json.dumps({"runs": labels}))
    return folder


def test_rows_are_the_logs_numbers(compare_folder):
    rows = {row["run"]: row for row in report.rows(compare_folder)}
    assert list(rows) == ["single", "mirrored-2", "multiworker-2", "multiworker-4", "parameter-server-2", "unfinished"]
    mw = rows["multiworker-2"]
    assert mw["final_loss"] == 0.84 and mw["steady_step_seconds"] == 0.010
    assert mw["examples_per_second"] == pytest.approx(GB / 0.010)
    assert mw["time_to_first_step_seconds"] == pytest.approx(5.0)  # first_step_at 1005 - launched_at 1000
    assert mw["wall_seconds"] == 12.5 and mw["processes"] == 2 and mw["replicas"] == 2
    assert mw["peak_rss_per_process_bytes"] == 600_000_000 and mw["peak_rss_total_bytes"] == 1_200_000_000
    assert mw["gradient_bytes_per_step"] == 341 * 4
    assert rows["single"]["gradient_bytes_per_step"] == 0  # one replica has nobody to reduce with
    assert mw["losses"] == [1.68, 0.84]


def test_speedup_and_efficiency_are_against_single(compare_folder):
    rows = {row["run"]: row for row in report.rows(compare_folder)}
    assert rows["single"]["speedup"] == pytest.approx(1.0) and rows["single"]["efficiency"] == pytest.approx(1.0)
    assert rows["mirrored-2"]["speedup"] == pytest.approx(0.5)
    assert rows["mirrored-2"]["efficiency"] == pytest.approx(0.25)
    assert rows["multiworker-2"]["speedup"] == pytest.approx(0.1)
    assert rows["multiworker-2"]["efficiency"] == pytest.approx(0.05)
    # parameter_server: its replicas are its workers; its servers count among its processes.
    ps = rows["parameter-server-2"]
    assert (ps["replicas"], ps["processes"]) == (2, 4)
    assert ps["speedup"] == pytest.approx(0.125) and ps["efficiency"] == pytest.approx(0.0625)
    assert ps["peak_rss_total_bytes"] == 4 * 500_000_000


def test_failed_and_unfinished_runs_are_rows_that_say_so(compare_folder):
    rows = {row["run"]: row for row in report.rows(compare_folder)}
    failed = rows["multiworker-4"]
    assert failed["status"] == "failed: worker-0 failed (exit 1): UnavailableError: worker-1 went away"
    assert failed["final_loss"] is None and failed["speedup"] is None
    assert failed["peak_rss_total_bytes"] is None  # worker-3 wrote nothing: no sum pretends otherwise
    assert rows["unfinished"]["status"].startswith("incomplete: no summary.json")
    table = report.table(report.rows(compare_folder))
    assert "multiworker-4: failed: worker-0 failed (exit 1)" in table
    assert "unfinished: incomplete" in table


def test_markdown_csv_and_png_hold_every_row(compare_folder):
    found, written = report.write(compare_folder)
    assert [p.name for p in written] == ["report.md", "report.csv", "report.png"]
    markdown = (compare_folder / "report.md").read_text()
    for row in found:
        assert f"| {row['run']} | " in markdown
    assert ("| multiworker-2 | multiworker | 2 | 2 | float32 | 0.8400 | 0.8400 | 12.5 | 5.0 | 0.80 | 10.00 | 6400 "
            "| 0.10 | 0.05 | 600 | 1200 | 1364 | ok |") in markdown
    parsed = list(csv.DictReader(io.StringIO((compare_folder / "report.csv").read_text())))
    assert [r["run"] for r in parsed] == [row["run"] for row in found]
    assert float(parsed[2]["examples_per_second"]) == pytest.approx(6400)
    assert parsed[3]["final_loss"] == ""  # failed: empty, not zero
    assert (compare_folder / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_single_run_folder_is_a_one_row_report(tmp_path):
    run_dir = record_run(tmp_path, "alone", "single", ["single"], steady=0.002)
    found = report.rows(run_dir)
    assert [row["run"] for row in found] == ["alone"] and found[0]["speedup"] == pytest.approx(1.0)


def test_a_run_of_foreign_files_is_a_row_of_what_can_be_read(tmp_path, capsys):
    """A config.json of wrong-typed settings and a log with a task's stray lines: the report shows
    what it can, names what it skipped once, and prints nothing raw."""
    run_dir = record_run(tmp_path, "odd", "single", ["single"], steady=0.002)
    config = json.loads((run_dir / "config.json").read_text())
    config["settings"].update(global_batch="sixty-four", strategy=["single"], model="\x1b[31mmlp", workers=10**30)
    (run_dir / "config.json").write_text(json.dumps(config))
    with open(run_dir / "single.jsonl", "a") as log:
        log.write('hello from the script\n{"event": "end", "task": "single", "time": 1, "role": 7}\n')
    found = report.rows(run_dir)
    assert found[0]["examples_per_second"] is None and found[0]["strategy"] is None
    assert found[0]["final_loss"] is not None  # the lab's own end event still counts
    said = capsys.readouterr().out.splitlines()
    assert said == [f"tflab: skipped 2 line(s) of {run_dir / 'single.jsonl'} that are not the lab's events "
                    "(first: line 5: is not JSON (Expecting value at line 1 column 1))"]
    assert "\x1b" not in report.table(found) and "\x1b" not in report.markdown(run_dir, found)


def test_a_config_whose_tasks_climb_out_of_the_run_is_refused(tmp_path):
    run_dir = record_run(tmp_path, "climb", "single", ["single"], steady=0.002)
    (run_dir / "config.json").write_text(json.dumps({"settings": {}, "tasks": ["../../../etc/passwd"]}))
    with pytest.raises(ForeignFile, match=r"climb/config.json is not a config the lab wrote"):
        report.rows(run_dir)


def test_the_report_replaces_a_link_left_in_its_place_and_never_writes_through_it(tmp_path):
    run_dir = record_run(tmp_path, "linked", "single", ["single"], steady=0.002)
    precious = tmp_path / "precious"
    precious.write_text("mine\n")
    (run_dir / "report.md").symlink_to(precious)
    report.write(run_dir)
    assert precious.read_text() == "mine\n"
    assert not (run_dir / "report.md").is_symlink() and (run_dir / "report.md").read_text().startswith("# tflab")
    assert sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".")) == []  # no temporary left
    (run_dir / "report.csv").unlink()
    (run_dir / "report.csv").mkdir()
    with pytest.raises(ForeignFile, match="linked/report.csv is a folder; the report writes a file there"):
        report.write(run_dir)


@pytest.mark.parametrize("replay, expected", [("TFJob", "tfjob"), ("TrainJob", "trainjob"), (None, "tfjob")])
def test_a_replay_is_a_row_of_its_kind_not_the_guessed_strategy(tmp_path, replay, expected):
    """A replay's config.json holds strategy multiworker where its job has no PS (the lab's guess
    for its shape, tfjob.replay_settings): the report called every TFJob and TrainJob replay
    multiworker. Its row names what it replayed (config.json's "replay"; before that key, "tfjob")."""
    run_dir = record_run(tmp_path, "job", "multiworker", ["worker-0", "worker-1"], steady=0.01, replicas=2)
    config = json.loads((run_dir / "config.json").read_text())
    config.update(tfjob="/jobs/job.yaml", **({"replay": replay} if replay else {}))
    (run_dir / "config.json").write_text(json.dumps(config))
    assert [row["strategy"] for row in report.rows(run_dir)] == [expected]


def test_a_lab_run_keeps_its_strategy(tmp_path):
    run_dir = record_run(tmp_path, "lab", "multiworker", ["worker-0", "worker-1"], steady=0.01, replicas=2)
    assert [row["strategy"] for row in report.rows(run_dir)] == ["multiworker"]


def test_each_run_stands_beside_the_single_run_of_its_own_precision(tmp_path):
    """make compare PRECISIONS="float32 mixed_float16": the final losses are the trainer's own, measured on
    this machine's CPUs (tf-keras, mlp, 1024 examples, global batch 64, 3 epochs, 2 logical CPUs): float32
    23.66417 under both, mixed_float16 23.79824 on one device and 23.77158 on mirrored-2."""
    folder = tmp_path / "cmp"
    for label, strategy, precision, loss in (("single-float32", "single", "float32", 23.66417),
                                             ("single-mixed-float16", "single", "mixed_float16", 23.79824),
                                             ("mirrored-2-float32", "mirrored", "float32", 23.66417),
                                             ("mirrored-2-mixed-float16", "mirrored", "mixed_float16", 23.77158)):
        record_run(folder, label, strategy, [strategy], steady=0.001 if strategy == "single" else 0.002,
                   replicas=1 if strategy == "single" else 2, loss=loss, precision=precision)
    (folder / "compare.json").write_text(json.dumps({"runs": ["single-float32", "single-mixed-float16",
                                                              "mirrored-2-float32", "mirrored-2-mixed-float16"]}))
    found = {row["run"]: row for row in report.rows(folder)}
    assert [(row["precision"], row["final_loss"], row["single_loss"]) for row in found.values()] == [
        ("float32", 23.66417, 23.66417), ("mixed_float16", 23.79824, 23.79824),
        ("float32", 23.66417, 23.66417), ("mixed_float16", 23.77158, 23.79824)]
    assert found["mirrored-2-mixed-float16"]["speedup"] == pytest.approx(0.5)  # against its own precision's single
    markdown = report.markdown(folder, list(found.values()))
    assert "| mirrored-2-mixed-float16 | mirrored | 1 | 2 | mixed_float16 | 23.7716 | 23.7982 |" in markdown


def test_a_run_from_before_precision_reads_as_float32_and_no_single_run_leaves_its_loss_empty(tmp_path):
    folder = tmp_path / "cmp"
    record_run(folder, "mirrored-2", "mirrored", ["mirrored"], steady=0.002, replicas=2, loss=0.84)
    (folder / "compare.json").write_text(json.dumps({"runs": ["mirrored-2"]}))
    [row] = report.rows(folder)
    assert (row["precision"], row["single_loss"], row["speedup"]) == ("float32", None, None)
