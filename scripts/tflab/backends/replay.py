"""`tflab up TFJOB=...`: the replay of a TFJob (tfjob.py's Plan; `TRAINJOB=`, a Trainer v2 TrainJob that
trainjob.py translates into the same Plan) as a run of the lab's one
pipeline (runner.run): its replicas as one Compose project (ReplayStack), watched from outside
(Watcher: each replica's start and end into <task>.jsonl), followed, restarted and summarised as
ReplayRun says where a TFJob differs from the lab's own run. tfjob.py reads and plans; this module
is what touches the engine and the run folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

from tflab import console, docker, labels, manifest, runfolder, runner, summary, tfoperator
from tflab.backends import compose
from tflab.errors import LabError
from tflab.explain import VANISHED
from tflab.manifest import ManifestError, shown
from tflab.runfolder import Summary
from tflab.schema import EventLog
from tflab.settings import Settings
from tflab.tfjob import Plan, describe, load, refuse_decided, replay_settings

COMPOSE_FILE = "compose.tfjob.json"


def check_images(plan: Plan) -> None:
    """Every image on the engine already: the lab pulls and builds nothing for a TFJob. And what
    the manifest asks of the engine that only the engine can answer: the image's own user where
    runAsNonRoot leaves it to the image (the kubelet's check), CPU limits within the engine's CPUs."""
    for image in sorted({task.image for task in plan.tasks}):
        found = docker.image_user(image)
        if found.returncode != 0:
            raise LabError(f"image {image} is not on this Docker engine; build it (docker build -t {image} ...) "
                           f"or pull it (docker pull {image}) first")
        if any(task.non_root for task in plan.tasks if task.image == image):
            try:
                check_non_root(image, found.stdout.strip())
            except ManifestError as error:
                raise ManifestError(f"{plan.setting}={plan.path}: {error}") from None
    limited = [task for task in plan.tasks if "cpus" in task.service]
    if limited:
        engine_cpus = docker_cpus()
        for task in limited:
            if engine_cpus and task.service["cpus"] > engine_cpus:
                raise ManifestError(f"{plan.setting}={plan.path}: {task.name}'s resources.limits.cpu is "
                                    f"{task.service['cpus']:g}, more than this Docker engine's {engine_cpus} CPUs; "
                                    f"expected at most {engine_cpus}")


def check_non_root(image: str, user_json: str) -> None:
    """The kubelet's verifyRunAsNonRoot: the image's user must be a number other than 0 (a name
    cannot be checked, so it is refused), where runAsNonRoot is true and runAsUser unset."""
    try:
        user = json.loads(user_json or '""')
    except ValueError:
        user = ""
    uid = str(user).split(":", 1)[0] if isinstance(user, str) else ""
    if not uid.isdigit() or int(uid) == 0:
        what = "root" if uid in ("", "0", "root") else f"the non-numeric user {shown(uid)}"
        raise ManifestError(f"image {image} runs as {what}, but its pod asks runAsNonRoot: true (the kubelet "
                            "refuses it); give securityContext.runAsUser a non-zero uid, or build the image with a "
                            "numeric non-root USER")


def docker_cpus() -> int:
    """The engine's CPUs (docker info's NCPU), 0 where it does not say."""
    found = docker.info_format("{{.NCPU}}")
    text = found.stdout.strip() if found.returncode == 0 else ""
    return int(text) if text.isdigit() else 0


def volume_path(run_dir: Path, relative: str) -> Path:
    """run_dir/volumes/<relative>: the one way write_volumes and render build a host path from
    the manifest's names (manifest.path_under: plain parts, no link, resolving under volumes/)."""
    root = run_dir / "volumes"
    try:
        root.mkdir(exist_ok=True)
    except OSError as error:
        raise ManifestError(f"cannot make {root}: {error.strerror or error}") from None
    if root.is_symlink() or os.path.realpath(root) != os.path.join(os.path.realpath(run_dir), "volumes"):
        raise ManifestError(f"{root} is a link; the run's volumes must be its own folder")
    return manifest.path_under(root, relative)


def write_volumes(plan: Plan, run_dir: Path) -> None:
    """ConfigMaps as read-only folders of files (volumes/configmaps/<name>/); each claim a folder
    (volumes/<claim>/) that every task mounting it shares, as a ReadWriteMany claim would be.
    Every path comes from volume_path; a file is created, never followed or overwritten."""
    for folder_name, volume in plan.volumes.items():
        folder = volume_path(run_dir, folder_name)
        try:
            folder.mkdir(exist_ok=True)
        except OSError as error:
            raise ManifestError(f"cannot make {folder}: {error.strerror or error}") from None
        if folder.is_symlink() or not folder.is_dir():
            raise ManifestError(f"{folder} is not a folder of the run's")
        if "claim" in volume:
            folder.chmod(0o777)  # whatever user the image runs as may write, as on a fresh volume
            continue
        data = plan.config_maps[volume["configMap"]]
        for item in volume["items"] or [{"key": key, "path": key} for key in data]:
            path = volume_path(run_dir, f"{folder_name}/{item['path']}")
            try:
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
                with os.fdopen(descriptor, "w") as file:
                    file.write(data[item["key"]])
            except OSError as error:
                raise ManifestError(f"cannot write {path}: {error.strerror or error}") from None


def render(plan: Plan, run_dir: Path) -> dict:
    services = {}
    marks = compose.literal(labels.run_labels(run_dir))
    for task in plan.tasks:
        service = dict(task.service)
        mounts = service.pop("x-mounts")
        binds = [f"{volume_path(run_dir, folder)}:{target}{':ro' if read_only else ''}"
                 for folder, target, read_only in mounts]
        if binds:
            service["volumes"] = binds
        service["labels"] = marks
        services[task.name] = service
    return compose.literal({"services": services, "networks": {"cluster": {
        "internal": True, "driver_opts": {"com.docker.network.bridge.inhibit_ipv4": "true"}, "labels": marks}}})


class ReplayCluster:
    """A Plan as the runner reads a run's cluster (cluster.Cluster's names): the replay's tasks,
    its chief as the summary reads it, and the spec. No servers or evaluators: the runner's own
    rule for them (the lab's training is over once only they run) is not the operator's, and
    ReplayRun.job_condition decides the job's end instead."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.tasks = [task.name for task in plan.tasks]
        self.chiefs = plan.chief
        self.chief = self.chiefs[0] if self.chiefs else self.tasks[0]
        self.servers: list[str] = []
        self.evaluators: list[str] = []
        self.spec = plan.spec

    def role(self, task: str) -> str:
        return "script"  # every replica runs its own command, watched from outside


class ReplayStack(compose.ComposeStack):
    """compose.ComposeStack with the manifest's services instead of the lab's template."""

    def __init__(self, cli: compose.ComposeCli, run_dir: Path, plan: Plan):
        self.plan = plan
        self.init_project(cli, run_dir, ReplayCluster(plan), frozenset(), [run_dir / COMPOSE_FILE])

    def start(self, spec: dict = None) -> None:
        runfolder.write_json(self.run_dir / COMPOSE_FILE, render(self.plan, self.run_dir))
        self.watch()
        self._start_attached(self.tasks)
        self.follow_output("all")

    def restart(self) -> None:
        super().restart()
        self.follow_output("0")  # both CLIs: from now on (an earlier attempt's lines were shown)

    def follow_output(self, tail: str) -> None:
        """The replicas' own output as it comes (the image is no lab's: it logs no events), until
        they exit; `output.log` keeps all of it."""
        self.stop_following()
        self.following = subprocess.Popen(self.command("logs", "--follow", "--no-color", "--tail", tail),
                                          env=self.env, stdout=None, stderr=subprocess.DEVNULL)

    def stop_following(self) -> None:
        docker.end(getattr(self, "following", None))

    def close(self) -> None:
        self.stop_following()
        super().close()

    def state(self) -> dict[str, dict]:
        """task -> the engine's State of its container (Status, ExitCode, StartedAt, FinishedAt, Pid)."""
        ids = docker.project_containers(self.project)
        found = docker.inspect(ids, labels.label_template(labels.SERVICE_LABEL) + "\t{{.Id}}\t{{json .State}}")
        states = {}
        for line in found.splitlines():
            service, container, state = line.split("\t", 2)
            states[service] = {**json.loads(state), "Id": container}
        return states


class Watcher:
    """Each task's start and end, from outside, into <task>.jsonl as a script's (role "script")."""

    def __init__(self, plan: Plan, run_dir: Path):
        self.plan, self.run_dir = plan, run_dir
        space = run_dir / runfolder.TASKS  # the lab's watcher writes each replica's log; no replica mounts it
        self.logs = {task.name: EventLog(runfolder.log_path(space, task.name), task.name) for task in plan.tasks}
        self.seen: dict[str, tuple[str, str]] = {}  # task -> (StartedAt, FinishedAt) last logged
        self.peak: dict[str, int] = {}

    def tick(self, states: dict[str, dict]) -> None:
        for task in self.plan.tasks:
            state = states.get(task.name)
            if not state or state.get("StartedAt", "0001").startswith("0001"):
                continue  # not started yet
            started, finished = state["StartedAt"], state.get("FinishedAt", "")
            last = self.seen.get(task.name)
            if last is None or last[0] != started:
                self.seen[task.name] = (started, "")
                self.peak[task.name] = 0
                self.logs[task.name].emit("start", role="script", strategy="tfjob", cluster=self.plan.spec,
                                          versions={"image": task.image}, settings={"tfjob": str(self.plan.path)})
                print(f"[{task.name}] started as {task.host} ({task.image})", flush=True)
            if state.get("Running"):
                self.peak[task.name] = max(self.peak.get(task.name, 0), cgroup_peak(state["Id"]))
            elif state.get("Status") in ("exited", "dead") and self.seen[task.name][1] != finished:
                self.seen[task.name] = (started, finished)
                seconds = max(0.0, _unix(finished) - _unix(started))
                code = int(state.get("ExitCode", -1))
                self.logs[task.name].emit("end", role="script", exit_code=code, total_seconds=seconds,
                                          peak_rss_bytes=self.peak.get(task.name, 0))
                print(f"[{task.name}] exited with code {code} after {seconds:.1f} s", flush=True)

    def close(self) -> None:
        for log in self.logs.values():
            log.close()


def cgroup_peak(container: str) -> int:
    """The container's peak memory so far, from its cgroup where the host can read it (v1, or v2's
    memory.peak); 0 where it cannot (an engine in a VM)."""
    for path in (f"/sys/fs/cgroup/memory/docker/{container}/memory.max_usage_in_bytes",
                 f"/sys/fs/cgroup/system.slice/docker-{container}.scope/memory.peak"):
        try:
            return int(Path(path).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return 0


def _unix(stamp: str) -> float:
    """Docker's RFC 3339 time with nanoseconds -> unix seconds."""
    from datetime import datetime

    main, _, rest = stamp.rstrip("Z").partition(".")
    fraction = float("0." + (rest[:6] or "0"))
    return datetime.fromisoformat(main + "+00:00").timestamp() + fraction


def up(settings: Settings, given: dict[str, str] | None = None) -> int:
    """`tflab up TFJOB=...`: checks everything, then runs the job (runner.run, as ReplayRun says)
    until its chief (or every worker) is done, restarting the whole job as its restart policy says;
    0 only if it succeeded. `given`: the settings the user gave (given_values), refused where the
    TFJob decides them."""
    if settings.trainjob:
        from tflab import trainjob  # a TrainJob is translated into the same plan

        plan = trainjob.load(settings)
    else:
        plan = load(settings)
    refuse_decided(plan, given or {})
    run_dir = runfolder.planned(settings)
    docker.check()
    cli = compose.find_compose(settings.compose)
    check_images(plan)
    console.say("not applied: " + ("; ".join(plan.not_applied) if plan.not_applied else "nothing"))
    return runner.run(ReplayRun(plan, settings, ReplayStack(cli, run_dir, plan), run_dir))


class ReplayRun(runner.LabRun):
    """A TFJob's replicas, as runner.run runs them, ended as the training operator would end the
    job (tfoperator: its code's rules): a replica's failure restarts or fails the job by its
    restartPolicy and backoffLimit, success is the chief's (or worker-0's, or every worker's), and
    the deadline is activeDeadlineSeconds. Where the operator would restart one replica in place,
    the lab restarts every replica (a MultiWorkerMirroredStrategy worker cannot rejoin). What its
    cleanPodPolicy would leave running is said; the lab still removes every replica at the end."""

    tasks_word = "replicas"
    done_line = "the job is done; ending {running}"

    def __init__(self, plan: Plan, settings: Settings, stack: ReplayStack, run_dir: Path):
        super().__init__(settings, stack, run_dir)
        self.plan = plan
        self.timeout = plan.timeout
        self.watcher: Watcher | None = None
        self.reason: str | None = None  # the operator's reason, and which limit, where the job failed by one
        self.restarts_counted = 0  # restartCount summed as PastBackoffLimit sums it, over the attempts so far
        self.failed_for_good = False  # job_condition said the operator marks the job Failed
        self.succeeded_at: float | None = None
        self.lingering: list[str] = []  # left running after success (cleanPodPolicy None), ending by themselves
        self.ended_when_done: list[str] = []  # still running once the job succeeded: the lab ended them

    def claimed(self) -> None:
        plan, run_dir = self.plan, self.run_dir
        settings = replay_settings(plan, self.settings, run_dir.name)
        runfolder.write_json(run_dir / runfolder.CONFIG, {
            "run": run_dir.name, "tfjob": str(plan.path), "settings": settings,
            "cluster": plan.spec, "tasks": [t.name for t in plan.tasks],
            "tf_config": {t.name: json.loads(t.tf_config or t.service["environment"]["TF_CONFIG"])
                          if t.tf_config or "TF_CONFIG" in t.service["environment"] else None for t in plan.tasks},
            "hosts": {t.name: t.host for t in plan.tasks}})
        write_volumes(plan, run_dir)
        self.watcher = Watcher(plan, run_dir)

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
                    f"outputs in {folder}/; failurePolicy.maxRestarts {plan.backoff_limit or 0}: a node's failure "
                    f"restarts the whole job that many times, then JobSet fails it; {deadline}",
                    "the job succeeds when every node does (JobSet's default successPolicy); the lab removes every "
                    "node at the end"]
        if plan.backoff_limit is None:
            limit = "no backoffLimit: restarts without limit, as the operator's"
        else:
            limit = (f"backoffLimit {plan.backoff_limit}: the operator's count is each OnFailure or Always "
                     "replica's own restarts")
        lines = [f"run {self.run_dir.name}: {describe(plan)} on {self.backend.description}",
                 f"outputs in {folder}/; {limit}; {deadline}",
                 f"the job succeeds when {self.success_words()}; {self.clean_words()}"]
        recreated = sorted(tfoperator.TYPE_NAMES[job] for job, policy in plan.policies.items() if policy == "ExitCode")
        if recreated and plan.backoff_limit:
            lines.append(f"restartPolicy ExitCode ({', '.join(recreated)}): a retried replica is recreated, not "
                         f"restarted, so backoffLimit {plan.backoff_limit} never counts it (PastBackoffLimit, "
                         "trainer#2045); only the deadline bounds its retries")
        always = sorted(tfoperator.TYPE_NAMES[job] for job, policy in plan.policies.items() if policy == "Always")
        if always:
            lines.append(f"restartPolicy Always ({', '.join(always)}): on a cluster the kubelet restarts a replica "
                         "that exits 0 too; the lab takes an exit 0 as done")
        return lines

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

    def warnings(self) -> list[str]:
        return []

    def progress(self):
        return self  # print_new: the watcher's start and end lines

    def print_new(self) -> None:
        self.watcher.tick(self.backend.state())

    def deadline(self, started: float) -> float:
        """activeDeadlineSeconds counts from the job's start (PastActiveDeadline: jobStatus.StartTime)."""
        return time.monotonic() + self.timeout - (time.time() - started)

    def deadline_line(self, running: list[str]) -> str:
        if not self.plan.active_deadline:
            return (f"TIMEOUT ({self.timeout:g} s) passed; the TFJob sets no activeDeadlineSeconds, so on a cluster "
                    f"it would run on; stopping {', '.join(running)}")
        self.reason = f"{tfoperator.FAILED}: activeDeadlineSeconds"
        return (f"activeDeadlineSeconds ({self.plan.active_deadline} s) passed: the operator marks the job Failed "
                f"({tfoperator.FAILED}: {tfoperator.deadline_message(self.plan.name)}); {self.left_words(running)}; "
                f"stopping {', '.join(running)}")

    def own_failures(self, codes: dict, stopped: list[str] = ()) -> dict[str, tuple[int, str, str]]:
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
            if waiting and time.monotonic() - self.succeeded_at < runner.EVALUATOR_END_SECONDS:
                return runner.WAITING
            self.ended_when_done = running
            return runner.SUCCEEDED
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
        """A TrainJob's JobSet (trainjob.py: one replicated job `node`, each Job's backoffLimit 0):
        any node's failure fails its Job, and failurePolicy.maxRestarts (plan.backoff_limit) restarts
        the whole JobSet that many times, then fails it as ReachedMaxRestarts (JobSet's
        failJobSet); it succeeds once every node's Job has (its default successPolicy, All)."""
        plan = self.plan
        if failures:
            if len(self.restarts_made) < (plan.backoff_limit or 0):
                return None
            task, (code, _, _) = next(iter(failures.items()))
            self.failed_for_good = True
            self.reason = "ReachedMaxRestarts"
            console.say(f"{task} exited with code {code}, after {len(self.restarts_made)} of failurePolicy.maxRestarts "
                        f"({plan.backoff_limit or 0}) restarts: JobSet marks the job Failed (ReachedMaxRestarts)")
            return runner.FAILED
        if codes and all(code == 0 for code in codes.values()):
            self.ended_when_done = []
            return runner.SUCCEEDED
        return None

    def fail(self, why: str, message: str, limit: str | None, running: list[str]) -> str:
        """The operator's Failed condition: said once, with what its cleanPodPolicy leaves running."""
        self.failed_for_good = True
        if limit:
            self.reason = f"{tfoperator.FAILED}: {limit}"
        console.say(f"{why}: the operator marks the job Failed ({tfoperator.FAILED}: {message})"
                   + (f"; {self.left_words(running)}" if running else ""))
        return runner.FAILED

    def restart_verdict(self, stopped: list[str]) -> tuple[bool, str]:
        """job_condition has failed the job already where the operator would; any other failure is
        one the operator retries (in place, or by recreating the pod), and the in-place ones add to
        the count PastBackoffLimit sums."""
        if self.failed_for_good:
            return False, ""
        failures = self.own_failures(self.backend.exit_codes(), stopped)
        self.restarts_counted += sum(1 for _, _, fate in failures.values() if fate == tfoperator.IN_PLACE)
        return True, ""

    def restart_line(self) -> str:
        limit = self.plan.backoff_limit
        counted = ("no backoffLimit" if limit is None else
                   f"{self.restarts_counted} restart{'s' if self.restarts_counted != 1 else ''} counted "
                   f"of backoffLimit {limit}")
        return f"restarting every replica (restart {len(self.restarts_made)}; {counted}), as the restart policy says"

    def finish(self) -> None:
        if self.watcher is not None:
            try:
                self.print_new()  # the last ends, before the containers go
            finally:
                self.watcher.close()

    def summarise(self, codes: dict, stopped: list[str], outcome: str, started: float, ended: float,
                  oom_killed: dict) -> Summary:
        plan = self.plan
        replayed = summary.Replayed(tfjob=str(plan.path), settings=replay_settings(plan, self.settings,
                                                                                   self.run_dir.name),
                                    not_applied=plan.not_applied, hosts={t.name: t.host for t in plan.tasks},
                                    images={t.name: t.image for t in plan.tasks},
                                    ended_when_done=self.ended_when_done)
        result = summary.summarise(self.settings, self.backend.cluster, self.run_dir, codes, stopped, outcome,
                                   started, ended, oom_killed, self.restarts_made, replayed=replayed)
        if not result.ok and self.reason:
            result.reason = self.reason
        return result
