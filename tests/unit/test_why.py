"""`tflab why` (make why): what the fixture's lab.why() starts with, for a run made on the command
line: what broke and the fix, where a restarted script resumed, the audit's findings."""

import json

import pytest
from labtest.cli import lab_env, run_lab
from tflab.core.explain import Explanation
from tflab.core.runsummary import Summary, SummaryError, TaskRow
from tflab.core.settings import Settings

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


def test_what_broke_comes_before_where_the_others_were_when_the_lab_stopped_them(tmp_path):
    """A swarm run whose peers could not reach each other: the lab's why led with the end of the
    failure's grace, the others "waiting in a collective" in the strategy's setup, and its fix of
    mismatched collectives, before the peer that could not be reached (seen 2026-12-06)."""
    unreachable = Explanation("worker-0", "cluster-not-formed", "the cluster never formed", "check the peer", "",
                              False).to_dict()
    waiting = {"kind": "all-waiting", "what": "every task waits in a collective", "fix": "compare where each is",
               "link": "", "moment": "the end of the failure's grace", "places": {}}
    write_run(tmp_path, "r2", outcome="failed", stall=waiting, tasks=[
        TaskRow(task="worker-0", status="failed", exit_code=1, error="gave up", explanation=unreachable),
        TaskRow(task="worker-1", status="failed", exit_code=137)])
    lines = why(tmp_path, "r2").stdout.splitlines()
    assert lines[1] == "worker-0: the cluster never formed"
    assert lines.index("where every task was at the end of the failure's grace (all-waiting): every task waits in a "
                       "collective") > lines.index("  fix: check the peer")


def test_why_on_a_clean_run_says_there_is_nothing_and_whether_it_was_audited(tmp_path):
    write_run(tmp_path, "clean", tasks=[TaskRow(task="worker-0", status="ok")])
    write_run(tmp_path, "unaudited", tasks=[TaskRow(task="worker-0", status="ok")], settings={"audit": "off"})
    assert why(tmp_path, "clean").stdout.splitlines()[1] == (
        "nothing to explain: no task failed, no script restarted, no audit finding (audited)")
    assert why(tmp_path, "unaudited").stdout.splitlines()[1].endswith("(AUDIT=off: nothing was audited)")


def test_why_on_a_chaos_run_whose_fault_never_landed_says_so_not_nothing_to_explain(tmp_path):
    """issue 43: the run succeeded, but its fault never came; why said "nothing to explain"."""
    missed = "worker-1 never reached the end of epoch 99999: it logged 3 epochs (96 steps), the last epoch 3"
    write_run(tmp_path, "missed", tasks=[TaskRow(task="worker-0", status="ok")],
              chaos={"scenario": "kill", "target": "worker-1", "at": "epoch:99999", "heal": "5", "injected": False,
                     "outcome": "not injected", "not_injected": missed})
    assert why(tmp_path, "missed").stdout.splitlines()[1:] == [
        f"chaos: kill on worker-1 at epoch:99999: not injected: {missed}"]


def test_why_on_a_failed_run_it_cannot_explain_never_says_nothing_to_explain(tmp_path):
    """A run whose summary says failed, with no row the lab can explain (a replay failed by its
    deadline, a task failed with no known signature): `tflab why` said "nothing to explain"."""
    write_run(tmp_path, "lost", outcome="failed", reason="DeadlineExceeded",
              tasks=[TaskRow(task="worker-0", status="failed", exit_code=143)])
    with open(tmp_path / "lost" / "summary.json") as file:
        data = json.load(file)
    data["ok"] = False
    (tmp_path / "lost" / "summary.json").write_text(json.dumps(data))
    said = why(tmp_path, "lost").stdout.splitlines()
    assert said == ["run lost: failed",
                    "failed (DeadlineExceeded), and nothing the lab recorded explains it: no known failure, no script "
                    "restart, no audit finding; the run's output is in `python3 -m tflab logs RUN=lost` (audited)"]


def test_why_on_a_stalled_or_timed_out_run_is_never_nothing_to_explain(tmp_path):
    """Issue 42: a run stopped at TIMEOUT with no task failed read "nothing to explain"."""
    found = {"kind": "stuck-callback", "what": "worker-1 stopped in a callback (on_epoch_end) at stall.py:23",
             "fix": "make the callback return", "link": "", "places": {}, "moment": "stall"}
    write_run(tmp_path, "stalled", outcome="stalled", tasks=[TaskRow(task="worker-0", status="stopped")], stall=found)
    write_run(tmp_path, "quiet", outcome="timed out", tasks=[TaskRow(task="worker-0", status="stopped")])
    assert why(tmp_path, "stalled").stdout.splitlines()[1:] == [
        "stall (stuck-callback): worker-1 stopped in a callback (on_epoch_end) at stall.py:23",
        "  fix: make the callback return"]
    said = why(tmp_path, "quiet").stdout
    assert "nothing to explain" not in said and "the run timed out with no task failed" in said


def test_why_on_a_run_without_a_summary_is_one_line(tmp_path):
    (tmp_path / "running").mkdir()
    (tmp_path / "running" / "config.json").write_text("{}")  # a run the lab started, and no summary yet
    result = why(tmp_path, "running")
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "tflab: run running has no summary.json: it is still running, or the lab was killed"]


def preemption_record() -> dict:
    """A preemption as the lab records it (preemption.Preemption.result), killed at its grace's end."""
    from tflab.supervisor import preemption

    found = preemption.Preemption(Settings(scenario="preempt", notice="gce", grace=3), "worker-1", print)
    found.noticed_at, found.exited_at, found.training_again_at = 100.0, 103.2, 110.0
    found.step_at_notice, found.reached, found.checkpoint, found.exit_code, found.killed = 224, 240, 224, 137, True
    found.resumed = {"worker-0": 218, "worker-1": 218}
    return found.result()


# Each a nested field of the wrong type that once crashed `tflab summary` or `why` (an unhashable
# key in resume_lines, sorted() of an int and a str in preemption.result_line): refused in one line.
WRONG_NESTED = [
    (lambda s: s["tasks"][0]["resumes"][0].update(attempt=[2]), "tasks[0].resumes[0].attempt is [2], not an integer"),
    (lambda s: s["tasks"][0]["resumes"][0].update(words=["x"]), "tasks[0].resumes[0].words is [\"x\"], not a str"),
    (lambda s: s["tasks"][0]["resumes"][0].update(resumed="yes"),
     "tasks[0].resumes[0].resumed is \"yes\", not a bool or null"),
    (lambda s: s["tasks"][0]["resumes"][0].pop("attempt"), "tasks[0].resumes[0].attempt is null, not an integer"),
    (lambda s: s["tasks"][0].update(restored=[{"epoch": 2.5, "step": 0}]),
     "tasks[0].restored[0].epoch is 2.5, not an integer"),
    (lambda s: s["tasks"][0].update(evals=[{"epoch": 1, "step": 8, "loss": "low"}]),
     "tasks[0].evals[0].loss is \"low\", not a number"),
    (lambda s: s["chaos"]["preemptions"][0]["resumed_steps"].update({"worker-1": "218"}),
     "chaos.preemptions[0].resumed_steps.worker-1 is \"218\", not an integer"),
    (lambda s: s["chaos"]["preemptions"][0]["resumed_steps"].update({"worker-1": [218]}),
     "chaos.preemptions[0].resumed_steps.worker-1 is [218], not an integer"),
    (lambda s: s["chaos"]["preemptions"][0].update(resumed_steps=[218]),
     "chaos.preemptions[0].resumed_steps is [218], not a dict"),
    (lambda s: s["chaos"]["preemptions"][0].update(killed=1), "chaos.preemptions[0].killed is 1, not a bool"),
    (lambda s: s["chaos"]["preemptions"][0].update(notice={"gce": 1}),
     "chaos.preemptions[0].notice is {\"gce\": 1}, not a str"),
    (lambda s: s["chaos"].update(preemptions={"worker-1": 1}), "chaos.preemptions is {\"worker-1\": 1}, not a list"),
    (lambda s: s["chaos"].update(preemptions=["killed"]), "chaos.preemptions[0] is \"killed\", not a dict"),
]


def summary_with_a_resume_and_a_preemption(runs_dir) -> dict:
    write_run(runs_dir, "r", tasks=[TaskRow(task="worker-0", status="ok", resumes=[
        {"attempt": 2, "resumed": None, "words": "the lab saw neither a fit nor a checkpoint"}])],
        chaos={"scenario": "preempt", "target": "worker-1", "at": "epoch:2", "outcome": "survived",
               "detection_seconds": 3.2, "recovery_seconds": 10.0, "preemptions": [preemption_record()]})
    return json.loads((runs_dir / "r" / "summary.json").read_text())


@pytest.mark.parametrize("change, expected", WRONG_NESTED)
def test_a_nested_field_of_the_wrong_type_is_refused_in_one_line(change, expected, tmp_path):
    summary = summary_with_a_resume_and_a_preemption(tmp_path)
    Summary.from_dict(summary)  # as the lab writes it, it reads
    change(summary)
    with pytest.raises(SummaryError) as refused:
        Summary.from_dict(summary)
    assert str(refused.value) == expected


@pytest.mark.parametrize("change, expected", WRONG_NESTED[:1] + WRONG_NESTED[6:7])
def test_summary_and_why_refuse_a_wrong_nested_field_in_one_line(change, expected, tmp_path):
    path = tmp_path / "r" / "summary.json"
    summary = summary_with_a_resume_and_a_preemption(tmp_path)
    good = run_lab("summary", "RUN=r", env=lab_env(RUNS_DIR=str(tmp_path)), timeout=60)
    assert good.returncode == 0 and "preemption: notice gce at step 224; killed at the grace's end" in good.stdout
    change(summary)
    path.write_text(json.dumps(summary))
    for command in ("why", "summary"):
        result = run_lab(command, "RUN=r", env=lab_env(RUNS_DIR=str(tmp_path)), timeout=60)
        assert result.returncode == 2 and result.stdout == "", (command, result.output)
        assert result.stderr.splitlines() == [f"tflab: {path} is not a summary the lab wrote: {expected}"], command
