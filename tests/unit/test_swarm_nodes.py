"""BACKEND=swarm across nodes and `tflab swarm-sim`, without an engine: where tasks are placed, what a
run across nodes needs before anything starts, the settings, and the sim's refusals and cleanup."""

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tflab.backends.swarm import link as swarm_link
from tflab.backends.swarm import nodes as swarm_nodes
from tflab.backends.swarm import render as swarm_render
from tflab.core import cluster
from tflab.core.errors import LabError
from tflab.core.settings import Settings, SettingsError
from tflab.tools import swarmsim

pytestmark = pytest.mark.unit

NODE = swarm_render.SwarmNode(node_id="n0", engine="20.10.24", api=(1, 41), hostname="vm")
THREE = {"n0": "vm", "n1": "tflab-sim-1", "n2": "tflab-sim-2"}
ACROSS = dict(workers=3, global_batch=96, registry="198.18.213.1:5000", shared_runs_dir=1)


def place(settings: Settings, nodes: dict[str, str]) -> swarm_nodes.Placement:
    return swarm_nodes.place(settings, cluster.build(settings), NODE, nodes)


def test_spread_puts_one_worker_on_each_node_in_turn():
    placement = place(Settings(**ACROSS), THREE)
    assert placement.nodes == {"worker-0": "n0", "worker-1": "n1", "worker-2": "n2"}
    assert placement.across_nodes
    assert placement.describe() == "worker-0 on vm; worker-1 on tflab-sim-1; worker-2 on tflab-sim-2"
    four = place(Settings(**{**ACROSS, "workers": 4, "global_batch": 64}), THREE)
    assert list(four.nodes.values()) == ["n0", "n1", "n2", "n0"]


def test_local_pins_every_task_to_this_node_and_needs_nothing_more():
    placement = place(Settings(workers=3, global_batch=96, swarm_placement="local"), {"n0": "vm"})
    assert set(placement.nodes.values()) == {"n0"} and not placement.across_nodes


def test_one_node_needs_no_registry():
    assert not place(Settings(workers=3, global_batch=96), {"n0": "vm"}).across_nodes


@pytest.mark.parametrize("missing, expected", [
    ("registry", "BACKEND=swarm would run tasks on 3 nodes, and the image is on this one only: give REGISTRY"),
    ("shared_runs_dir", "BACKEND=swarm would run tasks on 3 nodes, and each writes its logs to the run folder"),
])
def test_across_nodes_without_a_registry_or_a_shared_folder_is_refused(missing, expected):
    settings = Settings(**{**ACROSS, missing: "" if missing == "registry" else 0})
    with pytest.raises(LabError, match=expected):
        place(settings, THREE)


def test_the_stack_file_shows_each_services_node():
    settings = Settings(**ACROSS)
    placement = place(settings, THREE)
    stack = swarm_render.render_stack(settings, cluster.build(settings), "r:5000/tflab-trainer@sha256:" + "a" * 64,
                               Path("/runs/r1"), NODE, placement.nodes)
    constraints = {task: service["deploy"]["placement"]["constraints"] for task, service in stack["services"].items()}
    assert constraints == {"worker-0": ["node.id == n0"], "worker-1": ["node.id == n1"], "worker-2": ["node.id == n2"]}
    assert all(service["deploy"]["endpoint_mode"] == "dnsrr" for service in stack["services"].values())


def test_other_nodes_are_reached_through_their_engines():
    engines = {"n1": "unix:///sim/n1/docker.sock"}
    assert swarm_nodes.engine_command("n0", "n0", engines) == ["docker"]
    assert swarm_nodes.engine_command(None, "n0", engines) == ["docker"]
    assert swarm_nodes.engine_command("n1", "n0", engines) == ["docker", "-H", "unix:///sim/n1/docker.sock"]
    assert swarm_nodes.engine_command("n9", "n0", engines) == []  # unknown: the manager relays its logs


@pytest.mark.parametrize("name, value, expected", [
    ("REGISTRY", "http://r:5000", "REGISTRY='http://r:5000' is not allowed: expected a registry's host:port"),
    ("REGISTRY", "r:5000/path", "REGISTRY='r:5000/path' is not allowed"),
    ("REGISTRY", "r:70000", "REGISTRY='r:70000' is not allowed"),
    ("SWARM_PLACEMENT", "pack", "SWARM_PLACEMENT=pack is not allowed: expected one of spread, local"),
    ("SHARED_RUNS_DIR", "yes", "SHARED_RUNS_DIR=yes is not allowed: expected an integer from 0 to 1"),
    ("NODES", "1", "NODES=1 is not allowed: expected an integer from 2 to 8"),
    ("NODE_ENGINES", "node-2", "NODE_ENGINES='node-2' is not allowed (entry node-2)"),
    ("NODE_ENGINES", "a=ssh://x a=ssh://y", "NODE_ENGINES='a=ssh://x a=ssh://y' is not allowed (a node named twice)"),
])
def test_bad_swarm_settings_are_one_line(name, value, expected):
    with pytest.raises(SettingsError) as error:
        Settings.from_env({}, {name: value})
    assert str(error.value).startswith(expected) and "\n" not in str(error.value)


def test_good_swarm_settings():
    settings = Settings.from_env({}, {"REGISTRY": "registry.example.com:5000", "NODES": "4",
                                      "NODE_ENGINES": "node-2=ssh://admin@node-2 node-3=tcp://10.0.0.3:2376"})
    assert settings.registry == "registry.example.com:5000" and settings.nodes == 4


def test_swarm_sim_refuses_without_root(monkeypatch):
    monkeypatch.setattr(swarmsim.os, "geteuid", lambda: 1000)
    with pytest.raises(LabError, match="make swarm-sim needs root"):
        swarmsim.check_can_run()
    with pytest.raises(LabError, match="make swarm-sim-down needs root"):
        swarmsim.down(Settings())


def test_swarm_sim_down_without_a_sim_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(swarmsim, "STATE", tmp_path / "state.json")
    assert swarmsim.down(Settings()) == 0
    assert "no simulated swarm is up" in capsys.readouterr().out


def test_remove_takes_only_what_the_state_records_and_then_the_state(tmp_path, monkeypatch):
    """A sim that failed early: its records name a node whose engine never started and a namespace
    that was never made. Nothing else is touched, and the state file goes once all is gone."""
    monkeypatch.setattr(swarmsim, "SIM_ROOT", tmp_path / "sim")
    monkeypatch.setattr(swarmsim, "STATE", tmp_path / "sim" / "state.json")
    folder = tmp_path / "sim" / "tflab-sim-1"
    folder.mkdir(parents=True)
    state = {"nodes": [{"name": "tflab-sim-1", "netns": "tflab-unit-absent", "veth": "tflabunit0h",
                        "dir": str(folder), "socket": "unix:///nowhere", "pid": None, "node_id": None}],
             "registry": None, "bridge": None, "forward_rule": None, "swarm_created": False}
    swarmsim.save(state)
    assert json.loads(swarmsim.STATE.read_text()) == state
    assert swarmsim.remove(state) == []
    assert not folder.exists() and not swarmsim.STATE.exists() and not (tmp_path / "sim").exists()


def test_a_recorded_pid_is_ended_only_while_it_is_the_sims(tmp_path):
    import subprocess
    import sys

    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not swarmsim.alive(other.pid)  # a python, not a dockerd nor the registry: never signalled
        assert swarmsim.stop(other.pid) and other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_an_encrypted_overlay_where_the_kernel_has_ipsec():
    settings = Settings(**ACROSS)
    stack = swarm_render.render_stack(settings, cluster.build(settings), "i", Path("/runs/r1"), NODE, encrypted=True)
    assert stack["networks"]["cluster"]["driver_opts"] == {"encrypted": ""}
    plain = swarm_render.render_stack(settings, cluster.build(settings), "i", Path("/runs/r1"), NODE)
    assert "driver_opts" not in plain["networks"]["cluster"]


@pytest.mark.skipif(not shutil.which("unshare"), reason="needs util-linux's unshare (Linux)")
def test_the_partition_script_sets_the_interface_holding_the_address_down_and_up(tmp_path):
    """swarm_link.LINK_SCRIPT, run for real in a network namespace of its own (only `lo`), as the lab
    runs it in a task's: it finds the interface by its address and flips IFF_UP. `lo` is up first
    (a new namespace's is down, without its address), by name, through the same ioctls."""
    (tmp_path / "link.py").write_text(swarm_link.LINK_SCRIPT)
    (tmp_path / "lo.py").write_text(textwrap.dedent("""
        import fcntl, socket, struct, sys
        s, request = socket.socket(), struct.pack("256s", b"lo")
        flags = struct.unpack("H", fcntl.ioctl(s, 0x8913, request)[16:18])[0]
        if sys.argv[1:] == ["up"]:
            fcntl.ioctl(s, 0x8914, struct.pack("16sH", b"lo", flags | 1).ljust(40, b"\\0"))
        else:
            print("is-up" if flags & 1 else "is-down")
        """))
    link, lo = f"{sys.executable} {tmp_path / 'link.py'}", f"{sys.executable} {tmp_path / 'lo.py'}"

    def run(*commands: str) -> subprocess.CompletedProcess:
        return subprocess.run(["unshare", "--user", "--map-root-user", "--net", "sh", "-ec", "; ".join(commands)],
                              capture_output=True, text=True, timeout=60)

    result = run(f"{lo} up", lo, f"{link} 127.0.0.1 down", lo, f"{link} 127.0.0.1 up", lo)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["is-up", "lo", "down", "is-down", "lo", "up", "is-up"]
    missing = run(f"{lo} up", f"{link} 10.9.8.7 down")
    assert (missing.returncode, missing.stderr.strip()) == (1, "no interface holds 10.9.8.7")
