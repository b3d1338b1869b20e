"""The training operator's rules for a TFJob, as tflab/k8s/tfoperator.py mirrors them from its code
(training-operator release-1.9, tag v1.9.4). Each test names the upstream file and function: when
a release changes one, the test to change is the one that names it."""

import pytest
from tflab.k8s import tfoperator
from tflab.k8s.tfoperator import FAILS_THE_JOB, IN_PLACE, RECREATED, Replica


def test_set_defaults_tfjob():
    """pkg/apis/kubeflow.org/v1/tensorflow_defaults.go SetDefaults_TFJob: cleanPodPolicy None (the
    docs said Running: trainer#1753), successPolicy "" (SuccessPolicyDefault), restartPolicy
    TFJobDefaultRestartPolicy, which tensorflow_types.go sets to Never."""
    assert tfoperator.DEFAULT_CLEAN_POD_POLICY == "None"
    assert tfoperator.DEFAULT_RESTART_POLICY == "Never"
    assert tfoperator.SUCCESS_POLICIES == ("", "AllWorkers")


@pytest.mark.parametrize("code, retryable", [(1, False), (2, False), (127, False), (128, True), (137, True),
                                             (139, True), (143, True), (255, True)])
def test_is_retryable_exit_code(code, retryable):
    """pkg/util/train/train_util.go IsRetryableExitCode: `return exitCode >= 128`. 128 and 139 are
    retried, whatever the docs call them."""
    assert tfoperator.is_retryable_exit_code(code) is retryable


@pytest.mark.parametrize("policy, code, fate", [
    ("OnFailure", 1, IN_PLACE), ("OnFailure", 137, IN_PLACE), ("Always", 1, IN_PLACE),
    ("ExitCode", 143, RECREATED), ("ExitCode", 128, RECREATED), ("ExitCode", 127, FAILS_THE_JOB),
    ("ExitCode", 1, FAILS_THE_JOB), ("Never", 143, FAILS_THE_JOB), ("Never", 1, FAILS_THE_JOB),
])
def test_reconcile_pods_after_a_failure(policy, code, fate):
    """pkg/controller.v1/common/pod.go ReconcilePods: a pod in phase Failed is deleted to be made again
    under ExitCode with a retryable code (OnFailure and Always pods never reach Failed: the kubelet
    restarts their container, pkg/core/pod.go SetRestartPolicy); ExitCode with another code fails the
    job; Never leaves a failed pod that UpdateJobStatus fails the job for."""
    assert tfoperator.after_failure(policy, code) == fate


@pytest.mark.parametrize("limit, restarts, past", [
    (None, 0, False), (None, 1000, False),  # nil: PastBackoffLimit returns false, no limit at all
    (0, 0, False), (0, 1, True),  # `result > 0`
    (1, 0, False), (1, 1, True),  # `result >= backoffLimit`: 1 behaves as 0
    (3, 2, False), (3, 3, True),
])
def test_past_backoff_limit(limit, restarts, past):
    """pkg/core/job.go PastBackoffLimit: the OnFailure, Always and ExitCode replicas' restartCount
    summed; `result > 0` for a limit of 0, `result >= limit` otherwise; nothing without a limit."""
    assert tfoperator.past_backoff_limit(limit, restarts) is past
    assert tfoperator.COUNTED_IN_BACKOFF == ("OnFailure", "Always", "ExitCode")


@pytest.mark.parametrize("limit, failed_pods, exceeds", [(None, 1, False), (0, 0, False), (0, 1, True),
                                                         (1, 1, False), (5, 3, False)])
def test_reconcile_jobs_exceeds_backoff_limit(limit, failed_pods, exceeds):
    """pkg/controller.v1/common/job.go ReconcileJobs: a new failed pod with `previousRetry + 1 >
    backoffLimit`, previousRetry being 0 while reconciles succeed: only a limit of 0 trips it."""
    assert tfoperator.exceeds_backoff_limit(limit, failed_pods) is exceeds


def replicas(*names: str) -> list[Replica]:
    return [Replica(name, name.rsplit("-", 1)[0], int(name.rsplit("-", 1)[1])) for name in names]


@pytest.mark.parametrize("names, codes, policy, succeeded", [
    (("chief-0", "worker-0", "worker-1"), {"chief-0": 0}, "", True),  # the chief's success is the job's
    (("chief-0", "worker-0", "worker-1"), {"worker-0": 0, "worker-1": 0}, "", False),
    (("master-0", "worker-0"), {"master-0": 0}, "", True),
    (("worker-0", "worker-1"), {"worker-0": 0}, "", True),  # IsWorker0Completed
    (("worker-0", "worker-1"), {"worker-1": 0}, "", False),
    (("worker-0", "worker-1"), {"worker-0": 0}, "AllWorkers", False),
    (("worker-0", "worker-1"), {"worker-0": 0, "worker-1": 0}, "AllWorkers", True),  # expected == 0
    (("worker-0", "worker-1", "ps-0", "evaluator-0"), {"worker-0": 0}, "", True),
    (("ps-0", "evaluator-0"), {"ps-0": 0, "evaluator-0": 0}, "", False),  # no chief, no worker: never
    (("chief-0", "worker-0"), {"chief-0": 1}, "", False),
])
def test_update_job_status_success(names, codes, policy, succeeded):
    """pkg/controller.v1/tensorflow/tfjob_controller.go UpdateJobStatus and IsWorker0Completed: with
    a Chief or Master its success is the job's; else every worker's, or worker-0's (exit code 0)
    unless successPolicy is AllWorkers; PS and Evaluator never decide it."""
    assert tfoperator.succeeded(replicas(*names), codes, policy) is succeeded


@pytest.mark.parametrize("policy, left", [("None", ["worker-1", "ps-0"]), ("Running", []), ("All", [])])
def test_delete_pods_and_services(policy, left):
    """pkg/controller.v1/common/job.go DeletePodsAndServices for a finished job: None deletes nothing,
    Running the running and pending pods, All every pod. v1.9.4 (trainer#3419, #3420) sets the
    Failed condition before it, so this holds at backoffLimit and the deadline too."""
    assert tfoperator.left_running(policy, ["worker-1", "ps-0"]) == left


def test_the_operators_messages():
    """pkg/controller.v1/common/job.go ReconcileJobs and tfjob_controller.go UpdateJobStatus: every
    Failed condition's reason is NewReason("TFJob", JobFailedReason) (pkg/util/status.go); the
    message says which rule."""
    assert tfoperator.FAILED == "TFJobFailed" and tfoperator.SUCCEEDED == "TFJobSucceeded"
    assert tfoperator.backoff_message("j") == "Job j has failed because it has reached the specified backoff limit"
    assert tfoperator.deadline_message("j") == "Job j has failed because it was active longer than specified deadline"
    # UpdateJobStatus's order of types: Chief, Eval, Master, PS, Worker
    assert tfoperator.replica_failed_message("ns", "j", {"worker": 2, "ps": 1}) == \
        "TFJob ns/j has failed because 1 PS replica(s) failed."
    assert tfoperator.succeeded_message("ns", "j") == "TFJob ns/j successfully completed."
