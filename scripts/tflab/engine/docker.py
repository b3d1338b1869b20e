"""The one door to the Docker CLI: every `docker ...` the lab runs is spelled here, a named verb each.

    docker.image_remove(name)                     # a CompletedProcess, never an exception for a non-zero exit
    docker.check()                                # the engine's version, or one LabError line
    docker.labelled_containers("tflab.run=abc")   # ids, running or not

The other modules call these verbs, never `run` or `command` with a command line of their own
(test_walls.py holds that), so "what does the lab ask the engine?" is answered by this file alone,
with dockerswarm.py for a swarm's verbs (nodes, services, stacks), spelled on this module's `run`
and `command`; the label names the verbs filter on are labels.py's.

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

from tflab.core.errors import LabError
from tflab.core.grammars import MIN_CPUS
from tflab.engine import labels
from tflab.engine.labels import PROJECT_LABEL, SERVICE_LABEL  # noqa: F401 (docker.PROJECT_LABEL, as before)


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


def labelled_containers(*label_filters: str, engine: list[str] | None = None) -> list[str]:
    """The ids of every container, running or not, that carries all these labels (`key=value` or `key`)."""
    filters = [arg for label in label_filters for arg in ("--filter", f"label={label}")]
    return run("ps", "--all", "--quiet", *filters, engine=engine).stdout.split()


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

    def _follow(self, process: subprocess.Popen | None, since: float) -> None:
        while process is not None:
            assert process.stdout is not None  # _open pipes it
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


# -- the verbs the rest of the lab uses, one function each, so every argv is spelled here --------
# Each returns what its callers read (a CompletedProcess where they read the exit code and the
# message); none raises for a non-zero exit. `engine` is engine_at's, for a container on another
# swarm node.


def info_format(template: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`docker info --format template`."""
    return run("info", "--format", template, timeout=timeout)


def system_df(timeout: float = 120) -> subprocess.CompletedProcess:
    """`docker system df`: what images, containers, volumes and build cache take on the engine."""
    return run("system", "df", timeout=timeout)


def server_version() -> subprocess.CompletedProcess:
    """The engine's version and API version, space-separated."""
    return run("version", "--format", "{{.Server.Version}} {{.Server.APIVersion}}")


def engine_version(engine: list[str], timeout: float = 10) -> subprocess.CompletedProcess:
    """The version of the engine at `engine` (engine_at's): whether it answers."""
    return run("version", "--format", "{{.Server.Version}}", timeout=timeout, engine=engine)


# images

def image_inspect(image: str, template: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """`docker image inspect [--format template] image`; a non-zero exit where there is no such image."""
    return run("image", "inspect", *(["--format", template] if template else []), image, timeout=timeout)


def image_user(image: str) -> subprocess.CompletedProcess:
    """An image's configured user as JSON (`""` for none); `--` so a name cannot read as a flag."""
    return run("image", "inspect", "--format", "{{json .Config.User}}", "--", image)


def image_size(image: str) -> int:
    """An image's size in bytes (ValueError where the engine has no such image)."""
    return int(image_inspect(image, "{{.Size}}").stdout)


def images_inspect(ids: list[str], template: str) -> str:
    """`docker image inspect --format template` of several images; empty for none."""
    return run("image", "inspect", "--format", template, *ids).stdout if ids else ""


def image_remove(image: str, force: bool = False, timeout: float = 60) -> subprocess.CompletedProcess:
    """Removes one name of an image (the image itself with its last name), unless a container uses it."""
    return run("image", "rm", *(["--force"] if force else []), image, timeout=timeout)


def dangling_images(all_layers: bool = False, label: str | None = None) -> list[str]:
    """The ids of untagged images: `all_layers` includes intermediate ones (full ids), `label` keeps
    only those that carry it."""
    flags = ["--all", "--quiet", "--no-trunc"] if all_layers else ["--quiet"]
    return run("image", "ls", *flags, "--filter", "dangling=true",
               *(["--filter", f"label={label}"] if label else [])).stdout.split()


def pull(name: str, platform: str | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return run("pull", "--quiet", *(["--platform", platform] if platform else []), name, timeout=timeout)


def tag(image: str, name: str) -> subprocess.CompletedProcess:
    return run("tag", image, name)


def push(name: str, timeout: float) -> subprocess.CompletedProcess:
    return run("push", name, timeout=timeout)


def buildx_available() -> bool:
    """Whether the CLI has buildx (BuildKit's client); raises TimeoutExpired if it does not answer."""
    return run("buildx", "version", timeout=30).returncode == 0


def build_command(dockerfile: str, context: str, iidfile: str, platform: str | None, build_args: list[str],
                  own: list[str]) -> list[str]:
    """The argv of an image build, for a caller that streams its progress: untagged, its image's id
    written to `iidfile`, so that only the caller tags it, once the build succeeded (the engine
    finishes a build its client left, and would tag it after an interrupted lab had gone)."""
    return command("build", *own, "--file", dockerfile, *(["--platform", platform] if platform else []),
                   *build_args, "--iidfile", iidfile, context)


def commit(container: str, tag: str, changes: list[str], timeout: float = 1800) -> subprocess.CompletedProcess:
    """A stopped container's filesystem as an image, with Dockerfile instructions (`changes`) applied."""
    return run("commit", *[arg for change in changes for arg in ("--change", change)], container, tag,
               timeout=timeout)


# containers

def run_isolated(image: str, entrypoint: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """A throwaway container of `image` with no network, `entrypoint args` its command."""
    return run("run", "--rm", "--network", "none", "--entrypoint", entrypoint, image, *args, timeout=timeout)


def strip_setid_in(image: str, folder: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Set-ID bits removed from everything under a host folder by a throwaway container of `image` (supervisor/
    setid.py's fallback where the lab is not root and a root replica's file is not its to change): no network,
    user 0 with no capability but FOWNER (chmod another's file) and DAC_READ_SEARCH (enter its 0700 folders), only
    that folder mounted, so a link a task left there resolves inside the container, never on the host."""
    return run("run", "--rm", "--network", "none", "--user", "0:0", "--cap-drop", "ALL", "--cap-add", "FOWNER",
               "--cap-add", "DAC_READ_SEARCH", "--security-opt", "no-new-privileges",
               "--mount", f"type=bind,source={folder},target=/d", "--entrypoint", "find", image,
               "-P", "/d", "-xdev", "-perm", "/6000", "!", "-type", "l", "-exec", "chmod", "u-s,g-s", "{}", "+",
               timeout=timeout)


def create(name: str, image: str, command_args: list[str], options: list[str]) -> subprocess.CompletedProcess:
    """A container created (not started) with `options` before the image."""
    return run("create", "--name", name, *options, image, *command_args)


def copy_out(container: str, path: str, to: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """`path` of a created or stopped container copied to the host's new `to`, modes and times kept."""
    return run("cp", f"{container}:{path}", str(to), timeout=timeout)


def copy_between(source: str, path: str, target: str, into: str, timeout: float = 1800) -> subprocess.CompletedProcess:
    """`path` (a folder) of container `source` copied into the folder `into` of container `target`, both created
    or stopped, as a tar stream through this client (`docker cp` out, then in): neither runs, whatever its platform."""
    out = subprocess.Popen(command("cp", f"{source}:{path}", "-"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert out.stdout is not None and out.stderr is not None  # both piped
    try:
        copied = subprocess.run(command("cp", "-", f"{target}:{into}"), stdin=out.stdout, capture_output=True,
                                timeout=timeout)
        out.stdout.close()
        out_error = out.stderr.read()
        out.wait(timeout=timeout)
    finally:
        if out.poll() is None:
            out.kill()
            out.wait()
        out.stderr.close()
    failed = out.returncode or copied.returncode
    return subprocess.CompletedProcess(copied.args, failed, "", (out_error + copied.stderr).decode(errors="replace"))


def start_attached_command(container: str) -> list[str]:
    """The argv that starts a container and streams its output until it exits."""
    return command("start", "--attach", container)


def open_output(container: str, attach: bool, since: float | None = None, apart: bool = False) -> subprocess.Popen:
    """A container's output as a stream, stdout and stderr merged (apart: each its own pipe, as a
    terminal folds each apart): `start --attach` (which starts it) or `logs --follow --timestamps`
    from `since`; in a session of its own, so a Ctrl-C meant for the lab does not end it first."""
    arguments = (["start", "--attach", container] if attach else
                 ["logs", "--follow", "--timestamps", *(["--since", f"{since:.3f}"] if since else []), container])
    return subprocess.Popen(command(*arguments), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE if apart else subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def kill(containers: list[str], signal: str | None = None, timeout: float = 60,
         engine: list[str] | None = None) -> subprocess.CompletedProcess:
    """SIGKILL (or `signal`) to running containers."""
    return run("kill", *(["--signal", signal] if signal else []), *containers, timeout=timeout, engine=engine)


def pause(container: str, engine: list[str] | None = None) -> subprocess.CompletedProcess:
    return run("pause", container, engine=engine)


def unpause(container: str, engine: list[str] | None = None) -> subprocess.CompletedProcess:
    return run("unpause", container, engine=engine)


def update_cpus(container: str, cpus: float) -> subprocess.CompletedProcess:
    return run("update", "--cpus", f"{cpus:g}", container)


def remove_containers(*containers: str, timeout: float = 120, volumes: bool = True,
                      engine: list[str] | None = None) -> subprocess.CompletedProcess:
    """Removes containers, running or not, with their anonymous volumes unless `volumes` is False."""
    return run("rm", "--force", *(["--volumes"] if volumes else []), *containers, timeout=timeout, engine=engine)


def all_containers(engine: list[str]) -> list[str]:
    """Every container on the engine at `engine` (a simulated node's own: all the sim's)."""
    return run("ps", "--all", "--quiet", engine=engine).stdout.split()


def container_inspect(container: str, template: str | None = None,
                      engine: list[str] | None = None) -> subprocess.CompletedProcess:
    return run("inspect", *(["--format", template] if template else []), container, engine=engine)


def inspect_json(ids: list[str]) -> subprocess.CompletedProcess:
    """`docker inspect` of any objects (a swarm's tasks) as its JSON list."""
    return run("inspect", *ids)


def run_in_namespace(container: str, image: str, entrypoint: str, *args: str, timeout: float = 60,
                     engine: list[str] | None = None) -> subprocess.CompletedProcess:
    """A throwaway container of `image` in `container`'s network namespace, as root with NET_ADMIN."""
    return run("run", "--rm", "--network", f"container:{container}", "--cap-add", "NET_ADMIN", "--user", "0:0",
               "--entrypoint", entrypoint, image, *args, timeout=timeout, engine=engine)


def logs_merged(container: str, engine: list[str] | None = None, timeout: float = 120) -> str:
    """A container's whole output, timestamped, stdout and stderr as one text."""
    return _merged(["logs", "--timestamps", container], engine, timeout)


def service_task_logs(task_id: str, timeout: float = 120) -> str:
    """A swarm task's whole output as the manager relays it, timestamped."""
    return _merged(["service", "logs", "--raw", "--no-trunc", "--timestamps", task_id], None, timeout)


def _merged(arguments: list[str], engine: list[str] | None, timeout: float) -> str:
    return subprocess.run(command(*arguments, engine=engine), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout).stdout


# networks

def network_connect(network: str, container: str, alias: str) -> subprocess.CompletedProcess:
    return run("network", "connect", "--alias", alias, network, container)


def network_disconnect(network: str, container: str) -> subprocess.CompletedProcess:
    return run("network", "disconnect", network, container)


def labelled_networks(label: str) -> list[str]:
    """The ids of the networks that carry this label (`key=value` or `key`)."""
    return run("network", "ls", "--quiet", "--filter", f"label={label}").stdout.split()


def network_remove(*networks: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return run("network", "rm", *networks, timeout=timeout)

