"""The Compose files as the lab renders them, read as YAML (the CLIs' own view is an integration test)."""

import json
import re

import pytest
import yaml
from tflab.backends import compose, userscript
from tflab.backends.compose import render_run
from tflab.core import cluster
from tflab.core.settings import Settings
from tflab.engine import labels
from tflab.images import libraries
from tflab.trainer import metadata


@pytest.fixture(scope="module")
def base():
    return yaml.safe_load(compose.COMPOSE_FILE.read_text())


def test_every_trainer_service_comes_from_one_block(base):
    trainer = base["x-trainer"]
    for name in ("single", "mirrored", "task"):
        service = base["services"][name]
        for key, value in trainer.items():
            if key != "environment":
                assert service[key] == value, (name, key)
        assert trainer["environment"].items() <= service["environment"].items()
    assert base["services"]["single"]["environment"]["TFLAB_TASK"] == "single"
    assert base["services"]["mirrored"]["environment"]["TFLAB_TASK"] == "mirrored"
    assert "version" not in base


def test_trainers_are_hardened_and_unreachable_from_outside(base):
    trainer = base["x-trainer"]
    assert trainer["user"] == "${TFLAB_UID:-1000}:${TFLAB_GID:-1000}"
    assert trainer["read_only"] is True and trainer["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in trainer["security_opt"]
    assert base["networks"]["cluster"]["internal"] is True
    trainers = {name: service for name, service in base["services"].items() if name != "tensorboard"}
    assert all("ports" not in service for service in trainers.values())


def test_tensorboard_publishes_its_port_on_loopback_only_and_reads_runs_only(base):
    service = base["services"]["tensorboard"]
    assert service["profiles"] == ["tensorboard"]
    assert service["ports"] == ["127.0.0.1:${TFLAB_TENSORBOARD_PORT:-6006}:6006"]
    assert service["networks"] == ["tensorboard"] and "cluster" not in service["networks"]
    assert service["volumes"] == ["${TFLAB_RUNS_DIR:-./runs}:/lab/runs:ro"]
    assert service["read_only"] is True and service["cap_drop"] == ["ALL"]


def test_the_header_lists_every_variable_the_file_reads():
    text = compose.COMPOSE_FILE.read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    used = set(re.findall(r"\$\{(\w+)", text))
    assert used == {"TFLAB_IMAGE", "TFLAB_BASE_IMAGE", "TFLAB_RUN_DIR", "TFLAB_RUN", "TFLAB_UID", "TFLAB_GID",
                    "TFLAB_RUNS_DIR", "TFLAB_TENSORBOARD_PORT"}
    for variable in used:
        assert variable in header


@pytest.mark.parametrize("workers", [1, 2, 3, 16])
def test_worker_services_extend_the_template_with_their_tf_config(workers):
    settings = Settings(strategy="multiworker", workers=workers, global_batch=48 * workers)
    the_cluster = cluster.build(settings)
    spec = the_cluster.spec
    rendered = compose.render_run(settings, the_cluster)
    assert list(rendered["services"]) == [f"worker-{i}" for i in range(workers)]
    for index, (name, service) in enumerate(rendered["services"].items()):
        assert service == {
            "extends": {"file": str(compose.COMPOSE_FILE), "service": "task"},
            "hostname": name,
            "environment": {"TFLAB_TASK": name, "TF_CONFIG": json.dumps(
                {"cluster": spec, "task": {"type": "worker", "index": index}}, separators=(",", ":"))},
        }


def test_a_stack_adds_the_runs_own_file(tmp_path):
    cli = compose.ComposeCli(("docker-compose",), "1.29.2")
    single = compose.ComposeStack(cli, tmp_path / "r1", Settings(strategy="single"), "img",
                                  cluster.build(Settings(strategy="single")))
    multi = compose.ComposeStack(cli, tmp_path / "r2", Settings(), "img", cluster.build(Settings()))
    assert single.files == [compose.COMPOSE_FILE, tmp_path / "r1" / compose.RUN_FILE]
    assert multi.files == [compose.COMPOSE_FILE, tmp_path / "r2" / compose.RUN_FILE]
    assert multi.project == labels.project_name(tmp_path / "r2") and multi.tasks == ["worker-0", "worker-1"]
    assert re.fullmatch(r"tflab-r2-[0-9a-f]{8}", multi.project)
    assert multi.env["TFLAB_RUN_DIR"] == str(tmp_path / "r2")
    assert multi.env["COMPOSE_PROFILES"] == "single,mirrored,cluster"
    assert multi.command("up")[:3] == ["docker-compose", "--project-name", multi.project]


def test_every_dollar_is_escaped_so_compose_interpolates_nothing(tmp_path):
    """ARGS="--home $HOME" reaches the script as written on every backend: in a Compose file `$`
    means a host variable, `$$` one `$` (both CLIs' `config` in tests/integration/test_compose_cli.py)."""
    folder = tmp_path / "a$b"
    folder.mkdir()
    (folder / "train.py").write_text("")
    settings = Settings.from_env({}, {"SCRIPT": str(folder / "train.py"), "ARGS": "--home $HOME ${USER} $$"})
    service = compose.render_run(settings, cluster.build(settings))["services"]["worker-1"]
    assert service["command"][-4:] == ["--home", "$$HOME", "$${USER}", "$$$$"]
    assert service["volumes"] == [f"{tmp_path}/a$$b:/lab/script:ro"]
    assert compose.literal({"a": ["$x", 1, {"b": "$"}], "c": None}) == {"a": ["$$x", 1, {"b": "$$"}], "c": None}
    unescaped = json.loads(json.dumps(compose.render_run(settings, cluster.build(settings))).replace("$$", "$"))
    assert unescaped["services"]["worker-1"]["command"] == userscript.script_command(settings, "/lab/script/train.py")


def test_every_trainer_mounts_the_shared_libraries_and_no_helper_does():
    """images/libraries.py's mount goes to every task of the cluster, after a SCRIPT's own mounts
    (which replace the list), and to neither a delay proxy nor the metadata stand-in."""
    mount = f"/lab/home/.libraries/abc/tensorflow:{libraries.PACKAGE}:ro"
    settings = Settings(workers=2, scenario="preempt", notice="gce")
    the_cluster = cluster.build(settings)
    services = render_run(settings, the_cluster, frozenset({"worker-1"}), shared_libraries=mount)["services"]
    assert [name for name, service in services.items() if mount in service.get("volumes", [])] == the_cluster.tasks
    assert set(services) - set(the_cluster.tasks) == {"worker-1-link", metadata.SERVICE}
    assert "volumes" not in render_run(settings, the_cluster)["services"]["worker-0"]
