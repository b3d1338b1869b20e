"""The running stack, inspected: TensorFlow's gRPC servers are unauthenticated (its SECURITY.md),
so the trainers must be unreachable from outside and hold no privilege; and a run's outputs
outlive the lab itself."""

import ipaddress
import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labtest.cli import lab_env, run_lab
from labtest.runs import lab_containers
from tflab.core.schema import read_events
from tflab.engine import labels
from tflab.images import libraries


def docker_json(*args):
    return json.loads(subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout)


@pytest.fixture(scope="module")
def running(trainer_image, tmp_path_factory):
    """A multiworker run with CPU and memory limits, caught while it trains; killed at the end."""
    runs = tmp_path_factory.mktemp("hardening")
    env = lab_env(RUNS_DIR=str(runs), RUN="hard", EPOCHS="200", CPUS="1", MEMORY="1500m", RESTARTS="0")
    up = subprocess.Popen([sys.executable, "-m", "tflab", "up"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    # As long as the lab runs (its TIMEOUT bounds it), not a fixed 300 s: at load 12 on 2 cores
    # `import tensorflow` alone took 90 s.
    while not [r for r in read_events(runs / "hard" / "tasks" / "worker-1.jsonl") if r["event"] == "epoch"]:
        assert up.poll() is None, up.stdout.read()
        time.sleep(0.5)
    containers = [c for c in lab_containers() if c.startswith("tflab-hard")]
    yield {"up": up, "runs": runs, "containers": docker_json("inspect", *containers),
           "network": docker_json("network", "inspect", f"{labels.project_name(runs / 'hard')}_cluster")[0]}
    if up.poll() is None:
        up.kill()  # the lab itself dies here; test_outputs_outlive_a_killed_lab checks what stays
        up.wait()


def test_every_trainer_is_unprivileged_and_read_only(running):
    assert len(running["containers"]) == 2
    for container in running["containers"]:
        config, host = container["Config"], container["HostConfig"]
        uid = config["User"].split(":")[0]
        assert uid and uid != "0" and uid != "root", config["User"]
        assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
        assert "no-new-privileges:true" in host["SecurityOpt"]
        assert host["ReadonlyRootfs"] is True and "/tmp" in host["Tmpfs"]
        assert host["Privileged"] is False


def test_the_trainers_share_tensorflows_pages_from_one_read_only_copy(running):
    """images/libraries.py: each task mounts the host's one copy of its image's TensorFlow, read-only,
    so their processes share its libraries' pages; without it each fuse-overlayfs mount had its own
    copy (0 MB shared, measured)."""
    shared = []
    for container in running["containers"]:
        (mount,) = [m for m in container["Mounts"] if m["Destination"] == libraries.PACKAGE]
        assert mount["Type"] == "bind" and mount["RW"] is False
        assert mount["Source"].startswith(str(libraries.FOLDER))
        init = container["State"]["Pid"]
        trainer = subprocess.run(["pgrep", "-P", str(init)], capture_output=True, text=True).stdout.split()[0]
        rollup = Path(f"/proc/{trainer}/smaps_rollup").read_text()
        shared.append(int(re.search(r"^Shared_Clean:\s+(\d+) kB", rollup, re.M).group(1)) // 1024)
    assert min(shared) > 100, f"MB of shared clean pages per trainer: {shared}"


def test_resource_limits_are_applied_per_task(running):
    for container in running["containers"]:
        assert container["HostConfig"]["NanoCpus"] == 1_000_000_000
        assert container["HostConfig"]["Memory"] == 1500 * 1024 * 1024


def test_no_port_is_published_and_the_network_has_no_way_out(running):
    for container in running["containers"]:
        assert not container["HostConfig"]["PortBindings"]
        assert not any(container["NetworkSettings"]["Ports"].values())
    network = running["network"]
    assert network["Internal"] is True
    assert network["Options"]["com.docker.network.bridge.inhibit_ipv4"] == "true"


def test_the_host_cannot_reach_a_workers_grpc_port(running):
    """Not on localhost (nothing is published), and not on the trainers' network either: the host
    has no address on that bridge, so no route to it. (No packet is sent off loopback to check.)"""
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", 2222), timeout=2)
    subnet = ipaddress.ip_network(running["network"]["IPAM"]["Config"][0]["Subnet"])
    addresses = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    host_addresses = [ipaddress.ip_interface(field.split()[3]).ip for field in addresses.splitlines()]
    assert not [a for a in host_addresses if a in subnet], "the host has an address on the trainers' network"
    routes = subprocess.run(["ip", "-4", "route", "show", str(subnet)], capture_output=True, text=True).stdout
    assert routes.strip() == "", f"the host has a route to the trainers' network: {routes}"


def test_outputs_outlive_a_killed_lab(running):
    """SIGKILL of the lab itself: its reaper removes its containers within seconds (issue 28: they
    used to stay, training, until `make down`), and the run's folder keeps everything written so
    far; `make summary` says why there is no summary."""
    up, runs = running["up"], running["runs"]
    up.send_signal(signal.SIGKILL)
    up.wait()
    folder = runs / "hard"
    written = {p.name for p in folder.iterdir()} | {p.name for p in (folder / "tasks").iterdir()}
    assert {"config.json", "worker-0.jsonl", "worker-1.jsonl"} <= written
    summary = run_lab("summary", env=lab_env(RUNS_DIR=str(runs), RUN="hard"))
    assert summary.returncode == 2
    assert "has no summary.json: it is still running, or the lab was killed" in summary.stderr
    deadline = time.monotonic() + 30  # the reaper's bound (test_clean_ends: measured 0.5-0.8 s)
    while [c for c in lab_containers() if c.startswith("tflab-hard")] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [c for c in lab_containers() if c.startswith("tflab-hard")], "the killed lab's containers stayed"
    assert run_lab("down", env=lab_env(RUNS_DIR=str(runs))).returncode == 0
    after = {p.name for p in folder.iterdir()} | {p.name for p in (folder / "tasks").iterdir()}
    assert after >= written  # neither the reaper nor down touched an output
