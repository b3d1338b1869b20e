"""Where a swarm run's tasks go (BACKEND=swarm): this engine as a manager, the swarm's nodes, the
placement of each task, and what a run across nodes needs first (the image in a registry every
node pulls from, an encrypted overlay where the kernel can), and the docker that reaches each node.

A simulated swarm (`make swarm-sim`, a tool outside the runtime) records its nodes' engines in
SIM_STATE; the lab reads that file, never the tool, to reach tasks on those nodes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tflab.backends.swarm.render import SwarmNode
from tflab.core.cluster import Cluster
from tflab.core.errors import LabError
from tflab.core.settings import Settings
from tflab.engine import docker, dockerswarm
from tflab.engine.docker import run_quiet

SIM_STATE = Path("/var/lib/tflab-swarm-sim/state.json")  # make swarm-sim's record of what it made


def check_swarm() -> SwarmNode:
    """This engine as a swarm manager; LabError (one line) if it is not one."""
    info = docker.info_format("{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}} {{.Swarm.NodeID}} {{.Name}}",
                              timeout=30)
    state, manager, node_id, hostname = (info.stdout.split() + ["", "", "", ""])[:4]
    if state != "active":
        what = "run `docker swarm init` first" if state == "inactive" else "see `docker info`"
        raise LabError(f"BACKEND=swarm needs an active Docker Swarm, and this engine's swarm is "
                       f"{state or 'unknown'}: {what} (the lab never changes it itself)")
    if manager != "true":
        raise LabError("BACKEND=swarm needs a swarm manager to deploy a stack, and this engine is a "
                       "worker node: run the lab on a manager")
    version = docker.server_version()
    engine, api_text = (version.stdout.split() + ["unknown", "0.0"])[:2]
    try:
        major, minor = (int(part) for part in (api_text.split(".") + ["0"])[:2])
        api = (major, minor)
    except ValueError:
        api = (0, 0)  # unknown: the stack leaves out what needs a newer engine
    return SwarmNode(node_id, engine, api, hostname)


@dataclass(frozen=True)
class Placement:
    """Where each task runs, and what the other nodes need for it."""
    nodes: dict[str, str]  # task -> node id
    hostnames: dict[str, str]  # node id -> hostname
    this_node: str

    @property
    def across_nodes(self) -> bool:
        return any(node != self.this_node for node in self.nodes.values())

    def describe(self) -> str:
        by_node: dict[str, list[str]] = {}
        for task, node in self.nodes.items():
            by_node.setdefault(self.hostnames.get(node, node), []).append(task)
        return "; ".join(f"{', '.join(tasks)} on {host}" for host, tasks in by_node.items())


def ready_nodes(this_node: str) -> dict[str, str]:
    """node id -> hostname of the swarm's Ready, Active nodes: this node first, the others by hostname."""
    found = dockerswarm.node_ls("{{.ID}} {{.Hostname}} {{.Status}} {{.Availability}}")
    nodes = {}
    for line in found.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2:] == ["Ready", "Active"]:
            nodes[parts[0]] = parts[1]
    ordered = sorted(nodes.items(), key=lambda item: (item[0] != this_node, item[1], item[0]))
    return dict(ordered) if this_node in nodes else {this_node: "this node", **dict(ordered)}


def place(settings: Settings, the_cluster: Cluster, node: SwarmNode, nodes: dict[str, str] | None = None) -> Placement:
    """Each task's node, and the checks a run across nodes needs, before anything starts."""
    tasks = the_cluster.tasks
    nodes = nodes if nodes is not None else (
        ready_nodes(node.node_id) if settings.swarm_placement == "spread" else {node.node_id: node.hostname})
    ids = list(nodes) if settings.swarm_placement == "spread" else [node.node_id]
    placement = Placement({task: ids[index % len(ids)] for index, task in enumerate(tasks)}, nodes, node.node_id)
    if placement.across_nodes:
        count = len(set(placement.nodes.values()))
        if not settings.registry:
            raise LabError(f"BACKEND=swarm would run tasks on {count} nodes, and the image is on this one only: give "
                           "REGISTRY=host:port, a registry every node can pull from (make swarm-sim starts one), "
                           "or SWARM_PLACEMENT=local")
        if not settings.shared_runs_dir:
            raise LabError(f"BACKEND=swarm would run tasks on {count} nodes, and each writes its logs to the run "
                           "folder: mount RUNS_DIR at the same path on every node (NFS; make swarm-sim's nodes "
                           "share this host's files) and give SHARED_RUNS_DIR=1, or SWARM_PLACEMENT=local")
    return placement


PUSH_SECONDS = 1800
# Swarm's encrypted overlay is IPsec ESP with AES-GCM (rfc4106) between the nodes' VXLAN endpoints.
XFRM_PROBE = ["ip", "xfrm", "state", "add", "src", "192.0.2.1", "dst", "192.0.2.2", "proto", "esp", "spi", "0x100",
              "mode", "transport", "aead", "rfc4106(gcm(aes))", "0x" + "00" * 20, "128"]


def kernel_encrypts() -> bool | None:
    """Whether this kernel has the IPsec that an encrypted overlay needs: an ESP state with
    swarm's cipher added in a throwaway network namespace; None where it cannot be asked (not root,
    no `ip`). Only this node's kernel: on a real swarm every node's must have it."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        return None
    probe = f"tflab-xfrm-{os.getpid()}"
    if run_quiet(["ip", "netns", "add", probe]).returncode != 0:
        return None
    try:
        return run_quiet(["ip", "netns", "exec", probe, *XFRM_PROBE]).returncode == 0
    finally:
        run_quiet(["ip", "netns", "delete", probe])


def push(image: str, registry: str) -> tuple[str, str]:
    """Pushes the image to the registry; returns the tag it pushed and the reference by digest,
    which every node pulls: this engine's two names for it."""
    name = f"{registry}/{image}"
    tagged = docker.tag(image, name)
    if tagged.returncode != 0:
        raise LabError(f"docker tag {image} {name} failed: {docker.last_line(tagged)}")
    print(f"tflab: pushing {image} to {registry} (every node pulls it from there)", flush=True)
    started = time.monotonic()
    try:
        pushed = docker.push(name, timeout=PUSH_SECONDS)
    except subprocess.TimeoutExpired:
        raise LabError(f"docker push {name} did not finish in {PUSH_SECONDS} s") from None
    if pushed.returncode != 0:
        raise LabError(f"docker push {name} failed: {docker.last_line(pushed)}; is REGISTRY={registry} a registry "
                       "this engine trusts (its CA in /etc/docker/certs.d/<host:port>/, or insecure-registries)?")
    digest = re.search(r"digest: (sha256:[0-9a-f]{64})", pushed.stdout)
    if not digest:
        raise LabError(f"docker push {name} printed no digest: {docker.last_line(pushed)}")
    reference = f"{name.rsplit(':', 1)[0]}@{digest.group(1)}"
    print(f"tflab: pushed in {time.monotonic() - started:.1f} s: {reference}", flush=True)
    return name, reference


def node_engine_map(raw: str) -> dict[str, str]:
    """NODE_ENGINES as hostname -> the docker CLI's -H address."""
    return dict(entry.split("=", 1) for entry in raw.split())


def engine_command(node: str | None, this_node: str, engines: dict[str, str]) -> list[str]:
    """`docker` for this node's containers, `docker -H <engine>` for another node's whose engine is
    known; [] where it is not (then only the swarm's manager can act on that task)."""
    if not node or node == this_node:
        return docker.engine_at(None)
    return docker.engine_at(engines[node]) if node in engines else []



def sim_node_engines(state_file: Path = SIM_STATE) -> dict[str, str]:
    """swarm node id -> the `docker -H` address of its engine, for the nodes of a simulated swarm
    that is up (SIM_STATE); empty where none is, or where the file cannot be read as the sim writes it."""
    try:
        state = json.loads(state_file.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(state, dict) or not isinstance(state.get("nodes"), list):
        return {}
    return {node["node_id"]: node["socket"] for node in state["nodes"]
            if isinstance(node, dict) and isinstance(node.get("node_id"), str) and node["node_id"]
            and isinstance(node.get("socket"), str)}
