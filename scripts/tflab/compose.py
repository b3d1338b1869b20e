"""Docker and Compose from the host side: finding them, rendering the worker services, running them.

Both Compose CLIs are supported: v2 (`docker compose`, what laptops have) and v1
(`docker-compose` 1.29, what Debian bookworm ships). They differ in ways that matter here, so the
lab leans only on what both do the same: `up -d` with named services, `logs`, `stop`, `down`,
profiles, `extends`; and it reads container state from Docker itself, by the labels Compose puts
on every container, since v1 has no JSON `ps` and the two name containers differently.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from tflab import cluster, labels
from tflab.errors import LabError
from tflab.home import LAB_HOME
from tflab.settings import Settings

REPO = LAB_HOME  # the checkout, or an installed lab's laid-out files (home.py)
COMPOSE_FILE = REPO / "docker-compose.yml"
RUN_FILE = "compose.run.json"  # the run's generated services and overrides, in its folder
PROFILES = ("single", "mirrored", "cluster")
# A task whose container disappeared while the run went on (removed from outside the lab): not
# an exit code any process gives, so the summary cannot mistake it for one.
VANISHED = -1
TENSORBOARD_WAIT_SECONDS = 60  # until it answers HTTP: its first scan of the runs folder included
# /dev/shm of every GPU task. NCCL keeps its buffers there between the GPUs of one container
# (mirrored over several GPUs) and fails in Docker's default 64 MB: NVIDIA/nccl#290. `ipc: host`
# would do too, but it hands the hardened trainers (read_only, cap_drop ALL) the host's IPC
# namespace, and they need none of it: NCCL tells nodes apart by hostname and boot id, each task
# has a hostname of its own, so between containers NCCL talks over the cluster network, as it
# would between machines, and never through shared memory.
GPU_SHM_SIZE = "1gb"


def run_quiet(command: list[str], timeout: float = 60, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def check_docker() -> str:
    """The engine's version; LabError if docker is missing or its engine does not answer."""
    if shutil.which("docker") is None:
        raise LabError("docker is not installed (no `docker` on PATH); install Docker Engine or "
                       "Docker Desktop, or run without containers with BACKEND=local")
    try:
        info = run_quiet(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=30)
    except subprocess.TimeoutExpired:
        raise LabError("Docker is not running: `docker info` did not answer in 30 s") from None
    if info.returncode != 0 or not info.stdout.strip():
        reason = (info.stderr.strip().splitlines() or ["no answer"])[-1]
        raise LabError(f"Docker is not running ({reason}); start the Docker daemon or Docker Desktop")
    return info.stdout.strip()


def docker_info() -> dict:
    """`docker info` as a dict (every engine version answers `{{json .}}`); empty if unreadable."""
    try:
        result = run_quiet(["docker", "info", "--format", "{{json .}}"], timeout=30)
    except (OSError, subprocess.TimeoutExpired):  # no docker at all: check_docker says so
        return {}
    try:
        info = json.loads(result.stdout) if result.returncode == 0 else {}
    except json.JSONDecodeError:
        return {}
    return info if isinstance(info, dict) else {}


@functools.lru_cache(maxsize=1)
def engine_cpus() -> int | None:
    """The engine's CPUs (`docker info`'s NCPU), asked once; None where it does not say."""
    cpus = docker_info().get("NCPU")
    return cpus if isinstance(cpus, int) and not isinstance(cpus, bool) and cpus > 0 else None


def check_cpus(name: str, cpus: float) -> None:
    """A CPU limit against what the engine has (`docker info`'s NCPU), before anything is written:
    Docker itself refuses more only when the container is created ("Range of CPUs is from 0.01 to
    N"), after the run folder exists. 0 is no limit."""
    if not cpus:
        return
    available = engine_cpus()
    if available and cpus > available:
        raise LabError(f"{name}={cpus:g} is more than this Docker engine's {available} CPUs; expected 0.01 to "
                       f"{available}, or 0 (no limit)")


def check_tensorboard_port(port: int, runs_dir: Path) -> None:
    """TENSORBOARD_PORT is free on 127.0.0.1, or this runs folder's TensorBoard serves on it
    already (then `make tensorboard` keeps it)."""
    project = f"label=com.docker.compose.project={labels.tensorboard_project(runs_dir)}"
    serving = run_quiet(["docker", "ps", "--quiet", "--filter", project, "--filter", f"publish={port}"]).stdout.strip()
    if not serving:
        check_port_free(port)


def check_port_free(port: int) -> None:
    """Binds 127.0.0.1:port for a moment, as Docker will, so that a busy port is one line before
    Compose creates a container and networks it would then leave behind."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            raise LabError(f"TENSORBOARD_PORT={port} is not free on 127.0.0.1 ({error.strerror}); expected a free "
                           "port from 1024 to 65535, such as TENSORBOARD_PORT=6007") from None


def nvidia_gpus_usable(info: dict) -> bool:
    """Whether the engine can hand NVIDIA GPUs to containers: the NVIDIA runtime is registered
    (`nvidia-ctk runtime configure`, the toolkit's install step), or CDI found NVIDIA devices
    (engines since 28.3 list them in DiscoveredDevices, as nvidia.com/gpu=0 ...). An engine with
    only the toolkit's hook on its PATH could do it too, but shows nothing of it: it is refused,
    and the configure step the message leads to fixes that."""
    runtimes = info.get("Runtimes") or {}
    discovered = info.get("DiscoveredDevices") or []
    return (any(name.startswith("nvidia") for name in runtimes)
            or any(str(device.get("ID", "")).startswith("nvidia.com/gpu") for device in discovered))


def host_gpu_indexes() -> list[str]:
    """The host's NVIDIA GPUs by index, as nvidia-smi numbers them (and Docker's device_ids take
    them); LabError if nvidia-smi cannot say. The host's nvidia-smi: an engine on another machine
    (DOCKER_HOST) has GPUs this cannot see, and then GPUS needs the indexes given."""
    if shutil.which("nvidia-smi") is None:
        raise LabError("nvidia-smi is not on PATH")
    try:
        result = run_quiet(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], timeout=30)
    except subprocess.TimeoutExpired:
        raise LabError("nvidia-smi did not answer in 30 s") from None
    indexes = result.stdout.split()
    if result.returncode != 0 or not indexes or not all(index.isdigit() for index in indexes):
        raise LabError(f"nvidia-smi answered no GPU list ({_last_line(result)})")
    return indexes


def check_gpus(settings: Settings) -> tuple[str, ...]:
    """GPUS checked against this engine, before anything is built, written or started. Returns
    the host's GPU indexes where GPUS=all must be spread over the workers one by one (render_run
    takes them); empty where the indexes are given or Compose's `count: all` says it."""
    if not settings.gpus:
        return ()
    info = docker_info()
    if not nvidia_gpus_usable(info):
        runtimes = ", ".join(sorted(info.get("Runtimes") or {})) or "none"
        raise LabError(f"GPUS={settings.gpus} needs the NVIDIA container runtime, and this Docker engine "
                       f"has only: {runtimes}; install the NVIDIA Container Toolkit, or leave GPUS empty "
                       "to train on CPUs")
    if settings.gpu_indexes or not cluster.job_sizes(settings):
        return ()
    try:
        return tuple(host_gpu_indexes())
    except LabError as error:
        raise LabError(f"GPUS=all with STRATEGY={settings.strategy} gives each worker one GPU of the "
                       f"host's list, and that list cannot be had: {error}; give the GPU indexes "
                       "instead, such as GPUS=0,1") from None


@dataclass(frozen=True)
class ComposeCli:
    command: tuple[str, ...]  # ("docker", "compose") or ("docker-compose",)
    version: str

    @property
    def major(self) -> int:
        return int(self.version.lstrip("v").split(".")[0])

    def __str__(self) -> str:
        return f"{' '.join(self.command)} {self.version}"


def _compose_version(command: tuple[str, ...]) -> str | None:
    if shutil.which(command[0]) is None:
        return None
    try:
        result = run_quiet([*command, "version", "--short"], timeout=30)
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


def gpu_requests(settings: Settings, host_gpus: Sequence[str] = ()) -> dict[str, dict]:
    """GPUS: task -> its NVIDIA device request. Single and mirrored take every GPU given (GPUS=all:
    Compose's `count: all`); each worker takes one, in turn over the list (GPUS=all: `host_gpus`),
    so WORKERS beyond the GPUs share them; parameter_server's chief and ps compute nothing and get
    none. One GPU per worker, not all of them: MultiWorkerMirroredStrategy would make every GPU a
    worker sees a replica of its own, and the lab's worker is one replica."""
    if not settings.gpus:
        return {}
    if not cluster.job_sizes(settings):
        request = {"count": "all"} if settings.gpus == "all" else {"device_ids": list(settings.gpu_indexes)}
        return {settings.strategy: request}
    indexes = settings.gpu_indexes or tuple(host_gpus)
    if not indexes:
        raise ValueError("GPUS=all on a cluster needs the host's GPU indexes (check_gpus finds them)")
    # multiworker's chief (CHIEF=1) is a replica like any worker; parameter_server's computes nothing.
    replicas = ("chief", "worker") if settings.strategy == "multiworker" else ("worker",)
    workers = [task for task in cluster.task_names(settings) if cluster.parse_task(task)[0] in replicas]
    return {task: {"device_ids": [indexes[i % len(indexes)]]} for i, task in enumerate(workers)}


def gpu_service_keys(request: dict) -> dict:
    """What a GPU task's service adds. TF_FORCE_GPU_ALLOW_GROWTH: TensorFlow otherwise takes almost
    all of a GPU's memory at start, and a second worker on the same GPU would find none left."""
    device = {"driver": "nvidia", **request, "capabilities": ["gpu"]}
    return {"deploy": {"resources": {"reservations": {"devices": [device]}}},
            "shm_size": GPU_SHM_SIZE,
            "environment": {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}}


def render_run(settings: Settings, spec: dict, proxied: frozenset[str] = frozenset(),
               host_gpus: Sequence[str] = ()) -> dict:
    """The run's Compose override: one service per cluster task, each extending the `task`
    template with its TF_CONFIG; a delay proxy in front of each task in `proxied`; every task's
    resource limits and GPUs; and the network's mode. `host_gpus`: see check_gpus."""
    services: dict[str, dict] = {}
    gpus = gpu_requests(settings, host_gpus)
    limits = {}
    if settings.cpus:
        limits["cpus"] = settings.cpus
    if settings.memory != "0":
        limits["mem_limit"] = settings.memory
    for task in cluster.task_names(settings):
        if spec:
            services[task] = {
                "extends": {"file": str(COMPOSE_FILE), "service": "task"},
                "hostname": task,
                "environment": cluster.tf_config_env(spec, task),
            }
        services.setdefault(task, {}).update(limits)
        if settings.script:
            services[task].update(script_service(settings))
        if task in gpus:
            keys = gpu_service_keys(gpus[task])
            services[task].setdefault("environment", {}).update(keys.pop("environment"))
            services[task].update(keys)
        if task in proxied:
            services[link_service(task)] = {
                "extends": {"file": str(COMPOSE_FILE), "service": "task"},
                "hostname": link_service(task),
                "command": ["python", "-m", "tflab.linkproxy"],
                "environment": {"TFLAB_LINK_TO": f"{task}:{cluster.PORT}",
                                "TFLAB_LINK_CONTROL": f"/lab/run/links/{task}.json"},
            }
    override: dict = {"services": services}
    if settings.network == "bridge":
        override["networks"] = {"cluster": {"internal": False,
                                            "driver_opts": {"com.docker.network.bridge.inhibit_ipv4": "false"}}}
    return literal(override)


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


SCRIPT_DIR = "/lab/script"  # where a user's script folder is mounted, read-only


def script_command(settings: Settings, script_path: str, python: str = "python") -> list[str]:
    """The command of every task under SCRIPT: the launcher, which runs the script unmodified."""
    return [python, "-m", "tflab.launch", "--", python, script_path, *shlex.split(settings.args)]


def script_service(settings: Settings) -> dict:
    """SCRIPT: the script's folder mounted read-only, and the launcher as the command."""
    script = Path(settings.script)
    return {"volumes": [f"{script.parent}:{SCRIPT_DIR}:ro"],
            "command": script_command(settings, f"{SCRIPT_DIR}/{script.name}"),
            "working_dir": SCRIPT_DIR}


def container_user() -> tuple[int, int]:
    """The uid:gid trainers run as: the host user's, so the run folder stays theirs; never root."""
    uid, gid = os.getuid(), os.getgid()
    return (uid, gid) if uid != 0 else (1000, 1000)


class ComposeStack:
    """The Backend for BACKEND=compose (see runner.py): one Compose project per run."""

    def __init__(self, cli: ComposeCli, run_dir: Path, settings: Settings, image: str,
                 proxied: frozenset[str] = frozenset(), host_gpus: Sequence[str] = ()):
        self.cli = cli
        self.host_gpus = tuple(host_gpus)
        self.run_dir = run_dir
        self.settings = settings
        self.project = labels.project_name(run_dir)
        self.tasks = cluster.task_names(settings)
        self.proxied = proxied if cluster.job_sizes(settings) else frozenset()
        self.address = cluster.linked_address(self.proxied)
        self.description = f"compose ({cli}), project {self.project}, image {image}"
        self.files = [COMPOSE_FILE, run_dir / RUN_FILE]
        self.started = False  # once every task's container exists, a missing one has vanished
        # task -> the engine's State.OOMKilled, read with every exit_codes(): the kernel killed it
        # for memory. Exit code 137 alone cannot say so (a `docker kill` gives it too).
        self.oom_killed: dict[str, bool] = {}
        uid, gid = container_user()
        self.env = {**os.environ, "TFLAB_IMAGE": image, "TFLAB_RUN_DIR": str(run_dir), "TFLAB_RUN": run_dir.name,
                    "TFLAB_UID": str(uid), "TFLAB_GID": str(gid),
                    "COMPOSE_PROFILES": ",".join(PROFILES)}

    def command(self, *args: str) -> list[str]:
        files = [arg for path in self.files for arg in ("-f", str(path))]
        return [*self.cli.command, "--project-name", self.project,
                "--project-directory", str(REPO), *files, *args]

    def compose(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return run_quiet(self.command(*args), timeout=timeout, env=self.env)

    def start(self, spec: dict) -> None:
        override = render_run(self.settings, spec, self.proxied, self.host_gpus)
        marks = literal(labels.run_labels(self.run_dir))  # a run folder's path may hold a `$`
        for service in override["services"].values():
            service["labels"] = marks
        if "cluster" in override.get("networks", {}):  # NETWORK=bridge: the override replaces the network
            override["networks"]["cluster"]["labels"] = marks
        write_json(self.run_dir / RUN_FILE, override)
        self._up(*[link_service(task) for task in sorted(self.proxied)], *self.tasks)
        self.started = True

    def restart(self) -> None:
        """Starts every task's container again (after all have exited): same config, same logs."""
        self._up(*self.tasks)

    def _up(self, *services: str) -> None:
        result = self.compose("up", "--detach", "--no-build", *services, timeout=300)
        if result.returncode != 0:
            raise LabError(f"compose up failed: {_last_line(result)}")

    def container(self, task: str) -> str:
        """The id of a task's container."""
        found = run_quiet(["docker", "ps", "--all", "--quiet", "--filter",
                           f"label=com.docker.compose.project={self.project}",
                           "--filter", f"label=com.docker.compose.service={task}"]).stdout.split()
        if not found:
            raise LabError(f"task {task} has no container in project {self.project}")
        return found[0]

    def network(self) -> str:
        return f"{self.project}_cluster"

    def exit_codes(self) -> dict[str, int | None]:
        """task -> exit code, None while its container is not (yet) finished, or VANISHED once the
        run has started and its container is gone."""
        ids = run_quiet(["docker", "ps", "--all", "--quiet", "--filter",
                         f"label=com.docker.compose.project={self.project}"]).stdout.split()
        codes: dict[str, int | None] = {task: VANISHED if self.started else None for task in self.tasks}
        template = ('{{index .Config.Labels "com.docker.compose.service"}} {{.State.Status}} {{.State.ExitCode}} '
                    '{{.State.OOMKilled}}')
        # A container removed between `ps` and `inspect` is left out of inspect's answer: vanished too.
        found = run_quiet(["docker", "inspect", "--format", template, *ids]).stdout if ids else ""
        for line in found.splitlines():
            service, status, code, oom_killed = line.split()
            if service in codes:
                codes[service] = int(code) if status in ("exited", "dead") else None
                self.oom_killed[service] = oom_killed == "true"
        return codes

    def terminate(self, tasks: list[str]) -> None:
        if tasks:
            self.compose("kill", "-s", "SIGTERM", *tasks, timeout=60)

    def stop(self, tasks: list[str]) -> None:
        if tasks:
            self.compose("kill", *tasks, timeout=60)

    def save_output(self) -> None:
        result = self.compose("logs", "--no-color", "--timestamps", timeout=120)
        (self.run_dir / "output.log").write_text(result.stdout + result.stderr)

    def close(self) -> None:
        self.compose("down", "--volumes", "--remove-orphans", "--timeout", "5", timeout=180)


def serve_tensorboard(cli: ComposeCli, runs_dir: Path, port: int, image: str) -> str:
    """`make tensorboard`: starts (or keeps) the tensorboard service on 127.0.0.1:port, serving
    every run under runs_dir, and returns its URL once it answers; `make down` removes it."""
    uid, gid = container_user()
    env = {**os.environ, "TFLAB_IMAGE": image, "TFLAB_RUNS_DIR": str(runs_dir), "TFLAB_UID": str(uid),
           "TFLAB_GID": str(gid), "TFLAB_TENSORBOARD_PORT": str(port), "COMPOSE_PROFILES": "tensorboard"}
    command = [*cli.command, "--project-name", labels.tensorboard_project(runs_dir), "--project-directory", str(REPO),
               "-f", str(COMPOSE_FILE)]
    result = run_quiet([*command, "up", "--detach", "--no-build", "tensorboard"], timeout=300, env=env)
    if result.returncode != 0:
        # Whatever failed (the port taken since, the image...), nothing half-made is left behind.
        run_quiet([*command, "down", "--remove-orphans"], timeout=180, env=env)
        raise LabError(f"could not start TensorBoard on 127.0.0.1:{port}: {_last_line(result)}")
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + TENSORBOARD_WAIT_SECONDS
    while True:
        try:
            with urllib.request.urlopen(f"{url}/data/runs", timeout=5):
                return url
        except OSError as error:
            if time.monotonic() > deadline:
                logs = run_quiet([*command, "logs", "--no-color", "--tail", "5", "tensorboard"], env=env)
                raise LabError(f"TensorBoard did not answer at {url} in {TENSORBOARD_WAIT_SECONDS} s ({error}); "
                               f"its last words: {_last_line(logs)}") from None
            time.sleep(1)


def _last_line(result: subprocess.CompletedProcess) -> str:
    lines = (result.stderr + result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit code {result.returncode}"


def lab_projects(scope: Path, tensorboard: bool = True) -> list[str]:
    """The Compose projects of the runs under `scope` (a runs folder, a run, a compare) that still
    have containers or networks, running or not; with `tensorboard`, the scope's TensorBoard too.
    Found by the labels every run puts on what it creates: nothing else is ever listed."""
    template = f'{{{{.Label "{labels.RUN_DIR}"}}}}\t{{{{.Label "com.docker.compose.project"}}}}'
    projects = set()
    for kind in (["ps", "--all"], ["network", "ls"]):
        found = run_quiet(["docker", *kind, "--filter", f"label={labels.RUN_DIR}", "--format", template])
        for line in found.stdout.splitlines():
            run_dir, _, project = line.partition("\t")
            if project and labels.within(run_dir, scope):
                projects.add(project)
    if tensorboard:
        name = labels.tensorboard_project(scope)
        found = run_quiet(["docker", "ps", "--all", "--quiet", "--filter", f"label=com.docker.compose.project={name}"])
        if found.stdout.strip():
            projects.add(name)
    return sorted(projects)


def remove_project(project: str) -> None:
    """Removes a project's containers and networks by label, without needing its Compose files."""
    label = f"label=com.docker.compose.project={project}"
    ids = run_quiet(["docker", "ps", "--all", "--quiet", "--filter", label]).stdout.split()
    if ids:
        run_quiet(["docker", "rm", "--force", "--volumes", *ids], timeout=120)
    networks = run_quiet(["docker", "network", "ls", "--quiet", "--filter", label]).stdout.split()
    if networks:
        run_quiet(["docker", "network", "rm", *networks], timeout=60)


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")
