"""BACKEND=compose, the lab's default: one Compose project per run, one service per task.

Both Compose CLIs are supported: v2 (`docker compose`, what laptops have) and v1
(`docker-compose` 1.29, what Debian bookworm ships). They differ in ways that matter here, so the
lab leans only on what both do the same: `up -d` with named services, `logs`, `stop`, `down`,
profiles, `extends`; and it reads container state from Docker itself (docker.py), by the labels
Compose puts on every container, since v1 has no JSON `ps` and the two name containers differently.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import NamedTuple, Sequence

from tflab.backends import userscript
from tflab.backends.userscript import script_service
from tflab.core import cluster, runfolder, versions
from tflab.core import task as task_contract
from tflab.core.cluster import Cluster
from tflab.core.errors import LabError
from tflab.core.explain import VANISHED
from tflab.core.runfolder import LINKS, METADATA, OUTPUT, container_user, write_json
from tflab.core.settings import Settings
from tflab.core.stacks import STACKS_SIGNAL
from tflab.engine import docker, labels
from tflab.engine.gpus import gpu_requests, gpu_service_keys
from tflab.home import LAB_HOME
from tflab.images import libraries
from tflab.trainer import metadata

COMPOSE_FILE = LAB_HOME / "docker-compose.yml"
RUN_FILE = "compose.run.json"  # the run's generated services and overrides, in its folder
PROFILES = ("single", "mirrored", "cluster")


@dataclass(frozen=True)
class ComposeCli:
    command: tuple[str, ...]  # ("docker", "compose") or ("docker-compose",)
    version: str

    @property
    def major(self) -> int:
        return int(self.version.lstrip("v").split(".")[0])

    def __str__(self) -> str:
        return f"{' '.join(self.command)} {self.version}"

    def run(self, *args: str, timeout: float = 60, env=None) -> subprocess.CompletedProcess:
        """`<compose> args`, its output captured as text; the caller reads the exit code."""
        return docker.run_quiet([*self.command, *args], timeout=timeout, env=env)


def _compose_version(command: tuple[str, ...]) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        result = docker.run_quiet([*command, "version", "--short"], timeout=30)
    except subprocess.TimeoutExpired:
        return None
    version = result.stdout.strip()
    return version if result.returncode == 0 and version[:1].lstrip("v").isdigit() else None


def find_compose(choice: str = "auto") -> ComposeCli:
    """The Compose CLI to use: `choice` is auto, v2 or v1 (the COMPOSE setting)."""
    candidates = {"v2": ("docker", "compose"), "v1": ("docker-compose",)}
    wanted = ["v2", "v1"] if choice == "auto" else [choice]
    for name in wanted:
        version = _compose_version(candidates[name])
        if version:
            return ComposeCli(candidates[name], version)
    if choice == "auto":
        raise LabError("no Compose CLI found: neither `docker compose` (v2) nor `docker-compose` (v1) "
                       "works; install the Docker Compose plugin")
    raise LabError(f"COMPOSE={choice} but `{' '.join(candidates[choice])}` does not work; "
                   "install it, or use COMPOSE=auto")


def link_service(task: str) -> str:
    return f"{task}-link"


def lab_mount(run_dir: Path, folder: str, target: str) -> str:
    """One folder of the lab's own space, read-only, for the lab's own helper (a delay proxy, the
    metadata stand-in), which reads what the lab writes there; never a trainer's."""
    return f"{run_dir / folder}:{target}:ro"


def render_run(settings: Settings, the_cluster: Cluster, proxied: frozenset[str] = frozenset(),
               host_gpus: Sequence[str] = (), script_folder: Path | None = None,
               run_dir: Path = Path("runs/latest"), shared_libraries: str = "") -> dict:
    """The run's Compose override: one service per cluster task, each extending the `task`
    template with its TF_CONFIG; a delay proxy in front of each task in `proxied`; every task's
    resource limits and GPUs; and the network's mode. `host_gpus`: see gpus.check_gpus;
    `script_folder`: see userscript.stage; `shared_libraries`: the mount that gives every task the
    host's one copy of its image's TensorFlow (images/libraries.py)."""
    services: dict[str, dict] = {}
    gpus = gpu_requests(settings, the_cluster, host_gpus)
    limits: dict[str, float | str] = {}
    if settings.cpus:
        limits["cpus"] = settings.cpus
    if settings.memory != "0":
        limits["mem_limit"] = settings.memory
    for task in the_cluster.tasks:
        if the_cluster.spec:
            services[task] = {
                "extends": {"file": str(COMPOSE_FILE), "service": "task"},
                "hostname": task,
                "environment": the_cluster.tf_config_env(task),
            }
        services.setdefault(task, {}).update(limits)
        keras = versions.legacy_keras_env(settings.tf, settings.keras)
        if keras != task_contract.LEGACY_KERAS:  # KERAS=keras3 or bundled: tf.keras is not tf_keras
            services[task].setdefault("environment", {}).update(keras)
        if settings.script:
            script = script_service(settings, script_folder)
            services[task].setdefault("environment", {}).update(script.pop("environment"))
            services[task].update(script)
        if task in gpus:
            keys = gpu_service_keys(gpus[task])
            services[task].setdefault("environment", {}).update(keys.pop("environment"))
            services[task].update(keys)
        if shared_libraries:  # merged with the template's mounts, by their targets
            services[task].setdefault("volumes", []).append(shared_libraries)
        if task in proxied:
            services[link_service(task)] = {
                "extends": {"file": str(COMPOSE_FILE), "service": "task"},
                "hostname": link_service(task),
                "command": ["python", "-m", "tflab.linkproxy"],
                "environment": {"TFLAB_LINK_TO": f"{task}:{cluster.PORT}",
                                "TFLAB_LINK_CONTROL": task_contract.link_control(task)},
                "volumes": [lab_mount(run_dir, LINKS, task_contract.LINKS_MOUNT)],
            }
    if gce_notice(settings) and the_cluster.tasks:
        add_metadata_server(services, the_cluster.tasks, run_dir)
    override: dict = {"services": services}
    if settings.network == "bridge":
        override["networks"] = {"cluster": {"internal": False,
                                            "driver_opts": {"com.docker.network.bridge.inhibit_ipv4": "false"}}}
    return literal(override)


def gce_notice(settings: Settings) -> bool:
    """make chaos SCENARIO=preempt NOTICE=gce: the run gets a GCE metadata stand-in."""
    return settings.scenario == "preempt" and settings.notice == "gce"


def add_metadata_server(services: dict, tasks: list[str], run_dir: Path) -> None:
    """The GCE metadata stand-in (trainer/metadata.py) as one more service on the cluster network,
    and each task's GCE_METADATA_IP pointed at its own port there (TensorFlow reads it, and the
    trainer's closed-port default gives way to it)."""
    services[metadata.SERVICE] = {
        "extends": {"file": str(COMPOSE_FILE), "service": "task"},
        "hostname": metadata.SERVICE,
        "command": ["python", "-m", "tflab.metadata"],
        "environment": {"TFLAB_METADATA_TASKS": ",".join(tasks),
                        "TFLAB_METADATA_CONTROL": task_contract.metadata_control()},
        "volumes": [lab_mount(run_dir, METADATA, task_contract.METADATA_MOUNT)],
    }
    for task in tasks:
        services.setdefault(task, {}).setdefault("environment", {})["GCE_METADATA_IP"] = \
            metadata.address_for(tasks, task)


def literal(value):
    """Every string in a Compose (or stack) file as written: Compose reads `$NAME` and `${NAME}`
    in any value as the host's variables, and `$$` as one `$`. Nothing the lab renders means a
    variable, so ARGS="--home $HOME" and a folder named `a$b` reach the task exactly as given."""
    if isinstance(value, str):
        return value.replace("$", "$$")
    if isinstance(value, list):
        return [literal(item) for item in value]
    if isinstance(value, dict):
        return {key: literal(item) for key, item in value.items()}
    return value


class ComposeStack:
    """The Backend (backends/base.py) for BACKEND=compose: one Compose project per run."""

    name = "compose"

    def __init__(self, cli: ComposeCli, run_dir: Path, settings: Settings, image: str, the_cluster: Cluster,
                 proxied: frozenset[str] = frozenset(), host_gpus: Sequence[str] = ()):
        self.host_gpus = tuple(host_gpus)
        self.settings = settings
        self.image = image
        proxied = proxied if the_cluster.jobs else frozenset()
        uid, gid = container_user()
        # The lab's own cluster, which render_run reads by name (init_project takes a replay's too).
        self.lab_cluster = the_cluster.readdressed(cluster.linked_address(proxied))
        self.init_project(cli, run_dir, self.lab_cluster, proxied,
                          [COMPOSE_FILE, run_dir / RUN_FILE], f", image {image}",
                          {"TFLAB_IMAGE": image, "TFLAB_RUN_DIR": str(run_dir), "TFLAB_RUN": run_dir.name,
                           "TFLAB_UID": str(uid), "TFLAB_GID": str(gid), "COMPOSE_PROFILES": ",".join(PROFILES)})

    def init_project(self, cli: ComposeCli, run_dir: Path, the_cluster: Cluster, proxied: frozenset[str],
                     files: list, described: str = "", env: dict[str, str] | None = None) -> None:
        """What every run's Compose project holds, the lab's and a TFJob replay's (replay.stack.ReplayStack),
        whatever its services: set here once for both."""
        self.cli = cli
        self.run_dir = run_dir
        self.project = labels.project_name(run_dir)
        self.proxied = proxied
        self.cluster = the_cluster
        self.tasks = the_cluster.tasks
        self.description = f"compose ({cli}), project {self.project}{described}"
        self.files = files
        self.started = False  # once every task's container exists, a missing one has vanished
        # task -> the engine's State.OOMKilled, read with every exit_codes(): the kernel killed it
        # for memory. Exit code 137 alone cannot say so (a `docker kill` gives it too).
        self.oom_killed: dict[str, bool] = {}
        self.changes: docker.Changes | None = None  # from start() on: whether to read the states again
        self.codes: dict[str, int | None] = {}  # as last read
        self.env = {**os.environ, **(env or {})}
        self.output = TaskOutput(run_dir, OUTPUT)  # opens its file at the first line, in the claimed folder

    def command(self, *args: str) -> list[str]:
        files = [arg for path in self.files for arg in ("-f", str(path))]
        return [*self.cli.command, "--project-name", self.project,
                "--project-directory", str(LAB_HOME), *files, *args]

    def compose(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return docker.run_quiet(self.command(*args), timeout=timeout, env=self.env)

    def start(self) -> None:
        script_folder = userscript.stage(self.settings, self.run_dir) if self.settings.script else None
        override = render_run(self.settings, self.lab_cluster, self.proxied, self.host_gpus, script_folder,
                              self.run_dir, libraries.shared_mount(self.image))
        mounted = [LINKS] * bool(self.proxied) + [METADATA] * (metadata.SERVICE in override["services"])
        with runfolder.lab_space(self.run_dir) as folder:  # a read-only mount's source must be there first
            for name in mounted:
                folder.mkdir(name)
        marks = literal(labels.run_labels(self.run_dir))  # a run folder's path may hold a `$`
        for service in override["services"].values():
            service["labels"] = marks
        if "cluster" in override.get("networks", {}):  # NETWORK=bridge: the override replaces the network
            override["networks"]["cluster"]["labels"] = marks
        # Compose v1's `up --no-start` creates every network of the file, the tensorboard profile's
        # too: marked as the run's, the reaper and `make down` find it as they find the rest.
        override.setdefault("networks", {})["tensorboard"] = {"labels": marks}
        write_json(self.run_dir / RUN_FILE, override)
        self.watch()
        helpers = [link_service(task) for task in sorted(self.proxied)] + \
            ([metadata.SERVICE] if metadata.SERVICE in override["services"] else [])
        self._start_attached([*helpers, *self.tasks])

    def _start_attached(self, services: list[str]) -> None:
        """Creates the services' containers, then starts each with its output attached (as `docker
        run` does): output.log gets it from the container's own streams from its first byte, never
        from the engine's rotated log files."""
        result = self.compose("up", "--no-start", "--no-build", *services, timeout=300)
        self.changed()
        if result.returncode != 0:
            raise LabError(f"compose up failed: {docker.last_line(result)}")
        for service in services:
            for container in docker.project_containers(self.project, service):
                self.output.attach(service, container)
        self.output.check_started()
        self.changed()
        self.started = True

    def restart(self) -> None:
        """Starts every task's container again (after all have exited): same config, same logs.
        Compose starts them (it puts back what a chaos fault changed); their output is followed from
        the engine's log, since the restart."""
        self.restart_tasks(self.tasks)

    def restart_tasks(self, tasks: list[str], timeout: float = 300) -> None:
        """Starts these tasks' exited containers again, the others left as they are (a replay's
        in-place restart, as the kubelet's); LabError if Compose has not done it in `timeout` s."""
        # A restarted container's log holds its earlier attempts too: follow it from now, when the
        # last attempt has ended and been shown, and the new one not begun (a second earlier printed
        # the end of the last attempt twice).
        since = time.time()
        self._up(*tasks, timeout=timeout)
        for task in tasks:
            for container in docker.project_containers(self.project, task):
                self.output.follow(task, container, since)

    def _up(self, *services: str, timeout: float = 300) -> None:
        try:
            result = self.compose("up", "--detach", "--no-build", *services, timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            self.changed()
            raise LabError(f"compose up of {', '.join(services)} did not finish in {timeout:.0f} s") from None
        self.changed()
        if result.returncode != 0:
            raise LabError(f"compose up failed: {docker.last_line(result)}")

    def watch(self) -> None:
        """From now on exit_codes() reads the engine only when it reports a change (docker.Changes)."""
        self.changes = docker.Changes(f"{docker.PROJECT_LABEL}={self.project}")

    def changed(self) -> None:
        """The lab changed its containers itself: the next exit_codes() reads them again."""
        if self.changes:
            self.changes.report()

    def container(self, task: str) -> str:
        """The id of a task's container."""
        found = docker.project_containers(self.project, task)
        if not found:
            raise LabError(f"task {task} has no container in project {self.project}")
        return found[0]

    def network(self) -> str:
        return f"{self.project}_cluster"

    def docker_for(self, task: str) -> list[str]:
        return docker.engine_at(None)  # every container of a Compose project is on this engine

    def cut_off(self, task: str) -> subprocess.CompletedProcess:
        return docker.network_disconnect(self.network(), self.container(task))

    def reconnect(self, task: str) -> subprocess.CompletedProcess:
        return docker.network_connect(self.network(), self.container(task), alias=task)

    def exit_codes(self) -> dict[str, int | None]:
        """task -> exit code, None while its container is not (yet) finished, or VANISHED once the
        run has started and its container is gone. Read from the engine only when something
        happened to the project's containers since the last read (docker.Changes)."""
        if self.changes and self.codes and not self.changes.since_last_asked():
            return dict(self.codes)
        self.codes = self._read_exit_codes()
        return dict(self.codes)

    def _read_exit_codes(self) -> dict[str, int | None]:
        ids = docker.project_containers(self.project)
        codes: dict[str, int | None] = {task: VANISHED if self.started else None for task in self.tasks}
        template = (labels.label_template(labels.SERVICE_LABEL) + " {{.State.Status}} {{.State.ExitCode}} "
                    "{{.State.OOMKilled}}")
        # A container removed between `ps` and `inspect` is left out of inspect's answer: vanished too.
        found = docker.inspect(ids, template)
        for line in found.splitlines():
            service, status, code, oom_killed = line.split()
            if service in codes:
                codes[service] = int(code) if status in ("exited", "dead") else None
                self.oom_killed[service] = oom_killed == "true"
        return codes

    def terminate(self, tasks: list[str]) -> None:
        if tasks:
            self.compose("kill", "-s", "SIGTERM", *tasks, timeout=60)
            self.changed()

    def stop(self, tasks: list[str]) -> None:
        if tasks:
            self.compose("kill", *tasks, timeout=60)
            self.changed()

    def dump_stacks(self, tasks: list[str]) -> None:
        """STACKS_SIGNAL to each task's running container, whose init hands it to the task's process."""
        # A container that ended (or went) meanwhile: the engine says so for it, and the others get it.
        containers = [found for task in tasks for found in docker.project_containers(self.project, task)]
        if containers:
            docker.kill(containers, STACKS_SIGNAL, timeout=30)

    def save_output(self) -> None:
        """output.log was written as the tasks printed (TaskOutput); this waits for its last lines."""
        self.output.finish(self.tasks)

    def close(self) -> None:
        if self.changes:
            self.changes.close()
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "5", timeout=180)


class Follower(NamedTuple):
    """The `docker` process that copies one task's container's streams, and the thread reading it."""
    task: str
    process: subprocess.Popen
    reader: threading.Thread
    container: str


class TaskOutput:
    """output.log, streamed: each container's output is copied into it as it comes, with the host's
    time on each line, not read from the engine at the end. The engine's log driver rotates what it
    keeps (json-file with max-size and max-file, set per engine: 10 MB x 3 here), so a task that
    printed 60 MB left only its last 19 MB to a read at the end, silently; and a `docker logs
    --follow` across its rotations (engine 20.10) skipped and repeated whole files. So a run's
    first start attaches to each container before it starts (`docker start --attach`): every byte,
    straight from the container's streams. A restart's output is followed from the engine's log
    (Compose restarts the containers), where a restarted attempt that prints more than the engine
    keeps can still lose lines."""

    def __init__(self, run_dir: Path, name: str):
        self.run_dir, self.name = run_dir, name
        self.path = run_dir / name
        self.file = None
        self.lock = threading.Lock()
        self.followers: list[Follower] = []
        self.last: dict[str, bytes] = {}  # each task's last line, for a container that did not start
        self.error: OSError | None = None  # the first write that failed (a full disk), raised by finish()

    def _open(self) -> None:
        with self.lock:
            if self.file is None and self.error is None:
                try:
                    with runfolder.lab_space(self.run_dir) as folder:  # never through a link
                        self.file = folder.append(self.name)
                except OSError as error:
                    self.error = OSError(error.errno, error.strerror, str(self.path))
                except LabError as error:  # a folder the lab must not write into (runfolder.lab_space)
                    self.error = OSError(errno.EPERM, str(error), str(self.path))

    def attach(self, task: str, container: str) -> None:
        """Starts a created container with its output attached; it has its own session, so a
        terminal's Ctrl-C reaches the lab (which ends the tasks itself), not `docker start`, which
        would pass it on to the task."""
        self._open()
        self._launch(task, stamp=True, container=container, attach=True)

    def follow(self, task: str, container: str, since: float | None) -> None:
        self._open()
        self._launch(task, stamp=False, container=container, attach=False, since=since)

    def _launch(self, task: str, stamp: bool, container: str, attach: bool, since: float | None = None) -> None:
        try:
            process = docker.open_output(container, attach, since)
        except OSError as error:
            raise LabError(f"cannot run docker for {task}'s output: {error}") from None
        reader = threading.Thread(target=self._copy, args=(task, process, stamp), daemon=True)
        reader.start()
        self.followers.append(Follower(task, process, reader, container))

    def check_started(self, timeout: float = 120) -> None:
        """LabError if a container did not start (`docker start` ended and it is still `created`),
        naming the task and what the engine said; otherwise it would count as running until TIMEOUT."""
        deadline = time.monotonic() + timeout
        waiting = list(self.followers)
        while waiting and time.monotonic() < deadline:
            ids = [follower.container for follower in waiting]
            states = dict(zip(ids, docker.inspect(ids, "{{.State.Status}}").split()))
            for entry in list(waiting):
                task, process, reader, container = entry
                if states.get(container, "created") != "created":
                    waiting.remove(entry)
                elif process.poll() is not None:
                    reader.join(timeout=5)
                    said = self.last.get(task, b"").decode(errors="replace").strip()
                    raise LabError(f"compose up failed: {task} did not start: {said or 'no reason given'}")
            if waiting:
                time.sleep(0.1)

    def _copy(self, task: str, process: subprocess.Popen, stamp: bool) -> None:
        prefix = f"{task} | ".encode()
        assert process.stdout is not None  # docker.open_output pipes it
        for line in process.stdout:  # read to the end even when writes fail, so the CLI never blocks
            said = line
            if stamp:
                line = datetime.now(timezone.utc).isoformat(timespec="microseconds").encode() + b" " + line
            if not line.endswith(b"\n"):
                line += b"\n"
            with self.lock:
                self.last[task] = said
                if self.file is None:
                    continue
                try:
                    self.file.write(prefix + line)
                    self.file.flush()
                except OSError as error:  # named as output.log, which the one line then says
                    self.error = self.error or OSError(error.errno, error.strerror, str(self.path))

    def finish(self, tasks, wait_seconds: float = 10) -> None:
        """Waits for the tasks' followers (each ends with its container), ends every other one (a
        delay proxy runs until `down`), then closes output.log; raises the first OSError a write
        met (a full disk), once."""
        deadline = time.monotonic() + wait_seconds
        for task, process, reader, _ in self.followers:
            if task in tasks:
                reader.join(timeout=max(0.0, deadline - time.monotonic()))
        for _, process, reader, _ in self.followers:
            docker.end(process)
            reader.join(timeout=1)
        self.followers = []
        with self.lock:
            file, self.file = self.file, None
            error, self.error = self.error, None
            if file is not None:
                try:
                    file.close()
                except OSError as closing:
                    error = error or closing
        if error is not None:
            raise error
