"""The one door to the Docker CLI: every `docker ...` the lab runs goes through here.

    docker.run("ps", "--all", "--quiet")          # a CompletedProcess, never an exception for a non-zero exit
    docker.check()                                # the engine's version, or one LabError line
    docker.labelled_containers("tflab.run=abc")   # ids, running or not

The lab drives the engine through its CLI, not its HTTP API: the CLI is what every user has (and
what Compose v1 and v2, `docker stack` and BuildKit sit on), it follows DOCKER_HOST and contexts
the way the user's own commands do, and it needs no client library in an installed lab.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

from tflab import labels
from tflab.errors import LabError
from tflab.settings import MIN_CPUS

PROJECT_LABEL = "com.docker.compose.project"  # Compose v1 and v2 label every container and network
SERVICE_LABEL = "com.docker.compose.service"


def run_quiet(command: list[str], timeout: float = 60, env=None) -> subprocess.CompletedProcess:
    """Any command, its output captured as text; the caller reads the exit code."""
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)


def engine_at(address: str | None) -> list[str]:
    """The docker command that reaches an engine: this host's, or another's (`-H ssh://...`,
    `-H unix:///...`: a swarm node's, which the lab reaches only this way)."""
    return ["docker", "-H", address] if address else ["docker"]


def command(*args: str, engine: list[str] | None = None) -> list[str]:
    """The argv of `docker <args>` on `engine` (engine_at's; this host's when None), for a caller
    that streams its output (a build, `logs --follow`)."""
    return [*(engine or ["docker"]), *args]


def run(*args: str, timeout: float = 60, env=None, engine: list[str] | None = None) -> subprocess.CompletedProcess:
    """`docker <args>` on `engine`, its output captured as text; the caller reads the exit code."""
    return run_quiet(command(*args, engine=engine), timeout=timeout, env=env)


def last_line(result: subprocess.CompletedProcess) -> str:
    """What a failed command said last (stderr first), for a one-line error."""
    lines = (result.stderr + result.stdout).strip().splitlines()
    return lines[-1] if lines else f"exit code {result.returncode}"


def check() -> str:
    """The engine's version; LabError if docker is missing or its engine does not answer."""
    if shutil.which("docker") is None:
        raise LabError("docker is not installed (no `docker` on PATH); install Docker Engine or "
                       "Docker Desktop, or run without containers with BACKEND=local")
    try:
        info = run("info", "--format", "{{.ServerVersion}}", timeout=30)
    except subprocess.TimeoutExpired:
        raise LabError("Docker is not running: `docker info` did not answer in 30 s") from None
    if info.returncode != 0 or not info.stdout.strip():
        reason = (info.stderr.strip().splitlines() or ["no answer"])[-1]
        raise LabError(f"Docker is not running ({reason}); start the Docker daemon or Docker Desktop")
    return info.stdout.strip()


def info() -> dict:
    """`docker info` as a dict (every engine version answers `{{json .}}`); empty if unreadable."""
    try:
        result = run("info", "--format", "{{json .}}", timeout=30)
    except (OSError, subprocess.TimeoutExpired):  # no docker at all: check() says so
        return {}
    try:
        found = json.loads(result.stdout) if result.returncode == 0 else {}
    except json.JSONDecodeError:
        return {}
    return found if isinstance(found, dict) else {}


@functools.lru_cache(maxsize=1)
def engine_cpus() -> int | None:
    """The engine's CPUs (`docker info`'s NCPU), asked once; None where it does not say."""
    cpus = info().get("NCPU")
    return cpus if isinstance(cpus, int) and not isinstance(cpus, bool) and cpus > 0 else None


@functools.lru_cache(maxsize=1)
def engine_memory() -> int | None:
    """The engine's memory in bytes (`docker info`'s MemTotal: the VM's, under Docker Desktop),
    asked once; None where it does not say."""
    memory = info().get("MemTotal")
    return memory if isinstance(memory, int) and not isinstance(memory, bool) and memory > 0 else None


def check_cpus(name: str, cpus: float) -> None:
    """A CPU limit against what the engine has (`docker info`'s NCPU), before anything is written:
    Docker itself refuses more only when the container is created ("Range of CPUs is from 0.01 to
    N"), after the run folder exists. 0 is no limit."""
    if not cpus:
        return
    available = engine_cpus()
    if available and cpus > available:
        raise LabError(f"{name}={cpus:g} is more than this Docker engine's {available} CPUs; expected {MIN_CPUS:g} to "
                       f"{available}, or 0 (no limit)")


def labelled_containers(*label_filters: str) -> list[str]:
    """The ids of every container, running or not, that carries all these labels (`key=value` or `key`)."""
    filters = [arg for label in label_filters for arg in ("--filter", f"label={label}")]
    return run("ps", "--all", "--quiet", *filters).stdout.split()


def project_containers(project: str, service: str | None = None) -> list[str]:
    """A Compose project's containers (one service's, with `service`), running or not."""
    return labelled_containers(f"{PROJECT_LABEL}={project}", *([f"{SERVICE_LABEL}={service}"] if service else []))


class Changes:
    """Whether anything happened to some containers since the last ask, from a `docker events`
    stream that runs alongside (no CPU while nothing happens).

    A run's supervisor asks for its tasks' states twice a second: `docker ps` and `docker inspect`,
    64 ms of CPU together here (the CLI's start, mostly), which on a 2-CPU machine whose trainers
    use both is 6 % of it taken from training. With this it asks only after the engine reported
    something (a container created, started, paused, killed, dead, removed), and at least every
    RECHECK_SECONDS anyway, in case the stream missed one or ended. The stream replays from a
    second before it was started (`--since`), so nothing between its start and its subscription
    is lost. It comes in spans of SPAN_SECONDS (`--until`), each the next one's `--since`, so a lab
    killed outright (SIGKILL: no close()) leaves no `docker events` running for longer than that."""

    RECHECK_SECONDS = 5.0
    SPAN_SECONDS = 60.0

    def __init__(self, *label_filters: str, engine: list[str] | None = None):
        self.arguments = ["--filter", "type=container",
                          *[arg for label in label_filters for arg in ("--filter", f"label={label}")],
                          "--format", "{{.Action}}"]
        self.engine = engine
        self.lock = threading.Lock()
        self.reported = True  # nothing read yet
        self.read_at = float("-inf")
        self.closed = False
        since = time.time() - 1
        self.process = self._open(since)
        if self.process:  # the thread gets it itself: close() may clear self.process before it starts
            threading.Thread(target=self._follow, args=(self.process, since), daemon=True).start()

    def _open(self, since: float) -> subprocess.Popen | None:
        """One span's stream; None without docker (every ask then reads again, as without this)."""
        try:
            return subprocess.Popen(command("events", "--since", f"{since:.3f}", "--until",
                                            f"{since + self.SPAN_SECONDS:.3f}", *self.arguments, engine=self.engine),
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return None

    def _follow(self, process: subprocess.Popen, since: float) -> None:
        while True:
            for _ in process.stdout:
                self.report()
            until = since + self.SPAN_SECONDS
            if process.wait() != 0 or time.time() < until - self.SPAN_SECONDS / 2:
                break  # closed, or the engine ended it early
            since = until
            with self.lock:
                if self.closed:
                    break
                process = self.process = self._open(since)
            if process is None:
                break
        with self.lock:
            self.process = None  # the stream ended: from now on every ask reads again

    def report(self) -> None:
        """Marks a change, as the engine would: the lab's own actions (a kill, a restart) call it."""
        with self.lock:
            self.reported = True

    def since_last_asked(self) -> bool:
        """True when the caller should read the containers' state again, and counts that as read."""
        with self.lock:
            now = time.monotonic()
            due = self.reported or self.process is None or now - self.read_at > self.RECHECK_SECONDS
            if due:
                self.reported, self.read_at = False, now
            return due

    def close(self) -> None:
        with self.lock:
            self.closed = True
            process, self.process = self.process, None
        end(process)


def end(process: subprocess.Popen | None) -> None:
    """Ends a CLI that follows the engine (`docker events`, `compose logs --follow`) where it still
    runs: SIGTERM, and SIGKILL after 10 s."""
    if process and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def inspect(ids: list[str], template: str) -> str:
    """`docker inspect --format template` of these containers; a container removed meanwhile is left out."""
    return run("inspect", "--format", template, *ids).stdout if ids else ""


def remove_project(project: str) -> None:
    """Removes a Compose project's containers and networks by label, without its Compose files."""
    ids = project_containers(project)
    if ids:
        run("rm", "--force", "--volumes", *ids, timeout=120)
    networks = run("network", "ls", "--quiet", "--filter", f"label={PROJECT_LABEL}={project}").stdout.split()
    if networks:
        run("network", "rm", *networks, timeout=60)


def lab_projects(scope, tensorboard_project: str | None = None) -> list[str]:
    """The Compose projects of the runs under `scope` (a runs folder, a run, a compare) that still
    have containers or networks, running or not, and `tensorboard_project` where it has any.
    Found by the labels every run puts on what it creates: nothing else is ever listed."""
    template = f'{{{{.Label "{labels.RUN_DIR}"}}}}\t{{{{.Label "{PROJECT_LABEL}"}}}}'
    projects = set()
    for kind in (["ps", "--all"], ["network", "ls"]):
        found = run(*kind, "--filter", f"label={labels.RUN_DIR}", "--format", template)
        for line in found.stdout.splitlines():
            run_dir, _, project = line.partition("\t")
            if project and labels.within(run_dir, scope):
                projects.add(project)
    if tensorboard_project and project_containers(tensorboard_project):
        projects.add(tensorboard_project)
    return sorted(projects)


def project_run_dir(project: str) -> Path | None:
    """The run folder a Compose project's objects are labelled with (labels.RUN_DIR); None for a
    project that has none (TensorBoard's)."""
    for kind in (["ps", "--all"], ["network", "ls"]):
        found = run(*kind, "--filter", f"label={PROJECT_LABEL}={project}", "--format",
                    f'{{{{.Label "{labels.RUN_DIR}"}}}}')
        for value in found.stdout.splitlines():
            if value.strip().startswith("/"):
                return Path(value.strip())
    return None


def published(project: str, port: int) -> bool:
    """Whether a container of the project publishes this host port."""
    return bool(run("ps", "--quiet", "--filter", f"label={PROJECT_LABEL}={project}",
                    "--filter", f"publish={port}").stdout.strip())
