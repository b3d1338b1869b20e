"""BACKEND=swarm without an engine: the stack file the lab renders (its exact shape, TF_CONFIG from
cluster.py, the same trainer block as docker-compose.yml), and how swarm tasks become exit codes."""

import json
from pathlib import Path

import pytest
import yaml
from tflab.backends import compose, swarm, userscript
from tflab.backends.swarm import render as swarm_render
from tflab.core import cluster, runfolder
from tflab.core import task as task_contract
from tflab.core.errors import LabError
from tflab.core.settings import Settings
from tflab.engine import labels

NODE = swarm_render.SwarmNode(node_id="n0de", engine="20.10.24", api=(1, 41))
RUN_DIR = Path("/runs/r1")


def render(settings: Settings, node: swarm_render.SwarmNode = NODE) -> dict:
    return swarm_render.render_stack(settings, cluster.build(settings), "tflab-trainer:latest", RUN_DIR, node)


def test_a_two_worker_stack_exactly():
    uid, gid = runfolder.container_user()
    stack = render(Settings(workers=2))
    spec = {"worker": ["worker-0:2222", "worker-1:2222"]}
    assert stack == {
        "version": "3.9",
        "services": {
            f"worker-{index}": {
                "image": "tflab-trainer:latest",
                "hostname": f"worker-{index}",
                "user": f"{uid}:{gid}",
                "init": True,
                "read_only": True,
                "cap_drop": ["ALL"],
                "command": ["python", "-m", "tflab.train"],
                "networks": ["cluster"],
                "volumes": [{"type": "bind", "source": "/runs/r1/tasks", "target": "/lab/run"},
                            {"type": "bind", "source": "/runs/r1/config.json", "target": "/lab/config.json",
                             "read_only": True},
                            {"type": "tmpfs", "target": "/tmp"}],
                "environment": {
                    "TFLAB_CONFIG": "/lab/config.json",
                    "TFLAB_OUTPUT": "/lab/run",
                    "TF_USE_LEGACY_KERAS": "1",
                    "TFLAB_TASK": f"worker-{index}",
                    "TF_CONFIG": json.dumps({"cluster": spec, "task": {"type": "worker", "index": index}},
                                            separators=(",", ":")),
                },
                "labels": {"tflab.run": "r1", "tflab.run-dir": "/runs/r1"},
                "deploy": {"labels": {"tflab.run": "r1", "tflab.run-dir": "/runs/r1"},
                           "replicas": 1, "endpoint_mode": "dnsrr", "restart_policy": {"condition": "none"},
                           "placement": {"constraints": ["node.id == n0de"]}},
            }
            for index in range(2)
        },
        "networks": {"cluster": {"driver": "overlay", "internal": True,
                                 "labels": {"tflab.run": "r1", "tflab.run-dir": "/runs/r1"}}},
    }
    json.dumps(stack)  # written as JSON, which stack deploy reads as YAML


def workers(count: int) -> list[str]:
    return [f"worker-{index}:2222" for index in range(count)]


# Each cluster as the TFJob convention names it, written out by hand (not by cluster.py): a
# service per task, `<job>-<index>`, its hostname, port 2222.
@pytest.mark.parametrize("settings, expected_spec", [
    (Settings(workers=1, global_batch=64), {"worker": ["worker-0:2222"]}),
    (Settings(workers=3, global_batch=96), {"worker": ["worker-0:2222", "worker-1:2222", "worker-2:2222"]}),
    (Settings(workers=16, global_batch=64), {"worker": workers(16)}),
    (Settings(strategy="parameter_server", workers=2, ps=2),
     {"chief": ["chief-0:2222"], "worker": ["worker-0:2222", "worker-1:2222"], "ps": ["ps-0:2222", "ps-1:2222"]}),
])
def test_every_task_is_a_service_with_cluster_pys_tf_config(settings, expected_spec):
    spec = cluster.cluster_spec(settings)
    services = render(settings)["services"]
    assert list(services) == cluster.build(settings).tasks
    assert list(services) == [address.removesuffix(":2222") for addresses in expected_spec.values()
                              for address in addresses]
    for task, service in services.items():
        assert service["environment"]["TFLAB_TASK"] == task
        assert json.loads(service["environment"]["TF_CONFIG"]) == cluster.tf_config_for(spec, task)
        job, index = task.rsplit("-", 1)
        assert json.loads(service["environment"]["TF_CONFIG"]) == {"cluster": expected_spec,
                                                                   "task": {"type": job, "index": int(index)}}
        assert service["hostname"] == task


@pytest.mark.parametrize("strategy", ["single", "mirrored"])
def test_a_one_process_strategy_is_one_service_without_tf_config(strategy):
    services = render(Settings(strategy=strategy))["services"]
    assert list(services) == [strategy]
    assert services[strategy]["environment"] == {"TFLAB_CONFIG": "/lab/config.json", "TFLAB_OUTPUT": "/lab/run",
                                                 "TF_USE_LEGACY_KERAS": "1", "TFLAB_TASK": strategy}


def test_the_stack_carries_compose_files_trainer_block():
    """Stack deploy cannot `extends` the Compose file, so the block is translated; this holds the
    translation to the original, key by key, so the two cannot drift apart unnoticed."""
    trainer = yaml.safe_load(compose.COMPOSE_FILE.read_text())["x-trainer"]
    service = render(Settings())["services"]["worker-0"]
    for key in ("init", "read_only", "cap_drop", "command", "networks"):
        assert service[key] == trainer[key], key
    assert trainer["environment"].items() <= service["environment"].items()
    assert [volume.removesuffix(":ro").rsplit(":", 1)[1] for volume in trainer["volumes"]] == [
        swarm_render.RUN_MOUNT, task_contract.CONFIG]
    # `tmpfs:` is what stack deploy ignores: the same path becomes a tmpfs mount.
    assert trainer["tmpfs"] == [swarm_render.TMPFS_MOUNT]
    assert {"type": "tmpfs", "target": "/tmp"} in service["volumes"]
    assert trainer["user"] == "${TFLAB_UID:-1000}:${TFLAB_GID:-1000}"
    assert service["user"] == "{}:{}".format(*runfolder.container_user())
    # What a stack cannot apply is named in every swarm run's first line.
    assert trainer["security_opt"] == ["no-new-privileges:true"] and "security_opt" not in service
    assert "no-new-privileges" in swarm_render.NOT_APPLIED
    assert "ports" not in service


def test_limits_and_network_come_from_the_settings():
    limited = render(Settings(cpus=1.5, memory="2g", network="bridge"))
    for service in limited["services"].values():
        assert service["deploy"]["resources"] == {"limits": {"cpus": "1.5", "memory": "2g"}}
    assert limited["networks"]["cluster"] == {"driver": "overlay", "internal": False,
                                              "labels": {"tflab.run": "r1", "tflab.run-dir": "/runs/r1"}}
    assert all("resources" not in s["deploy"] for s in render(Settings())["services"].values())


def test_a_users_script_runs_in_every_service_as_under_compose():
    script = Path(__file__).resolve().parents[2] / "examples/multiworker-tutorial/train.py"
    settings = Settings(workers=2, script=str(script), args="--epochs 2")
    for task, service in render(settings)["services"].items():
        assert service["volumes"] == [{"type": "bind", "source": str(RUN_DIR / "tasks"), "target": "/lab/run"},
                                      {"type": "bind", "source": str(RUN_DIR / "config.json"),
                                       "target": "/lab/config.json", "read_only": True},
                                      {"type": "tmpfs", "target": "/tmp"}, f"{script.parent}:/lab/script:ro"]
        assert service["command"] == userscript.script_command(settings, "/lab/script/train.py")
        assert service["working_dir"] == "/lab/script"
        assert json.loads(service["environment"]["TF_CONFIG"]) == cluster.tf_config_for(
            cluster.cluster_spec(settings), task)


def test_an_engine_older_than_api_1_41_gets_no_cap_drop_and_says_so():
    old = swarm_render.SwarmNode("n0de", "19.03.15", (1, 40))
    assert all("cap_drop" not in s for s in render(Settings(), old)["services"].values())
    stack = swarm.SwarmStack(RUN_DIR, Settings(), "img", old, cluster.build(Settings()))
    assert "not applied: no-new-privileges (stack deploy ignores security_opt), cap_drop" in stack.description
    assert "cap_drop" not in swarm.SwarmStack(RUN_DIR, Settings(), "img", NODE,
                                              cluster.build(Settings())).description


def test_names_and_addresses():
    stack = swarm.SwarmStack(Path("/runs/20261202-182819-85f8"), Settings(), "img", NODE, cluster.build(Settings()))
    name = "tflab-20261202-182819-85f8-" + labels.digest(Path("/runs/20261202-182819-85f8"))
    assert stack.stack == name
    assert stack.service("worker-1") == f"{name}_worker-1"
    assert stack.network() == f"{name}_cluster"
    assert stack.cluster.spec == {"worker": ["worker-0:2222", "worker-1:2222"]}
    assert stack.proxied == frozenset()


def test_a_run_id_too_long_for_a_service_name_is_refused():
    tasks = cluster.build(Settings(workers=16, global_batch=64)).tasks
    swarm_render.check_names("tflab-" + "r" * 47, tasks)  # tflab-rrr..._worker-15: 63 characters
    refusal = r"^RUN=r{48} is too long for BACKEND=swarm: service tflab-r{48}_worker-1\d would exceed"
    with pytest.raises(LabError, match=refusal):
        swarm_render.check_names("tflab-" + "r" * 48, tasks)


def task(service: str, created: str, state: str, container: str = "", exit_code: int = 0) -> dict:
    status = {"State": state}
    if container:
        status["ContainerStatus"] = {"ContainerID": container, "ExitCode": exit_code}
    return {"ID": f"{service}-{created}", "ServiceID": service, "CreatedAt": created, "Status": status}


def test_the_newest_task_of_each_service_counts():
    # Swarm drops trailing zeros from fractions: .9Z is later than .12Z, though it sorts before it as text.
    history = [task("s1", "2026-12-02T18:28:19.9Z", "failed", "c2", 137),
               task("s1", "2026-12-02T18:28:19.12Z", "failed", "c1", 1),
               task("s1", "2026-12-02T18:28:18.999999999Z", "complete", "c0"),
               task("s2", "2026-12-02T18:28:20Z", "running", "c3")]
    newest = swarm.newest_tasks(history)
    assert {service: t["ID"] for service, t in newest.items()} == {
        "s1": "s1-2026-12-02T18:28:19.9Z", "s2": "s2-2026-12-02T18:28:20Z"}


@pytest.mark.parametrize("state, container, exit_code, expected", [
    ("pending", "", 0, None),
    ("preparing", "", 0, None),
    ("running", "c", 0, None),
    ("complete", "c", 0, 0),
    ("failed", "c", 1, 1),
    ("failed", "c", 137, 137),  # docker kill
    ("shutdown", "c", 143, 143),
    ("rejected", "", 0, swarm.NO_CONTAINER_EXIT),  # e.g. a mount it could not make: never ran
])
def test_task_states_become_exit_codes(state, container, exit_code, expected):
    assert swarm.exit_code_of(task("s", "2026-12-02T18:28:19Z", state, container, exit_code)) == expected


def test_a_stack_escapes_every_dollar_as_stack_deploy_interpolates(tmp_path):
    (tmp_path / "train.py").write_text("")
    settings = Settings.from_env({}, {"SCRIPT": str(tmp_path / "train.py"), "ARGS": "--home $HOME"})
    service = render(settings)["services"]["worker-0"]
    assert service["command"][-2:] == ["--home", "$$HOME"]
    assert service["command"].count("$$HOME") == 1  # escaped once, not once per pass
