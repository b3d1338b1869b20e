"""The unit tests' one fake backend and one fake engine: a scripted run the runner supervises as
it would a real one, and a docker CLI that answers from a table, so no unit test needs an engine.

FakeBackend implements backends.base.ContainerBackend (and the `state` of replay.ReplayStack, which
a TFJob replay's watcher reads); FakeEngine stands in behind engine/docker.py's one door to the CLI
(`docker.run_quiet`), so every docker verb of the lab reaches it as the argv it would have run.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tflab.core import explain, runfolder
from tflab.core.cluster import Cluster
from tflab.core.stacks import stacks_file
from tflab.engine import docker


class FakeBackend:
    """A run whose exit codes are scripted: attempts[n] is the n-th start's, one dict of task ->
    code per poll (a task not in it is running; the last dict holds). SIGTERM ends a running task
    with 143, SIGKILL with 137, and it stays ended. on_start(backend, attempt) runs at each start
    (a test writes the task's logs there). A task restarted alone (restart_tasks, a replay's
    in-place restart) moves on to its own next attempt's script, read from the poll of its
    restart, while the others go on with theirs. Each task's container lives on a node of its own,
    reached by its own docker command; a partition's cut is recorded, not done."""

    def __init__(self, the_cluster: Cluster, run_dir: Path, attempts: list[list[dict[str, int]]],
                 on_start: Callable[[FakeBackend, int], None] | None = None, description: str = "a stand-in",
                 clock: Callable[[], float] = time.monotonic):
        self.cluster, self.run_dir, self.attempts, self.on_start = the_cluster, run_dir, attempts, on_start
        self.tasks, self.description = the_cluster.tasks, description
        self.name = "compose"  # what it stands in for: the stack of a run on Compose
        self.images: dict[str, dict] | None = None  # a replay's image configs (ReplayStack): none, no hooks
        self.proxied: frozenset[str] = frozenset()
        self.oom_killed: dict[str, bool] = {}
        self.attempt = self.poll = self.starts = 0  # attempt: restarts made; starts: start() calls
        self.ended: dict[str, int] = {}
        self.terminated: list[str] = []
        self.cuts: list[str] = []  # cut_off's tasks, in order
        self.reconnected: list[str] = []  # reconnect's
        self.closed = False
        self.stacks: dict[str, str] = {}  # task -> the dump it answers dump_stacks with
        self.asked_stacks: list[list[str]] = []
        self.clock = clock
        self.own_attempt: dict[str, int] = {}  # task -> its attempt, once restarted alone
        self.own_since: dict[str, int] = {}  # task -> the poll it was restarted alone at
        self.alone: list[tuple[str, float]] = []  # each restart_tasks' task, with the clock then

    def start(self) -> None:
        self.poll, self.ended = 0, {}
        self.own_attempt, self.own_since = {}, {}
        self.starts += 1
        for task in self.stacks:  # as a task's faulthandler opens its file when it starts
            (self.run_dir / runfolder.in_tasks(self.run_dir, stacks_file(task))).touch()
        if self.on_start:
            self.on_start(self, self.attempt)

    def restart(self) -> None:
        self.attempt += 1
        self.start()

    def restart_tasks(self, tasks: list[str], timeout: float = 300) -> None:
        for task in tasks:
            self.own_attempt[task] = self.own_attempt.get(task, self.attempt) + 1
            self.own_since[task] = self.poll
            self.ended.pop(task, None)
            self.alone.append((task, self.clock()))

    def script_at(self, attempt: int, poll: int) -> dict[str, int]:
        script = self.attempts[min(attempt, len(self.attempts) - 1)]
        return script[min(poll, len(script) - 1)]

    def exit_codes(self) -> dict[str, int | None]:
        codes: dict[str, int | None] = {task: None for task in self.tasks} | self.script_at(self.attempt, self.poll)
        for task, attempt in self.own_attempt.items():
            codes[task] = self.script_at(attempt, self.poll - self.own_since[task]).get(task)
        self.poll += 1
        return codes | self.ended

    def state(self) -> dict:
        """What replay.ReplayStack.state reads of the engine, made from the scripted codes."""
        codes = self.exit_codes()
        self.poll -= 1  # the watcher's look is no poll of the run's
        def stamp(task: str, seconds: int) -> str:
            attempt = self.own_attempt.get(task, self.attempt)
            moment = datetime(2026, 12, 4, 10, tzinfo=timezone.utc) + timedelta(minutes=attempt, seconds=seconds)
            return moment.strftime("%Y-%m-%dT%H:%M:%S.000000000Z")

        return {task: {"StartedAt": stamp(task, 0), "Id": task, "Running": code is None,
                       "Status": "running" if code is None else "exited", "ExitCode": code,
                       "FinishedAt": stamp(task, 5)}
                for task, code in codes.items() if code != explain.VANISHED}

    def terminate(self, tasks: list[str]) -> None:
        self.terminated += tasks
        self.ended |= dict.fromkeys(tasks, 143)

    def stop(self, tasks: list[str]) -> None:
        self.ended |= dict.fromkeys(tasks, 137)

    def dump_stacks(self, tasks: list[str]) -> None:
        """Each live task answers with `stacks[task]` (a recorded faulthandler dump) appended to its
        tasks/<task>.stacks, as a task's faulthandler would; one without a dump has no such file
        (start opens it for those that have one) and does not answer."""
        self.asked_stacks.append(list(tasks))
        for task in tasks:
            if task in self.stacks and task not in self.ended:
                with open(self.run_dir / runfolder.in_tasks(self.run_dir, stacks_file(task)), "a") as file:
                    file.write(self.stacks[task])

    def save_output(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True

    def container(self, task: str) -> str:
        return f"id-{task}"

    def network(self) -> str:
        return "a-stand-in-network"

    def docker_for(self, task: str) -> list[str]:
        return ["docker", "-H", f"ssh://node-of-{task}"]

    def cut_off(self, task: str) -> subprocess.CompletedProcess:
        self.cuts.append(task)
        return subprocess.CompletedProcess([], 0, "", "")

    def reconnect(self, task: str) -> subprocess.CompletedProcess:
        self.reconnected.append(task)
        return subprocess.CompletedProcess([], 0, "", "")


Answer = Callable[[list[str]], "subprocess.CompletedProcess | None"]


class FakeEngine:
    """The docker CLI as docker.run_quiet reaches it, every docker verb's one door: each command is
    recorded (`commands`, the argv; `calls`, docker.run's view of it) and answered by `answer`,
    a function of the argv that returns the result, or None for the default: exit 0 with `stdout`.
    A test that asserts on the commands rather than answering them leaves `answer` out."""

    def __init__(self, monkeypatch, answer: Answer | None = None, stdout: str = ""):
        self.answer, self.stdout = answer, stdout
        self.commands: list[list[str]] = []
        self.timeouts: list[float] = []
        monkeypatch.setattr(docker, "run_quiet", self.run)

    def run(self, command: list[str], timeout: float = 60, env=None, **_) -> subprocess.CompletedProcess:
        self.commands.append(list(command))
        self.timeouts.append(timeout)
        answered = self.answer(list(command)) if self.answer else None
        return answered if answered is not None else subprocess.CompletedProcess(command, 0, self.stdout, "")

    @property
    def calls(self) -> list[tuple[tuple[str, ...], float, list[str] | None]]:
        """Each docker command as docker.run was given it: (its args, its timeout, its engine:
        None for this host's, `docker -H <address>` for another's)."""
        seen = []
        for command, timeout in zip(self.commands, self.timeouts):
            engine = command[:3] if command[1:2] == ["-H"] else None
            seen.append((tuple(command[len(engine or ["docker"]):]), timeout, engine))
        return seen


def answered(command: list[str], code: int = 0, stdout: str = "", stderr: str = "") -> subprocess.CompletedProcess:
    """What the CLI said to a command: its exit code and output."""
    return subprocess.CompletedProcess(command, code, stdout, stderr)


def docker_on_path(folder: Path, script: str, monkeypatch=None) -> Path:
    """A `docker` executable made of a shell script, in folder/bin, first on PATH (this process's,
    with monkeypatch). FakeEngine cannot stand in where the docker CLI is started as a process of
    its own rather than through docker.run_quiet: a stream the lab reads while it runs (`docker
    events`, `docker start --attach`), the reaper (a process of its own), or the CLI run as a
    subprocess by a test; this does, at the cost of a shell script. Returns folder/bin."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "docker").write_text(script)
    (bin_dir / "docker").chmod(0o755)
    if monkeypatch is not None:
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


class FakeClock:
    """time's clock, for the modules a test hands it to (install): time() and monotonic() move only
    when a module sleeps, by as much, so a run of 900 s is supervised in a blink, exactly."""

    def __init__(self, now: float = 1_000_000.0):
        self.now = now

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)

    def install(self, monkeypatch, *modules) -> "FakeClock":
        for module in modules:
            monkeypatch.setattr(module, "time", self)
        return self
