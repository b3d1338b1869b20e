"""JobSet's failure policy, mirrored from its controller's code (kubernetes-sigs/jobset, tag v0.12.0,
the JobSet Kubeflow Trainer v2.3.0 builds on: its go.mod), not from its docs. A TrainJob's replay
(replay/run.py ReplayRun) asks `execute_failure_policy` what JobSet does when a node's Job fails.
Each rule names the upstream file and function it mirrors, and so does the unit test that pins it
(tests/unit/test_jobset.py), so the next release is one diff to read.

    pkg/controllers/failure_policy.go    executeFailurePolicy, findFirstFailedPolicyRuleAndJob,
                                         ruleIsApplicable, anyMatchFound, findFirstFailedJob, the
                                         actionFunctionMap appliers, failurePolicyRecreateAll,
                                         failurePolicyRecreateJob, totalRestartsCountTowardsMax
    pkg/constants/constants.go           the Failed conditions' reasons
    pkg/features/features.go             RestartJob (jobset#1177), InPlaceRestart (its agent:
                                         keps/467, jobset#1140): alpha gates, off by default
    pkg/webhooks/jobset_webhook.go       ValidateCreate, validateFailurePolicy (what it refuses)
    api/jobset/v1alpha2/jobset_types.go  FailurePolicy, JobSetRestartStrategy (default Recreate)

Trainer v2.3.0 copies the runtime's spec.template.spec whole into the JobSet it makes, failurePolicy
included (runtime/core/trainingruntime.go newRuntimeInfo). A TrainJob the lab replays has one
replicated job, `node`, of one Job holding every node (runtime.trainer_job), so RestartJob of that
Job recreates every node, as RestartJobSet does: the replay's whole-job restart is what the cluster
does for every action here. What it cannot replay, the in-place restart (a failed node's container
restarted while its peers wait at an agent's barrier), `policy_of` refuses in one line; RestartJob,
behind an alpha gate, it says it replays as with the gate on.

Pure logic: no engine, no files.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field

from tflab.k8s.manifest import ManifestError, shown
from tflab.k8s.pod import field_of

RELEASE = "JobSet v0.12.0"
FAIL_JOBSET = "FailJobSet"
RESTART_JOBSET = "RestartJobSet"
RESTART_JOBSET_IGNORE_MAX = "RestartJobSetAndIgnoreMaxRestarts"
RESTART_JOB = "RestartJob"
RESTART_JOB_IGNORE_MAX = "RestartJobAndIgnoreMaxRestarts"
ACTIONS = (FAIL_JOBSET, RESTART_JOBSET, RESTART_JOBSET_IGNORE_MAX, RESTART_JOB, RESTART_JOB_IGNORE_MAX)
DEFAULT_ACTION = RESTART_JOBSET  # failure_policy.go defaultFailurePolicyRuleAction: no rule matched
# jobset_types.go JobSetRestartStrategy; the CRD defaults it to Recreate.
RECREATE, BLOCKING_RECREATE, IN_PLACE_RESTART = "Recreate", "BlockingRecreate", "InPlaceRestart"
STRATEGIES = (RECREATE, BLOCKING_RECREATE, IN_PLACE_RESTART)
# constants.go: the JobSet's Failed condition's reason, by the way it failed.
FAILED_JOBS = "FailedJobs"  # no failurePolicy: the first failed Job fails the JobSet
REACHED_MAX_RESTARTS = "ReachedMaxRestarts"
FAIL_JOBSET_REASON = "FailJobSetFailurePolicyAction"
# The node Job's Failed condition once its failures pass its backoffLimit (jobcontroller.py: make k8s
# writes 0, unset is 6): Kubernetes' Job controller (pkg/controller/job/job_controller.go) fails it
# with batch.JobReasonBackoffLimitExceeded and this message.
JOB_FAILED_REASON = "BackoffLimitExceeded"
JOB_FAILED_MESSAGE = "Job has reached the specified backoff limit"
# Outcomes of a failure.
FAILS, RESTARTS_ALL, RESTARTS_ONE_JOB = "fails the JobSet", "recreates every Job", "recreates the failed Job"
# jobset_webhook.go validOnJobFailureReasons (batch/v1's JobReason*) and ruleNameFmt.
JOB_FAILURE_REASONS = (JOB_FAILED_REASON, "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded",
                       "PodFailurePolicy")
RULE_NAME = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
# Python's re backtracks where JobSet's Go regexp (RE2) is linear: a hostile pattern could take hours
# against even a short message. Every pattern is first matched against the one message the replay
# gives a failed Job (JOB_FAILED_MESSAGE) in a child process, bounded by this (check_patterns).
PATTERN_SECONDS = 5.0


@dataclass(frozen=True)
class Rule:
    name: str
    action: str
    reasons: tuple[str, ...] = ()  # onJobFailureReasons; empty: any
    patterns: tuple[str, ...] = ()  # onJobFailureMessagePatterns (Go regexp, unanchored); empty: any
    targets: tuple[str, ...] = ()  # targetReplicatedJobs; empty: any


@dataclass(frozen=True)
class Policy:
    max_restarts: int = 0
    strategy: str = RECREATE
    rules: tuple[Rule, ...] = ()


@dataclass(frozen=True)
class FailedJob:
    replicated_job: str  # its jobset.sigs.k8s.io/replicatedjob-name label
    index: int  # its jobset.sigs.k8s.io/job-index label
    failed_at: float  # its Failed condition's lastTransitionTime
    reason: str = JOB_FAILED_REASON
    message: str = JOB_FAILED_MESSAGE

    @property
    def name(self) -> str:
        return f"{self.replicated_job}-{self.index}"  # the Job's name, less the JobSet's prefix


@dataclass
class Counts:
    """The JobSet's status counts (jobset_types.go JobSetStatus, ReplicatedJobStatus)."""
    restarts: int = 0  # status.restarts: every RestartJobSet*
    restarts_count_towards_max: int = 0  # status.restartsCountTowardsMax: RestartJobSet only
    job_restarts: dict[str, int] = field(default_factory=dict)  # Job name -> jobRestarts[index]
    job_restarts_count_towards_max: dict[str, int] = field(default_factory=dict)  # RestartJob only

    @property
    def total_towards_max(self) -> int:
        """failure_policy.go totalRestartsCountTowardsMax: the JobSet's count plus every Job's."""
        return self.restarts_count_towards_max + sum(self.job_restarts_count_towards_max.values())


@dataclass(frozen=True)
class Verdict:
    action: str
    outcome: str  # FAILS, RESTARTS_ALL or RESTARTS_ONE_JOB
    job: FailedJob  # the failed Job the action names
    rule: str | None = None  # the matching rule's name; None: no rule matched (or no failurePolicy)
    reason: str = ""  # the Failed condition's reason where it FAILS
    counted: bool = False  # whether the restart counts towards maxRestarts

    def words(self) -> str:
        by = f"rule {self.rule}" if self.rule else ("no failurePolicy" if self.reason == FAILED_JOBS
                                                     else "no rule matched, JobSet's default")
        return f"{self.action} ({by}; first failed Job {self.job.name}, {self.job.reason})"


def rule_is_applicable(rule: Rule, job: FailedJob) -> bool:
    """failure_policy.go ruleIsApplicable: the reason among onJobFailureReasons, the message matching
    one of onJobFailureMessagePatterns (anyMatchFound: regexp.MatchString, a search; a pattern that
    does not compile is skipped), the parent replicated job among targetReplicatedJobs; an empty list
    matches anything. Python's re stands in for Go's RE2 (the same for the patterns RE2 accepts,
    less backreferences and lookarounds, which RE2 refuses)."""
    if rule.reasons and job.reason not in rule.reasons:
        return False
    if rule.patterns and not any(matches(pattern, job.message) for pattern in rule.patterns):
        return False
    return not rule.targets or job.replicated_job in rule.targets


def matches(pattern: str, message: str) -> bool:
    try:
        return re.search(pattern, message) is not None
    except re.error:
        return False  # anyMatchFound logs "invalid regex" and goes on to the next pattern


def first_failed_job(failed: list[FailedJob]) -> FailedJob:
    """failure_policy.go findFirstFailedJob: the Job whose Failed condition is oldest (the first
    such in the list where two tie: `Before` is strict)."""
    return min(failed, key=lambda job: job.failed_at)


def first_matching_rule(rules: tuple[Rule, ...], failed: list[FailedJob]) -> tuple[Rule | None, FailedJob | None]:
    """failure_policy.go findFirstFailedPolicyRuleAndJob: the rules in order, the first that some
    failed Job matches, with the earliest-failed Job that matches it."""
    for rule in rules:
        matched = [job for job in failed if rule_is_applicable(rule, job)]
        if matched:
            return rule, first_failed_job(matched)
    return None, None


def execute_failure_policy(policy: Policy | None, failed: list[FailedJob], counts: Counts,
                           restart_job_gate: bool = True) -> Verdict:
    """failure_policy.go executeFailurePolicy and its actionFunctionMap appliers, once a child Job
    has failed. No failurePolicy: FailedJobs. A matching rule's action, else RestartJobSet:
    - FailJobSet: failed, FailJobSetFailurePolicyAction (failJobSetActionApplier);
    - RestartJobSet: failed, ReachedMaxRestarts, where the count towards the max reached
      maxRestarts (with the RestartJob gate on, totalRestartsCountTowardsMax, the Jobs' too), else
      every Job recreated, counted (restartJobSetActionApplier);
    - RestartJobSetAndIgnoreMaxRestarts: every Job recreated, not counted;
    - RestartJob: ReachedMaxRestarts as RestartJobSet (always the total), else the failed Job
      recreated alone, counted (restartJobActionApplier, failurePolicyRecreateJob);
    - RestartJobAndIgnoreMaxRestarts: the failed Job recreated alone, not counted.
    RestartJob's two need the RestartJob gate (features.go, alpha, off by default): without it the
    webhook refuses the JobSet, and an applier reached all the same errs (ValueError here)."""
    if not failed:
        raise ValueError("execute_failure_policy runs only once a child Job has failed")
    if policy is None:
        return Verdict(FAIL_JOBSET, FAILS, first_failed_job(failed), reason=FAILED_JOBS)
    rule, job = first_matching_rule(policy.rules, failed)
    action = rule.action if rule else DEFAULT_ACTION
    job = job or first_failed_job(failed)
    name = rule.name if rule else None
    if action == FAIL_JOBSET:
        return Verdict(action, FAILS, job, name, FAIL_JOBSET_REASON)
    if action in (RESTART_JOB, RESTART_JOB_IGNORE_MAX) and not restart_job_gate:
        raise ValueError(f"{action} needs JobSet's RestartJob feature gate (applyFailurePolicyRuleAction errs)")
    if action in (RESTART_JOBSET, RESTART_JOB):
        # restartJobSetActionApplier: `(gate && total >= max) || restartsCountTowardsMax >= max`
        towards_max = counts.total_towards_max if restart_job_gate else counts.restarts_count_towards_max
        if towards_max >= policy.max_restarts:
            return Verdict(action, FAILS, job, name, REACHED_MAX_RESTARTS)
    outcome = RESTARTS_ALL if action in (RESTART_JOBSET, RESTART_JOBSET_IGNORE_MAX) else RESTARTS_ONE_JOB
    return Verdict(action, outcome, job, name, counted=action in (RESTART_JOBSET, RESTART_JOB))


def counted(verdict: Verdict, counts: Counts) -> Counts:
    """The counts after the verdict's restart: failurePolicyRecreateAll (restarts + 1, and
    restartsCountTowardsMax + 1 where counted) or failurePolicyRecreateJob (the Job's jobRestarts
    + 1, and its jobRestartsCountTowardsMax + 1 where counted). A failing verdict changes nothing."""
    if verdict.outcome == FAILS:
        return counts
    if verdict.outcome == RESTARTS_ALL:
        return Counts(counts.restarts + 1, counts.restarts_count_towards_max + verdict.counted,
                      dict(counts.job_restarts), dict(counts.job_restarts_count_towards_max))
    name = verdict.job.name
    job_restarts = {**counts.job_restarts, name: counts.job_restarts.get(name, 0) + 1}
    towards = dict(counts.job_restarts_count_towards_max)
    if verdict.counted:
        towards[name] = towards.get(name, 0) + 1
    return Counts(counts.restarts, counts.restarts_count_towards_max, job_restarts, towards)


def policy_of(jobset: dict, replicated_jobs: list[str], where: str) -> tuple[Policy | None, list[str]]:
    """The runtime's JobSet failurePolicy (None where absent: JobSet then fails at the first failed
    Job), and what it says before the run; ManifestError, one line, for what JobSet's webhook
    refuses with its default gates (jobset_webhook.go ValidateCreate, validateFailurePolicy) and for
    what the replay cannot restart as the cluster would."""
    failure = field_of(jobset, "failurePolicy", dict, where, None)
    if failure is None:
        return None, []
    where = f"{where}.failurePolicy"
    max_restarts = field_of(failure, "maxRestarts", int, where, 0)
    if max_restarts < 0:
        raise ManifestError(f"{where}.maxRestarts is {max_restarts}, expected 0 or more")
    strategy = field_of(failure, "restartStrategy", str, where, RECREATE)
    if strategy == IN_PLACE_RESTART:
        raise ManifestError(f"{where}.restartStrategy is InPlaceRestart: {RELEASE}'s webhook refuses it unless the "
                            "cluster enables the alpha InPlaceRestart gate, and with it a failed node's container "
                            "restarts in its pod while its peers wait at JobSet's in-place agent (keps/467), which "
                            "the lab has not; the replay restarts every node, and a lone restarted "
                            "MultiWorkerMirroredStrategy worker cannot rejoin its peers; expected Recreate or "
                            "BlockingRecreate")
    rules = [rule_of(rule, f"{where}.rules[{number}]", replicated_jobs)
             for number, rule in enumerate(field_of(failure, "rules", list, where, []) or [])]
    check_patterns([(f"{where}.rules[{number}]", pattern) for number, rule in enumerate(rules)
                    for pattern in rule.patterns])
    names = [rule.name for rule in rules]
    if len(set(names)) != len(names):
        raise ManifestError(f"{where}.rules has two rules named {shown(next(n for n in names if names.count(n) > 1))}: "
                            f"{RELEASE}'s webhook wants each name once (validateFailurePolicy)")
    said = []
    if strategy == BLOCKING_RECREATE:
        said.append(f"{where}.restartStrategy BlockingRecreate: for the one Job of the nodes the same as Recreate "
                    "(the replay ends every node before it starts any again)")
    if any(rule.action in (RESTART_JOB, RESTART_JOB_IGNORE_MAX) for rule in rules):
        said.append(f"{where}.rules: RestartJob needs {RELEASE}'s alpha RestartJob gate, off by default (without it "
                    "the webhook refuses the JobSet); replayed as with the gate on: the node Job holds every node, "
                    "so it recreates them all, counted per Job")
    return Policy(max_restarts, strategy, tuple(rules)), said


def rule_of(rule: dict, where: str, replicated_jobs: list[str]) -> Rule:
    """One rule, as jobset_webhook.go validateFailurePolicy checks it: a name of 1-128 characters
    matching ruleNameFmt, targets among the replicated jobs, reasons among validOnJobFailureReasons
    (the CRD's schema has checked the action is one of ACTIONS)."""
    name = rule["name"]
    if not RULE_NAME.fullmatch(name) or len(name) > 128:
        raise ManifestError(f"{where}.name is {shown(name)}: {RELEASE}'s webhook wants 1-128 characters, a letter "
                            "first, then letters, digits or _,: and no , or : last (validateFailurePolicy)")
    for target in rule.get("targetReplicatedJobs") or []:
        if target not in replicated_jobs:
            raise ManifestError(f"{where}.targetReplicatedJobs names {shown(target)}, not a replicated job of the "
                                f"runtime ({', '.join(replicated_jobs)}), which {RELEASE}'s webhook refuses")
    for reason in rule.get("onJobFailureReasons") or []:
        if reason not in JOB_FAILURE_REASONS:
            raise ManifestError(f"{where}.onJobFailureReasons has {shown(reason)}, which {RELEASE}'s webhook refuses; "
                                f"expected one of {', '.join(JOB_FAILURE_REASONS)}")
    return Rule(name, rule["action"], tuple(rule.get("onJobFailureReasons") or ()),
                tuple(rule.get("onJobFailureMessagePatterns") or ()), tuple(rule.get("targetReplicatedJobs") or ()))


def check_patterns(patterns: list[tuple[str, str]], message: str = JOB_FAILED_MESSAGE) -> None:
    """Each (where, pattern) matched once against `message` in a child Python, which prints a line
    per pattern done; ManifestError naming the first pattern not done within PATTERN_SECONDS. After
    this, matching them in the lab's own process against that message is known to end."""
    if not patterns:
        return
    program = ("import json, re, sys\n"
               "message = sys.argv[1]\n"
               "for pattern in json.load(sys.stdin):\n"
               "    try:\n"
               "        re.search(pattern, message)\n"
               "    except re.error:\n"
               "        pass\n"
               "    print(flush=True)\n")
    try:
        subprocess.run([sys.executable, "-I", "-c", program, message], input=json.dumps([p for _, p in patterns]),
                       capture_output=True, text=True, timeout=PATTERN_SECONDS, check=True)
    except subprocess.TimeoutExpired as error:
        output = error.stdout or b""  # bytes whatever `text` says (subprocess.TimeoutExpired)
        done = output.count(b"\n" if isinstance(output, bytes) else "\n")
        where, pattern = patterns[min(done, len(patterns) - 1)]
        raise ManifestError(f"{where}.onJobFailureMessagePatterns has {shown(pattern)}, which Python's backtracking "
                            f"re did not match against {shown(message)} in {PATTERN_SECONDS:g} s (JobSet's Go "
                            "RE2 is linear); expected a simpler pattern") from None
    except (subprocess.CalledProcessError, OSError) as error:
        raise ManifestError(f"the failure policy's onJobFailureMessagePatterns could not be checked: {error}") from None
