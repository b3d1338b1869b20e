"""Bad input to the host CLI: one line naming the bad value and what is allowed, exit status 2,
no traceback, and nothing written or started. (That no container starts either is checked against
a real engine by tests/integration/test_compose_cli.py::test_bad_input_starts_no_container.)"""

import errno
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from labtest.cli import REPO, assert_refused, lab_env, run_lab
from labtest.fakes import docker_on_path
from tflab.core import cluster, runfolder
from tflab.core.errors import LabError
from tflab.core.settings import Settings


@pytest.mark.parametrize("arguments, expected", [
    (["STRATEGY=bogus"],
     "STRATEGY=bogus is not allowed: expected one of single, mirrored, multiworker, parameter_server"),
    (["WORKERS=0"], "WORKERS=0 is not allowed: expected an integer from 1 to 2147483647"),
    (["WORKERS=abc"], "WORKERS=abc is not allowed"),
    (["WORKERS=2147483648"], "WORKERS=2147483648 is not allowed"),
    (["EPOCHS=-1"], "EPOCHS=-1 is not allowed"),
    (["GLOBAL_BATCH=65"], "GLOBAL_BATCH=65 is not divisible by the 2 replicas of STRATEGY=multiworker"),
    (["STRATEGY=mirrored", "REPLICAS=3"], "GLOBAL_BATCH=64 is not divisible by the 3 replicas of STRATEGY=mirrored"),
    (["BACKEND=k8s"], "BACKEND=k8s is not allowed: expected one of compose, local, swarm"),
    (["STRATEGY=parameter_server", "PS=0"], "PS=0 is not allowed with STRATEGY=parameter_server: expected 1 or more"),
    (["STRATEGY=parameter_server", "LOOP=custom"], "LOOP=custom is not allowed with STRATEGY=parameter_server"),
    (["MODEL=resnet"], "MODEL=resnet is not allowed: expected one of mlp, cnn"),
    (["COLLECTIVE=mpi"], "COLLECTIVE=mpi is not allowed: expected one of auto, ring, nccl"),
    (["STEPS_PER_EXECUTION=0"], "STEPS_PER_EXECUTION=0 is not allowed: expected an integer from 1 to 1000"),
    (["GPUS=yes"], "GPUS=yes is not allowed: expected all, or distinct GPU indexes such as 0,1 (empty: CPUs only)"),
    (["COLLECTIVE=nccl"], "COLLECTIVE=nccl is not allowed without GPUS: expected GPUS=all or GPU indexes"),
    (["GPUS=0", "BACKEND=local"], "GPUS=0 is not allowed with BACKEND=local: expected BACKEND=compose"),
    (["GPUS=all", "BACKEND=swarm"], "GPUS=all is not allowed with BACKEND=swarm: expected BACKEND=compose"),
    (["WORKRES=3"], "unknown setting WORKRES"),
    (["fast"], "unexpected argument 'fast'; settings are given as NAME=value"),
    ([f"SCRIPT={REPO / 'examples/multiworker-tutorial/train.py'}", "SCRIPT_ENV=PYTHONHOME=/usr"],
     "SCRIPT_ENV=PYTHONHOME=/usr is not allowed: PYTHONHOME is the image's"),
    ([f"SCRIPT={REPO / 'examples/multiworker-tutorial/train.py'}", "KERAS=tf-keras",
      "SCRIPT_ENV=TF_USE_LEGACY_KERAS=0"],
     "SCRIPT_ENV=TF_USE_LEGACY_KERAS=0 is not allowed: TF_USE_LEGACY_KERAS is KERAS's to set"),
])
def test_bad_settings_are_refused_before_anything_starts(arguments, expected, tmp_path):
    runs = tmp_path / "runs"
    assert_refused(run_lab("up", f"RUNS_DIR={runs}", *arguments), expected, runs)


@pytest.mark.parametrize("arguments, expected", [
    (["COMPARE=single mirrored-3"], "COMPARE entry mirrored-3: GLOBAL_BATCH=64 is not divisible by the 3 replicas"),
    (["COMPARE=single warp-2"], "COMPARE='single warp-2' is not allowed (entry warp-2)"),
    (["COMPARE=single single"], "COMPARE='single single' is not allowed (a repeated entry)"),
])
def test_bad_compare_entries_are_refused_before_any_run(arguments, expected, tmp_path):
    runs = tmp_path / "runs"
    assert_refused(run_lab("compare", f"RUNS_DIR={runs}", *arguments), expected, runs)


def test_settings_from_the_environment_are_checked_too(tmp_path):
    runs = tmp_path / "runs"
    result = run_lab("up", env=lab_env(STRATEGY="bogus", RUNS_DIR=str(runs)))
    assert_refused(result, "STRATEGY=bogus is not allowed", runs)


def test_an_existing_run_is_never_overwritten(tmp_path):
    runs = tmp_path / "runs"
    (runs / "mine").mkdir(parents=True)
    (runs / "mine" / "worker-0.jsonl").write_text("precious\n")
    result = run_lab("up", f"RUNS_DIR={runs}", "RUN=mine")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert result.stderr.startswith("tflab: RUN=mine already exists")
    assert (runs / "mine" / "worker-0.jsonl").read_text() == "precious\n"
    assert [p.name for p in runs.iterdir()] == ["mine"]


def shim_path(tmp_path: Path, docker_script: str | None) -> str:
    """A PATH holding only a `docker` made of `docker_script` (or no docker at all)."""
    if docker_script is None:
        (tmp_path / "bin").mkdir()
        return str(tmp_path / "bin")
    return str(docker_on_path(tmp_path, "#!/bin/sh\n" + docker_script))


def test_docker_not_installed(tmp_path):
    runs = tmp_path / "runs"
    result = run_lab("up", f"RUNS_DIR={runs}", env=lab_env(PATH=shim_path(tmp_path, None)))
    assert_refused(result, "docker is not installed (no `docker` on PATH)", runs)


def test_docker_not_running(tmp_path):
    if shutil.which("docker") is None:
        pytest.fail("these tests need the docker CLI (the engine itself is not used here)")
    runs = tmp_path / "runs"
    result = run_lab("up", f"RUNS_DIR={runs}", env=lab_env(DOCKER_HOST=f"unix://{tmp_path}/no-such.sock"))
    assert_refused(result, "Docker is not running (", runs)


ENGINE_UP_NO_COMPOSE = """case "$1" in
  info) echo 20.10.24 ;;
  compose) echo "docker: unknown command: docker compose" >&2; exit 1 ;;
  *) exit 1 ;;
esac
"""


def test_no_compose_cli(tmp_path):
    runs = tmp_path / "runs"
    result = run_lab("up", f"RUNS_DIR={runs}", env=lab_env(PATH=shim_path(tmp_path, ENGINE_UP_NO_COMPOSE)))
    assert_refused(result, "no Compose CLI found: neither `docker compose` (v2) nor `docker-compose` (v1)", runs)


def test_the_asked_for_compose_cli_is_missing(tmp_path):
    runs = tmp_path / "runs"
    result = run_lab("up", f"RUNS_DIR={runs}", "COMPOSE=v1",
                     env=lab_env(PATH=shim_path(tmp_path, ENGINE_UP_NO_COMPOSE)))
    assert_refused(result, "COMPOSE=v1 but `docker-compose` does not work", runs)


def engine_with_swarm(state: str, manager: str) -> str:
    return f"""case "$1" in
  info) case "$3" in *Swarm*) echo "{state} {manager} n0de" ;; *) echo 20.10.24 ;; esac ;;
  *) exit 1 ;;
esac
"""


@pytest.mark.parametrize("state, manager, expected", [
    ("inactive", "false", "BACKEND=swarm needs an active Docker Swarm, and this engine's swarm is inactive: "
                          "run `docker swarm init` first"),
    ("active", "false", "BACKEND=swarm needs a swarm manager to deploy a stack, and this engine is a worker node"),
])
def test_swarm_backend_without_a_swarm_manager(tmp_path, state, manager, expected):
    runs = tmp_path / "runs"
    result = run_lab("up", f"RUNS_DIR={runs}", "BACKEND=swarm",
                     env=lab_env(PATH=shim_path(tmp_path, engine_with_swarm(state, manager))))
    assert_refused(result, expected, runs)


def test_make_stack_up_is_up_on_swarm(tmp_path):
    """Without an active swarm, `make stack-up` is refused with BACKEND=swarm's line, so it is
    `up BACKEND=swarm` and not the Compose run."""
    if shutil.which("make") is None:
        pytest.fail("make is required")
    runs = tmp_path / "runs"
    env = lab_env(PYTHON=sys.executable, PATH=shim_path(tmp_path, engine_with_swarm("inactive", "false")))
    result = subprocess.run([shutil.which("make"), "--no-print-directory", "stack-up", f"RUNS_DIR={runs}"],
                            cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines()[0].startswith("tflab: BACKEND=swarm needs an active Docker Swarm")
    assert not runs.exists()


@pytest.mark.parametrize("backend", ["local", "swarm"])
def test_link_needs_compose(tmp_path, backend):
    runs = tmp_path / "runs"
    result = run_lab("up", f"RUNS_DIR={runs}", f"BACKEND={backend}", "LINK=1ms,100mbit")
    assert_refused(result, "LINK=1ms,100mbit needs BACKEND=compose: the delay proxies are Compose services", runs)


def test_local_backend_without_tensorflow(tmp_path):
    runs = tmp_path / "runs"
    result = run_lab("up", f"RUNS_DIR={runs}", "BACKEND=local", env=lab_env(TFLAB_PYTHON=str(tmp_path / "nopython")))
    assert_refused(result, "BACKEND=local needs TensorFlow on the host", runs)


def test_make_up_refuses_with_the_same_line(tmp_path):
    """Through make, the lab's one line comes first; make adds its own `Error 2` after it."""
    if shutil.which("make") is None:
        pytest.fail("make is required")
    runs = tmp_path / "runs"
    result = subprocess.run(["make", "--no-print-directory", "up", "STRATEGY=bogus", f"RUNS_DIR={runs}"],
                            cwd=REPO, env=lab_env(PYTHON=sys.executable),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0] == ("tflab: STRATEGY=bogus is not allowed: "
                        "expected one of single, mirrored, multiworker, parameter_server")
    assert all(re.match(r"make(\[\d+\])?: \*\*\* ", line) for line in lines[1:]), lines
    assert "Traceback" not in result.stderr
    assert not runs.exists()


def test_config_prints_the_generators_tf_config():
    result = run_lab("config", "WORKERS=3", "GLOBAL_BATCH=96")
    assert result.returncode == 0, result.output
    spec = cluster.cluster_spec(Settings(workers=3, global_batch=96))
    for task in ("worker-0", "worker-1", "worker-2"):
        line = next(out for out in result.stdout.splitlines() if out.startswith(f"{task}: TF_CONFIG="))
        assert json.loads(line.split("=", 1)[1]) == cluster.tf_config_for(spec, task)


def fake_engine(tmp_path: Path, info: dict) -> tuple[str, Path]:
    """A PATH whose `docker` answers like a running engine with `info` and has Compose v2, and
    writes down every command it is given; anything else it refuses, loudly."""
    calls = tmp_path / "docker-calls.log"
    script = """echo "$*" >> CALLS
case "$1 $2 $3" in
  "info --format {{.ServerVersion}}") echo 20.10.24 ;;
  "info --format {{json .}}") echo 'INFO' ;;
  "compose version --short") echo 2.40.3 ;;
  *) echo "fake docker: unexpected docker $*" >&2; exit 1 ;;
esac
""".replace("CALLS", str(calls)).replace("INFO", json.dumps(info))
    return shim_path(tmp_path, script), calls


def test_gpus_without_the_nvidia_runtime_are_refused_before_anything(tmp_path):
    runs = tmp_path / "runs"
    path, calls = fake_engine(tmp_path, {"Runtimes": {"io.containerd.runc.v2": {"path": "runc"},
                                                      "runc": {"path": "runc"}}})
    result = run_lab("up", f"RUNS_DIR={runs}", "STRATEGY=mirrored", "GPUS=all", env=lab_env(PATH=path))
    assert_refused(result, "GPUS=all needs the NVIDIA container runtime, and this Docker engine has only: "
                           "io.containerd.runc.v2, runc; install the NVIDIA Container Toolkit, or leave GPUS "
                           "empty to train on CPUs", runs)
    # Asked, and nothing else: no pull, no build, no compose up.
    assert calls.read_text().splitlines() == ["info --format {{.ServerVersion}}", "compose version --short",
                                              "info --format {{json .}}"]


def test_gpus_all_for_workers_without_a_gpu_list_is_refused(tmp_path):
    runs = tmp_path / "runs"
    path, calls = fake_engine(tmp_path, {"Runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}})
    result = run_lab("up", f"RUNS_DIR={runs}", "WORKERS=2", "GPUS=all", "COLLECTIVE=nccl", env=lab_env(PATH=path))
    assert_refused(result, "GPUS=all with STRATEGY=multiworker gives each worker one GPU of the host's list, "
                           "and that list cannot be had: nvidia-smi is not on PATH; give the GPU indexes "
                           "instead, such as GPUS=0,1", runs)
    assert "build" not in calls.read_text()


def test_the_issue_10_inputs_are_refused_in_one_line(tmp_path):
    """Each once ended in a traceback, or was taken and failed after the run folder was written."""
    runs = tmp_path / "runs"
    (tmp_path / "a:b").mkdir()
    (tmp_path / "a:b" / "train.py").write_text("print('hello')\n")
    (tmp_path / "file").write_text("")
    cases = [
        ("up", [f"RUNS_DIR={runs}", "BACKUP=\u00b2"], "BACKUP=\u00b2 is not allowed"),
        ("compare", [f"RUNS_DIR={runs}", "COMPARE=multiworker-0"], "COMPARE='multiworker-0' is not allowed"),
        ("compare", [f"RUNS_DIR={runs}", "COMPARE=single mirrored-33"], "COMPARE='single mirrored-33' is not"),
        ("compare", [f"RUNS_DIR={runs}", "COMPARE= "], "COMPARE=' ' is not allowed: an empty or blank value"),
        ("up", [f"RUNS_DIR={runs}", "RUN=latest"], "RUN=latest is not allowed"),
        ("k8s", [f"RUNS_DIR={runs}", "RUN=latest"], "RUN=latest is not allowed"),
        ("up", [f"RUNS_DIR={tmp_path / 'file'}"], f"RUNS_DIR={tmp_path / 'file'} is not allowed"),
        ("up", [f"RUNS_DIR={runs}", f"SCRIPT={tmp_path / 'a:b' / 'train.py'}"], "SCRIPT="),
        ("up", [f"RUNS_DIR={runs}", "BASE_IMAGE=--help"], "BASE_IMAGE='--help' is not allowed"),
        ("k8s", [f"RUNS_DIR={runs}", "K8S_IMAGE=-rm"], "K8S_IMAGE='-rm' is not allowed"),
        ("k8s", [f"RUNS_DIR={runs}", "CPUS=0.0001"], "CPUS=0.0001 is not allowed"),
        ("k8s", [f"RUNS_DIR={runs}", "MEMORY=\u0663g"], "MEMORY=\u0663g is not allowed"),
        ("up", [f"RUNS_DIR={runs}", "MEMORY=4m"], "MEMORY=4m is not allowed"),
    ]
    for command, arguments, expected in cases:
        assert_refused(run_lab(command, *arguments), expected, runs)
    assert (tmp_path / "file").read_text() == ""


def test_cpus_beyond_the_engines_are_refused_before_the_run_folder(tmp_path):
    runs = tmp_path / "runs"
    path, calls = fake_engine(tmp_path, {"NCPU": 2})
    for command in ("up", "compare"):
        result = run_lab(command, f"RUNS_DIR={runs}", "CPUS=3", env=lab_env(PATH=path))
        assert_refused(result, "CPUS=3 is more than this Docker engine's 2 CPUs; expected 0.01 to 2, "
                               "or 0 (no limit)", runs)
    result = run_lab("chaos", f"RUNS_DIR={runs}", "SCENARIO=slow-node", "SLOW_CPUS=4", env=lab_env(PATH=path))
    assert_refused(result, "SLOW_CPUS=4 is more than this Docker engine's 2 CPUs", runs)
    assert "build" not in calls.read_text() and " up" not in calls.read_text()


def test_soak_with_one_epoch_is_refused_before_its_folder(tmp_path):
    runs = tmp_path / "runs"
    path, _ = fake_engine(tmp_path, {"NCPU": 2})
    result = run_lab("soak", f"RUNS_DIR={runs}", "EPOCHS=1", env=lab_env(PATH=path))
    assert_refused(result, "EPOCHS=1 is not allowed with make soak: expected 2 or more", runs)


def test_a_busy_tensorboard_port_is_refused_before_compose(tmp_path):
    runs = tmp_path / "runs"
    path, calls = fake_engine(tmp_path, {})
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        if port < 1024:
            pytest.fail(f"the kernel gave port {port}")
        result = run_lab("tensorboard", f"RUNS_DIR={runs}", f"TENSORBOARD_PORT={port}", env=lab_env(PATH=path))
    assert_refused(result, f"TENSORBOARD_PORT={port} is not free on 127.0.0.1 (Address already in use); "
                           "expected a free port", runs)
    assert not runs.exists()
    assert not any(line.startswith("compose") and " up" in line for line in calls.read_text().splitlines())


def run_make(*arguments: str, **env: str) -> subprocess.CompletedProcess:
    if shutil.which("make") is None:
        pytest.fail("make is required")
    return subprocess.run(["make", "--no-print-directory", *arguments], cwd=REPO,
                          env=lab_env(PYTHON=sys.executable, **env), capture_output=True, text=True, timeout=120)


def assert_make_refused(result, expected: str):
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert lines[0] == f"tflab: {expected}", lines
    assert all(re.match(r"make(\[\d+\])?: \*\*\* ", line) for line in lines[1:]), lines
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("arguments, expected", [
    (["up", "WORKER=3"], "WORKER=3 is not a setting; did you mean WORKERS?"),
    (["up", "workers=3"], "workers=3 is not a setting (settings are upper case); did you mean WORKERS?"),
    (["config", "STRATAGY=mirrored"], "STRATAGY=mirrored is not a setting; did you mean STRATEGY?"),
    (["config", "VNEV=.venv"], "VNEV=.venv is not a setting; did you mean VENV?"),
    (["config", "FROBNICATE=1"], "FROBNICATE=1 is not a setting; `make help` lists the settings"),
])
def test_make_refuses_a_variable_that_is_no_setting(arguments, expected, tmp_path):
    runs = tmp_path / "runs"
    assert_make_refused(run_make(*arguments, f"RUNS_DIR={runs}"), expected)
    assert not runs.exists()


def test_make_takes_its_own_variables_and_the_settings():
    result = run_make("config", "WORKERS=4", f"PYTHON={sys.executable}", "PYTEST_ARGS=-x")
    assert result.returncode == 0, result.stderr
    assert "worker-3: TF_CONFIG=" in result.stdout


@pytest.mark.parametrize("target, arguments, expected", [
    ("compare", ["COMPARE= "], "COMPARE='' is not allowed: an empty or blank value is not the default"),
    ("compare", ["COMPARE=multiworker-0"], "COMPARE='multiworker-0' is not allowed (entry multiworker-0)"),
    ("report", ["RUN=nope"], "RUN=nope does not exist in"),
    ("bench", ["GLOBAL_BATCH=66"], "GLOBAL_BATCH=66 is not divisible by the 8 replicas of STRATEGY=multiworker"),
    ("up", ["BACKEND=local", "WORKERS=0"], "WORKERS=0 is not allowed"),
])
def test_make_checks_the_input_before_it_builds_the_venv(target, arguments, expected, tmp_path):
    """compare, report, bench (and up BACKEND=local) need .venv, TensorFlow and all: make builds it
    only once the host's Python has checked their input."""
    runs, venv = tmp_path / "runs", tmp_path / "venv"
    result = run_make(target, *arguments, f"RUNS_DIR={runs}", f"VENV={venv}")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines()[0].startswith(f"tflab: {expected}"), result.stderr
    assert not venv.exists() and not runs.exists()
    assert "pip install" not in result.stdout


@pytest.mark.parametrize("venv, expected", [
    ("{tmp}/precious", "VENV={tmp}/precious is not inside this checkout"),
    ("tests", "VENV=tests is not a venv this Makefile made (it has no .installed); make clean leaves it"),
    (".", "VENV=. is not inside this checkout"),
    ("..", "VENV=.. is not inside this checkout"),
])
def test_make_clean_removes_no_folder_it_did_not_make(venv, expected, tmp_path):
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "keep").write_text("mine\n")
    venv = venv.format(tmp=tmp_path)
    result = run_make("clean", f"VENV={venv}")
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines()[0].startswith(f"tflab: {expected.format(tmp=tmp_path)}"), result.stderr
    assert result.stdout == ""  # refused before `tflab clean` touched containers, images or wheels
    assert (tmp_path / "precious" / "keep").read_text() == "mine\n"
    assert (REPO / "tests" / "unit").is_dir()


MALFORMED_RUNS = {
    "not-json": {"config.json": "{bad", "summary.json": "{bad", "output.log": "hi\n"},
    "wrong-shapes": {"config.json": "{}", "summary.json": "[]"},
    "wrong-types": {"config.json": '{"settings": 3, "tasks": "x"}', "summary.json": '{"tasks": [{}]}'},
    "missing-keys": {"config.json": '{"settings": {"strategy": "single"}, "tasks": ["t"]}',
                     "summary.json": '{"ok": true, "wall_seconds": "x", "launched_at": 1}',
                     "t.jsonl": '{"event": "end", "first_step_at": "z"}\n'},
    "not-utf8": {"config.json": "{}", "summary.json": b"\xff", "output.log": b"\xff\xfe\n"},
    "compare-not-json": {"compare.json": "{bad"},
    "compare-escapes": {"compare.json": '{"runs": ["../../etc", 3]}'},
    "compare-a-string": {"compare.json": '{"runs": "abc"}'},
    "deep-nesting": {"config.json": "{}", "summary.json": "[" * 100_000 + "]" * 100_000},
    "huge-numbers": {"config.json": "{}", "summary.json": '{"tasks": [], "wall_seconds": ' + "9" * 5000 + "}"},
    "escapes-in-wrong-types": {"config.json": '{"settings": {}, "tasks": ["\u001b[2J"]}',
                               "summary.json": '{"tasks": [{"task": "\u001b[2J", "status": 3}]}'},
}


@pytest.mark.parametrize("run", MALFORMED_RUNS)
def test_files_the_lab_did_not_write_are_one_line_not_a_traceback(run, tmp_path):
    runs = tmp_path / "runs"
    (runs / run).mkdir(parents=True)
    for name, content in MALFORMED_RUNS[run].items():
        path = runs / run / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    before = sorted(p.name for p in (runs / run).iterdir())
    for command in ("summary", "logs", "report"):
        result = run_lab(command, f"RUNS_DIR={runs}", f"RUN={run}")
        assert "Traceback" not in result.stderr, (command, result.stderr)
        if result.returncode == 0:  # logs prints output.log whatever its bytes
            assert command == "logs" and "output.log" in MALFORMED_RUNS[run]
            continue
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, (command, result.stderr)
        assert result.stderr.startswith("tflab: "), result.stderr
        assert "\x1b" not in result.stderr, result.stderr
    assert sorted(p.name for p in (runs / run).iterdir()) == before  # no report half-written


def test_make_k8s_run_latest_leaves_the_latest_link_alone(tmp_path):
    """`make k8s RUN=latest` once made runs/latest a folder, and every `make up` after it failed."""
    runs = tmp_path / "runs"
    (runs / "r1").mkdir(parents=True)
    (runs / "latest").symlink_to("r1")
    assert_make_refused(run_make("k8s", "RUN=latest", f"RUNS_DIR={runs}"),
                        "RUN=latest is not allowed: latest is the lab's link to the newest run; expected another "
                        "name (leave RUN empty for the newest, or for a fresh id)")
    assert (runs / "latest").is_symlink() and sorted(p.name for p in runs.iterdir()) == ["latest", "r1"]


RUNS_DIR_ALLOWED = "expected a folder the lab can write, whose latest (if any) is the lab's link to the newest run"


@pytest.mark.parametrize("runs, expected", [
    ("/proc/runs", "RUNS_DIR=/proc/runs is not allowed: /proc cannot hold a folder (No such file or directory); "),
    ("/proc", "RUNS_DIR=/proc is not allowed: /proc cannot hold a folder (No such file or directory); "),
    ("/sys/runs", "RUNS_DIR=/sys/runs is not allowed: /sys cannot hold a folder ("),
])
def test_a_runs_dir_the_kernel_will_not_hold_a_folder_in_is_one_line(runs, expected, tmp_path):
    """/proc and /sys refuse a folder even to root, whom no permission check stops: a traceback
    once, from the mkdir. No engine is reached here (docker is not on PATH)."""
    if not Path(runs).parent.is_dir() or not Path("/proc/self").is_dir():
        pytest.fail("these refusals are Linux's: /proc and /sys are expected")
    no_docker = shim_path(tmp_path, None)
    for command in ("up", "compare", "chaos"):
        result = run_lab(command, f"RUNS_DIR={runs}", env=lab_env(PATH=no_docker))
        assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr, result.output
        assert result.stderr.startswith(f"tflab: {expected}") and result.stderr.endswith(f"{RUNS_DIR_ALLOWED}\n"), \
            result.stderr
        assert len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_a_latest_that_is_not_the_labs_link_is_refused_before_anything_is_written(kind, tmp_path):
    """A folder where runs/latest is: the run folder and owner.json were written, then the link's
    rename failed in a traceback and left a stray `.latest-*` link beside them."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "latest").mkdir() if kind == "folder" else (runs / "latest").write_text("mine\n")
    no_docker = shim_path(tmp_path, None)
    for command in ("up", "compare"):
        result = run_lab(command, f"RUNS_DIR={runs}", env=lab_env(PATH=no_docker))
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.output
        assert result.stderr.splitlines() == [
            f"tflab: RUNS_DIR={runs} is not allowed: its latest is a {kind}, not the lab's link to the newest run; "
            f"{RUNS_DIR_ALLOWED} (move {runs / 'latest'} away)"]
        assert [p.name for p in runs.iterdir()] == ["latest"]


def test_a_read_only_runs_dir_is_one_line(tmp_path, monkeypatch):
    """A read-only file system refuses even root (EROFS); made so here where no mount can be."""
    def read_only(**kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), kwargs["dir"])

    monkeypatch.setattr(runfolder.tempfile, "mkdtemp", read_only)
    runs = tmp_path / "runs"
    with pytest.raises(LabError) as refused:
        runfolder.planned(Settings(runs_dir=str(runs)))
    assert str(refused.value) == (f"RUNS_DIR={runs} is not allowed: {tmp_path} cannot hold a folder (Read-only file "
                                  f"system); {RUNS_DIR_ALLOWED}")
    with pytest.raises(LabError):
        runfolder.make(runs / "r1", link_latest=True, owner=True)
    assert list(tmp_path.iterdir()) == []


def test_a_claim_whose_latest_link_fails_is_undone(tmp_path, monkeypatch):
    """`latest` made a folder between the check and the link (another lab, a person): the run
    folder, owner.json and the temporary link go, and the line says why."""
    runs = tmp_path / "runs"
    runs.mkdir()
    real_replace = os.replace

    def latest_became_a_folder(source, target, **handles):
        if Path(target).name == "latest":
            Path(target).mkdir()
        return real_replace(source, target, **handles)

    monkeypatch.setattr(runfolder.os, "replace", latest_became_a_folder)
    with pytest.raises(LabError) as refused:
        runfolder.make(runs / "r1", link_latest=True, owner=True)
    assert str(refused.value).startswith(f"RUNS_DIR={runs} is not allowed: the run r1 could not be set up there (")
    assert [p.name for p in runs.iterdir()] == ["latest"]


EMPTY_RUN_DOWN = ("RUN='' is not allowed with make down: an empty RUN would remove what every run in RUNS_DIR left "
                  "on the engine; expected a run id (RUN=<id>), or RUN left out (unset) for every run")


def test_down_with_an_empty_run_is_refused_however_it_is_given(tmp_path):
    """`make down RUN=` (RUN=$id with $id empty) once acted on every run in RUNS_DIR. Docker is
    not on PATH here: a down that went on would fail on it, not refuse RUN."""
    runs, no_docker = tmp_path / "runs", shim_path(tmp_path, None)
    for arguments, env in ((["RUN="], {}), (["--run", ""], {}), ([], {"RUN": ""})):
        result = run_lab("down", f"RUNS_DIR={runs}", *arguments, env=lab_env(PATH=no_docker, **env))
        assert result.returncode == 2 and result.stdout == "", (arguments, env, result.output)
        assert result.stderr.splitlines() == [f"tflab: {EMPTY_RUN_DOWN}"], (arguments, env)
    blank = run_lab("down", f"RUNS_DIR={runs}", "RUN= ", env=lab_env(PATH=no_docker))
    assert blank.returncode == 2 and blank.stderr.startswith("tflab: RUN=' ' is not allowed with make down: ")
    assert_make_refused(run_make("down", "RUN=", f"RUNS_DIR={runs}", PATH=f"{no_docker}:/usr/bin:/bin"),
                        EMPTY_RUN_DOWN)
    left_out = run_lab("down", f"RUNS_DIR={runs}", env=lab_env(PATH=no_docker))  # every run: as it always was
    assert left_out.stderr.startswith("tflab: docker is not installed"), left_out.stderr
    assert not runs.exists()


EMPTY_INPUTS = ["TRAINJOB", "TFJOB", "SCRIPT", "DATA", "CLAIMS", "KERAS", "TF", "RUNTIME"]


@pytest.mark.parametrize("name", EMPTY_INPUTS)
def test_an_empty_file_or_version_setting_is_refused_however_it_is_given(name, tmp_path):
    """`make up TRAINJOB=$JOB` with $JOB unset trained the lab's default job (and passed in CI): an
    empty value of a setting whose empty default is meant by leaving it out is refused as an
    argument, a flag, on make's command line and from the environment, as `make down RUN=` is.
    Docker is not on PATH: an `up` that went on would fail on it, not refuse the setting."""
    runs, no_docker = tmp_path / "runs", shim_path(tmp_path, None)
    expected = f"tflab: {name}='' is not allowed: an empty {name} is taken for a mistake"
    flag = "--" + name.lower().replace("_", "-")
    for arguments, env in (([f"{name}="], {}), ([flag, ""], {}), ([], {name: ""})):
        result = run_lab("up", f"RUNS_DIR={runs}", *arguments, env=lab_env(PATH=no_docker, **env))
        assert result.returncode == 2 and result.stdout == "", (arguments, env, result.output)
        assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith(expected), (arguments, result.stderr)
        assert f"or {name} left out (unset) for " in result.stderr
    made = run_make("up", f"{name}=", f"RUNS_DIR={runs}", PATH=f"{no_docker}:/usr/bin:/bin")
    assert made.returncode == 2 and made.stderr.startswith(expected), made.stderr
    assert not runs.exists()


def test_an_empty_exported_setting_is_left_alone_by_a_command_that_never_reads_it(tmp_path):
    """One environment serves every command: `TFJOB= tflab summary` is not refused for TFJOB, but
    `tflab summary TFJOB=` (given to it by name) is."""
    runs = tmp_path / "runs"
    exported = run_lab("summary", f"RUNS_DIR={runs}", env=lab_env(TFJOB="", TF=""))
    assert exported.stderr.startswith("tflab: no runs yet in "), exported.stderr
    named = run_lab("summary", f"RUNS_DIR={runs}", "TFJOB=")
    assert named.stderr.startswith("tflab: TFJOB='' is not allowed: an empty TFJOB"), named.stderr


@pytest.mark.parametrize("command", ["settings", "--help"])
def test_a_reader_that_closes_the_pipe_gets_no_traceback(command):
    """`tflab settings | head` printed BrokenPipeError's traceback: the reader closed the pipe
    before the lab wrote. Closed here before the lab starts, so its first write meets it."""
    lab = subprocess.Popen([sys.executable, "-m", "tflab", command], cwd=REPO, env=lab_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lab.stdout.close()
    _, errors = lab.communicate(timeout=60)
    assert b"Traceback" not in errors, errors.decode(errors="replace")
    assert lab.returncode in (0, 120), errors.decode(errors="replace")  # 120: Python's own exit on a failed flush


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("command", [["tflab", "settings"], ["tflab", "--help"], ["tflab", "config"],
                                     ["tflab.core.settings", "--markdown"]])
def test_a_write_error_on_stdout_is_one_line(command):
    """`tflab settings > /dev/full` ended in OSError's traceback (a closed pipe was handled, no other
    write error): one line naming the error, and a non-zero exit, for every command."""
    with open("/dev/full", "w") as full:
        lab = subprocess.run([sys.executable, "-m", *command], cwd=REPO, env=lab_env(), stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=120)
    assert lab.stderr == "tflab: cannot write to standard output: No space left on device\n", lab.stderr
    assert lab.returncode == 1


@pytest.mark.parametrize("argument, shown", [("--html", "--html"), ("\x1b[2J", "'\\x1b[2J'")])
def test_the_settings_module_names_a_wrong_argument_escaped(argument, shown):
    """`python -m tflab.core.settings $'\\e[2J'` echoed the ESC raw into the terminal."""
    result = subprocess.run([sys.executable, "-m", "tflab.core.settings", argument], cwd=REPO, env=lab_env(),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"tflab: {shown} is not allowed: expected --markdown (python3 -m tflab.core.settings " \
                            "--markdown prints docs/settings.md's table of settings)\n"
