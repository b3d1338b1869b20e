"""A TFJob replay followed by the runner's one loop (runner.run with replay.ReplayRun), against a
stand-in for its Compose project whose exit codes change from one poll to the next: the job is
done when its chief succeeds, a failure restarts the job up to the TFJob's restarts, the deadline
ends it, a replica removed from outside ends it without a restart."""

import json
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tflab import explain, runfolder, runner, tfjob
from tflab.backends import replay
from tflab.runfolder import Summary
from tflab.schema import by_event, read_events
from tflab.settings import Settings

PS_JOB = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: job}
spec:
  runPolicy: {backoffLimit: 1}
  tfReplicaSpecs:
    Chief: {replicas: 1, restartPolicy: OnFailure, template: {spec: {containers: [{name: tensorflow, image: "img:1"}]}}}
    Worker: {replicas: 2, restartPolicy: OnFailure,
             template: {spec: {containers: [{name: tensorflow, image: "img:1"}]}}}
    PS: {replicas: 1, restartPolicy: OnFailure, template: {spec: {containers: [{name: tensorflow, image: "img:1"}]}}}
"""

MULTIWORKER_JOB = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: job}
spec:
  runPolicy: {backoffLimit: 2, activeDeadlineSeconds: 2}
  tfReplicaSpecs:
    Chief: {replicas: 1, restartPolicy: OnFailure, template: {spec: {containers: [{name: tensorflow, image: "img:1"}]}}}
    Worker: {replicas: 1, restartPolicy: OnFailure,
             template: {spec: {containers: [{name: tensorflow, image: "img:1"}]}}}
"""


class FakeProject:
    """Stands in for replay.ReplayStack: attempts[n] is the n-th start's exit codes, one dict per
    poll (the last one holds); SIGTERM ends a replica with 143, SIGKILL with 137."""

    def __init__(self, plan, run_dir, attempts):
        self.cluster = replay.ReplayCluster(plan)
        self.tasks = self.cluster.tasks
        self.run_dir, self.attempts = run_dir, attempts
        self.proxied, self.oom_killed, self.description = frozenset(), {}, "a stand-in project"
        self.attempt = self.poll = 0
        self.ended: dict[str, int] = {}
        self.terminated: list[str] = []
        self.closed = False

    def start(self) -> None:
        self.poll, self.ended = 0, {}

    def restart(self) -> None:
        self.attempt += 1
        self.start()

    def exit_codes(self) -> dict:
        script = self.attempts[min(self.attempt, len(self.attempts) - 1)]
        codes = {task: None for task in self.tasks} | script[min(self.poll, len(script) - 1)]
        self.poll += 1
        return codes | self.ended

    def state(self) -> dict:
        codes = self.exit_codes()
        self.poll -= 1  # the watcher's look is no poll of the run's
        started = f"2026-12-04T10:0{self.attempt}:00.000000000Z"
        return {task: {"StartedAt": started, "Id": task, "Running": code is None,
                       "Status": "running" if code is None else "exited", "ExitCode": code,
                       "FinishedAt": f"2026-12-04T10:0{self.attempt}:05.000000000Z"}
                for task, code in codes.items() if code != explain.VANISHED}

    def terminate(self, tasks) -> None:
        self.terminated += tasks
        self.ended |= dict.fromkeys(tasks, 143)

    def stop(self, tasks) -> None:
        self.ended |= dict.fromkeys(tasks, 137)

    def save_output(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class Guard:
    def release(self) -> None:
        pass


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(runner, "FAILURE_GRACE_SECONDS", 0.05)
    monkeypatch.setattr(runner.reaper, "watch", lambda run_dir: Guard())  # no process for a stand-in's run


def run_replay(tmp_path, job: str, attempts) -> tuple[int, FakeProject, Summary]:
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "tfjob.yaml"
    path.write_text(textwrap.dedent(job))
    settings = Settings(tfjob=str(path), runs_dir=str(tmp_path / "runs"), run="r1")
    plan = tfjob.load(settings)
    run_dir = tmp_path / "runs" / "r1"
    project = FakeProject(plan, run_dir, attempts)
    code = runner.run(replay.ReplayRun(plan, settings, project, run_dir))
    return code, project, Summary.read(run_dir)


def rows(result: Summary) -> dict:
    return {row["task"]: (row["status"], row["exit_code"]) for row in result["tasks"]}


def test_the_chief_done_ends_the_servers_and_their_sigterm_is_no_failure(tmp_path, capsys):
    code, project, result = run_replay(tmp_path, PS_JOB, [[{}, {}, {"chief-0": 0}]])
    out = capsys.readouterr().out
    assert "tflab: the job is done; ending worker-0, worker-1, ps-0" in out
    assert project.terminated == ["worker-0", "worker-1", "ps-0"] and project.closed
    assert code == 0 and result["ok"] and result["outcome"] == "ok" and result["strategy"] == "tfjob"
    assert rows(result) == {"chief-0": ("ok", 0), "worker-0": ("ok", 143), "worker-1": ("ok", 143), "ps-0": ("ok", 143)}
    space = runfolder.task_space(project.run_dir)
    ends = [by_event(read_events(space / f"{task}.jsonl"), "end") for task in project.tasks]
    assert [[end["exit_code"] for end in found] for found in ends] == [[0], [143], [143], [143]]
    assert "[ps-0] exited with code 143 after 5.0 s" in out
    config = json.loads((project.run_dir / "config.json").read_text())
    assert config["settings"] == result["settings"] and config["hosts"]["ps-0"] == "job-ps-0"


def test_a_chief_that_failed_does_not_end_the_servers_as_done(tmp_path, capsys):
    code, project, result = run_replay(tmp_path, PS_JOB, [[{}, {"chief-0": 1}]])
    out = capsys.readouterr().out
    assert "the job is done" not in out and not project.terminated
    assert "tflab: chief-0 exited with code 1; the other replicas get 0.05 s to end by themselves" in out
    assert "tflab: restarting every replica (1 of 1), as the restart policy says" in out
    assert code == 1 and result["outcome"] == "failed" and len(result["restarts"]) == 1
    assert result["reason"] == "BackoffLimitExceeded"
    assert rows(result) == {"chief-0": ("failed", 1), "worker-0": ("stopped", 137), "worker-1": ("stopped", 137),
                            "ps-0": ("stopped", 137)}


def test_a_failure_restarts_the_job_and_the_next_attempt_counts(tmp_path, capsys):
    code, project, result = run_replay(tmp_path, MULTIWORKER_JOB,
                                   [[{}, {"worker-0": 1}], [{}, {"worker-0": 0, "chief-0": 0}]])
    out = capsys.readouterr().out
    assert out.count("restarting every replica") == 1 and project.attempt == 1
    assert code == 0 and result["ok"] and len(result["restarts"]) == 1
    assert rows(result) == {"chief-0": ("ok", 0), "worker-0": ("ok", 0)}
    assert [row["attempts"] for row in result["tasks"]] == [2, 2]


def test_restarts_stop_at_the_tfjobs_backoff_limit(tmp_path, capsys):
    code, project, result = run_replay(tmp_path, MULTIWORKER_JOB, [[{}, {"worker-0": 1}]])
    out = capsys.readouterr().out
    assert "restarting every replica (2 of 2)" in out and "(3 of 2)" not in out and project.attempt == 2
    assert code == 1 and len(result["restarts"]) == 2
    # Named as the operator names the job's Failed condition.
    assert ("tflab: not restarting: the job failed 3 times, past its backoffLimit (2): BackoffLimitExceeded, "
            "as the operator names it") in out
    assert result["reason"] == "BackoffLimitExceeded" and "run r1: failed (BackoffLimitExceeded)" in out


def test_the_deadline_stops_what_runs(tmp_path, capsys):
    code, project, result = run_replay(tmp_path, MULTIWORKER_JOB, [[{}]])
    out = capsys.readouterr().out
    assert ("tflab: activeDeadlineSeconds / TIMEOUT (2 s) passed; stopping chief-0, worker-0: DeadlineExceeded, "
            "as the operator names it") in out
    assert code == 1 and result["outcome"] == "timed out" and not result["restarts"]
    assert result["reason"] == "DeadlineExceeded"
    assert rows(result) == {"chief-0": ("stopped", 137), "worker-0": ("stopped", 137)}


def test_a_replica_removed_from_outside_ends_the_job_without_a_restart(tmp_path, capsys):
    code, project, result = run_replay(tmp_path, MULTIWORKER_JOB, [[{}, {"worker-0": explain.VANISHED}]])
    out = capsys.readouterr().out
    assert "tflab: worker-0 vanished: its container or service was removed from outside the lab; ending the run" in out
    assert "not restarting: worker-0 vanished" in out and project.attempt == 0
    assert code == 1 and result["outcome"] == "failed" and not result["restarts"]
    assert rows(result)["chief-0"] == ("stopped", 137)


@pytest.mark.parametrize("code, stopped, clean, when_done, expected", [
    (143, False, True, False, "failed"),  # the lab's servers: SIGTERM's code without their clean exit fails
    (143, False, True, True, "ok"),  # a TFJob's server ended once the chief succeeded
    (0, False, False, False, "failed"),  # exit 0 with an error event, or without its end
    (None, False, True, True, "missing"),
    (137, True, True, True, "stopped"),
])
def test_one_status_rule_for_the_lab_and_the_replay(code, stopped, clean, when_done, expected):
    from tflab import summary

    assert summary.status_of(code, stopped, clean, when_done) == expected


EXIT = st.tuples(st.integers(0, 4), st.sampled_from([0, 0, 1, 137]))  # (the poll it exits at, its code)
ATTEMPT = st.tuples(EXIT, st.dictionaries(st.sampled_from(["worker-0", "worker-1", "ps-0"]), EXIT))


def script_of(chief: tuple[int, int], others: dict) -> list[dict]:
    """The codes seen at each poll of one attempt; the last poll holds. The chief always exits,
    so every attempt ends (by the job being done, or by a failure's grace)."""
    ends = {"chief-0": chief, **others}
    last = max(poll for poll, _ in ends.values())
    return [{task: code for task, (at, code) in ends.items() if at <= poll} for poll in range(last + 1)]


@settings(max_examples=40, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(attempts=st.lists(ATTEMPT, min_size=1, max_size=3))
def test_any_schedule_of_exits_ends_in_a_summary_that_agrees_with_the_exit_status(attempts, tmp_path_factory):
    """Generated schedules of exits (which replica, at which poll, with what code, per attempt) of a
    PS job with one restart: the run always ends; its status, summary and restarts agree; and where
    the chief succeeded with nothing failed yet, the job succeeded, whatever its servers' SIGTERM gave."""
    scripts = [script_of(chief, others) for chief, others in attempts]
    code, project, result = run_replay(tmp_path_factory.mktemp("r"), PS_JOB, scripts)
    assert (code == 0) == result["ok"] == (result["outcome"] == "ok")
    assert len(result["restarts"]) == project.attempt <= 1
    statuses = rows(result)
    assert all(status in ("ok", "failed", "stopped") for status, _ in statuses.values()), statuses
    if result["ok"]:
        assert statuses["chief-0"] == ("ok", 0)
    (chief_at, chief_code), _ = attempts[min(project.attempt, len(attempts) - 1)]
    seen = scripts[min(project.attempt, len(scripts) - 1)][chief_at]
    if chief_code == 0 and all(value == 0 for value in seen.values()):
        assert result["ok"], (scripts, statuses)
    elif not result["ok"]:
        assert any(value != 0 for value in seen.values()) or chief_code != 0


@pytest.mark.parametrize("policy, code, restarts, said", [
    ("ExitCode", 143, 1, None),  # a preemption's (TF's exit on Google Cloud): retried
    ("ExitCode", 137, 1, None),  # killed: retried
    ("ExitCode", 3, 0, "worker-0 exited with code 3: 1-127 is permanent under its restartPolicy ExitCode"),
    ("OnFailure", 3, 1, None),
    ("Never", 143, 0, "worker-0 exited with code 143 and its restartPolicy is Never"),
])
def test_each_replicas_restart_policy_reads_its_exit_code_as_the_operator_does(policy, code, restarts, said,
                                                                              tmp_path, capsys):
    job = MULTIWORKER_JOB.replace("Worker: {replicas: 1, restartPolicy: OnFailure",
                                  f"Worker: {{replicas: 1, restartPolicy: {policy}")
    code_, project, result = run_replay(tmp_path, job, [[{}, {"worker-0": code}], [{}, {"worker-0": 0, "chief-0": 0}]])
    out = capsys.readouterr().out
    assert len(result["restarts"]) == restarts, out
    if said:
        assert f"tflab: not restarting: {said}" in out and code_ == 1 and result["reason"] is None
    else:
        assert code_ == 0 and result["ok"]
