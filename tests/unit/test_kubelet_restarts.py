"""A TFJob's OnFailure replica restarted as the kubelet restarts it (issue 44): its container
alone, in place, after the kubelet's back-off, while the other replicas run on; and TIMEOUT a
bound, not a hint. The back-off is the kubelet's code's (k8s/kubelet.py names each file):

    pkg/kubelet/kubelet.go                          backOffPeriod 10 s, MaxContainerBackOff 300 s
    pkg/kubelet/kuberuntime/kuberuntime_manager.go  doBackOff (FinishedAt starts the back-off)
    client-go util/flowcontrol/backoff.go           Next (doubling, capped), IsInBackOffSince, hasExpired

The runner's one pipeline (runner.run with replay.run.ReplayRun) runs on the stand-in backend
(labtest.fakes.FakeBackend) with a FakeClock: a sleep moves it, so each wait is exact and a run of
minutes takes a moment."""

import textwrap
from functools import partialmethod

import pytest
from labtest.fakes import FakeBackend, FakeClock
from tflab.core import runfolder
from tflab.core.runsummary import Summary
from tflab.core.schema import EventLog
from tflab.core.settings import Settings, SettingsError
from tflab.k8s import jobcontroller, kubelet, tfjob, trainjob
from tflab.k8s import writer as k8s
from tflab.replay import run as run_module
from tflab.replay.run import ReplayRun
from tflab.supervisor import runner, stall

pytestmark = pytest.mark.unit

TWO_WORKERS = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: job}
spec:
  tfReplicaSpecs:
    Worker: {replicas: 2, restartPolicy: POLICY,
             template: {spec: {containers: [{name: tensorflow, image: "img:1"}]}}}
"""


class Guard:
    def release(self) -> None:
        pass


@pytest.fixture()
def clock(monkeypatch) -> FakeClock:
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.5)
    monkeypatch.setattr(runner, "FAILURE_GRACE_SECONDS", 10)
    monkeypatch.setattr(runner.reaper, "watch", lambda run_dir: Guard())  # no process for a stand-in's run
    return FakeClock().install(monkeypatch, runner, run_module, stall)


def replay(tmp_path, clock: FakeClock, attempts, policy="OnFailure", timeout=300.0, job=TWO_WORKERS,
           stacks: dict | None = None, **given) -> tuple[int, FakeBackend, Summary]:
    """The replay of `job` (a TFJob; a TrainJob where it is a list of documents: trainjob_documents)."""
    if isinstance(job, list):
        path = tmp_path / "trainjob.yaml"
        path.write_text(k8s.to_yaml_documents(job))
        settings = Settings(trainjob=str(path), runs_dir=str(tmp_path / "runs"), run="r1", **given)
        plan = trainjob.load(settings)
    else:
        path = tmp_path / "tfjob.yaml"
        path.write_text(textwrap.dedent(job.replace("POLICY", policy)))
        settings = Settings(tfjob=str(path), runs_dir=str(tmp_path / "runs"), run="r1", **given)
        plan = tfjob.load(settings)
    plan.timeout = timeout
    run_dir = tmp_path / "runs" / "r1"
    project = FakeBackend(plan.as_cluster(), run_dir, attempts, description="a stand-in project", clock=clock.monotonic)
    project.stacks = stacks or {}
    code = runner.run(ReplayRun(plan, settings, project, run_dir))
    return code, project, Summary.read(run_dir)


def trainjob_documents(max_restarts: int = 0, **node_job) -> list[dict]:
    """A TrainJob of 2 nodes and its runtime as make k8s writes them (failurePolicy.maxRestarts,
    the node Job's backoffLimit 0, restartPolicy Never), with `node_job`'s fields set on the node
    Job's spec (None: taken out), and `restartPolicy` on its pod."""
    settings = Settings(workers=2, restarts=max_restarts, k8s_image="registry.example/tflab:test")
    documents = k8s.render(settings, "tj", k8s.manifests_cluster(settings))[0]["trainjob.yaml"]
    (runtime,) = [document for document in documents if document["kind"] in k8s.RUNTIME_KINDS.values()]
    (replicated,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    job_spec = replicated["template"]["spec"]
    for key, value in node_job.items():
        where = job_spec["template"]["spec"] if key == "restartPolicy" else job_spec
        where.pop(key, None)
        if value is not None:
            where[key] = value
    return documents


# -- the back-off, as the kubelet's code keeps it ---------------------------------------------------


def test_the_kubelets_back_off_is_none_then_10_s_doubling_to_300_s():
    """doBackOff: no entry, no back-off (the first failure restarts at once); Next makes the entry
    at backOffPeriod, then doubles it up to MaxContainerBackOff."""
    backoff, waits, now = kubelet.Backoff(), [], 0.0
    for _ in range(9):
        finished = now + 1.0  # each attempt runs a second
        wait = backoff.wait("worker-1", finished, finished)
        waits.append(wait)
        now = finished + wait
        backoff.restarted("worker-1", finished, now)
    assert waits == [0, 10, 20, 40, 80, 160, 300, 300, 300]
    assert (kubelet.INITIAL_SECONDS, kubelet.MAX_SECONDS) == (10.0, 300.0)
    assert backoff.words() == "back-off 10 s, doubling to 300 s"


def test_a_container_that_ran_twice_the_cap_starts_its_back_off_over():
    """flowcontrol hasExpired: `eventTime.Sub(lastUpdate) > maxDuration*2`; a container that ran
    600 s since its last restart is restarted at once, and the next back-off is 10 s again."""
    backoff = kubelet.Backoff()
    backoff.restarted("w", 0.0, 0.0)
    backoff.restarted("w", 5.0, 15.0)  # back-off now 20 s
    assert backoff.wait("w", 15.0 + 600.0, 15.0 + 600.0) == 20.0  # 600 s exactly: not expired
    assert backoff.wait("w", 15.0 + 600.5, 15.0 + 600.5) == 0.0
    backoff.restarted("w", 615.5, 615.5)
    assert backoff.wait("w", 620.0, 620.0) == 10.0
    assert backoff.wait("w", 620.0, 627.0) == 3.0  # from the container's end, not from when it is asked


def test_the_simple_yaml_figure_is_7_restarts_a_replica_in_15_minutes():
    """The operator's simple.yaml on the internal network fails each attempt within seconds: 0 + 10
    + 20 + 40 + 80 + 160 + 300 = 610 s of back-off for 7 restarts, the 8th would start after 910 s."""
    assert [kubelet.restarts_within(900, run) for run in (1, 10, 30, 40)] == [7, 7, 7, 7]
    assert kubelet.restarts_within(900, 60) == 6
    assert kubelet.restarts_within(900, 1, initial=1.0) == 33  # BACKOFF=1: 1 s doubling to 30 s


def test_backoff_is_a_replays_setting_refused_in_one_line_elsewhere(tmp_path):
    with pytest.raises(SettingsError, match=r"^BACKOFF=0 is not allowed: expected seconds from 0.1 to 10$"):
        Settings.from_env({"BACKOFF": "0"})
    with pytest.raises(SettingsError, match=r"^BACKOFF=2 is not allowed without TFJOB or TRAINJOB: expected TFJOB="):
        Settings.from_env({"BACKOFF": "2"})
    assert Settings.from_env({}).backoff == 10.0
    path = tmp_path / "trainjob.yaml"
    path.write_text(k8s.to_yaml_documents(trainjob_documents()))
    assert Settings.from_env({"BACKOFF": "2", "TRAINJOB": str(path)}).backoff == 2.0  # a TrainJob's node retries


# -- the runner's pipeline ------------------------------------------------------------------------


def test_one_failed_replica_is_restarted_alone_after_a_doubling_capped_back_off(tmp_path, clock, capsys):
    """worker-1 fails a second after each start; worker-0 runs on, never stopped, never restarted.
    BACKOFF=1 scales the kubelet's schedule (1 s doubling to 30 s) as a test may; each restart
    comes its back-off after the end was seen, to within a poll."""
    code, project, result = replay(tmp_path, clock, [[{}, {}, {"worker-1": 1}]], timeout=200.0, backoff=1.0)
    out = capsys.readouterr().out
    assert {task for task, _ in project.alone} == {"worker-1"}
    assert project.starts == 1 and project.attempt == 0 and project.terminated == []
    assert "worker-0" not in project.own_attempt  # never restarted, in place or otherwise
    waits = [line.split(" after ")[1].split(" s ")[0] if " after " in line else "0"
             for line in out.splitlines() if "the kubelet restarts it in place" in line]
    assert waits[:8] == ["0", "1", "2", "4", "8", "16", "30", "30"], waits
    assert "after 60 s" not in out and "restarting every replica" not in out
    times = [moment for _, moment in project.alone]
    gaps = [later - earlier for earlier, later in zip(times, times[1:])]
    for gap, wait in zip(gaps, [1, 2, 4, 8, 16, 30, 30]):
        assert wait + 1.0 <= gap <= wait + 2.0, (gaps, wait)  # the attempt's second, its back-off, a poll
    assert result["outcome"] == "timed out" and code == 1
    rows = {row["task"]: row for row in result["tasks"]}
    assert rows["worker-1"]["restart_count"] == len(times) == len(result["restarts"])
    assert rows["worker-0"]["restart_count"] == 0 and rows["worker-0"]["status"] == "stopped"
    assert result["settings"]["backoff"] == 1.0


def test_a_replica_that_ran_long_is_restarted_at_once_again(tmp_path, clock, capsys):
    """hasExpired: an attempt that ran more than 2 x the cap (60 s at BACKOFF=1) starts the back-off
    over: restarted at once, not after the doubled back-off."""
    quick = [{}, {}, {"worker-1": 1}]
    long = [{}] * 200 + [{"worker-1": 1}]  # 100 s at 0.5 s a poll
    code, project, result = replay(tmp_path, clock, [quick, quick, quick, long, quick], timeout=150.0, backoff=1.0)
    out = capsys.readouterr().out
    waits = [line.split(" in place ")[1].split(" (")[0] for line in out.splitlines()
             if "the kubelet restarts it in place" in line]
    assert waits[:5] == ["at once", "after 1 s", "after 2 s", "at once", "after 1 s"], waits


def test_an_exit_code_replica_is_recreated_alone_at_once_and_its_peers_run_on(tmp_path, clock, capsys):
    """ExitCode (core/pod.go SetRestartPolicy: a Never pod) with a code that train_util.go
    IsRetryableExitCode retries: common/pod.go ReconcilePods deletes that pod alone and its next
    reconcile creates it again (createNewPod), with no back-off, the kubelet's or the operator's;
    worker-0 runs on untouched, and its success is the job's. A new pod's restartCount is 0, so the
    summary's restart_count (the kubelet's) stays 0 and nothing is counted for backoffLimit."""
    first = [{}, {"worker-1": 137}, {"worker-1": 137}, {"worker-1": 137}, {"worker-1": 137, "worker-0": 0}]
    code, project, result = replay(tmp_path, clock, [first, [{}, {"worker-1": 143}], [{}, {"worker-1": 0}]],
                                   policy="ExitCode")
    out = capsys.readouterr().out
    assert code == 0 and project.attempt == 0 and [task for task, _ in project.alone] == ["worker-1", "worker-1"]
    assert len(result["restarts"]) == 2 and "get 10 s to end" not in out and "restarting every replica" not in out
    assert ("restartPolicy ExitCode (Worker): a retried replica is recreated, not restarted; one that exits 128 or "
            "more is recreated alone, at once, and the other replicas run on; 1-127 fails the job") in out
    assert ("worker-1 exited with code 137, retryable under restartPolicy ExitCode (128 and up): the operator deletes "
            "its pod and creates it again at once; the other replicas run on") in out
    assert "recreating worker-1 (its recreation 2, the job's restart 2; a new pod's restartCount is 0" in out
    (first_at, second_at) = [when for _, when in project.alone]
    assert second_at - first_at == 2 * runner.POLL_SECONDS  # no back-off: seen at its restart's 2nd poll, made then
    assert [row["restart_count"] for row in result["tasks"]] == [0, 0]


def test_an_exit_code_replicas_peer_that_aborts_with_1_fails_the_job(tmp_path, clock, capsys):
    """The recreated replica's peers meet what a lost MultiWorkerMirroredStrategy peer gives them:
    they abort, and under ExitCode their own code decides (ReconcilePods: 1-127 fails the job)."""
    code, project, result = replay(tmp_path, clock, [[{}, {"worker-1": 137}, {"worker-1": 137, "worker-0": 1}],
                                                     [{}]], policy="ExitCode")
    out = capsys.readouterr().out
    assert code == 1 and [task for task, _ in project.alone] == ["worker-1"] and project.attempt == 0
    assert "worker-0 exited with code 1, permanent under restartPolicy ExitCode (1-127)" in out


def test_never_fails_the_job_at_its_first_failure(tmp_path, clock, capsys):
    """Never: a failed pod stays failed (tfjob_controller.go UpdateJobStatus marks the job Failed)."""
    code, project, result = replay(tmp_path, clock, [[{}, {"worker-1": 1}]], policy="Never")
    out = capsys.readouterr().out
    assert code == 1 and project.attempt == 0 and not project.alone and not result["restarts"]
    assert "worker-1 exited with code 1 and its restartPolicy is Never: the operator marks the job Failed" in out


def test_timeout_ends_the_run_within_a_bound_whatever_it_waits_for(tmp_path, clock, capsys):
    """TIMEOUT is a bound (issue 44: 120 s asked once took 159.5 s): a replica waiting out a back-off
    of 300 s, and a peer that opened its stacks file but never answers the lab's request, which
    the lab waits for at most STACKS_WAIT_SECONDS, or PAST_DEADLINE_SECONDS past the deadline."""
    started = clock.now
    code, project, result = replay(tmp_path, clock, [[{}, {}, {"worker-1": 1}]], timeout=120.0,
                                   stacks={"worker-0": ""})
    out = capsys.readouterr().out
    assert result["outcome"] == "timed out" and code == 1
    # restarts at once, then after 10, 20 and 40 s (and a second or so of each attempt): the 5th, 80 s
    # after the failure seen at about 76 s, would come past the deadline and is never made
    assert "after 80 s" in out and "its restart 4," in out and "its restart 5," not in out
    assert project.asked_stacks == [["worker-0"]]
    bound = 120 + runner.POLL_SECONDS + runner.PAST_DEADLINE_SECONDS + 0.2  # + stackdump.capture's own poll
    assert clock.now - started <= bound and result["wall_seconds"] <= bound, clock.now - started


def test_a_restart_whose_start_takes_the_rest_of_the_time_ends_the_run(tmp_path, clock, capsys, monkeypatch):
    """A restart's start is bounded by the deadline: the backend is given what is left, and once
    it returns past the deadline nothing else is waited for."""
    limits = []
    restart_tasks = FakeBackend.restart_tasks

    def slow_restart(self, tasks, timeout=300):
        limits.append(timeout)
        clock.sleep(timeout)  # Compose took all it was given
        restart_tasks(self, tasks, timeout)

    monkeypatch.setattr(FakeBackend, "restart_tasks", slow_restart, raising=True)
    started = clock.now
    code, project, result = replay(tmp_path, clock, [[{}, {}, {"worker-1": 1}]], timeout=60.0)
    assert result["outcome"] == "timed out" and limits and limits[0] <= 60.0
    assert clock.now - started <= 60 + runner.POLL_SECONDS + runner.PAST_DEADLINE_SECONDS


def test_a_whole_restart_that_ends_past_the_deadline_ends_the_run(tmp_path, clock, capsys, monkeypatch):
    """JobSet's RestartJobSet restarts every node; a restart that returned past the deadline (a slow
    start) ends the run there as timed out, and nothing further is followed or waited for: not the
    stacks of replicas just started, which have nothing to say yet (issue 44's waits of 5 s)."""
    restart = FakeBackend.restart

    def slow_restart(self):
        clock.sleep(120)
        restart(self)

    monkeypatch.setattr(FakeBackend, "restart", slow_restart)
    started = clock.now
    code, project, result = replay(tmp_path, clock, [[{}, {"worker-1": 137}], [{}]], job=trainjob_documents(1),
                                   timeout=60.0, stacks={"worker-0": "", "worker-1": ""})
    assert result["outcome"] == "timed out" and code == 1 and project.attempt == 1
    assert project.asked_stacks == [["worker-0"]]  # at the failure's grace, not after the restart
    assert "passed: Trainer marks the TrainJob Failed (DeadlineExceeded" in capsys.readouterr().out
    # the failure's grace, worker-0's stacks waited for then, the slow start, and no more
    assert clock.now - started <= 10 + stall.STACKS_WAIT_SECONDS + 0.2 + 120 + runner.POLL_SECONDS * 4


# -- a TrainJob's node Job, as Kubernetes' Job controller retries its pods (k8s/jobcontroller.py) -----


def test_the_job_controllers_limits_and_pod_failure_back_off():
    """pkg/controller/job/job_controller.go syncJob's exceedsBackoffLimit (`failed > backoffLimit`)
    and pastBackoffLimitOnFailure (`> 0` for 0, `>= limit` else); backoff_utils.go
    backoffRecord.getRemainingTime: DefaultJobPodFailureBackOff 10 s doubling per failure after the
    last success, capped at MaxJobPodFailureBackOff 10 min."""
    assert not jobcontroller.exceeds_backoff_limit(6, 6) and jobcontroller.exceeds_backoff_limit(6, 7)
    assert jobcontroller.exceeds_backoff_limit(0, 1) and not jobcontroller.exceeds_backoff_limit(0, 0)
    assert jobcontroller.past_backoff_limit_on_failure(0, 1) and not jobcontroller.past_backoff_limit_on_failure(0, 0)
    assert jobcontroller.past_backoff_limit_on_failure(6, 6) and not jobcontroller.past_backoff_limit_on_failure(6, 5)
    assert [jobcontroller.pod_failure_backoff(n) for n in range(8)] == [0, 10, 20, 40, 80, 160, 320, 600]
    assert jobcontroller.backoff_limit_of({}) == 6  # pkg/apis/batch/v1/defaults.go SetDefaults_Job
    job = jobcontroller.NodeJob("Never", 6)
    assert [job.pod_failed() for _ in range(2)] == [10, 20]
    job.saw({"worker-0": 0, "worker-1": None})  # backoff_utils.go newBackoffRecord: a success starts it over
    assert job.pod_failed() == 10
    job.saw({"worker-0": 0, "worker-1": None})  # the same success, seen again, changes nothing
    assert job.pod_failed() == 20
    assert jobcontroller.backoff_limit_of({"backoffLimit": 0}) == 0


def test_a_never_node_is_made_again_alone_until_its_jobs_failed_pods_pass_backoff_limit(tmp_path, clock, capsys):
    """restartPolicy Never, backoffLimit 2: each failure is one failed pod (job_controller.go
    syncJob counts status.failed); the controller makes it again after its pod failure back-off
    (backoff_utils.go getRemainingTime: 10 s, then 20 s), worker-0 untouched, until the third takes
    the failed pods past 2 (exceedsBackoffLimit): Job node-0 fails, BackoffLimitExceeded, and JobSet
    with maxRestarts 0 fails the job (failure_policy.go: ReachedMaxRestarts)."""
    failing = [{}, {"worker-1": 1}]
    job = trainjob_documents(0, backoffLimit=2, restartPolicy="Never")
    code, project, result = replay(tmp_path, clock, [failing] * 4, job=job)
    out = capsys.readouterr().out
    assert code == 1 and result["reason"] == "ReachedMaxRestarts" and project.attempt == 0
    (first, _), (second, _) = [(when, task) for task, when in project.alone]
    assert [task for task, _ in project.alone] == ["worker-1", "worker-1"]
    assert "worker-1 exited with code 1; the Job controller makes its pod again after 10 s (pod failure back-off" in out
    assert "the Job controller makes its pod again after 20 s" in out
    assert second - first == pytest.approx(20 + 2 * runner.POLL_SECONDS, abs=runner.POLL_SECONDS)
    assert ("worker-1 failed, 3 failed pods of backoffLimit 2: the Job controller marks Job node-0 Failed "
            "(BackoffLimitExceeded: Job has reached the specified backoff limit)") in out


def test_an_on_failure_node_restarts_in_place_until_its_jobs_restarts_reach_the_default_limit(tmp_path, clock, capsys):
    """A runtime that sets neither (Trainer v2.3.0's own do not): backoffLimit 6 (SetDefaults_Job),
    restartPolicy OnFailure (jobset_webhook.go Default). The kubelet restarts the node in place
    after its back-off (none, then 10 s doubling), and job_controller.go pastBackoffLimitOnFailure
    fails the Job once the restarts reach 6: the 6th failure, after 5 restarts."""
    job = trainjob_documents(0, backoffLimit=None, restartPolicy=None)
    code, project, result = replay(tmp_path, clock, [[{}, {"worker-1": 1}]] * 8, job=job)
    out = capsys.readouterr().out
    assert "restartPolicy OnFailure, backoffLimit 6: a failed node is retried alone (the kubelet restarts it" in out
    assert code == 1 and result["reason"] == "ReachedMaxRestarts" and project.attempt == 0
    times = [when for _, when in project.alone]
    gaps = [round(later - earlier - 2 * runner.POLL_SECONDS) for earlier, later in zip(times, times[1:])]
    assert len(times) == 5 and gaps == [10, 20, 40, 80], gaps
    assert "worker-1: restarting it in place, as the kubelet does (the job's restart 5; Job node-0: 5 restarts" in out
    assert "worker-1 failed, 6 restarts of backoffLimit 6: the Job controller marks Job node-0 Failed" in out
    assert {row["task"]: row["restart_count"] for row in result["tasks"]} == {"worker-0": 0, "worker-1": 5}


def test_a_node_waiting_its_back_off_is_not_made_again_once_its_job_failed(tmp_path, clock, capsys):
    """backoffLimit 1, Never: worker-1's failure is retried after 10 s, but worker-0's failure a poll
    later takes the failed pods to 2 > 1 and fails the Job (job_controller.go syncJob deletes its
    active pods, and makes none again); JobSet's RestartJobSet (maxRestarts 1) then recreates every
    node in a new Job. No node is made again alone in between (runner.follow: no lone restart once
    a failure is in its grace), and the new Job's count starts afresh."""
    job = trainjob_documents(1, backoffLimit=1, restartPolicy="Never")
    code, project, result = replay(tmp_path, clock, [[{}, {"worker-1": 1}, {"worker-1": 1, "worker-0": 1}],
                                                     [{}, {"worker-0": 0, "worker-1": 0}]], job=job)
    out = capsys.readouterr().out
    assert "worker-1 exited with code 1; the Job controller makes its pod again after 10 s" in out
    assert ("worker-0, worker-1 failed, 2 failed pods of backoffLimit 1: the Job controller marks Job node-0 "
            "Failed") in out
    assert "tflab: stopping \n" not in out  # nothing ran: worker-1 waited its back-off, and is not made again
    assert code == 0 and result["ok"] and project.alone == [] and project.attempt == 1 and len(result["restarts"]) == 1
    assert "tflab: restarting every node (restart 1, 1 counted of failurePolicy.maxRestarts 1)" in out


# -- the lab's own wait is no stall (issue 44) -----------------------------------------------------


@pytest.mark.parametrize("held", [True, False])
def test_a_back_off_the_lab_waits_out_is_no_stall_of_the_peers_waiting_for_it(tmp_path, clock, capsys, monkeypatch,
                                                                              held):
    """worker-1 fails and the Job controller makes its pod again after 10 s (restartPolicy Never,
    backoffLimit 2); worker-0, which advanced once, is silent meanwhile, waiting for its peer. With
    STALL=5 the stall watch would call that a stall; the replay's BackOffHold holds it while the lab
    waits (RunObserver.holds, stall.Watch.hold, as make chaos's fault does), so the run goes on and
    succeeds. Without the hold (held=False: the control) the same run is called stalled."""
    if not held:
        monkeypatch.setattr(run_module.BackOffHold, "holds", lambda self: False)

    def advanced(backend, attempt):  # worker-0's fit begins: the stall watch is armed from here
        EventLog(runfolder.log_path(backend.run_dir / runfolder.TASKS, "worker-0"), "worker-0").emit(
            "fit", epoch=0, step=0, epochs=3)

    monkeypatch.setattr(FakeBackend, "__init__", partialmethod(FakeBackend.__init__, on_start=advanced))
    first = [{}] + [{"worker-1": 1}] * 24 + [{"worker-1": 1, "worker-0": 0}]  # worker-0 ends just after worker-1
    job = trainjob_documents(0, backoffLimit=2, restartPolicy="Never")
    code, project, result = replay(tmp_path, clock, [first, [{}, {"worker-1": 0}]], job=job, stall="5")
    out = capsys.readouterr().out
    assert "the Job controller makes its pod again after 10 s" in out
    if held:
        assert code == 0 and result["outcome"] == "ok" and result["stall"] is None, out
        assert [task for task, _ in project.alone] == ["worker-1"]
    else:
        assert result["outcome"] == "stalled" and not project.alone, out
