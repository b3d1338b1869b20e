"""A TFJob's (or TrainJob's) replay as runner.run runs it (ReplayRun): what it says before it starts,
and the job's end, restarts and deadline as the training operator (tfoperator.py) or JobSet
would decide them from the replicas' exit codes."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from tflab import console
from tflab.backends.base import RunObserver
from tflab.core import cluster, runfolder
from tflab.core.explain import VANISHED
from tflab.core.settings import Settings
from tflab.k8s import jobcontroller, jobset, kubelet, tfoperator
from tflab.k8s.tfjob import Plan, describe, replay_settings
from tflab.replay.stack import ReplayStack
from tflab.replay.volumes import host_folders, write_hooks, write_volumes
from tflab.replay.watcher import BackOffHold, Watcher, unaudited
from tflab.supervisor import audit, progress, runner, strays, summary
from tflab.supervisor.kind import FAILED, SUCCEEDED, WAITING, Printer


class ReplayRun:
    """A TFJob's replicas as a kind of run (supervisor/kind.RunKind), ended as the training operator
    would end the job (tfoperator: its code's rules): a replica's failure restarts or fails the job
    by its restartPolicy and backoffLimit, success is the chief's (or worker-0's, or every
    worker's), and the deadline is activeDeadlineSeconds. An OnFailure or Always replica that fails
    is restarted alone, in place, after the kubelet's back-off (k8s/kubelet.py); an ExitCode
    replica with a retryable code is recreated alone, at once (ReconcilePods deletes its pod and
    makes it again); either way the others run on, meeting whatever its loss gives them.
    What its cleanPodPolicy would leave running is said; the lab still removes every replica at the
    end. A TrainJob's node is retried alone as Kubernetes' Job controller retries a pod of its Job
    (k8s/jobcontroller.py) until that Job fails; then JobSet's rules decide (jobset_condition)."""

    tasks_word = "replicas"
    done_line = "the job is done; ending {running}"
    logs_from_start = False  # a replica's program is watched from its first advance
    clean_exits = True  # a replica the lab ended is "stopped"; the operator's rules decide the job

    def __init__(self, plan: Plan, settings: Settings, stack: ReplayStack, run_dir: Path):
        self.settings, self.backend, self.run_dir = settings, stack, run_dir
        self.restarts_made: list[float] = []
        self.plan = plan
        self.timeout = plan.timeout
        self.watcher: Watcher | None = None  # made once the run folder is claimed (claimed)
        # holds the stall watch while a back-off is waited out; time looked up at each call, as tests swap it
        self.hold = BackOffHold(lambda: time.monotonic())
        self.reason: str | None = None  # the operator's reason, and which limit, where the job failed by one
        self.restarts_counted = 0  # restartCount summed as PastBackoffLimit sums it, over the attempts so far
        self.jobset_counts = jobset.Counts()  # a TrainJob's JobSet's restart counts (jobset.counted)
        self.jobset_restart: jobset.Verdict | None = None  # the verdict of the restart under way
        self.failed_for_good = False  # job_condition said the operator marks the job Failed
        self.succeeded_at: float | None = None
        self.lingering: list[str] = []  # left running after success (cleanPodPolicy None), ending by themselves
        self.ended_when_done: list[str] = []  # still running once the job succeeded: the lab ended them
        self.kubelet = kubelet.Backoff(settings.backoff)  # each replica's back-off, as the kubelet keeps it
        self.node_job = self.new_node_job()  # a TrainJob's node Job, as the Job controller keeps it
        self.node_job_failed = False  # that Job failed (BackoffLimitExceeded): JobSet's failure policy decides
        self.restarted_alone: dict[str, int] = {}  # task -> the kubelet's restarts of it in place (restartCount)
        self.recreated: dict[str, int] = {}  # task -> the operator's recreations of its pod (ExitCode)
        self.deadline_at: float | None = None  # deadline()'s, on time.monotonic()'s clock

    def claimed(self) -> None:
        plan, run_dir = self.plan, self.run_dir
        settings = replay_settings(plan, self.settings, run_dir.name)
        runfolder.write_config(run_dir, settings, self.backend.cluster, tfjob=str(plan.path), replay=plan.kind,
                               hosts={t.name: t.host for t in plan.tasks})
        write_volumes(plan, run_dir, self.settings)
        write_hooks(plan, run_dir, self.settings)
        self.watcher = Watcher(plan, run_dir, self.backend.state)

    def prepare(self) -> None:
        pass  # claimed() wrote it all

    def announce(self) -> list[str]:
        plan, folder = self.plan, console.display_path(self.run_dir)
        if plan.active_deadline:
            deadline = f"activeDeadlineSeconds {plan.active_deadline} s"
        else:
            deadline = f"no activeDeadlineSeconds, so TIMEOUT ({plan.timeout:g} s) bounds the run"
        if plan.kind == "TrainJob":  # JobSet's rules, not the training operator's (jobset_condition)
            return [f"run {self.run_dir.name}: {describe(plan)} on {self.backend.description}",
                    f"outputs in {folder}/; {self.node_job_words()}; {self.jobset_words()}; {deadline}",
                    "the job succeeds when every node does (JobSet's default successPolicy); the lab removes every "
                    "node at the end"]
        if plan.backoff_limit is None and set(plan.policies.values()) == {"Never"}:
            # the operator's examples all are: "restarts without limit" there was true of nothing
            limit = "restartPolicy Never for every replica: its first failure fails the job, no restart"
        elif plan.backoff_limit is None:
            limit = "no backoffLimit: restarts without limit, as the operator's"
        else:
            limit = (f"backoffLimit {plan.backoff_limit}: the operator's count is each OnFailure or Always "
                     "replica's own restarts")
        lines = [f"run {self.run_dir.name}: {describe(plan)} on {self.backend.description}",
                 f"outputs in {folder}/; {limit}; {deadline}",
                 f"the job succeeds when {self.success_words()}; {self.clean_words()}"]
        recreated = sorted(tfoperator.TYPE_NAMES[job] for job, policy in plan.policies.items() if policy == "ExitCode")
        if recreated:
            counted = (f", so backoffLimit {plan.backoff_limit} never counts it (PastBackoffLimit, trainer#2045); "
                       "only the deadline bounds its retries" if plan.backoff_limit else "")
            lines.append(f"restartPolicy ExitCode ({', '.join(recreated)}): a retried replica is recreated, not "
                         f"restarted{counted}; one that exits 128 or more is recreated alone, at once, and the other "
                         "replicas run on; 1-127 fails the job")
        in_place = sorted(tfoperator.TYPE_NAMES[job] for job, policy in plan.policies.items()
                          if policy in ("OnFailure", "Always"))
        if in_place:
            lines.append(f"restartPolicy OnFailure or Always ({', '.join(in_place)}): the kubelet restarts a failed "
                         f"replica's container in place, alone, at once the first time, then with a "
                         f"{self.kubelet.words()} (BACKOFF); the other replicas run on")
        always = sorted(tfoperator.TYPE_NAMES[job] for job, policy in plan.policies.items() if policy == "Always")
        if always:
            lines.append(f"restartPolicy Always ({', '.join(always)}): on a cluster the kubelet restarts a replica "
                         "that exits 0 too; the lab takes an exit 0 as done")
        return lines

    def new_node_job(self) -> jobcontroller.NodeJob:
        policy = self.plan.policies.get(cluster.TRAINJOB_JOB, "Never")
        scale = self.settings.backoff / kubelet.INITIAL_SECONDS  # BACKOFF scales the controller's back-off too
        return jobcontroller.NodeJob(policy, self.plan.node_backoff_limit, scale)

    def node_job_words(self) -> str:
        """A TrainJob's node Job's retries in a few words (jobcontroller.py, the Job controller's rules)."""
        job = self.node_job
        if job.backoff_limit == 0:  # exceedsBackoffLimit (Never) or pastBackoffLimitOnFailure at its restart
            return (f"restartPolicy {job.restart_policy}, backoffLimit 0: the first failed node fails Job "
                    f"{cluster.TRAINJOB_NODE}-0 ({jobset.JOB_FAILED_REASON}), no node is retried alone")
        retry = (f"the kubelet restarts it in place, {self.kubelet.words()}" if job.in_place else
                 f"the Job controller makes its pod again, {job.backoff_words()}")
        counted = "restarts reach" if job.in_place else "failed pods pass"
        return (f"restartPolicy {job.restart_policy}, backoffLimit {job.backoff_limit}: a failed node is retried "
                f"alone ({retry}), the others run on, until its Job's {counted} backoffLimit; then Job "
                f"{cluster.TRAINJOB_NODE}-0 fails ({jobset.JOB_FAILED_REASON})")

    def jobset_words(self) -> str:
        """A TrainJob's JobSet failure policy in a few words (jobset.py, JobSet v0.12.0's rules)."""
        policy = self.plan.failure_policy
        if policy is None:
            return (f"no failurePolicy: a node's failure fails its Job, and {jobset.RELEASE} fails the JobSet "
                    f"({jobset.FAILED_JOBS}), no restart")
        rules = "; ".join(f"rule {rule.name}: {rule.action}" for rule in policy.rules)
        return (f"failurePolicy.maxRestarts {policy.max_restarts}, restartStrategy {policy.strategy}"
                + (f", {rules}" if rules else "") + f"; a rule's action or else RestartJobSet ({jobset.RELEASE}): a "
                "restart recreates every node, then past maxRestarts JobSet fails the job")

    def success_words(self) -> str:
        chiefs = [t.name for t in self.plan.tasks if t.job in ("chief", "master")]
        if chiefs:
            return f"{chiefs[0]} does"
        if self.plan.success_policy == tfoperator.ALL_WORKERS:
            return "every worker does (successPolicy AllWorkers)"
        return "worker-0 does (no Chief, and no successPolicy AllWorkers)"

    def clean_words(self) -> str:
        policy = self.plan.clean_pod_policy
        if policy == "None":
            default = " (the operator's default)" if policy == tfoperator.DEFAULT_CLEAN_POD_POLICY else ""
            return (f"cleanPodPolicy None{default}: once the job ends the operator leaves whatever still runs "
                    "running; the lab ends and removes every replica")
        what = "the running replicas" if policy == "Running" else "every replica"
        return f"cleanPodPolicy {policy}: once the job ends the operator deletes {what}; the lab removes every replica"

    def left_words(self, running: list[str]) -> str:
        """What the operator's cleanPodPolicy does with `running` once the job is finished."""
        left = tfoperator.left_running(self.plan.clean_pod_policy, running)
        if left:
            return f"cleanPodPolicy None: the operator would leave {', '.join(left)} running"
        return f"cleanPodPolicy {self.plan.clean_pod_policy}: the operator deletes {', '.join(running)}"

    def printers(self) -> Printer:
        """Each replica's folded output as it comes, as a SCRIPT run prints its tasks' (FoldedOutput
        writes <task>.out); the watcher says each start and end."""
        return progress.ScriptOutputPrinter(self.backend.cluster, self.run_dir)

    def observers(self) -> list[RunObserver]:
        """The watcher, which runner.run asks for after claimed() made it."""
        return [self.watcher, self.hold] if self.watcher is not None else [self.hold]

    def deadline(self, started: float) -> float:
        """activeDeadlineSeconds counts from the job's start (PastActiveDeadline: jobStatus.StartTime)."""
        self.deadline_at = time.monotonic() + self.timeout - (time.time() - started)
        return self.deadline_at

    def deadline_line(self, running: list[str]) -> str:
        then = f"stopping {', '.join(running)}" if running else "no restart past it"
        if not self.plan.active_deadline:
            return (f"TIMEOUT ({self.timeout:g} s) passed; the TFJob sets no activeDeadlineSeconds, so on a cluster "
                    f"it would run on; {then}")
        if self.plan.kind == "TrainJob":  # trainjob_controller.go reconcileDeadline
            self.reason = "DeadlineExceeded"
            return (f"spec.activeDeadlineSeconds ({self.plan.active_deadline} s) passed: Trainer marks the TrainJob "
                    "Failed (DeadlineExceeded: TrainJob exceeded its active deadline) and deletes its JobSet; "
                    f"{then}")
        self.reason = f"{tfoperator.FAILED}: activeDeadlineSeconds"
        left = f"{self.left_words(running)}; " if running else ""
        return (f"activeDeadlineSeconds ({self.plan.active_deadline} s) passed: the operator marks the job Failed "
                f"({tfoperator.FAILED}: {tfoperator.deadline_message(self.plan.name)}); {left}{then}")

    def own_failures(self, codes: dict, stopped: Sequence[str] = ()) -> dict[str, tuple[int, str, str]]:
        """task -> (exit code, its restartPolicy, what the operator makes of it: tfoperator.after_failure),
        for every replica that failed by itself (not one the lab stopped, nor one removed from outside)."""
        job_of = {task.name: task.job for task in self.plan.tasks}
        found = {}
        for task, code in codes.items():
            if code in (None, 0, VANISHED) or task in stopped:
                continue
            policy = self.plan.policies[job_of[task]]
            found[task] = (code, policy, tfoperator.after_failure(policy, code))
        return found

    def job_condition(self, codes: dict) -> str | None:
        """The operator's verdict on the exit codes so far, failure first (ReconcileJobs tests the
        backoffLimit before it reconciles the pods, UpdateJobStatus marks success): FAILED where a
        failure is not retried or the restarts reach backoffLimit; else WAITING / SUCCEEDED once the
        job succeeded; None while it runs or restarts."""
        plan = self.plan
        running = [task for task, code in codes.items() if code is None]
        if self.succeeded_at is not None:
            waiting = [task for task in self.lingering if codes.get(task) is None]
            if (waiting and time.monotonic() - self.succeeded_at < runner.EVALUATOR_END_SECONDS
                    and (self.deadline_at is None or time.monotonic() < self.deadline_at)):
                return WAITING
            self.ended_when_done = running
            return SUCCEEDED
        failures = self.own_failures(codes)
        if plan.kind == "TrainJob":
            return self.jobset_condition(codes, failures, running)
        in_place = self.restarts_counted + sum(1 for _, _, fate in failures.values() if fate == tfoperator.IN_PLACE)
        failed_pods = [task for task, (_, _, fate) in failures.items() if fate != tfoperator.IN_PLACE]
        if (tfoperator.exceeds_backoff_limit(plan.backoff_limit, len(failed_pods))
                or tfoperator.past_backoff_limit(plan.backoff_limit, in_place)):
            why = (f"{', '.join(failed_pods)} failed under backoffLimit 0" if failed_pods and plan.backoff_limit == 0
                   else f"the restarts the operator counts ({in_place}) reach backoffLimit {plan.backoff_limit}")
            return self.fail(why, tfoperator.backoff_message(plan.name), "backoffLimit", running)
        permanent = {task: found for task, found in failures.items() if found[2] == tfoperator.FAILS_THE_JOB}
        if permanent:
            task, (code, policy, _) = next(iter(permanent.items()))
            if policy == "ExitCode":  # ReconcilePods' own message, set before UpdateJobStatus runs
                why = f"{task} exited with code {code}, permanent under restartPolicy ExitCode (1-127)"
                message = (f"job \"{plan.name}\" is failing because "
                           f"\"{tfoperator.TYPE_NAMES[task.rsplit('-', 1)[0]]}\" replica(s) failed.")
            else:
                why = f"{task} exited with code {code} and its restartPolicy is Never"
                counts: dict[str, int] = {}
                for name in permanent:
                    counts[name.rsplit("-", 1)[0]] = counts.get(name.rsplit("-", 1)[0], 0) + 1
                message = tfoperator.replica_failed_message(plan.namespace, plan.name, counts)
            return self.fail(why, message, None, running)
        if tfoperator.succeeded(plan.replicas, codes, plan.success_policy):
            console.say(f"the operator marks the job Succeeded ({tfoperator.SUCCEEDED}: "
                       f"{tfoperator.succeeded_message(plan.namespace, plan.name)})"
                       + (f"; {self.left_words(running)}" if running else ""))
            left = tfoperator.left_running(plan.clean_pod_policy, running)
            self.lingering = [task for task in left if task not in plan.servers]  # servers never end by themselves
            if self.lingering:
                console.say(f"the lab gives {', '.join(self.lingering)} up to {runner.EVALUATOR_END_SECONDS} s to end "
                           "by themselves, then ends and removes what runs")
            self.succeeded_at = time.monotonic()
            return self.job_condition(codes)
        return None

    def jobset_condition(self, codes: dict, failures: dict, running: list[str]) -> str | None:
        """A TrainJob's JobSet (runtime.py: one replicated job `node`, one Indexed Job of every node):
        a node's failure is retried alone (retry_node) until that Job fails as Kubernetes' Job
        controller fails it (jobcontroller.NodeJob.fails: its backoffLimit, BackoffLimitExceeded),
        and then JobSet's failure policy decides (jobset.execute_failure_policy): FAILED where it
        fails the JobSet, else None and the runner restarts (restart_verdict counts it). It succeeds
        once every node's Job has (its default successPolicy, All). The TrainJob's Failed condition
        takes the JobSet's reason as it is (Trainer v2.3.0 plugins/jobset/jobset.go Status), so the
        summary's reason is both."""
        self.node_job.saw(codes)
        if failures and not self.node_job_failed:
            if not self.node_job.fails(len(failures)):
                return None  # the Job controller retries each failed node alone (restart_alone)
            self.node_job_failed = True
            self.hold.done()  # the controller makes no pod again: nothing is waited for
            console.say(f"{', '.join(failures)} failed, {self.node_job.count_words(len(failures))}: the Job "
                        f"controller marks Job {cluster.TRAINJOB_NODE}-0 Failed ({jobset.JOB_FAILED_REASON}: "
                        f"{jobset.JOB_FAILED_MESSAGE}) and deletes its running pods")
        if failures:
            verdict = self.jobset_verdict()
            if verdict.outcome != jobset.FAILS:
                return None
            task, (code, _, _) = next(iter(failures.items()))
            counts = self.jobset_counts
            self.failed_for_good = True
            self.reason = verdict.reason
            console.say(f"{task} exited with code {code}, after {counts.restarts + sum(counts.job_restarts.values())} "
                        f"restarts ({counts.total_towards_max} counted of failurePolicy.maxRestarts "
                        f"{self.plan.backoff_limit or 0}): JobSet applies {verdict.words()} and marks the job Failed "
                        f"({verdict.reason})")
            return FAILED
        if codes and all(code == 0 for code in codes.values()):
            self.ended_when_done = []
            return SUCCEEDED
        return None

    def jobset_verdict(self) -> jobset.Verdict:
        """What JobSet does now: every node is in the one Job node-0 (job index 0), failed as a Job
        with backoffLimit 0 fails (jobset.JOB_FAILED_REASON)."""
        failed = [jobset.FailedJob(cluster.TRAINJOB_NODE, 0, time.time())]
        return jobset.execute_failure_policy(self.plan.failure_policy, failed, self.jobset_counts)

    def fail(self, why: str, message: str, limit: str | None, running: list[str]) -> str:
        """The operator's Failed condition: said once, with what its cleanPodPolicy leaves running."""
        self.failed_for_good = True
        if limit:
            self.reason = f"{tfoperator.FAILED}: {limit}"
        console.say(f"{why}: the operator marks the job Failed ({tfoperator.FAILED}: {message})"
                   + (f"; {self.left_words(running)}" if running else ""))
        return FAILED

    def restart_verdict(self, stopped: list[str], diagnosis: dict | None = None) -> tuple[bool, str]:
        """job_condition has failed the job already where the operator would; any other failure is
        one the operator retries (in place, or by recreating the pod), and the in-place ones add to
        the count PastBackoffLimit sums. The diagnosis is the lab's, which no operator reads: a
        replay restarts as the operator would, stall or none."""
        if self.failed_for_good:
            return False, ""
        if self.plan.kind == "TrainJob":
            verdict = self.jobset_restart = self.jobset_verdict()
            if verdict.outcome == jobset.FAILS:  # job_condition says it first; this only where it could not
                self.failed_for_good, self.reason = True, verdict.reason
                return False, f"JobSet applies {verdict.words()} and marks the job Failed ({verdict.reason})"
            self.jobset_counts = jobset.counted(verdict, self.jobset_counts)
            # JobSet recreates the Job: a new Job's status and new pods, whose back-offs start afresh
            self.node_job, self.node_job_failed = self.new_node_job(), False
            self.kubelet = kubelet.Backoff(self.settings.backoff)
            self.hold.done()
            return True, ""
        failures = self.own_failures(self.backend.exit_codes(), stopped)
        self.restarts_counted += sum(1 for _, _, fate in failures.values() if fate == tfoperator.IN_PLACE)
        self.hold.done()
        return True, ""

    def restart_line(self) -> str:
        limit = self.plan.backoff_limit
        if self.plan.kind == "TrainJob":  # no backoffLimit: JobSet's counts (jobset.counted)
            verdict, counts = self.jobset_restart or self.jobset_verdict(), self.jobset_counts
            counted = "not counted" if not verdict.counted else f"{counts.total_towards_max} counted"
            one_job = (f" (it recreates Job {verdict.job.name}, which holds every node)"
                       if verdict.outcome == jobset.RESTARTS_ONE_JOB else "")
            return (f"restarting every node (restart {len(self.restarts_made)}, {counted} of failurePolicy.maxRestarts "
                    f"{limit or 0}), as JobSet's {verdict.words()} says{one_job}")
        counted = ("no backoffLimit" if limit is None else
                   f"{self.restarts_counted} restart{'s' if self.restarts_counted != 1 else ''} counted "
                   f"of backoffLimit {limit}")
        return f"restarting every replica (restart {len(self.restarts_made)}; {counted}), as the restart policy says"

    def restart_alone(self, task: str, code: int, now: float) -> tuple[float, str] | None:
        """An OnFailure or Always replica's failure (tfoperator.after_failure: IN_PLACE) is the
        kubelet's: its container alone is restarted in place (kuberuntime_manager.go doBackOff), after
        its back-off (kubelet.Backoff, from the moment its end was seen). An ExitCode replica's
        retryable failure (RECREATED) is the operator's: common/pod.go ReconcilePods deletes that pod
        alone and its next reconcile creates it again (createNewPod), with no back-off. Either way the
        others are not touched. A TrainJob's node: retry_node. A Never replica: the runner's rules."""
        if self.failed_for_good or self.node_job_failed:
            return None
        if self.plan.kind == "TrainJob":
            return self.retry_node(task, code, now)
        policy = self.plan.policies[next(t.job for t in self.plan.tasks if t.name == task)]
        fate = tfoperator.after_failure(policy, code)
        if fate == tfoperator.RECREATED:
            return 0.0, (f"{task} exited with code {code}, retryable under restartPolicy ExitCode (128 and up): the "
                         "operator deletes its pod and creates it again at once; the other replicas run on")
        if fate != tfoperator.IN_PLACE:
            return None
        wait = self.kubelet.wait(task, now, now)
        self.hold.waiting(task, now + wait)
        when = "at once" if wait == 0 else f"after {wait:g} s"
        return wait, (f"{task} exited with code {code}; the kubelet restarts it in place {when} "
                      f"({self.kubelet.words()}); the other replicas run on")

    def restart_alone_now(self, task: str, ended: float, now: float, limit: float) -> None:
        """The kubelet's restart: its back-off moves on (Backoff.Next), restartCount + 1, which
        PastBackoffLimit sums; the replica's container alone is started again. An ExitCode replica's
        is the operator's recreation instead: a new pod, whose restartCount is 0, so nothing counts.
        A TrainJob's node: its Job's count moves on (jobcontroller.NodeJob.retried)."""
        self.hold.done(task)
        if self.plan.kind == "TrainJob":
            self.retry_node_now(task, ended, now, limit)
            return
        if self.plan.policies[next(t.job for t in self.plan.tasks if t.name == task)] == "ExitCode":
            self.recreated[task] = self.recreated.get(task, 0) + 1
            console.say(f"recreating {task} (its recreation {self.recreated[task]}, the job's restart "
                        f"{len(self.restarts_made)}; a new pod's restartCount is 0, so backoffLimit never counts it), "
                        "as the operator does")
            self.backend.restart_tasks([task], limit)
            return
        self.kubelet.restarted(task, ended, now)
        self.restarts_counted += 1
        self.restarted_alone[task] = self.restarted_alone.get(task, 0) + 1
        limit_words = ("no backoffLimit" if self.plan.backoff_limit is None else
                       f"{self.restarts_counted} counted of backoffLimit {self.plan.backoff_limit}")
        console.say(f"restarting {task} in place (its restart {self.restarted_alone[task]}, the job's "
                    f"{len(self.restarts_made)}; {limit_words}), as the kubelet does")
        self.backend.restart_tasks([task], limit)

    def retry_node(self, task: str, code: int, now: float) -> tuple[float, str]:
        """A TrainJob node's failure that its Job survives (jobset_condition): under OnFailure the
        kubelet restarts its container in place after its back-off; under Never the Job controller
        makes its pod again after the pod failure back-off (backoff_utils.go getRemainingTime)."""
        job = self.node_job
        wait = self.kubelet.wait(task, now, now) if job.in_place else job.pod_failed()
        self.hold.waiting(task, now + wait)
        when = "at once" if wait == 0 else f"after {wait:g} s"
        how = (f"the kubelet restarts it in place {when} ({self.kubelet.words()})" if job.in_place else
               f"the Job controller makes its pod again {when} ({job.backoff_words()})")
        return wait, f"{task} exited with code {code}; {how}; the other nodes run on"

    def retry_node_now(self, task: str, ended: float, now: float, limit: float) -> None:
        job = self.node_job
        job.retried()
        if job.in_place:
            self.kubelet.restarted(task, ended, now)
            self.restarted_alone[task] = self.restarted_alone.get(task, 0) + 1
        how = "restarting it in place, as the kubelet does" if job.in_place else "making its pod again, as the Job " \
              "controller does"
        console.say(f"{task}: {how} (the job's restart {len(self.restarts_made)}; Job {cluster.TRAINJOB_NODE}-0: "
                    f"{job.count_words()})")
        self.backend.restart_tasks([task], limit)

    def writable_outside(self) -> dict[str, Path]:
        """CLAIMS's host folders a replica could write (not `:ro`)."""
        return {f"CLAIMS {claim}": Path(folder)
                for claim, (folder, read_only) in host_folders(self.plan, self.settings).items() if not read_only}

    def spaces(self) -> dict[str, list[strays.Space]]:
        """Each replica's writable volumes that the run folder holds (volumes/<folder>, at the mount's
        target), where the audit looks for what a non-chief left in the chief's folders; CLAIMS's
        host folders are the user's, not looked in."""
        given = host_folders(self.plan, self.settings)
        return {task.name: [strays.Space(target, f"volumes/{folder}")
                            for folder, target, read_only in task.service.get("x-mounts", [])
                            if not read_only and folder not in given]
                for task in self.plan.tasks}

    def image(self) -> str:
        return self.plan.tasks[0].image if self.plan.tasks else ""

    def rows(self, codes: dict[str, int | None], stopped: list[str], outcome: str,
             oom_killed: dict[str, bool]) -> summary.Rows:
        """Each replica's row from the start and end its watcher logged (summary.replay_row), and the
        lab's own trainer's end where the replicas ran it with its log on a claim. "ok": the job
        succeeded as the operator decides it (job_condition), and the lab ended what still ran; a
        replica that failed and was being retried keeps its failed row, as the operator's job is
        Succeeded all the same. The audit is a SCRIPT run's, over the replicas the lab's hooks reached
        (replayhooks.py); the others are named in the notes, "not audited: ...", never counted."""
        plan, run_dir = self.plan, self.run_dir
        settings = replay_settings(plan, self.settings, run_dir.name)
        replayed = summary.Replayed(tfjob=str(plan.path), settings=settings, not_applied=plan.not_applied,
                                    hosts={t.name: t.host for t in plan.tasks},
                                    images={t.name: t.image for t in plan.tasks}, ended_when_done=self.ended_when_done,
                                    unaudited=unaudited(plan, run_dir, self.backend.images))
        tasks = self.backend.cluster.tasks
        outputs = summary.output_tails(run_dir, list(tasks))
        done = outcome == "ok"
        rows = [summary.replay_row(run_dir, task, codes.get(task), task in stopped, replayed,
                                   done and task in replayed.ended_when_done, outputs[task], oom_killed.get(task))
                for task in tasks]
        if plan.kind == "TFJob" or self.restarted_alone:
            for row in rows:
                row.restart_count = self.restarted_alone.get(row.task, 0)
        reached = [task for task in tasks
                   if not any(note.startswith(summary.NOT_AUDITED) and summary.note_names(note, task)
                              for note in replayed.unaudited)]
        records = {task: summary.task_records(run_dir, task) for task in reached}
        findings, notes = audit.audit(records, {task: "script" for task in reached}, self.backend.cluster.chief,
                                      {task: outputs[task] for task in reached}, run_dir,
                                      self.spaces()) if reached else ([], [])
        digests = {row.weights_sha256 for row in rows}  # the lab's own program's, where the replicas ran it
        return summary.Rows(tasks=rows, ok=done, strategy="tfjob", backend=self.backend.name, settings=settings,
                            weights_agree=len(digests) == 1 and None not in digests,
                            findings=[finding.to_dict() for finding in findings], notes=replayed.unaudited + notes,
                            tfjob=replayed.tfjob, not_applied=replayed.not_applied, reason=self.reason)
