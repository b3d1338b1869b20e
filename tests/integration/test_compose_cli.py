"""The rendered Compose files as both real CLIs read them (`config`), and what no bad input starts."""

import json
import secrets
import socket
import subprocess
from pathlib import Path

import pytest
import yaml
from labtest.cli import lab_env, run_lab
from labtest.runs import engine_objects, lab_containers
from tflab.backends import compose, userscript
from tflab.backends.swarm import render as swarm_render
from tflab.core import cluster, runfolder
from tflab.core.settings import Settings
from tflab.engine import docker, gpus


@pytest.fixture(params=["v1", "v2"])
def cli_env(request, compose_env):
    if compose_env.get(request.param) is None:
        pytest.skip(f"Compose {request.param} is not installed here (CI requires it)")
    return compose_env[request.param]


@pytest.mark.parametrize("workers", [1, 3, 16])
def test_both_clis_read_the_worker_services_as_rendered(cli_env, workers, tmp_path, monkeypatch):
    for name, value in cli_env.items():
        monkeypatch.setenv(name, value)
    settings = Settings(workers=workers, global_batch=48 * workers)
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    cli = compose.find_compose(cli_env["COMPOSE"])
    stack = compose.ComposeStack(cli, run_dir, settings, "tflab-trainer:cpu-0123456789ab", cluster.build(settings))
    spec = stack.cluster.spec
    runfolder.write_json(run_dir / compose.RUN_FILE, compose.render_run(settings, stack.cluster))
    result = stack.compose("config")
    assert result.returncode == 0, result.stderr
    config = yaml.safe_load(result.stdout)
    workers_seen = sorted(name for name in config["services"] if name.startswith("worker-"))
    assert workers_seen == sorted(cluster.build(settings).tasks)
    for task in cluster.build(settings).tasks:
        service = config["services"][task]
        assert service["hostname"] == task
        assert json.loads(service["environment"]["TF_CONFIG"]) == cluster.tf_config_for(spec, task)
        assert service["environment"]["TFLAB_TASK"] == task
        assert service["environment"]["TF_USE_LEGACY_KERAS"] == "1"
        assert service["image"] == "tflab-trainer:cpu-0123456789ab"
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"]
        assert service["user"] != "0:0" and not service["user"].startswith("0:")
        assert "ports" not in service
        assert any(str(run_dir) in str(volume) for volume in service["volumes"])
    network = next(iter(config["networks"].values()))
    assert network["internal"] is True


@pytest.mark.parametrize("settings, host_gpus", [
    (Settings(strategy="mirrored", gpus="all"), ()),
    (Settings(strategy="single", gpus="0,1"), ()),
    (Settings(strategy="multiworker", workers=3, global_batch=96, gpus="0,1", collective="nccl"), ()),
    (Settings(strategy="multiworker", workers=2, gpus="all"), ("0", "1")),
])
def test_both_clis_read_the_gpu_reservations_as_rendered(cli_env, settings, host_gpus, tmp_path, monkeypatch):
    """Only `config`: no GPU is needed to see that each CLI takes the device requests and the larger
    /dev/shm, merged into the services without losing the trainers' hardening."""
    for name, value in cli_env.items():
        monkeypatch.setenv(name, value)
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    stack = compose.ComposeStack(compose.find_compose(cli_env["COMPOSE"]), run_dir, settings, "tflab-trainer:gpu",
                                 cluster.build(settings), host_gpus=host_gpus)
    runfolder.write_json(run_dir / compose.RUN_FILE, compose.render_run(settings, cluster.build(settings),
                                                                      host_gpus=host_gpus))
    result = stack.compose("config")
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    requests = gpus.gpu_requests(settings, cluster.build(settings), host_gpus)
    assert set(requests) == set(cluster.build(settings).tasks)
    for task, request in requests.items():
        service = services[task]
        [device] = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        assert device.get("device_ids") == request.get("device_ids")
        assert device.get("count") in ((None,) if "device_ids" in request else ("all", -1))  # v1: all, v2: -1
        assert str(service["shm_size"]) in ("1gb", "1073741824")  # v1 keeps the text, v2 counts the bytes
        assert service["environment"]["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
        assert service["environment"]["TFLAB_TASK"] == task
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"] and "ipc" not in service


DOLLARS = "--home $HOME --user ${USER} --price '$5' $$ --end $"


def test_both_clis_pass_dollars_in_args_and_paths_literally(cli_env, tmp_path, monkeypatch):
    """ARGS and SCRIPT reach the task as written, as under BACKEND=local: Compose reads `$NAME` in
    any value as the host's variable, so the rendered file writes each `$` as `$$`."""
    for name, value in cli_env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOME", "/host-home")
    monkeypatch.setenv("USER", "host-user")
    folder = tmp_path / "a$HOME b"
    folder.mkdir()
    (folder / "train.py").write_text("")
    settings = Settings.from_env({}, {"SCRIPT": str(folder / "train.py"), "ARGS": DOLLARS})
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    stack = compose.ComposeStack(compose.find_compose(cli_env["COMPOSE"]), run_dir, settings, "tflab-script:x",
                                 cluster.build(settings))
    runfolder.write_json(run_dir / compose.RUN_FILE, compose.render_run(settings, stack.cluster))
    result = stack.compose("config")
    assert result.returncode == 0, result.stderr
    # `config` prints a file Compose can read again, so both CLIs print a literal `$` escaped, as `$$`.
    service = yaml.safe_load(result.stdout)["services"]["worker-0"]
    command = [part.replace("$$", "$") for part in service["command"]]
    assert command == userscript.script_command(settings, f"{userscript.SCRIPT_DIR}/train.py")
    assert command[-9:] == ["--home", "$HOME", "--user", "${USER}", "--price", "$5", "$$", "--end", "$"]
    assert service["command"][-8] == "$$HOME"  # escaped once: interpolated, it would be /host-home
    # The script's folder, not interpolated (v1 prints a volume's path unescaped, v2 escaped).
    assert any(str(folder) in str(volume).replace("$$", "$") for volume in service["volumes"])
    assert "/host-home" not in result.stdout and "host-user" not in result.stdout


def test_a_swarm_stack_passes_dollars_literally(tmp_path, monkeypatch):
    """`docker stack config` (the CLI's own merge and interpolation, no swarm needed) reads the
    stack file as `docker stack deploy` will."""
    monkeypatch.setenv("HOME", "/host-home")
    (tmp_path / "train.py").write_text("")
    settings = Settings.from_env({}, {"SCRIPT": str(tmp_path / "train.py"), "ARGS": DOLLARS})
    node = swarm_render.SwarmNode(node_id="n0de", engine="20.10.24", api=(1, 41))
    path = tmp_path / swarm_render.STACK_FILE
    runfolder.write_json(path, swarm_render.render_stack(settings, cluster.build(settings), "tflab-script:x", tmp_path,
                                                node))
    result = docker.run_quiet(["docker", "stack", "config", "--compose-file", str(path)])
    assert result.returncode == 0, result.stderr
    service = yaml.safe_load(result.stdout)["services"]["worker-1"]
    assert service["command"] == userscript.script_command(settings, f"{userscript.SCRIPT_DIR}/train.py")
    assert "/host-home" not in result.stdout


def test_bad_input_starts_no_container(engine, tmp_path):
    """Counted by the run-folder label every container and network of a run carries, so only this
    test's runs count: it once counted every lab container on the engine, and failed when another
    run (another test, another CI job: the lab says two can share an engine) came or went meanwhile."""
    for arguments in (["STRATEGY=bogus"], ["WORKERS=0"], ["GLOBAL_BATCH=7"], ["RUN=Bad_Id"]):
        result = run_lab("up", f"RUNS_DIR={tmp_path}", *arguments)
        assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.output
    (tmp_path / "taken").mkdir()
    assert run_lab("up", f"RUNS_DIR={tmp_path}", "RUN=taken").returncode == 2
    assert engine_objects(tmp_path) == []
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]


def test_issue_10_inputs_start_no_container_and_write_nothing(engine, tmp_path):
    """Each was once taken, or a traceback, with the run folder (and for a busy port a container
    and two networks) left behind; against the real engine now, each is one line and nothing."""
    runs = tmp_path / "runs"
    (tmp_path / "a:b").mkdir()
    (tmp_path / "a:b" / "train.py").write_text("")
    cpus = docker.info()["NCPU"]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cases = [
            ("up", [f"CPUS={cpus + 1}"], f"CPUS={cpus + 1} is more than this Docker engine's {cpus} CPUs"),
            ("compare", [f"CPUS={cpus + 1}", "COMPARE=single"], f"CPUS={cpus + 1} is more than"),
            ("up", ["MEMORY=5m"], "MEMORY=5m is not allowed"),
            ("up", [f"SCRIPT={tmp_path / 'a:b' / 'train.py'}"], "SCRIPT="),
            ("up", ["BASE_IMAGE=--help"], "BASE_IMAGE='--help' is not allowed"),
            ("up", ["RUN=latest"], "RUN=latest is not allowed"),
            ("compare", ["COMPARE=multiworker-0"], "COMPARE='multiworker-0' is not allowed"),
            ("compare", ["COMPARE=mirrored-33"], "COMPARE='mirrored-33' is not allowed"),
            ("soak", ["EPOCHS=1"], "EPOCHS=1 is not allowed with make soak"),
            ("tensorboard", [f"TENSORBOARD_PORT={port}"], f"TENSORBOARD_PORT={port} is not free on 127.0.0.1"),
        ]
        for index, (command, arguments, expected) in enumerate(cases):
            run = [] if any(a.startswith("RUN=") for a in arguments) else [f"RUN=refused-{index}"]
            result = run_lab(command, f"RUNS_DIR={runs}", *run, *arguments)
            assert result.returncode == 2, (command, arguments, result.output)
            assert result.stderr.startswith(f"tflab: {expected}") and len(result.stderr.splitlines()) == 1, \
                (command, arguments, result.stderr)
    assert not runs.exists()
    assert not [c for c in lab_containers() if c.startswith("tflab-refused-")]
    networks = docker.run_quiet(["docker", "network", "ls", "--format", "{{.Name}}"]).stdout.split()
    assert not [n for n in networks if n.startswith("tflab-refused-")]


def orphan(trainer_image: str, runs_dir: Path, name: str) -> compose.ComposeStack:
    """A run whose lab was killed: its containers and network stay behind."""
    settings = Settings(strategy="single", runs_dir=str(runs_dir))
    stack = compose.ComposeStack(compose.find_compose("auto"), runs_dir / name, settings, trainer_image,
                                 cluster.build(settings))
    runfolder.make(runs_dir / name, link_latest=True, owner=True)
    (runs_dir / name / runfolder.OWNER).unlink()  # its lab is gone (this test's own process claimed it)
    runfolder.write_config(runs_dir / name, settings, stack.cluster)
    stack.start()
    return stack


def test_down_removes_what_a_killed_lab_left_behind_and_nothing_else(engine, trainer_image, tmp_path):
    """If the lab itself is killed, its containers stay; `make down` removes them: only those of
    its own runs folder, never another folder's runs nor someone else's tflab-* project."""
    mine = orphan(trainer_image, tmp_path / "runs", "orphan")
    theirs = orphan(trainer_image, tmp_path / "other", "orphan")
    foreign = f"tflab-foreign-{secrets.token_hex(3)}"
    subprocess.run(["docker", "run", "--detach", "--label", f"com.docker.compose.project={foreign}",
                    "--name", foreign, trainer_image, "python", "-c", "import time; time.sleep(600)"],
                   check=True, capture_output=True)
    try:
        assert [c for c in lab_containers() if c.startswith(mine.project)]
        result = run_lab("down", env=lab_env(RUNS_DIR=str(tmp_path / "runs")))
        assert result.returncode == 0 and f"removed {mine.project}" in result.stdout, result.output
        assert not [c for c in lab_containers() if c.startswith(mine.project)]
        networks = docker.run_quiet(["docker", "network", "ls", "--format", "{{.Name}}"]).stdout.split()
        assert not [n for n in networks if n.startswith(mine.project)]
        assert [c for c in lab_containers() if c.startswith(theirs.project)], "another runs folder's run was removed"
        assert foreign in lab_containers(), "a tflab-* project the lab did not start was removed"
        again = run_lab("down", env=lab_env(RUNS_DIR=str(tmp_path / "other"), RUN="orphan"))
        assert again.returncode == 0 and f"removed {theirs.project}" in again.stdout, again.output
        assert not [c for c in lab_containers() if c.startswith(theirs.project)]
    finally:
        subprocess.run(["docker", "rm", "--force", foreign], capture_output=True)
        theirs.close()
