"""`tflab why` (make why): what the fixture's lab.why() starts with, for a run made on the command
line: what broke and the fix, where a restarted script resumed, the audit's findings."""

import pytest
from labtest.cli import lab_env, run_lab
from tflab.explain import Explanation
from tflab.runfolder import Summary, TaskRow

pytestmark = pytest.mark.unit


def write_run(runs_dir, run: str, tasks: list[TaskRow], **fields) -> None:
    folder = runs_dir / run
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    Summary(run=run, strategy="multiworker", backend="compose", outcome=fields.pop("outcome", "ok"), ok=True,
            launched_at=1.0, wall_seconds=9.0, weights_agree=True, tasks=tasks,
            settings=fields.pop("settings", {"audit": "on"}), **fields).write(folder)


def why(runs_dir, run: str):
    return run_lab("why", f"RUN={run}", env=lab_env(RUNS_DIR=str(runs_dir)), timeout=60)


def test_why_says_what_broke_where_a_script_resumed_and_the_audits_findings(tmp_path):
    broke = Explanation("worker-1", "oom", "it was killed for memory", "raise MEMORY", "", False).to_dict()
    write_run(tmp_path, "r1", outcome="failed", tasks=[
        TaskRow(task="worker-0", status="ok", resumes=[{"attempt": 2, "resumed": False,
                                                        "words": "started over at epoch 1: its backup_dir /tmp/b"}]),
        TaskRow(task="worker-1", status="failed", exit_code=137, error="Killed", explanation=broke)],
        findings=[{"kind": "unsharded", "tasks": ["worker-0", "worker-1"], "message": "the same examples",
                   "fix": "shard it"}], notes=["every worker reads all the data"])
    result = why(tmp_path, "r1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "run r1: failed",
        "worker-1: it was killed for memory", "  error: Killed", "  fix: raise MEMORY",
        "worker-0: after restart 1, started over at epoch 1: its backup_dir /tmp/b",
        "finding (unsharded): the same examples", "  fix: shard it",
        "note: every worker reads all the data"]


def test_why_on_a_clean_run_says_there_is_nothing_and_whether_it_was_audited(tmp_path):
    write_run(tmp_path, "clean", tasks=[TaskRow(task="worker-0", status="ok")])
    write_run(tmp_path, "unaudited", tasks=[TaskRow(task="worker-0", status="ok")], settings={"audit": "off"})
    assert why(tmp_path, "clean").stdout.splitlines()[1] == (
        "nothing to explain: no task failed, no script restarted, no audit finding (audited)")
    assert why(tmp_path, "unaudited").stdout.splitlines()[1].endswith("(AUDIT=off: nothing was audited)")


def test_why_on_a_run_without_a_summary_is_one_line(tmp_path):
    (tmp_path / "running").mkdir()
    (tmp_path / "running" / "config.json").write_text("{}")  # a run the lab started, and no summary yet
    result = why(tmp_path, "running")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "tflab: run running has no summary.json: it is still running, or the lab was killed"]
