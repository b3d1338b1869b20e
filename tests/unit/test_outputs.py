"""`make clean` removes what the lab can rebuild and never a run's outputs; the live printer
prints what the tasks' logs say, and only that."""

import json

from tflab import images
from tflab.backends.swarm import teardown
from tflab.cli import upkeep
from tflab.core import cluster
from tflab.core.runsummary import Summary
from tflab.core.settings import Settings
from tflab.engine import docker
from tflab.images import record
from tflab.supervisor import summary
from tflab.supervisor.progress import ProgressPrinter
from tflab.supervisor.table import table


def test_clean_keeps_every_run(tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    (runs / "a").mkdir(parents=True)
    (runs / "a" / "worker-0.jsonl").write_text("{}\n")
    monkeypatch.setattr(docker, "check", lambda: "20.10")
    # Nothing here may reach the real engine: a real `down` would end every lab run on it
    # (this test once removed a swarm stack an integration test was running).
    monkeypatch.setattr(docker, "lab_projects", lambda scope, tensorboard_project=None: [])
    monkeypatch.setattr(teardown, "stack_run_dirs", lambda scope: {})
    for module in (images, record):  # image_id is read in both: the builds, and the record's removals
        monkeypatch.setattr(module, "image_id", lambda name: None)
    monkeypatch.setattr(images, "WHEELS", tmp_path / "wheels")
    monkeypatch.setattr(images, "WHEEL_STAMP", tmp_path / "wheels" / ".stamp")
    monkeypatch.setattr(record, "BUILT", tmp_path / "built.json")
    monkeypatch.setattr(images, "GPU_WHEELS", tmp_path / "wheels-gpu")
    monkeypatch.setattr(images, "GPU_WHEEL_STAMP", tmp_path / "wheels-gpu" / ".stamp")
    monkeypatch.setattr(images, "ARM64_WHEELS", tmp_path / "wheels-arm64")
    monkeypatch.setattr(images, "ARM64_WHEEL_STAMP", tmp_path / "wheels-arm64" / ".stamp")
    for wheels in ("wheels", "wheels-gpu", "wheels-arm64"):
        (tmp_path / wheels).mkdir()
        (tmp_path / wheels / "x.whl").write_text("")
        (tmp_path / wheels / "README.md").write_text("kept")
    (tmp_path / "built.json").write_text('{"images": ["tflab-trainer:cpu-0123456789ab"]}')
    assert upkeep.command_clean(Settings(runs_dir=str(runs))) == 0
    assert (runs / "a" / "worker-0.jsonl").read_text() == "{}\n"
    assert not [wheel for wheel in tmp_path.glob("wheels*/x.whl")]
    assert (tmp_path / "wheels-gpu" / "README.md").exists() and not (tmp_path / "built.json").exists()
    assert f"kept 1 run folder(s) in {runs}" in capsys.readouterr().out


def test_the_live_printer_skips_a_tasks_stray_lines_and_says_so_once(tmp_path, capsys):
    """A task's own print to $TFLAB_LOG once crashed the printer, and the run ended without a summary."""
    epoch = {"event": "epoch", "task": "worker-0", "time": 1.0, "epoch": 1, "loss": 2.0, "seconds": 0.5,
             "steps": 16, "examples_per_second": 2048.0}
    stray = [b"hello from my script", b"[1, 2]", b'{"event": "epoch"}', b'{"task": "worker-0", "event": 3}',
             b'{"event": "error", "task": "worker-0", "time": 1, "message": "\\u001b[2Jboom"}']
    (tmp_path / "worker-0.jsonl").write_bytes(b"\n".join(stray[:4] + [json.dumps(epoch).encode(), stray[4], b""]))
    printer = ProgressPrinter(Settings(), cluster.build(Settings()), tmp_path)
    printer.print_new()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[worker-0] skipped a line of worker-0.jsonl that is not one of the lab's events "
                               "(is not JSON"), lines
    assert lines[1:] == ["[worker-0] epoch 1/10  loss 2.0000  0.50 s  2048 examples/s",
                         "[worker-0] error: \\x1b[2Jboom"]


def test_a_line_break_in_a_summarys_one_line_field_starts_no_line_of_its_own():
    row = {"task": "w\nfake: ok", "status": "failed", "exit_code": 1, "error": "boom\x1b[2J"}
    summary = Summary.from_dict({"run": "r\nrun x: ok in 1.0 s", "strategy": "single", "backend": "compose",
                                 "outcome": "failed\r", "ok": False, "launched_at": 1.0, "wall_seconds": 2.0,
                                 "settings": {}, "weights_agree": False, "tasks": [row],
                                 "chaos": {"scenario": "kill\n", "target": 3, "at": None, "outcome": "x",
                                           "detection_seconds": None, "recovery_seconds": 1.5}})
    lines = table(summary).splitlines()
    assert lines[2:] == ["w\\nfake: ok: boom\\x1b[2J",
                         "chaos: kill\\n on 3 at None: x; detected after -, training again after 1.5 s",
                         "run r\\nrun x: ok in 1.0 s: failed\\r in 2.0 s"], lines


def test_the_runs_summary_is_written_whatever_a_task_left_in_the_folder(tmp_path, capsys):
    """A task shares the run folder: a folder where its log or output.log should be is said in one
    line each, and the summary still has a row per task."""
    settings = Settings()
    (tmp_path / "worker-0.jsonl").mkdir()
    (tmp_path / "output.log").mkdir()
    (tmp_path / "worker-1.jsonl").write_text("stray\n")
    result = summary.summarise(tmp_path, summary.lab_rows(settings, cluster.build(settings), tmp_path,
                                                         {"worker-0": 0, "worker-1": 1}, [], "ok"), "ok", 1.0, 2.0)
    assert [(row.task, row.status) for row in result.tasks] == [("worker-0", "failed"), ("worker-1", "failed")]
    said = capsys.readouterr().out.splitlines()
    assert said == [f"tflab: {tmp_path / 'output.log'} is a folder, not a file the lab wrote; the summary explains "
                    "failures without it",
                    f"tflab: {tmp_path / 'worker-0.jsonl'} is a folder, not a file the lab wrote; the summary reads "
                    "it as no events"]


def test_a_scripts_servers_ended_after_the_chief_are_said_so_and_a_failure_before_it_is_an_error(tmp_path, capsys):
    """SCRIPT with parameter_server: the launcher's `exited with code 143` of a server the lab ended
    once the chief was done is the lab's SIGTERM, not the server's error (its run ended ok)."""
    settings = Settings(strategy="parameter_server", script=__file__, workers=1)

    def error(task, code):
        return {"event": "error", "task": task, "time": 2.0, "message": f"ps.py exited with code {code}: I0000 noise"}
    end = {"event": "end", "task": "chief-0", "time": 1.0, "role": "script", "total_seconds": 9.0,
           "peak_rss_bytes": 1, "exit_code": 0}
    (tmp_path / "ps-0.jsonl").write_text(json.dumps(error("ps-0", 1)) + "\n")  # before the chief is done
    printer = ProgressPrinter(settings, cluster.build(settings), tmp_path)
    printer.print_new()
    (tmp_path / "chief-0.jsonl").write_text(json.dumps(end) + "\n")
    (tmp_path / "worker-0.jsonl").write_text(json.dumps(error("worker-0", 143)) + "\n")
    printer.print_new()
    assert capsys.readouterr().out.splitlines() == [
        "[ps-0] error: ps.py exited with code 1: I0000 noise",
        "[chief-0] done in 9.0 s: the script exited with code 0",
        "[worker-0] ended by the lab once the chief was done (exit code 143)"]
