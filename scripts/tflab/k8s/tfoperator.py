"""The Kubeflow training operator's rules for a TFJob, mirrored from its code (training-operator
release-1.9, tag v1.9.4, the last v1 release), not from its docs: where the two differ, the code is
what a cluster runs. Each rule names the upstream file and function it mirrors, and so does the
unit test that pins it (tests/unit/test_tfoperator.py), so the next release is one diff to read.

    pkg/apis/kubeflow.org/v1/tensorflow_defaults.go   SetDefaults_TFJob
    pkg/apis/kubeflow.org/v1/tensorflow_types.go      TFJobDefaultRestartPolicy, SuccessPolicyAllWorkers
    pkg/util/train/train_util.go                      IsRetryableExitCode
    pkg/controller.v1/common/pod.go                   ReconcilePods (what a failed pod does)
    pkg/core/pod.go                                   SetRestartPolicy (ExitCode pods are Never pods)
    pkg/core/job.go                                   PastBackoffLimit, PastActiveDeadline
    pkg/controller.v1/common/job.go                   ReconcileJobs, DeletePodsAndServices
    pkg/controller.v1/tensorflow/tfjob_controller.go  UpdateJobStatus, IsWorker0Completed
    pkg/util/status.go                                JobFailedReason, NewReason ("TFJobFailed")

Pure logic: no engine, no files. replay.run.ReplayRun applies it to what the engine reports.
"""

from __future__ import annotations

from dataclasses import dataclass

RELEASE = "training-operator v1.9.4"
KIND = "TFJob"
# tensorflow_types.go TFJobDefaultRestartPolicy, set by SetDefaults_TFJob (setDefaultRestartPolicy).
DEFAULT_RESTART_POLICY = "Never"
# SetDefaults_TFJob: "Set default cleanpod policy to None" (the docs long said Running: trainer#1753).
DEFAULT_CLEAN_POD_POLICY = "None"
ALL_WORKERS = "AllWorkers"  # tensorflow_types.go SuccessPolicyAllWorkers; "" is SuccessPolicyDefault
SUCCESS_POLICIES = ("", ALL_WORKERS)
# PastBackoffLimit counts the container restarts of these replica types' running pods only.
COUNTED_IN_BACKOFF = ("OnFailure", "Always", "ExitCode")
FAILED = f"{KIND}Failed"  # util.NewReason(kind, JobFailedReason): every Failed condition's reason
SUCCEEDED = f"{KIND}Succeeded"
# tensorflow_types.go: the names the operator gives a TFJob's parts and looks for in its pods, which
# make k8s writes (writer.py) and the replay reads (pod.py, tfjob.py, trainjob.py).
CONTAINER = "tensorflow"  # TFJobDefaultContainerName: TF_CONFIG goes into this container only
PORT_NAME = "tfjob-port"  # TFJobDefaultPortName: the cluster's port is this container port, else 2222
# The lab's jobs -> the TFJob's replica types (TFJobReplicaTypeChief ...), in the order tasks are listed.
TYPE_NAMES = {"chief": "Chief", "master": "Master", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
REPLICA_TYPES = tuple(TYPE_NAMES.values())

# What a replica's failed container leads to (ReconcilePods, and the kubelet for the pod's own policy).
IN_PLACE = "restarted in place"  # OnFailure / Always: the kubelet restarts the container; restartCount + 1
RECREATED = "recreated"  # ExitCode with a retryable code: the operator deletes the pod and makes it again
FAILS_THE_JOB = "fails the job"  # Never, or ExitCode with a permanent code


def is_retryable_exit_code(code: int) -> bool:
    """train_util.go IsRetryableExitCode: `exitCode >= 128`. Every code from 128 is retried,
    128 and 139 included, though the docs and the ExitCode comment call some of them permanent."""
    return code >= 128


def after_failure(policy: str, code: int) -> str:
    """What becomes of a replica whose container exited with a non-zero code, by its replica
    type's restartPolicy (common/pod.go ReconcilePods; core/pod.go SetRestartPolicy makes an
    ExitCode pod a Never pod, so the operator, not the kubelet, decides its restart)."""
    if policy in ("OnFailure", "Always"):
        return IN_PLACE
    if policy == "ExitCode" and is_retryable_exit_code(code):
        return RECREATED
    return FAILS_THE_JOB


def past_backoff_limit(limit: int | None, restarts_in_place: int) -> bool:
    """core/job.go PastBackoffLimit: no backoffLimit, no limit at all (it returns false); else the
    sum of restartCount over the running pods of OnFailure, Always and ExitCode replicas, against
    `result > 0` for a limit of 0 and `result >= limit` otherwise. An ExitCode pod is recreated,
    not restarted, so its restartCount stays 0 and it never counts here (trainer#2045)."""
    if limit is None:
        return False
    return restarts_in_place > 0 if limit == 0 else restarts_in_place >= limit


def exceeds_backoff_limit(limit: int | None, new_failed_pods: int) -> bool:
    """common/job.go ReconcileJobs' other test: a new pod in phase Failed (a Never or ExitCode
    replica's) while `previousRetry + 1 > backoffLimit`, where previousRetry is the work queue's
    requeues of the job, 0 unless its reconciles return errors: so it fails the job at the first
    such failure where backoffLimit is 0, and never otherwise."""
    return limit is not None and new_failed_pods > 0 and 0 + 1 > limit


def backoff_message(name: str) -> str:
    return f"Job {name} has failed because it has reached the specified backoff limit"  # ReconcileJobs


def deadline_message(name: str) -> str:
    return f"Job {name} has failed because it was active longer than specified deadline"  # ReconcileJobs


def replica_failed_message(namespace: str, name: str, failed: dict[str, int]) -> str:
    """UpdateJobStatus's message for the first replica type (in its order) with failed pods."""
    for job in ("chief", "evaluator", "master", "ps", "worker"):
        if failed.get(job):
            return f"{KIND} {namespace}/{name} has failed because {failed[job]} {TYPE_NAMES[job]} replica(s) failed."
    return ""


def succeeded_message(namespace: str, name: str) -> str:
    return f"{KIND} {namespace}/{name} successfully completed."  # UpdateJobStatus


@dataclass(frozen=True)
class Replica:
    name: str  # worker-1
    job: str  # worker
    index: int


def succeeded(replicas: list[Replica], codes: dict[str, int | None], success_policy: str) -> bool:
    """tfjob_controller.go UpdateJobStatus: with a Chief or Master, the job succeeded once it did
    (its replicas all succeeded); without one, once every worker succeeded, or worker-0 did
    (IsWorker0Completed: exit code 0) unless successPolicy is AllWorkers. PS and Evaluator
    replicas never decide success. A job with neither chief nor worker never succeeds."""
    def done(found: list[Replica]) -> bool:
        return bool(found) and all(codes.get(r.name) == 0 for r in found)

    chiefs = [r for r in replicas if r.job in ("chief", "master")]
    if chiefs:
        return done(chiefs)
    workers = [r for r in replicas if r.job == "worker"]
    worker0 = [r for r in workers if r.index == 0]
    return done(workers) or (success_policy != ALL_WORKERS and done(worker0))


def left_running(clean_pod_policy: str, running: list[str]) -> list[str]:
    """common/job.go DeletePodsAndServices once the job is finished (Succeeded or Failed): None
    deletes nothing, Running deletes the running (and pending) pods, All every pod. Since v1.9.4
    (trainer#3419, #3420) this holds at backoffLimit and activeDeadlineSeconds too; before, those
    deleted every pod whatever the policy. What the operator would leave running, of `running`."""
    return list(running) if clean_pod_policy == "None" else []
