"""Kubernetes' Job controller as a TrainJob's node Job meets it, mirrored from its code, not its docs:
how many of its pods' failures it takes before the Job fails, and how soon it makes a failed pod
again. A TrainJob's replay (replay/run.py ReplayRun) applies it to the one Job of every node, and
JobSet's failure policy (jobset.py) decides once that Job has failed. Each rule names the upstream
file and function it mirrors, and so does the unit test that pins it
(tests/unit/test_kubelet_restarts.py), so the next release is one diff to read.

    pkg/apis/batch/v1/defaults.go         SetDefaults_Job: backoffLimit 6 where unset (MaxInt32
                                          where backoffLimitPerIndex is set); neither JobSet v0.12.0
                                          nor Trainer v2.3.0 sets one, and JobSet's webhook
                                          (jobset_webhook.go Default) makes the pod OnFailure
    pkg/controller/job/job_controller.go  syncJob: exceedsBackoffLimit (`jobCtx.failed >
                                          backoffLimit`: the Job's failed pods, a Never pod's),
                                          pastBackoffLimitOnFailure (an OnFailure pod never fails:
                                          restartCount summed over the running and pending pods,
                                          `> 0` for a limit of 0, `>= limit` otherwise); either
                                          fails the Job, BackoffLimitExceeded, and deletes its
                                          active pods. DefaultJobPodFailureBackOff 10 s,
                                          MaxJobPodFailureBackOff 10 min
    pkg/controller/job/backoff_utils.go   backoffRecord.getRemainingTime: before it makes a failed
                                          pod again, 10 s doubling per failure since the Job's last
                                          success (failuresAfterLastSuccess, which newBackoffRecord
                                          sets to 0 at a pod's success), capped, counted from the
                                          last failure

So under restartPolicy Never a node's failure is one failed pod, made again after that back-off,
and the Job fails at the failure that takes its failed pods past backoffLimit; under OnFailure the
kubelet restarts the container in place (kubelet.py's back-off) and the Job fails once the
restarts reach backoffLimit. The replay counts a failure as it is seen, as it does a TFJob's
(tfoperator.py): the cluster sees an OnFailure restart once the kubelet has made it.

Pure logic: no engine, no clock of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_BACKOFF_LIMIT = 6  # defaults.go SetDefaults_Job
PER_INDEX_BACKOFF_LIMIT = 2**31 - 1  # SetDefaults_Job where backoffLimitPerIndex is set: math.MaxInt32
POD_FAILURE_BACKOFF = 10.0  # job_controller.go DefaultJobPodFailureBackOff
MAX_POD_FAILURE_BACKOFF = 600.0  # MaxJobPodFailureBackOff
RESTART_POLICIES = ("OnFailure", "Never")  # what the API server takes for a Job's pod (validation.go)


def backoff_limit_of(job_spec: dict) -> int:
    """The Job's backoffLimit as SetDefaults_Job leaves it."""
    if job_spec.get("backoffLimit") is not None:
        return job_spec["backoffLimit"]
    if job_spec.get("backoffLimitPerIndex") is not None:
        return PER_INDEX_BACKOFF_LIMIT
    return DEFAULT_BACKOFF_LIMIT


def exceeds_backoff_limit(limit: int, failed: int) -> bool:
    """job_controller.go syncJob's exceedsBackoffLimit: `jobCtx.failed > *job.Spec.BackoffLimit`."""
    return failed > limit


def past_backoff_limit_on_failure(limit: int, restarts: int) -> bool:
    """job_controller.go pastBackoffLimitOnFailure (an OnFailure pod's template only): the sum of
    restartCount over the running and pending pods, `result > 0` for 0, `result >= limit` else."""
    return restarts > 0 if limit == 0 else restarts >= limit


def pod_failure_backoff(failures: int, initial: float = POD_FAILURE_BACKOFF,
                        maximum: float = MAX_POD_FAILURE_BACKOFF) -> float:
    """backoff_utils.go getRemainingTime's backoffDuration: 0 after no failure, else `initial`
    doubled once per failure after the first, capped at `maximum`."""
    if failures <= 0:
        return 0.0
    backoff = initial
    for _ in range(1, failures):
        backoff *= 2
        if backoff >= maximum:
            return maximum
    return backoff


@dataclass
class NodeJob:
    """One node Job's life, as its status and the controller's backoff record keep it; JobSet's
    restart makes a new Job (and new pods), so a new NodeJob. `scale`: BACKOFF's, over the
    kubelet's 10 s, applied to the pod failure back-off too (1: the controller's own)."""

    restart_policy: str  # the pod's: OnFailure or Never
    backoff_limit: int
    scale: float = 1.0
    failed: int = 0  # status.failed: its pods that failed (under Never), made again since
    restarts: int = 0  # restartCount summed over its pods (under OnFailure): the kubelet's restarts
    failures_after_last_success: int = 0  # backoffRecord's
    succeeded: set[str] = field(default_factory=set)  # its pods that succeeded

    def saw(self, codes: dict[str, int | None]) -> None:
        """backoff_utils.go newBackoffRecord: a pod newly succeeded starts the record over (its
        failuresAfterLastSuccess 0); the failures after it count from there."""
        for task, code in codes.items():
            if code == 0 and task not in self.succeeded:
                self.succeeded.add(task)
                self.failures_after_last_success = 0

    @property
    def in_place(self) -> bool:
        return self.restart_policy == "OnFailure"

    def fails(self, failing: int) -> bool:
        """Whether the Job fails with `failing` of its pods failed now, not yet retried."""
        if self.in_place:
            return past_backoff_limit_on_failure(self.backoff_limit, self.restarts + failing)
        return exceeds_backoff_limit(self.backoff_limit, self.failed + failing)

    def pod_failed(self) -> float:
        """A Never pod's failure, as it is seen: the backoff record takes it; the seconds until the
        controller makes the pod again (getRemainingTime, from this failure)."""
        self.failures_after_last_success += 1
        return pod_failure_backoff(self.failures_after_last_success, POD_FAILURE_BACKOFF * self.scale,
                                   MAX_POD_FAILURE_BACKOFF * self.scale)

    def retried(self) -> None:
        """A failed pod made again (Never: status.failed keeps it) or its container restarted in
        place (OnFailure: its restartCount + 1)."""
        if self.in_place:
            self.restarts += 1
        else:
            self.failed += 1

    def count_words(self, failing: int = 0) -> str:
        """Its count against backoffLimit, as the controller tests it, with `failing` pods failed now."""
        if self.in_place:
            return f"{self.restarts + failing} restarts of backoffLimit {self.backoff_limit}"
        return f"{self.failed + failing} failed pods of backoffLimit {self.backoff_limit}"

    def backoff_words(self) -> str:
        return (f"pod failure back-off {POD_FAILURE_BACKOFF * self.scale:g} s, doubling to "
                f"{MAX_POD_FAILURE_BACKOFF * self.scale:g} s")
