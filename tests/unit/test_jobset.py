"""JobSet's failure policy as tflab/k8s/jobset.py mirrors it from its code (kubernetes-sigs/jobset,
tag v0.12.0, the JobSet Kubeflow Trainer v2.3.0 builds on), and a TrainJob's replay deciding as
JobSet would (replay/run.py ReplayRun.jobset_condition). Each test names the upstream file and
function: when a release changes one, the test to change is the one that names it."""

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st
from labtest.fakes import FakeBackend
from tflab.core.runsummary import Summary
from tflab.core.settings import Settings
from tflab.k8s import jobset
from tflab.k8s import writer as k8s
from tflab.k8s.jobset import (
    FAILS,
    RESTARTS_ALL,
    RESTARTS_ONE_JOB,
    Counts,
    FailedJob,
    Policy,
    Rule,
    execute_failure_policy,
)
from tflab.k8s.manifest import ManifestError
from tflab.replay.run import ReplayRun
from tflab.supervisor import runner

pytestmark = [pytest.mark.unit, pytest.mark.usefixtures("quick")]  # tests/unit/conftest.py

NODE = FailedJob("node", 0, 10.0)


def test_no_failure_policy_fails_the_jobset_at_the_first_failed_job():
    """failure_policy.go executeFailurePolicy: `js.Spec.FailurePolicy == nil` sets the Failed
    condition with constants.go FailedJobsReason, naming findFirstFailedJob's Job."""
    verdict = execute_failure_policy(None, [FailedJob("node", 1, 5.0), FailedJob("node", 0, 3.0)], Counts())
    assert (verdict.outcome, verdict.reason, verdict.job.index) == (FAILS, "FailedJobs", 0)


@pytest.mark.parametrize("done, outcome", [(0, RESTARTS_ALL), (1, RESTARTS_ALL), (2, FAILS)])
def test_restart_jobset_until_max_restarts(done, outcome):
    """failure_policy.go restartJobSetActionApplier, the default action (defaultFailurePolicyRuleAction
    = RestartJobSet, no rule matched): ReachedMaxRestarts once restartsCountTowardsMax >= maxRestarts,
    else failurePolicyRecreateAll, counted."""
    verdict = execute_failure_policy(Policy(max_restarts=2), [NODE], Counts(done, done))
    assert verdict.outcome == outcome and verdict.action == "RestartJobSet" and verdict.rule is None
    assert verdict.reason == ("ReachedMaxRestarts" if outcome == FAILS else "")


def test_failure_policy_recreate_all_counts():
    """failure_policy.go failurePolicyRecreateAll: status.restarts + 1 always, restartsCountTowardsMax
    + 1 only where shouldCountTowardsMax (RestartJobSet, not RestartJobSetAndIgnoreMaxRestarts)."""
    counted = execute_failure_policy(Policy(1), [NODE], Counts())
    after = jobset.counted(counted, Counts())
    assert (after.restarts, after.restarts_count_towards_max) == (1, 1)
    ignoring = Policy(1, rules=(Rule("always", "RestartJobSetAndIgnoreMaxRestarts"),))
    verdict = execute_failure_policy(ignoring, [NODE], Counts(5, 1))
    assert verdict.outcome == RESTARTS_ALL and not verdict.counted
    after = jobset.counted(verdict, Counts(5, 1))
    assert (after.restarts, after.restarts_count_towards_max) == (6, 1)


def test_fail_jobset_action():
    """failure_policy.go failJobSetActionApplier: Failed, constants.go FailJobSetActionReason
    ("FailJobSetFailurePolicyAction"), whatever the counts."""
    verdict = execute_failure_policy(Policy(9, rules=(Rule("stop", "FailJobSet"),)), [NODE], Counts())
    assert (verdict.outcome, verdict.reason, verdict.rule) == (FAILS, "FailJobSetFailurePolicyAction", "stop")


@pytest.mark.parametrize("rule, applies", [
    (Rule("any", "FailJobSet"), True),
    (Rule("r", "FailJobSet", reasons=("BackoffLimitExceeded",)), True),
    (Rule("r", "FailJobSet", reasons=("PodFailurePolicy", "DeadlineExceeded")), False),
    (Rule("t", "FailJobSet", targets=("node",)), True),
    (Rule("t", "FailJobSet", targets=("launcher",)), False),
    (Rule("m", "FailJobSet", patterns=("backoff limit$",)), True),
    (Rule("m", "FailJobSet", patterns=("^backoff",)), False),  # MatchString searches; ^ still anchors
    (Rule("m", "FailJobSet", patterns=("(unclosed", "reached")), True),  # a bad pattern is skipped
    (Rule("m", "FailJobSet", patterns=("(unclosed",)), False),
    (Rule("all", "FailJobSet", ("BackoffLimitExceeded",), ("reached",), ("node",)), True),
])
def test_rule_is_applicable(rule, applies):
    """failure_policy.go ruleIsApplicable: the Job's failure reason in onJobFailureReasons, its
    message matching one of onJobFailureMessagePatterns (anyMatchFound: regexp.MatchString, an
    invalid pattern logged and skipped), its parent replicated job in targetReplicatedJobs; an empty
    list matches anything. The Job is Kubernetes' BackoffLimitExceeded with its message."""
    assert jobset.rule_is_applicable(rule, NODE) is applies


def test_the_first_matching_rule_and_its_earliest_failed_job():
    """failure_policy.go findFirstFailedPolicyRuleAndJob: rules in order, the first some failed Job
    matches, with the Job that failed earliest of those it matches (jobFailedEarlier)."""
    rules = (Rule("launcher", "FailJobSet", targets=("launcher",)), Rule("nodes", "RestartJobSetAndIgnoreMaxRestarts",
                                                                         targets=("node",)))
    failed = [FailedJob("node", 2, 7.0), FailedJob("node", 1, 4.0), FailedJob("other", 0, 1.0)]
    rule, job = jobset.first_matching_rule(rules, failed)
    assert rule is not None and rule.name == "nodes" and job == failed[1]
    assert jobset.first_matching_rule(rules, [FailedJob("other", 0, 1.0)]) == (None, None)


def test_restart_job_counts_per_job_and_towards_the_total():
    """failure_policy.go restartJobActionApplier: ReachedMaxRestarts once totalRestartsCountTowardsMax
    (the JobSet's count plus every Job's jobRestartsCountTowardsMax) >= maxRestarts, else
    failurePolicyRecreateJob: the Job's jobRestarts + 1 and its jobRestartsCountTowardsMax + 1;
    RestartJobAndIgnoreMaxRestarts bumps jobRestarts only. restartJobSetActionApplier then counts the
    Jobs' restarts too (the RestartJob gate on)."""
    policy = Policy(2, rules=(Rule("node", "RestartJob"),))
    verdict = execute_failure_policy(policy, [NODE], Counts())
    assert verdict.outcome == RESTARTS_ONE_JOB and verdict.counted
    counts = jobset.counted(verdict, Counts(1, 1))
    assert counts.job_restarts == {"node-0": 1} and counts.total_towards_max == 2 and counts.restarts == 1
    assert execute_failure_policy(policy, [NODE], counts).reason == "ReachedMaxRestarts"
    assert execute_failure_policy(Policy(2), [NODE], counts).reason == "ReachedMaxRestarts"
    ignoring = Policy(0, rules=(Rule("node", "RestartJobAndIgnoreMaxRestarts"),))
    verdict = execute_failure_policy(ignoring, [NODE], counts)
    after = jobset.counted(verdict, counts)
    assert verdict.outcome == RESTARTS_ONE_JOB and after.job_restarts == {"node-0": 2}
    assert after.total_towards_max == 2


def test_restart_job_without_its_gate():
    """features.go RestartJob (alpha, off by default): restartJobActionApplier returns an error;
    restartJobSetActionApplier then reads restartsCountTowardsMax alone."""
    with pytest.raises(ValueError, match="RestartJob feature gate"):
        execute_failure_policy(Policy(1, rules=(Rule("n", "RestartJob"),)), [NODE], Counts(), restart_job_gate=False)
    counts = Counts(0, 0, {"node-0": 3}, {"node-0": 3})
    assert execute_failure_policy(Policy(1), [NODE], counts, restart_job_gate=False).outcome == RESTARTS_ALL
    assert execute_failure_policy(Policy(1), [NODE], counts).outcome == FAILS


@given(st.integers(0, 5), st.lists(st.sampled_from(jobset.ACTIONS[1:]), max_size=4), st.integers(1, 12))
def test_counted_restarts_never_pass_max_restarts(max_restarts, actions, failures):
    """totalRestartsCountTowardsMax (failure_policy.go) bounds the counted restarts: under any mix of
    the restart actions, applied failure after failure, the counted ones stop at maxRestarts, and
    the first failure past it fails the JobSet with ReachedMaxRestarts unless an IgnoreMaxRestarts
    action matched it. The rules here all match (no reasons, patterns or targets), so the first wins."""
    rules = tuple(Rule(f"r{number}", action) for number, action in enumerate(actions))
    policy_, counts = Policy(max_restarts, rules=rules), Counts()
    for _ in range(failures):
        verdict = execute_failure_policy(policy_, [NODE], counts)
        if verdict.outcome == FAILS:
            assert verdict.reason == "ReachedMaxRestarts" and counts.total_towards_max == max_restarts
            break
        counts = jobset.counted(verdict, counts)
        assert counts.total_towards_max <= max_restarts
        assert verdict.action == (actions[0] if actions else "RestartJobSet")
    assert counts.restarts + sum(counts.job_restarts.values()) <= failures


def policy(failure: dict) -> jobset.Policy | None:
    found, _ = jobset.policy_of({"failurePolicy": failure}, ["node"], "runtime")
    return found


@pytest.mark.parametrize("failure, refused", [
    ({"restartStrategy": "InPlaceRestart"}, "InPlaceRestart"),
    ({"rules": [{"name": "9lives", "action": "FailJobSet"}]}, "rules[0].name"),
    ({"rules": [{"name": "ends,", "action": "FailJobSet"}]}, "rules[0].name"),
    ({"rules": [{"name": "a" * 129, "action": "FailJobSet"}]}, "rules[0].name"),
    ({"rules": [{"name": "a", "action": "FailJobSet"}, {"name": "a", "action": "RestartJobSet"}]}, "two rules"),
    ({"rules": [{"name": "a", "action": "FailJobSet", "targetReplicatedJobs": ["launcher"]}]}, "launcher"),
    ({"rules": [{"name": "a", "action": "FailJobSet", "onJobFailureReasons": ["OOMKilled"]}]}, "OOMKilled"),
    ({"maxRestarts": -1}, "maxRestarts is -1"),
])
def test_what_the_webhook_refuses(failure, refused):
    """pkg/webhooks/jobset_webhook.go ValidateCreate (InPlaceRestart with its alpha gate off) and
    validateFailurePolicy (ruleNameFmt and 1-128 characters, unique names, targetReplicatedJobs among
    the replicated jobs, onJobFailureReasons among validOnJobFailureReasons); the CRD's int32 with
    maxRestarts >= 0 as the lab reads it. InPlaceRestart is refused by the replay too: its agent's
    barrier is not the lab's."""
    with pytest.raises(ManifestError, match=refused.replace("[", r"\[")):
        policy(failure)


def test_a_pattern_pythons_re_cannot_match_in_time_is_refused(monkeypatch):
    """anyMatchFound runs Go's regexp (RE2: linear time); Python's re backtracks, so a hostile
    pattern (here 2**43 ways through the 43 characters of the Job's message) would hang the replay:
    jobset.check_patterns matches each once in a child process, bounded, and refuses it in one line."""
    monkeypatch.setattr(jobset, "PATTERN_SECONDS", 1.0)
    good = {"name": "fine", "action": "FailJobSet", "onJobFailureMessagePatterns": ["backoff", "(bad"]}
    hostile = {"name": "slow", "action": "FailJobSet", "onJobFailureMessagePatterns": ["limit", "(.|.)*X"]}
    assert policy({"rules": [good]}) is not None
    with pytest.raises(ManifestError, match=r"^runtime.failurePolicy.rules\[1\].onJobFailureMessagePatterns has "
                                            r"\"\(\.\|\.\)\*X\", which Python's backtracking re did not match"):
        policy({"rules": [good, hostile]})


def test_what_the_policy_reads():
    """jobset_types.go FailurePolicy: restartStrategy defaults to Recreate (the CRD's default);
    no failurePolicy is None (executeFailurePolicy's FailedJobs path)."""
    read = policy({"maxRestarts": 3, "rules": [{"name": "on_deadline:x", "action": "FailJobSet",
                                                  "onJobFailureReasons": ["DeadlineExceeded"]}]})
    assert read == Policy(3, "Recreate", (Rule("on_deadline:x", "FailJobSet", ("DeadlineExceeded",)),))
    assert jobset.policy_of({}, ["node"], "runtime") == (None, [])
    _, said = jobset.policy_of({"failurePolicy": {"restartStrategy": "BlockingRecreate",
                                                  "rules": [{"name": "n", "action": "RestartJob"}]}}, ["node"], "rt")
    assert any("BlockingRecreate" in line for line in said) and any("RestartJob gate" in line for line in said)


# -- the replay deciding as JobSet would (replay/run.py ReplayRun) ---------------------------

def replay_run(tmp_path, attempts, failure_policy: dict | None) -> ReplayRun:
    """make k8s's TrainJob (2 nodes) with this runtime failurePolicy (None: none), as a ReplayRun on
    a stand-in project whose n-th start gives attempts[n]'s exit codes, one dict a poll."""
    from tflab.k8s import trainjob

    settings = Settings(workers=2, k8s_image="registry.example/tflab:test")
    rendered, _ = k8s.render(settings, "tj", k8s.manifests_cluster(settings))
    documents = copy.deepcopy(rendered["trainjob.yaml"])
    (runtime,) = [d for d in documents if d["kind"].endswith("TrainingRuntime")]
    runtime["spec"]["template"]["spec"].pop("failurePolicy")
    if failure_policy is not None:
        runtime["spec"]["template"]["spec"]["failurePolicy"] = failure_policy
    path = tmp_path / "trainjob.yaml"
    path.write_text(k8s.to_yaml_documents(documents))
    settings = Settings(trainjob=str(path), runs_dir=str(tmp_path / "runs"), run="r1")
    plan = trainjob.load(settings)
    run_dir = tmp_path / "runs" / "r1"
    project = FakeBackend(plan.as_cluster(), run_dir, attempts, description="a stand-in project")
    return ReplayRun(plan, settings, project, run_dir)


def replay(tmp_path, attempts, failure_policy: dict | None) -> tuple[int, Summary]:
    run = replay_run(tmp_path, attempts, failure_policy)
    code = runner.run(run)
    return code, Summary.read(run.run_dir)


def test_a_restart_asked_for_past_max_restarts_is_refused(tmp_path):
    """restart_verdict asks JobSet too (restartJobSetActionApplier): where the counts reached
    maxRestarts it fails the job, ReachedMaxRestarts, rather than restart."""
    run = replay_run(tmp_path, [FAILING], {"maxRestarts": 1})
    assert run.restart_verdict([]) == (True, "") and run.jobset_counts.total_towards_max == 1
    restart, why = run.restart_verdict([])
    assert not restart and run.reason == "ReachedMaxRestarts" and "marks the job Failed (ReachedMaxRestarts)" in why


FAILING = [{}, {"worker-0": 1, "worker-1": 1}]
DONE = [{}, {"worker-0": 0, "worker-1": 0}]


def test_the_replay_without_a_failure_policy_fails_at_once(tmp_path, capsys):
    """failure_policy.go executeFailurePolicy: no failurePolicy, FailedJobs at the first failure."""
    code, result = replay(tmp_path, [FAILING, DONE], None)
    out = capsys.readouterr().out
    assert code == 1 and result.restarts == [] and result.reason == "FailedJobs", out
    assert "no failurePolicy: a node's failure fails its Job" in out


def test_the_replay_applies_a_fail_jobset_rule(tmp_path, capsys):
    """failure_policy.go failJobSetActionApplier, reached through ruleIsApplicable: the node Job's
    BackoffLimitExceeded matches the rule, so no restart, whatever maxRestarts says."""
    failure = {"maxRestarts": 3, "rules": [{"name": "stop", "action": "FailJobSet", "targetReplicatedJobs": ["node"],
                                            "onJobFailureReasons": ["BackoffLimitExceeded"]}]}
    code, result = replay(tmp_path, [FAILING, DONE], failure)
    out = capsys.readouterr().out
    assert code == 1 and result.restarts == [] and result.reason == "FailJobSetFailurePolicyAction", out
    assert "JobSet applies FailJobSet (rule stop; first failed Job node-0, BackoffLimitExceeded)" in out


def test_the_replay_skips_a_rule_that_does_not_match(tmp_path, capsys):
    """failure_policy.go findFirstFailedPolicyRuleAndJob: a rule for DeadlineExceeded does not
    match a BackoffLimitExceeded Job, so the default RestartJobSet restarts, counted."""
    failure = {"maxRestarts": 1, "rules": [{"name": "late", "action": "FailJobSet",
                                            "onJobFailureReasons": ["DeadlineExceeded"]}]}
    code, result = replay(tmp_path, [FAILING, DONE], failure)
    out = capsys.readouterr().out
    assert code == 0 and len(result.restarts) == 1, out
    assert "restarting every node (restart 1, 1 counted of failurePolicy.maxRestarts 1), as JobSet's " \
           "RestartJobSet (no rule matched, JobSet's default; first failed Job node-0, BackoffLimitExceeded)" in out


def test_the_replay_restarts_past_max_restarts_where_the_rule_ignores_them(tmp_path, capsys):
    """failure_policy.go restartJobSetAndIgnoreMaxRestartsActionApplier: maxRestarts 0, yet every
    failure restarts, not counted (restartsCountTowardsMax stays 0)."""
    failure = {"maxRestarts": 0, "rules": [{"name": "again", "action": "RestartJobSetAndIgnoreMaxRestarts"}]}
    code, result = replay(tmp_path, [FAILING, FAILING, DONE], failure)
    out = capsys.readouterr().out
    assert code == 0 and len(result.restarts) == 2, out
    assert "restarting every node (restart 2, not counted of failurePolicy.maxRestarts 0)" in out


def test_the_replay_restarts_the_node_job_whole_for_restart_job(tmp_path, capsys):
    """failure_policy.go restartJobActionApplier and failurePolicyRecreateJob: the one Job node-0
    holds every node, so recreating it restarts them all; its jobRestartsCountTowardsMax reaches
    maxRestarts (totalRestartsCountTowardsMax) and the next failure is ReachedMaxRestarts."""
    failure = {"maxRestarts": 1, "rules": [{"name": "job", "action": "RestartJob"}]}
    code, result = replay(tmp_path, [FAILING, FAILING, DONE], failure)
    out = capsys.readouterr().out
    assert code == 1 and len(result.restarts) == 1 and result.reason == "ReachedMaxRestarts", out
    assert "(it recreates Job node-0, which holds every node)" in out
    assert any("RestartJob needs JobSet v0.12.0's alpha RestartJob gate" in line for line in result.not_applied)
