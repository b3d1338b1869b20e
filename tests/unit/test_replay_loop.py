"""A TFJob replay followed by the runner's one loop (runner.run with ReplayRun), against a
stand-in for its Compose project whose exit codes change from one poll to the next. Each rule is
the training operator's, from its code (release-1.9, v1.9.4; tflab/k8s/tfoperator.py), and each test
names the upstream file and function it pins: success (UpdateJobStatus, IsWorker0Completed), a
failure's restart (ReconcilePods, IsRetryableExitCode), backoffLimit (PastBackoffLimit and
ReconcileJobs), cleanPodPolicy (DeletePodsAndServices), the deadline (PastActiveDeadline)."""

import json
import re
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from labtest.fakes import FakeBackend, FakeClock
from tflab.core import explain, runfolder
from tflab.core.runsummary import Summary
from tflab.core.schema import by_event, read_events
from tflab.core.settings import Settings
from tflab.k8s import kubelet, tfjob
from tflab.replay import run as run_module
from tflab.replay.run import ReplayRun
from tflab.replay.volumes import SITE_FILE, hooks_folder, write_hooks
from tflab.replay.watcher import Watcher, unaudited
from tflab.supervisor import runner, table
from tflab.trainer import replayhooks

pytestmark = pytest.mark.usefixtures("quick")  # tests/unit/conftest.py

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


def stand_in(plan, run_dir, attempts) -> FakeBackend:
    """Stands in for stack.ReplayStack: attempts[n] is the n-th start's exit codes, one dict per
    poll (the last one holds); SIGTERM ends a replica with 143, SIGKILL with 137."""
    return FakeBackend(plan.as_cluster(), run_dir, attempts, description="a stand-in project")


def run_replay(tmp_path, job: str, attempts, timeout: float | None = None, clock: FakeClock | None = None,
               **given) -> tuple[int, FakeBackend, Summary]:
    """The replay of `job` on a stand-in; with a `clock`, the runner and the replay read that clock
    (FakeClock: a sleep moves it), so timings are exact and take no time."""
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "tfjob.yaml"
    path.write_text(textwrap.dedent(job))
    settings = Settings(tfjob=str(path), runs_dir=str(tmp_path / "runs"), run="r1", **given)
    plan = tfjob.load(settings)
    if timeout is not None:
        plan.timeout = timeout  # the lab's TIMEOUT, shorter than Settings allows, for a quick test
    run_dir = tmp_path / "runs" / "r1"
    project = stand_in(plan, run_dir, attempts)
    if clock is not None:
        project.clock = clock.monotonic
    code = runner.run(ReplayRun(plan, settings, project, run_dir))
    return code, project, Summary.read(run_dir)


def rows(result: Summary) -> dict:
    return {row["task"]: (row["status"], row["exit_code"]) for row in result["tasks"]}


def with_policy(job: str, replica: str, policy: str) -> str:
    return job.replace(f"{replica}: {{replicas: 1, restartPolicy: OnFailure",
                       f"{replica}: {{replicas: 1, restartPolicy: {policy}").replace(
        f"{replica}: {{replicas: 2, restartPolicy: OnFailure", f"{replica}: {{replicas: 2, restartPolicy: {policy}")


def test_the_chief_done_ends_the_servers_and_their_sigterm_is_no_failure(tmp_path, capsys):
    """tfjob_controller.go UpdateJobStatus: with a Chief, its success is the job's; common/job.go
    DeletePodsAndServices under cleanPodPolicy None (SetDefaults_TFJob's default) deletes nothing,
    so the operator would leave the PS job's workers and ps serving: said, and ended by the lab."""
    code, project, result = run_replay(tmp_path, PS_JOB, [[{}, {}, {"chief-0": 0}]])
    out = capsys.readouterr().out
    assert ("tflab: the job succeeds when chief-0 does; cleanPodPolicy None (the operator's default): once the job "
            "ends the operator leaves whatever still runs running; the lab ends and removes every replica") in out
    assert ("tflab: the operator marks the job Succeeded (TFJobSucceeded: TFJob default/job successfully completed.); "
            "cleanPodPolicy None: the operator would leave worker-0, worker-1, ps-0 running") in out
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
    # Written by the lab's one config.json writer (runfolder.run_config), as every run's is
    assert config["layout"] == runfolder.LAYOUT and config["created"] and config["tasks"] == project.tasks
    assert config["tf_config"]["ps-0"]["task"] == {"type": "ps", "index": 0} and config["tfjob"].endswith("tfjob.yaml")
    assert config["replay"] == "TFJob"  # what the report names the run by (report.replayed_kind)


def test_a_chief_that_failed_under_backoff_limit_1_fails_the_job_at_its_first_restart(tmp_path, capsys):
    """core/job.go PastBackoffLimit: `result >= backoffLimit` over the OnFailure replicas'
    restartCount, so backoffLimit 1 fails the job at the first restart in place (common/job.go
    ReconcileJobs: "has reached the specified backoff limit"); the servers are not ended as done."""
    code, project, result = run_replay(tmp_path, PS_JOB, [[{}, {"chief-0": 1}]])
    out = capsys.readouterr().out
    assert "the job is done" not in out and not project.terminated and project.attempt == 0
    assert ("tflab: the restarts the operator counts (1) reach backoffLimit 1: the operator marks the job Failed "
            "(TFJobFailed: Job job has failed because it has reached the specified backoff limit); cleanPodPolicy "
            "None: the operator would leave worker-0, worker-1, ps-0 running") in out
    assert code == 1 and result["outcome"] == "failed" and not result["restarts"]
    assert result["reason"] == "TFJobFailed: backoffLimit" and "run r1: failed (TFJobFailed: backoffLimit)" in out
    assert rows(result) == {"chief-0": ("failed", 1), "worker-0": ("stopped", 137), "worker-1": ("stopped", 137),
                            "ps-0": ("stopped", 137)}


def test_an_on_failure_replica_is_restarted_alone_in_place_and_its_restart_counts(tmp_path, capsys):
    """kuberuntime_manager.go doBackOff: an OnFailure pod's failed container is restarted by the
    kubelet, in place and alone, at once the first time (no back-off entry yet); the chief runs on
    untouched, and its success is the job's. restartCount + 1 is what PastBackoffLimit sums."""
    chief_later = [{}, {"worker-0": 1}, {"worker-0": 1}, {"worker-0": 1}, {"worker-0": 1, "chief-0": 0}]
    code, project, result = run_replay(tmp_path, MULTIWORKER_JOB, [chief_later, [{}]])
    out = capsys.readouterr().out
    assert ("tflab: worker-0 exited with code 1; the kubelet restarts it in place at once (back-off 10 s, doubling "
            "to 300 s); the other replicas run on") in out
    assert ("tflab: restarting worker-0 in place (its restart 1, the job's 1; 1 counted of backoffLimit 2), as the "
            "kubelet does") in out
    assert "restarting every replica" not in out and "get 0.05 s to end" not in out
    assert [task for task, _ in project.alone] == ["worker-0"] and project.attempt == 0 and project.starts == 1
    assert project.terminated == ["worker-0"]  # the job is done: the restarted worker is ended then, no sooner
    assert code == 0 and result["ok"] and len(result["restarts"]) == 1
    assert rows(result) == {"chief-0": ("ok", 0), "worker-0": ("ok", 143)}
    assert [(row["attempts"], row["restart_count"]) for row in result["tasks"]] == [(1, 0), (2, 1)]


def test_restarts_stop_where_the_operators_count_reaches_the_backoff_limit(tmp_path, capsys):
    """core/job.go PastBackoffLimit: backoffLimit 2 and one OnFailure replica failing each time:
    the first restart counts 1, the second reaches 2 and the job fails; so one restart is made."""
    code, project, result = run_replay(tmp_path, MULTIWORKER_JOB, [[{}, {"worker-0": 1}]])
    out = capsys.readouterr().out
    assert "restarting worker-0 in place (its restart 1, the job's 1; 1 counted of backoffLimit 2)" in out
    assert "its restart 2" not in out and project.attempt == 0 and len(project.alone) == 1
    assert code == 1 and len(result["restarts"]) == 1
    assert "tflab: the restarts the operator counts (2) reach backoffLimit 2" in out
    assert result["reason"] == "TFJobFailed: backoffLimit" and "run r1: failed (TFJobFailed: backoffLimit)" in out


def test_every_replica_that_fails_by_itself_counts_toward_the_backoff_limit(tmp_path, capsys):
    """core/job.go PastBackoffLimit sums restartCount over every pod: when a multi-worker job's
    peers abort with the failed one, each restart counts; two such replicas reach backoffLimit 2
    at once."""
    job = MULTIWORKER_JOB.replace("activeDeadlineSeconds: 2", "activeDeadlineSeconds: 60")
    code, project, result = run_replay(tmp_path, job, [[{}, {"worker-0": 1, "chief-0": 1}]])
    out = capsys.readouterr().out
    assert "tflab: the restarts the operator counts (2) reach backoffLimit 2" in out
    assert code == 1 and not result["restarts"] and project.attempt == 0 and not project.alone


NO_LIMIT_JOB = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: job}
spec:
  tfReplicaSpecs:
    Worker: {replicas: 2, restartPolicy: OnFailure,
             template: {spec: {containers: [{name: tensorflow, image: "img:1"}]}}}
"""


def test_without_a_backoff_limit_restarts_have_no_limit_but_the_deadline(tmp_path, capsys, monkeypatch):
    """core/job.go PastBackoffLimit returns false where backoffLimit is nil, and ReconcileJobs
    tests nothing else of it: no limit at all (the lab's RESTARTS does not apply); only TIMEOUT,
    which the start says, ends it. Both workers failing a second after each start, as the
    operator's simple.yaml did on the internal network, are each restarted by the kubelet at once,
    then after 10, 20, 40, 80, 160 and 300 s: 7 restarts each in 900 s (kubelet.restarts_within),
    where restarting the whole job at once had made 41."""
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.5)
    clock = FakeClock().install(monkeypatch, runner, run_module)
    code, project, result = run_replay(tmp_path, NO_LIMIT_JOB, [[{}, {}, {"worker-0": 1, "worker-1": 1}]],
                                       clock=clock)
    out = capsys.readouterr().out
    assert ("no backoffLimit: restarts without limit, as the operator's; no activeDeadlineSeconds, so TIMEOUT "
            "(900 s) bounds the run") in out
    assert "restarting worker-1 in place (its restart 7, the job's 14; no backoffLimit)" in out
    assert code == 1 and result["outcome"] == "timed out" and len(result["restarts"]) == 14
    assert kubelet.restarts_within(900, 1.0) == 7
    assert {row["task"]: row["restart_count"] for row in result["tasks"]} == {"worker-0": 7, "worker-1": 7}
    assert ("the job restarted 14 times, as its restart policy says; in place, alone: worker-0 7 times, worker-1 7 "
            "times") in table.why_lines(result)
    assert result["settings"]["restarts"] is None  # recorded as no limit, not the lab's RESTARTS default
    assert result["settings"]["backoff"] == 10.0 and result["wall_seconds"] <= 900 + runner.PAST_DEADLINE_SECONDS


def test_the_lab_timeout_bounds_a_job_without_a_deadline(tmp_path, capsys):
    """core/job.go PastActiveDeadline is false without activeDeadlineSeconds: on a cluster the job
    would run on; the lab stops it at TIMEOUT, says so, and names no operator reason."""
    code, project, result = run_replay(tmp_path, NO_LIMIT_JOB, [[{}]], timeout=0.2)
    out = capsys.readouterr().out
    assert ("tflab: TIMEOUT (0.2 s) passed; the TFJob sets no activeDeadlineSeconds, so on a cluster it would run "
            "on; stopping worker-0, worker-1") in out
    assert code == 1 and result["outcome"] == "timed out" and result["reason"] is None


def test_the_deadline_stops_what_runs(tmp_path, capsys):
    """core/job.go PastActiveDeadline (from jobStatus.StartTime) and common/job.go ReconcileJobs:
    the job Failed, "active longer than specified deadline"; under cleanPodPolicy None the operator
    (since v1.9.4) leaves the pods running; the lab stops them."""
    code, project, result = run_replay(tmp_path, MULTIWORKER_JOB, [[{}]])
    out = capsys.readouterr().out
    assert ("tflab: activeDeadlineSeconds (2 s) passed: the operator marks the job Failed (TFJobFailed: Job job has "
            "failed because it was active longer than specified deadline); cleanPodPolicy None: the operator would "
            "leave chief-0, worker-0 running; stopping chief-0, worker-0") in out
    assert code == 1 and result["outcome"] == "timed out" and not result["restarts"]
    assert result["reason"] == "TFJobFailed: activeDeadlineSeconds"
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
    from tflab.supervisor import summary

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
    ("ExitCode", 128, 1, None),  # IsRetryableExitCode: every code from 128, though the docs call 128 permanent
    ("ExitCode", 139, 1, None),  # ... and 139 (SIGSEGV) too
    ("ExitCode", 127, 0, ("worker-0 exited with code 127, permanent under restartPolicy ExitCode (1-127)",
                          'job "job" is failing because "Worker" replica(s) failed.')),
    ("ExitCode", 3, 0, ("worker-0 exited with code 3, permanent under restartPolicy ExitCode (1-127)",
                        'job "job" is failing because "Worker" replica(s) failed.')),
    ("OnFailure", 3, 1, None),
    ("Always", 3, 1, None),
    ("Never", 143, 0, ("worker-0 exited with code 143 and its restartPolicy is Never",
                       "TFJob default/job has failed because 1 Worker replica(s) failed.")),
])
def test_each_replicas_restart_policy_reads_its_exit_code_as_the_operator_does(policy, code, restarts, said,
                                                                              tmp_path, capsys):
    """common/pod.go ReconcilePods: a failed pod is restarted under OnFailure and Always, and under
    ExitCode where train_util.go IsRetryableExitCode (`exitCode >= 128`) says so (deleted and
    created again alone); else the job fails (ReconcilePods' own message for ExitCode,
    tfjob_controller.go UpdateJobStatus's for Never)."""
    job = with_policy(MULTIWORKER_JOB, "Worker", policy)
    alone = bool(restarts)  # restarted (the kubelet) or recreated (the operator) alone; the chief runs on
    first = [{}, {"worker-0": code}] + [{"worker-0": code}] * 3 + [{"worker-0": code, "chief-0": 0}] * alone
    code_, project, result = run_replay(tmp_path, job, [first, [{}, {"worker-0": 0, "chief-0": 0}]])
    out = capsys.readouterr().out
    assert len(result["restarts"]) == restarts, out
    assert (project.attempt, len(project.alone)) == ((0, restarts) if alone else (restarts, 0))
    if said:
        why, message = said
        assert f"tflab: {why}: the operator marks the job Failed (TFJobFailed: {message})" in out
        assert code_ == 1 and result["reason"] is None and "the other replicas get" not in out
    else:
        assert code_ == 0 and result["ok"]


def test_exit_code_fails_the_job_when_a_killed_workers_peer_exits_1(tmp_path, capsys):
    """common/pod.go ReconcilePods under ExitCode: the killed worker's 137 is retried (its pod alone
    deleted and created again), but the peer that aborts with 1 when it goes (MultiWorkerMirroredStrategy's
    "Connection reset by peer") is a permanent code, and the job fails, where the lab's own
    RESTART_POLICY=ExitCode reads that peer's evidence and restarts. A TFJob that should survive a
    killed worker wants OnFailure."""
    job = with_policy(NO_LIMIT_JOB, "Worker", "ExitCode")
    code, project, result = run_replay(tmp_path, job, [[{}, {"worker-1": 137}, {"worker-1": 137, "worker-0": 1}]])
    out = capsys.readouterr().out
    assert "tflab: worker-0 exited with code 1, permanent under restartPolicy ExitCode (1-127)" in out
    assert code == 1 and len(result["restarts"]) == 1 and [task for task, _ in project.alone] == ["worker-1"]
    assert project.attempt == 0  # worker-0 was never restarted: it ran on and met the lost peer


def test_the_default_restart_policy_is_never(tmp_path, capsys):
    """tensorflow_defaults.go SetDefaults_TFJob sets TFJobDefaultRestartPolicy (tensorflow_types.go):
    Never. A replica without a restartPolicy that fails fails the job, whatever its code."""
    job = re.sub(r"restartPolicy: OnFailure,\s*", "", MULTIWORKER_JOB)
    assert "restartPolicy" not in job
    code, project, result = run_replay(tmp_path, job, [[{}, {"worker-0": 143}]])
    out = capsys.readouterr().out
    assert "worker-0 exited with code 143 and its restartPolicy is Never" in out
    assert code == 1 and not result["restarts"] and project.attempt == 0


def test_exit_code_retries_are_not_counted_unless_the_limit_is_0(tmp_path, capsys):
    """core/job.go PastBackoffLimit counts restartCount, and an ExitCode pod is recreated (common/
    pod.go ReconcilePods deletes it), so its retries never count (trainer#2045): backoffLimit 1
    does not stop three. common/job.go ReconcileJobs' exceedsBackoffLimit (`previousRetry + 1 >
    backoffLimit` at a new failed pod) fails the job at the first one where backoffLimit is 0."""
    job = with_policy(NO_LIMIT_JOB, "Worker", "ExitCode").replace(
        "spec:\n  tfReplicaSpecs", "spec:\n  runPolicy: {backoffLimit: 1}\n  tfReplicaSpecs")
    # worker-1 fails thrice, each time recreated alone (its own next script); worker-0 runs on, then succeeds
    first = [{}, {"worker-1": 137}] + [{"worker-1": 137}] * 8 + [{"worker-1": 137, "worker-0": 0}]
    code, project, result = run_replay(tmp_path, job, [first, [{}, {"worker-1": 137}], [{}, {"worker-1": 137}],
                                                       [{}, {"worker-1": 0}]])
    out = capsys.readouterr().out
    assert ("restartPolicy ExitCode (Worker): a retried replica is recreated, not restarted, so backoffLimit 1 never "
            "counts it (PastBackoffLimit, trainer#2045)") in out
    assert code == 0 and len(result["restarts"]) == 3 and project.attempt == 0, out
    assert [task for task, _ in project.alone] == ["worker-1"] * 3
    assert ("recreating worker-1 (its recreation 3, the job's restart 3; a new pod's restartCount is 0, so "
            "backoffLimit never counts it), as the operator does") in out
    failing = [[{}, {"worker-1": 137}]]

    zero = job.replace("backoffLimit: 1", "backoffLimit: 0")
    code, project, result = run_replay(tmp_path / "zero", zero, failing)
    out = capsys.readouterr().out
    assert "tflab: worker-1 failed under backoffLimit 0: the operator marks the job Failed" in out
    assert code == 1 and not result["restarts"] and result["reason"] == "TFJobFailed: backoffLimit"


def test_without_a_chief_worker_0s_success_is_the_jobs(tmp_path, capsys, monkeypatch):
    """tfjob_controller.go UpdateJobStatus with IsWorker0Completed: no Chief or Master, so the job
    succeeded once worker-0 exited 0, the other workers still running. cleanPodPolicy None would
    leave worker-1 running: it gets the lab's grace to end by itself (here it does, with 0)."""
    monkeypatch.setattr(runner, "EVALUATOR_END_SECONDS", 5)
    code, project, result = run_replay(tmp_path, NO_LIMIT_JOB, [[{}, {"worker-0": 0}, {"worker-0": 0},
                                                                 {"worker-0": 0, "worker-1": 0}]])
    out = capsys.readouterr().out
    assert "the job succeeds when worker-0 does (no Chief, and no successPolicy AllWorkers)" in out
    assert ("the operator marks the job Succeeded (TFJobSucceeded: TFJob default/job successfully completed.); "
            "cleanPodPolicy None: the operator would leave worker-1 running") in out
    assert "the lab gives worker-1 up to 5 s to end by themselves, then ends and removes what runs" in out
    assert code == 0 and not project.terminated and rows(result) == {"worker-0": ("ok", 0), "worker-1": ("ok", 0)}


@pytest.mark.parametrize("clean, terminated, said", [
    ("Running", ["worker-1"], "cleanPodPolicy Running: the operator deletes worker-1"),
    ("All", ["worker-1"], "cleanPodPolicy All: the operator deletes worker-1"),
])
def test_clean_pod_policy_running_and_all_end_what_runs_at_once(clean, terminated, said, tmp_path, capsys):
    """common/job.go DeletePodsAndServices once the job is finished: Running deletes the running
    pods, All every pod; the lab ends them at once (SIGTERM), rows ok as the job succeeded."""
    job = NO_LIMIT_JOB.replace("spec:\n  tfReplicaSpecs",
                               f"spec:\n  runPolicy: {{cleanPodPolicy: {clean}}}\n  tfReplicaSpecs")
    code, project, result = run_replay(tmp_path, job, [[{}, {"worker-0": 0}]])
    out = capsys.readouterr().out
    assert said in out and "the lab gives" not in out
    assert code == 0 and project.terminated == terminated
    assert rows(result) == {"worker-0": ("ok", 0), "worker-1": ("ok", 143)}


def test_success_policy_all_workers_waits_for_every_worker(tmp_path, capsys):
    """tfjob_controller.go UpdateJobStatus: with successPolicy AllWorkers (tensorflow_types.go
    SuccessPolicyAllWorkers) worker-0's success is not the job's; every worker's (expected == 0) is."""
    job = NO_LIMIT_JOB.replace("spec:\n  tfReplicaSpecs", "spec:\n  successPolicy: AllWorkers\n  tfReplicaSpecs")
    code, project, result = run_replay(tmp_path, job, [[{}, {"worker-0": 0}, {"worker-0": 0}, {"worker-0": 0},
                                                        {"worker-0": 0, "worker-1": 0}]])
    out = capsys.readouterr().out
    assert "the job succeeds when every worker does (successPolicy AllWorkers)" in out
    assert code == 0 and not project.terminated and project.poll >= 4
    assert "the operator marks the job Succeeded" in out and "would leave" not in out


NEVER_JOB = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: job}
spec:
  tfReplicaSpecs:
    Chief: {replicas: 1, template: {spec: {containers: [{name: tensorflow, image: "img:1"}]}}}
    Worker: {replicas: 1, template: {spec: {containers: [{name: tensorflow, image: "img:1"}]}}}
    PS: {replicas: 1, template: {spec: {containers: [{name: tensorflow, image: "img:1"}]}}}
    Evaluator: {replicas: 1, template: {spec: {containers: [{name: tensorflow, image: "img:1"}]}}}
"""


@pytest.mark.parametrize("replica, kind", [("ps-0", "PS"), ("evaluator-0", "Evaluator")])
def test_a_failed_ps_or_evaluator_fails_the_job_there(replica, kind, tmp_path, capsys):
    """tfjob_controller.go UpdateJobStatus: a replica type with failed pods and no restart under
    way marks the job Failed, whatever the type; PS and Evaluator too, at once (no grace for the
    chief to finish: the operator does not wait for it)."""
    code, project, result = run_replay(tmp_path, NEVER_JOB, [[{}, {replica: 1}, {replica: 1, "chief-0": 0}]])
    out = capsys.readouterr().out
    assert (f"tflab: {replica} exited with code 1 and its restartPolicy is Never: the operator marks the job Failed "
            f"(TFJobFailed: TFJob default/job has failed because 1 {kind} replica(s) failed.)") in out
    assert "get 0.05 s to end by themselves" not in out and "Succeeded" not in out
    assert code == 1 and result["outcome"] == "failed" and rows(result)["chief-0"] == ("stopped", 137)
    # SetDefaults_TFJob's Never everywhere: the start said "restarts without limit" of a job that has none
    assert "; restartPolicy Never for every replica: its first failure fails the job, no restart; " in out
    assert "restarts without limit" not in out


def test_an_evaluator_left_running_after_success_ends_by_itself(tmp_path, capsys, monkeypatch):
    """The chief succeeded (UpdateJobStatus); cleanPodPolicy None (SetDefaults_TFJob) would leave
    the evaluator and the servers running: the evaluator gets the lab's grace and ends with 0, the
    servers (which never end by themselves) are ended."""
    monkeypatch.setattr(runner, "EVALUATOR_END_SECONDS", 5)
    code, project, result = run_replay(tmp_path, NEVER_JOB, [[{}, {"chief-0": 0}, {"chief-0": 0},
                                                              {"chief-0": 0, "worker-0": 0, "evaluator-0": 0}]])
    out = capsys.readouterr().out
    assert "the lab gives evaluator-0 up to 5 s to end by themselves" in out
    assert code == 0 and project.terminated == ["ps-0"]
    assert rows(result) == {"chief-0": ("ok", 0), "worker-0": ("ok", 0), "ps-0": ("ok", 143), "evaluator-0": ("ok", 0)}


def run_trainjob(tmp_path, attempts, restarts: int) -> tuple[int, Summary]:
    """A TrainJob as make k8s writes it (2 nodes, failurePolicy.maxRestarts = RESTARTS), replayed
    on the stand-in project: JobSet's rules, not the training operator's (run.ReplayRun.jobset_condition)."""
    from tflab.k8s import trainjob
    from tflab.k8s import writer as k8s

    settings = Settings(workers=2, restarts=restarts, k8s_image="registry.example/tflab:test")
    rendered, _ = k8s.render(settings, "tj", k8s.manifests_cluster(settings))
    path = tmp_path / "trainjob.yaml"
    path.write_text(k8s.to_yaml_documents(rendered["trainjob.yaml"]))
    settings = Settings(trainjob=str(path), runs_dir=str(tmp_path / "runs"), run="r1")
    plan = trainjob.load(settings)
    run_dir = tmp_path / "runs" / "r1"
    project = stand_in(plan, run_dir, attempts)
    code = runner.run(ReplayRun(plan, settings, project, run_dir))
    return code, Summary.read(run_dir)


def test_a_trainjob_restarts_the_whole_job_max_restarts_times_then_fails_as_jobset_names_it(tmp_path, capsys):
    """JobSet v0.12.0 (pkg/controllers/failure_policy.go restartJobSetActionApplier, the default
    action where no rule matches) restarts every replicated job on a failure while
    restartsCountTowardsMax < failurePolicy.maxRestarts, then fails the JobSet: ReachedMaxRestarts.
    The rules themselves: tests/unit/test_jobset.py."""
    failing = [{}, {"worker-0": 1, "worker-1": 1}]
    code, result = run_trainjob(tmp_path, [failing, failing], restarts=1)
    out = capsys.readouterr().out
    assert code == 1 and not result.ok and len(result.restarts) == 1
    assert result.reason == "ReachedMaxRestarts", out
    assert "JobSet applies RestartJobSet (no rule matched, JobSet's default; first failed Job node-0, " \
           "BackoffLimitExceeded) and marks the job Failed (ReachedMaxRestarts)" in out
    # A TrainJob's restarts are JobSet's, counted whole (once said as "2 restarts counted of
    # backoffLimit 1", the training operator's in-place count); its node Job's backoffLimit 0 fails
    # that Job at the first failed pod (job_controller.go exceedsBackoffLimit)
    assert "tflab: restarting every node (restart 1, 1 counted of failurePolicy.maxRestarts 1), as JobSet's " \
           "RestartJobSet (no rule matched, JobSet's default; first failed Job node-0, BackoffLimitExceeded) " \
           "says" in out
    assert "counted of backoffLimit" not in out
    assert ("restartPolicy Never, backoffLimit 0: the first failed node fails Job node-0 (BackoffLimitExceeded), "
            "no node is retried alone") in out


def test_a_trainjob_succeeds_when_every_node_does(tmp_path, capsys):
    code, result = run_trainjob(tmp_path, [[{}, {"worker-0": 0, "worker-1": 0}]], restarts=0)
    assert code == 0 and result.ok and result.restarts == [], capsys.readouterr().out

# -- the lab's hooks in a replica's own Python, and what the summary says of them (issue 35) -----

def hooks_root(tmp_path, task="worker-0"):
    """The layout the replay mounts at /opt/tflab-hooks, built here: site/ (the sitecustomize it
    writes), tflab/ (the lab's package), config.json, and the replica's own log/."""
    import shutil

    from tflab import home

    root = tmp_path / "opt-tflab-hooks"
    (root / "site").mkdir(parents=True)
    (root / "site" / "sitecustomize.py").write_text(SITE_FILE)
    shutil.copytree(home.PACKAGE, root / "tflab", ignore=shutil.ignore_patterns("__pycache__", "_lab"))
    (root / "config.json").write_text(json.dumps({"settings": {"audit": "on"}, "cluster": {}}))
    (root / "log").mkdir()
    return root


def in_replica(root, code, tmp_path, **env):
    """A Python process as a replica's image starts it: its own PYTHONPATH (here a folder with its own
    sitecustomize and a stand-in keras), the replay's site folder first, no TFLAB_* of the lab's."""
    import os
    import subprocess
    import sys

    own = tmp_path / "image-site"
    (own / "keras").mkdir(parents=True, exist_ok=True)
    (own / "keras" / "__init__.py").write_text("__version__ = '9.9.9'\n")
    (own / "sitecustomize.py").write_text("import sys; print('the image own sitecustomize ran', file=sys.stderr)\n")
    clean = {key: value for key, value in os.environ.items() if not key.startswith("TFLAB_") and key != "PYTHONPATH"}
    clean.update(PYTHONPATH=f"{root / 'site'}:{own}", TFLAB_HOOKS_TASK="worker-0", **env)
    return subprocess.run([sys.executable, "-c", code], env=clean, capture_output=True, text=True, cwd=tmp_path,
                          timeout=120)


def test_the_hooks_reach_a_replicas_own_python_and_leave_its_program_alone(tmp_path):
    root = hooks_root(tmp_path)
    program = ("import os, sys, keras; print('ran', keras.__version__, sorted(k for k in os.environ "
               "if k.startswith('TFLAB_') and k != 'TFLAB_HOOKS_TASK'))")
    result = in_replica(root, program, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ran 9.9.9 []"  # its environment is its own again
    assert "the image own sitecustomize ran" in result.stderr  # chained, as Python would have run it
    assert (root / "log" / "hooks").read_text().startswith("hooked: python ")
    events = [json.loads(line) for line in (root / "log" / "events.jsonl").read_text().splitlines()]
    assert [(e["event"], e["task"], e["module"], e["version"]) for e in events] == \
        [("imported", "worker-0", "keras", "9.9.9")]
    # a script the lab's launcher runs (TFLAB_LOG, which only the launcher sets): the hooks stand
    # aside, and what the lab's program logs where its manifest says (a pod's emptyDir, which the
    # host cannot see) is copied, line for line, to the replica's own folder, which the host reads
    lab = hooks_root(tmp_path / "lab")
    own_log = tmp_path / "emptydir" / "worker-0.jsonl"
    own_log.parent.mkdir()
    program = ("import keras; from tflab.core.schema import EventLog; log = EventLog(%r, 'worker-0'); "
               "log.emit('epoch', epoch=1, loss=2.5, seconds=1.0, steps=4); log.close()" % str(own_log))
    result = in_replica(lab, program, tmp_path, TFLAB_LOG=str(own_log))
    assert result.returncode == 0, result.stderr
    assert (lab / "log" / "hooks").read_text() == replayhooks.LAB_MARK + "\n"
    assert (lab / "log" / "events.jsonl").read_text() == own_log.read_text()
    assert [(e["event"], e["loss"]) for e in read_events(own_log)] == [("epoch", 2.5)]  # no keras `imported`


def test_a_node_that_runs_its_own_command_is_hooked_whatever_tflab_variables_it_has(tmp_path):
    """A TrainJob node's tfconfig sets TFLAB_TASK for the command it runs, and make k8s's manifests
    TFLAB_CONFIG: a node that ran `python -c` was said "not audited: it runs the lab's own program".
    Its own program gets the hooks, and keeps its variables."""
    root = hooks_root(tmp_path)
    program = "import os, keras; print(os.environ['TFLAB_TASK'], os.environ['TFLAB_CONFIG'])"
    result = in_replica(root, program, tmp_path, TFLAB_TASK="worker-0", TFLAB_CONFIG="/etc/tflab/config.json")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["worker-0", "/etc/tflab/config.json"]
    assert (root / "log" / "hooks").read_text().startswith("hooked: python ")


@pytest.mark.parametrize("argv, module", [
    (["python3", "-m", "tflab.train"], "tflab.train"),
    (["python3", "-u", "-X", "dev", "-mtflab.launch", "--", "x"], "tflab.launch"),
    (["python3", "-m", "tflab.trainer.tfconfig", "python", "-m", "tflab.train"], "tflab.trainer.tfconfig"),
    (["python3", "-c", "import tflab"], ""),
    (["python3", "/app/train.py", "-m", "tflab.train"], ""),
    (["python3", "-W", "-m", "-c", "pass"], ""),
])
def test_the_hooks_tell_the_labs_program_by_the_module_it_runs(argv, module):
    from tflab.trainer import replayhooks

    assert replayhooks.run_module(argv) == module
    assert (module in replayhooks.LAB_MODULES) == (module in ("tflab.train", "tflab.launch"))


def test_the_watcher_copies_only_the_hooks_events_under_the_replicas_own_name(tmp_path):
    plan = tfjob.plan_of(tmp_path / "job.yaml", [yaml_of(MULTIWORKER_JOB)], Settings())
    run_dir = tmp_path / "run"
    (run_dir / "tasks").mkdir(parents=True)
    write_hooks(plan, run_dir, Settings())
    watcher = Watcher(plan, run_dir, dict)
    folder = hooks_folder(run_dir, "worker-0")
    lines = [{"event": "imported", "task": "chief-0", "time": 1.0, "module": "keras", "version": "3"},
             {"event": "end", "task": "worker-0", "time": 1.0, "role": "script", "total_seconds": 1,
              "peak_rss_bytes": 0, "exit_code": 0},  # the watcher's own kind: never from inside
             {"event": "epoch", "task": "worker-0", "time": 1.0, "epoch": "one", "loss": 1, "seconds": 1, "steps": 1}]
    (folder / "events.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + "not json\n{\"partial")
    watcher.copy_hooks_events("worker-0")
    watcher.close()
    copied = read_events(run_dir / "tasks" / "worker-0.jsonl")
    assert [(r["event"], r["task"]) for r in copied] == [("imported", "worker-0")]
    assert watcher.skipped["worker-0"] == 3


def yaml_of(text):
    import yaml

    return yaml.safe_load(textwrap.dedent(text))


def test_a_replica_the_hooks_did_not_reach_is_said_not_audited_and_why(tmp_path):
    shell = 'containers: [{name: tensorflow, image: "img:1", command: [/bin/sh, -c, "exit 1"]}]'
    job = MULTIWORKER_JOB.replace('containers: [{name: tensorflow, image: "img:1"}]', shell, 1)
    plan = tfjob.plan_of(tmp_path / "job.yaml", [yaml_of(job)], Settings())
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    write_hooks(plan, run_dir, Settings())
    (hooks_folder(run_dir, "worker-0") / "hooks").write_text("hooked: python 3.11.2\n")
    images = {"img:1": {"Entrypoint": None, "Cmd": ["python3", "train.py"]}}
    notes = unaudited(plan, run_dir, images)
    assert notes == ["not audited: chief-0 (img:1): no Python of its started (its command starts with sh, not Python; "
                     "a shell that starts Python would have passed the hooks on)"]
    (hooks_folder(run_dir, "worker-0") / "hooks").unlink()
    assert unaudited(plan, run_dir, images)[1].startswith(
        "not audited: worker-0 (img:1): its Python never loaded the lab's hooks")


def test_a_replicas_failure_is_explained_from_its_output_and_why_says_it_all(tmp_path, monkeypatch, capsys):
    """Issue 35: a replay whose workers failed on a download, restarted twice, had `make why` say
    "nothing to explain ... (audited)", and every failure `exit code 1`."""
    from pathlib import Path

    from labtest.cli import lab_env, run_lab

    download = (Path(__file__).parent / "logs" / "no-route-out.log").read_text().partition("\n")[2]

    def save_output(project) -> None:
        lines = [f"worker-0 | 2026-12-04T10:00:01.000000+00:00 {line}" for line in download.splitlines()]
        (project.run_dir / "output.log").write_text("\n".join(lines) + "\n")

    monkeypatch.setattr(FakeBackend, "save_output", save_output)
    # backoffLimit 2: the second in-place restart reaches it (PastBackoffLimit, sum >= limit): one restart made
    code, project, result = run_replay(tmp_path, MULTIWORKER_JOB, [[{}, {"worker-0": 1}]])
    assert code == 1 and len(result["restarts"]) == 1
    worker = {row["task"]: row for row in result["tasks"]}["worker-0"]
    assert worker["explanation"]["signature"] == "no-route-out"
    assert "NETWORK=bridge" in worker["explanation"]["fix"] and "CLAIMS=" in worker["explanation"]["fix"]
    assert worker["error"].startswith("exited with code 1: socket.gaierror: [Errno -3]")
    assert worker["earlier_errors"] == ["exited with code 1"]
    said = run_lab("why", "RUN=r1", env=lab_env(RUNS_DIR=str(tmp_path / "runs")), timeout=60).stdout
    assert "worker-0: it tried to reach the internet" in said, said
    assert "the job restarted 1 time, as its restart policy says" in said
    assert "  before a restart: worker-0 exited with code 1" in said
    assert "not audited: chief-0, worker-0 (img:1): the lab's hooks were not put in" in said
    assert "(audited)" not in said and "nothing to explain" not in said


def test_why_on_a_clean_replay_the_hooks_did_not_reach_says_not_audited(tmp_path):
    from labtest.cli import lab_env, run_lab

    code, project, result = run_replay(tmp_path, MULTIWORKER_JOB, [[{}, {"worker-0": 0, "chief-0": 0}]])
    assert code == 0
    said = run_lab("why", "RUN=r1", env=lab_env(RUNS_DIR=str(tmp_path / "runs")), timeout=60).stdout.splitlines()
    assert said[1] == ("nothing to explain: no task failed, no script restarted, no audit finding (not audited: "
                       "chief-0, worker-0 (img:1): the lab's hooks were not put in)")


def test_a_restarted_replica_the_hooks_saw_says_where_it_resumed(tmp_path):
    """The hooks' `fit` events (observe.py) in a replica's log: the summary says where it resumed, as
    for a SCRIPT; a replica they did not reach says nothing of it."""
    from tflab.supervisor import summary

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for task in ("chief-0", "worker-0"):
        with open(run_dir / f"{task}.jsonl", "w") as log:
            for attempt in (1, 2):
                log.write(json.dumps({"event": "start", "task": task, "time": attempt, "role": "script",
                                      "strategy": "tfjob", "cluster": {}, "versions": {}, "settings": {}}) + "\n")
                log.write(json.dumps({"event": "fit", "task": task, "time": attempt + 0.5, "initial_epoch": 0,
                                      "epochs": 3, "backup_dir": "/out/backup", "backup_kept": True}) + "\n")
    replayed = summary.Replayed(tfjob="job.yaml", settings={}, not_applied=[],
                                hosts={"chief-0": "h0", "worker-0": "h1"},
                                images={"chief-0": "img:1", "worker-0": "img:1"},
                                unaudited=["not audited: chief-0 (img:1): why"])
    seen = summary.replay_row(run_dir, "worker-0", 0, False, replayed, False)
    unseen = summary.replay_row(run_dir, "chief-0", 0, False, replayed, False)
    assert [r["attempt"] for r in seen.resumes] == [2] and unseen.resumes == []


def test_the_lab_trainers_own_end_is_found_on_its_claim_by_its_exact_name(tmp_path):
    """make k8s K8S_PVC=... replayed: the chief's final loss from volumes/<claim>/tflab/chief-0.jsonl
    (beneath's walk matches a name's end: the name itself, never another task's or a longer one)."""
    from tflab.core.schema import EventLog
    from tflab.supervisor import summary

    end = dict(role="trainer", total_seconds=1.0, peak_rss_bytes=1, first_step_seconds=0.1, first_step_at=1.0,
               steady_step_seconds=0.01, weights_sha256="ab" * 32, parameters=3)
    folder = tmp_path / "volumes" / "out" / "tflab"
    folder.mkdir(parents=True)
    for name, loss in (("chief-0", 18.6), ("xchief-0", 99.0)):
        log = EventLog(folder / f"{name}.jsonl", name)
        log.emit("start", role="trainer", strategy="multiworker", cluster={}, versions={}, settings={},
                 baseline_loss=1.0)
        log.emit("end", final_loss=loss, **end)
        log.close()
    assert by_event(summary.own_attempt(tmp_path, "chief-0"), "end")[0]["final_loss"] == 18.6
    assert summary.own_attempt(tmp_path, "worker-0") == []


def test_a_replica_restarted_until_timeout_is_explained_by_its_failures_and_its_restarts_share_a_line(tmp_path):
    """The operator's simple.yaml (OnFailure, no backoffLimit) on the internal network: every
    attempt failed to download MNIST, the job restarted until TIMEOUT stopped it. The summary
    explained nothing (the last attempt was stopped, not failed) and said 'after restart N, the lab
    could not see whether it resumed' once per restart; now the download is explained, with its
    ways out, and the restarts alike share one line."""
    from tflab.core.runsummary import Summary
    from tflab.supervisor import summary, table

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for task in ("worker-0", "worker-1"):
        with open(run_dir / f"{task}.jsonl", "w") as log:
            for attempt in (1, 2, 3, 4):
                log.write(json.dumps({"event": "start", "task": task, "time": attempt, "role": "script",
                                      "strategy": "tfjob", "cluster": {}, "versions": {}, "settings": {}}) + "\n")
                log.write(json.dumps({"event": "end", "task": task, "time": attempt + 0.5, "role": "script",
                                      "exit_code": 1 if attempt < 4 else 137, "total_seconds": 0.5}) + "\n")
    output = ("Traceback (most recent call last):\n  File \"/var/tf_mnist/mnist_utils.py\", line 46, in load_data\n"
              "urllib.error.URLError: <urlopen error [Errno -3] Temporary failure in name resolution>\n\n"
              "During handling of the above exception, another exception occurred:\n\n"
              "Traceback (most recent call last):\n  File \"/var/tf_mnist/mnist_with_summaries.py\", line 105\n"
              "Exception: URL fetch failure on https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz: "
              "None -- [Errno -3] Temporary failure in name resolution\n")
    replayed = summary.Replayed(tfjob="simple.yaml", settings={"network": "internal"}, not_applied=[],
                                hosts={"worker-0": "h0", "worker-1": "h1"},
                                images={"worker-0": "img:1", "worker-1": "img:1"}, unaudited=[])
    rows = [summary.replay_row(run_dir, task, 137, True, replayed, False, output) for task in ("worker-0", "worker-1")]
    assert [row.status for row in rows] == ["stopped", "stopped"] and rows[0].error is None
    assert rows[0].explanation["signature"] == "no-route-out", rows[0].explanation
    assert "DATA=path" in rows[0].explanation["fix"]
    result = Summary(run="run", strategy="tfjob", backend="compose", outcome="timed out", ok=False, launched_at=0.0,
                     wall_seconds=906.3, settings={}, weights_agree=False, tasks=rows, tfjob="simple.yaml",
                     restarts=[1.0, 2.0, 3.0])
    lines = table.why_lines(result)
    assert lines[0].startswith("worker-0, worker-1: it tried to reach the internet"), lines
    resumed = [line for line in lines if "after restart" in line]
    assert resumed == ["worker-0, worker-1: after restarts 1 to 3, the lab could not see whether it resumed: no Keras "
                       "fit and no tf.train checkpoint restore before it ended"], resumed
    # a replica that failed last is explained by its last attempt, as before; one never failed, not at all
    assert summary.replay_row(run_dir, "worker-0", 0, False, replayed, True, "").explanation is None
