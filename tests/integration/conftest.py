"""The integration tests' fixtures: a working engine (or a loud failure), the trainer image built
once, both Compose CLIs, and `lab`, which runs `python -m tflab up` once per distinct setting set
and hands every test the same run."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import pickle
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from labtest import arm64, parallel
from labtest.cli import REPO, lab_env, run_lab
from labtest.runs import LabRun, lab_containers
from tflab.backends import compose
from tflab.core.errors import LabError
from tflab.engine import docker
from tflab.pytest_plugin import tflab_cluster  # noqa: F401  - the fixture users import, tested on itself

log = logging.getLogger("tflab.tests")
V2_PLUGIN_CONFIG = REPO / ".venv" / "docker-config"  # where scripts/get-compose-v2.sh puts v2


def require(condition: bool, why: str) -> None:
    """Integration tests never skip for want of a tool: they fail, saying what is missing."""
    if not condition:
        pytest.fail(why, pytrace=False)


ARM64_VERDICT = pytest.StashKey[tuple[str, str]]()


def pytest_runtest_setup(item):
    """The tests marked arm64 run, skip or fail as labtest/arm64.py decides, once a session. Here
    rather than in a fixture, whose skip pytest reports at each test's own line: skipped from here,
    the three fold into one line of the summary, which says how to include them."""
    if item.get_closest_marker("arm64") is None:
        return
    if ARM64_VERDICT not in item.config.stash:
        item.config.stash[ARM64_VERDICT] = arm64.verdict(
            os.environ.get("CI") == "true", os.environ.get("TFLAB_SKIP_ARM64") == "1", arm64.unavailable)
    decided, why = item.config.stash[ARM64_VERDICT]
    if decided == arm64.SKIP:
        pytest.skip(why)
    if decided == arm64.FAIL:
        pytest.fail(why, pytrace=False)


@pytest.fixture(scope="session")
def engine() -> str:
    try:
        return docker.check()
    except LabError as error:
        pytest.fail(f"integration tests need a working Docker engine: {error}", pytrace=False)


@pytest.fixture(scope="session")
def compose_env(engine) -> dict[str, dict[str, str]]:
    """Environment changes that select each Compose CLI: {"v1": {...}, "v2": {...}}."""
    clis = {}
    if shutil.which("docker-compose") and compose._compose_version(("docker-compose",)):
        clis["v1"] = {"COMPOSE": "v1"}
    if compose._compose_version(("docker", "compose")):
        clis["v2"] = {"COMPOSE": "v2"}
    elif (V2_PLUGIN_CONFIG / "cli-plugins" / "docker-compose").exists():
        clis["v2"] = {"COMPOSE": "v2", "DOCKER_CONFIG": str(V2_PLUGIN_CONFIG)}
    require("v2" in clis, "no Compose v2: run `make venv` (scripts/get-compose-v2.sh) or install the plugin")
    if "v1" not in clis and os.environ.get("CI") != "true":
        clis["v1"] = None  # a laptop without Compose v1: its tests say so instead of passing
    require(os.environ.get("CI") != "true" or clis.get("v1"), "CI needs Compose v1 (docker-compose) too")
    return clis


@pytest.fixture(scope="session")
def trainer_image(engine, request) -> str:
    """The trainer image's tag (tflab-trainer:cpu-<digest>), built if it is not there yet (by one
    worker: the others wait, then find it built)."""
    started = time.monotonic()
    shared = parallel.shared_folder(request.config)
    with parallel.once(shared / "locks" / "image.lock") if shared else contextlib.nullcontext():
        result = run_lab("images", timeout=3600)
    require(result.returncode == 0, f"could not build the trainer image:\n{result.output[-4000:]}")
    last = result.stdout.strip().splitlines()[-1]
    log.info("trainer image ready in %.1f s: %s", time.monotonic() - started, last)
    return last.split()[1]


class Lab:
    """Runs the lab with given settings, once per distinct settings, in a runs folder of its own.
    Under xdist the folder is the workers' shared one, and a run is made by whichever worker asks
    first: the others wait for it and read the same result (`shared`: where results are kept)."""

    def __init__(self, runs_dir: Path, compose_env: dict, shared: Path | None = None):
        self.runs_dir = runs_dir
        self.compose_env = compose_env
        self.shared = shared
        self.cache: dict[tuple, LabRun] = {}

    def run(self, name: str, cli: str | None = None, command: str = "up", **settings) -> LabRun:
        """cli: None lets the lab choose (COMPOSE=auto), "v1" or "v2" forces that Compose CLI;
        command: the lab's command, `up` or `chaos`."""
        key = (name, cli, command, tuple(sorted(settings.items())))
        if key not in self.cache:
            self.cache[key] = self._once(key, lambda: self._run(name, cli, command,
                                                                {k: str(v) for k, v in settings.items()}))
        return self.cache[key]

    def _once(self, key: tuple, make) -> LabRun:
        if self.shared is None:
            return make()
        kept = self.shared / f"{hashlib.sha256(repr(key).encode()).hexdigest()[:16]}.pickle"
        with parallel.once(kept.with_suffix(".lock")):
            if kept.exists():
                return pickle.loads(kept.read_bytes())
            run = make()
            kept.write_bytes(pickle.dumps(run))
            return run

    def _run(self, name: str, cli: str, command: str, settings: dict[str, str]) -> LabRun:
        if settings.get("BACKEND") == "local" or cli is None:
            extra = {}
        else:
            if self.compose_env.get(cli) is None:
                pytest.skip(f"Compose {cli} is not installed here (CI requires it)")
            extra = self.compose_env[cli]
        run_id = f"test-{name}"
        if command == "chaos":  # VERDICT=auto would run an undisturbed twin after every chaos run that
            # finished ok, a second run each (faults/twin.py): off unless a test asks (test_chaos's
            # verdict test names its reference run as TWIN instead)
            settings = {"VERDICT": "off", **settings}
        env = lab_env(RUNS_DIR=str(self.runs_dir), RUN=run_id, **extra, **settings)
        started = time.monotonic()
        finished = run_lab(command, env=env, timeout=float(settings.get("TIMEOUT", 900)) + 300)
        run = LabRun(finished.returncode, finished.output, self.runs_dir / run_id, name=name, settings=settings,
                     finished=finished, seconds=time.monotonic() - started)
        log.info("run %s took %.1f s, exit %d", name, run.seconds, finished.returncode)
        leftovers = [c for c in lab_containers() if c.startswith(f"tflab-{run_id}")]
        assert leftovers == [], f"run {name} left containers behind: {leftovers}"
        return run


def new_lab(request, tmp_path_factory, name: str, compose_env: dict) -> Lab:
    shared = parallel.shared_folder(request.config)
    if shared is None:
        return Lab(tmp_path_factory.mktemp(name), compose_env)
    (shared / name).mkdir(exist_ok=True)
    return Lab(shared / name, compose_env, shared / f"{name}-made")


@pytest.fixture(scope="session")
def lab(trainer_image, compose_env, tmp_path_factory, request) -> Lab:
    return new_lab(request, tmp_path_factory, "runs", compose_env)


@pytest.fixture(scope="session")
def engine_lab(trainer_image, tmp_path_factory, request) -> Lab:
    """`lab` for runs that need the engine and the image but no Compose CLI (BACKEND=swarm)."""
    return new_lab(request, tmp_path_factory, "engine-runs", {})


def docker_kill(container: str) -> None:
    subprocess.run(["docker", "kill", container], capture_output=True, check=True)
