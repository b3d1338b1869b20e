"""BACKEND=swarm (`make stack-up`): the same lab as a Docker Swarm stack, one service per task.

Same image, same TF_CONFIG (cluster.compose_address: inside a stack's network every service
answers to its short name, `worker-0`, as a Compose service does), same JSONL logs, the same
supervisor in runner.py. The lab renders the whole stack file into the run folder,
`runs/<RUN>/stack.run.json`, and deploys it with `docker stack deploy`: stack deploy supports
neither `extends` nor profiles, so the Compose file's `task` template cannot be reused as it is,
and the host side cannot read that YAML without a YAML library. `TRAINER` below is the same
trainer block translated, and a unit test holds it to docker-compose.yml's `x-trainer` key by key.

What a stack applies differently from Compose:
- `tmpfs:` on a service is ignored by stack deploy (measured: the read-only workers died with "No
  usable temporary directory"), so /tmp is a `type: tmpfs` mount instead.
- `security_opt` (no-new-privileges) is ignored by stack deploy: swarm services have no such
  option on engine 20.10, so a stack's trainers run without it.
- `cap_drop` reaches a service only from engine API 1.41 (Docker 20.10) on; older engines get
  a stack without it, and the run's first line says so.
- Swarm's own restart policy is off (`condition: none`): the lab restarts the whole cluster
  itself (RESTARTS), as with Compose.

The lab never changes the engine's swarm state: it refuses to start unless this engine is an
active swarm manager.

Across nodes (SWARM_PLACEMENT=spread, the default, on a swarm of several Ready nodes): task i runs
on node i (this node first, then the others by hostname), in turn, each service constrained to its
node by id in the stack file. Two things must then reach every node, and the lab checks that the
user has provided both before anything starts:
- the image: pushed to REGISTRY and deployed by digest (`registry/tflab-trainer@sha256:...`), so a
  node pulls exactly the image built here and never asks a public registry;
- the run folder: bind-mounted at the same path on every node, which the user states with
  SHARED_RUNS_DIR=1 (an NFS mount on a real swarm; the simulated swarm's nodes share this host's
  files). The lab reads the JSONL logs, backups and model from that folder as on one node, so what
  it shows is the same.
Tasks on another node are signalled (chaos, stop) and read (output.log) through that node's
engine where the lab knows it (swarmsim.node_engines), else their logs through `docker service logs`.
Every service uses `endpoint_mode: dnsrr`: a service name resolves to its task's own address, as
TF_CONFIG needs, with no virtual IP (which needs IPVS, missing from some kernels, this one's included).
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

from tflab import docker, labels, swarmsim, user_script
from tflab.cluster import Cluster
from tflab.compose import literal
from tflab.docker import run_quiet
from tflab.errors import LabError
from tflab.explain import VANISHED
from tflab.runfolder import OUTPUT, container_user, write_json
from tflab.settings import Settings, node_engine_map
from tflab.user_script import script_service

STACK_FILE = "stack.run.json"  # the run's whole stack, in its folder
STACK_FILE_VERSION = "3.9"  # the newest format docker stack deploy reads; `init` needs 3.7
CAP_DROP_API = (1, 41)  # the engine API from which a service's cap_drop is applied (Docker 20.10)
NOT_APPLIED = "no-new-privileges (stack deploy ignores security_opt)"
MAX_SERVICE_NAME = 63  # swarm service names are DNS labels
NO_CONTAINER_EXIT = 125  # a task that never got a container, as `docker run` reports its own failures
REMOVAL_SECONDS = 60
RESTART_SECONDS = 60
# Task states before a task ends; every other state (complete, failed, shutdown, rejected,
# orphaned, remove) is an end.
RUNNING_STATES = {"new", "allocated", "pending", "assigned", "accepted", "preparing", "ready",
                  "starting", "running"}

# docker-compose.yml's x-trainer block, as a stack service (see the module docstring).
TRAINER = {
    "init": True,  # a real PID 1, so signals reach the trainer and its watchdog is reaped
    "read_only": True,
    "cap_drop": ["ALL"],
    "environment": {"TFLAB_CONFIG": "/lab/run/config.json", "TF_USE_LEGACY_KERAS": "1"},
    "command": ["python", "-m", "tflab.train"],
}
RUN_MOUNT = "/lab/run"
TMPFS_MOUNT = "/tmp"  # HOME and scratch space; the run folder is the only other writable path


@dataclass(frozen=True)
class SwarmNode:
    node_id: str
    engine: str  # the engine's version, for the run's description
    api: tuple[int, int]  # the engine's API version
    hostname: str = ""

    @property
    def applies_cap_drop(self) -> bool:
        return self.api >= CAP_DROP_API


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
        api = tuple(int(part) for part in api_text.split(".")[:2])
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
    found = docker.node_ls("{{.ID}} {{.Hostname}} {{.Status}} {{.Availability}}")
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


def make_stack(run_dir: Path, settings: Settings, the_cluster: Cluster, image_of) -> "SwarmStack":
    """The swarm backend, every check first: the swarm, the names, the placement (and what it
    needs); then the image (`image_of()`, built if need be), pushed where other nodes need it."""
    node = check_swarm()
    check_names(stack_name(run_dir), the_cluster.tasks)
    placement = place(settings, the_cluster, node)
    image = image_of()
    if not placement.across_nodes:
        return SwarmStack(run_dir, settings, image, node, the_cluster, placement)
    pushed = push(image, settings.registry)
    return SwarmStack(run_dir, settings, pushed[1], node, the_cluster, placement, pushed=pushed)


def stack_name(run_dir: Path) -> str:
    return labels.project_name(run_dir)


def check_names(stack: str, tasks: list[str]) -> None:
    longest = max(tasks, key=len)
    if len(f"{stack}_{longest}") > MAX_SERVICE_NAME:
        run = stack[len(labels.PREFIX):].rsplit("-", 1)[0]
        raise LabError(f"RUN={run} is too long for BACKEND=swarm: service {stack}_{longest} "
                       f"would exceed swarm's {MAX_SERVICE_NAME} characters; choose a shorter RUN")


def render_stack(settings: Settings, the_cluster: Cluster, image: str, run_dir: Path, node: SwarmNode,
                 placement: dict[str, str] | None = None, encrypted: bool = False,
                 script_folder: Path | None = None) -> dict:
    """The run's whole stack file: one service per task, each the trainer block with its
    TF_CONFIG, pinned to its node (`placement`: task -> node id; default this node), limited by
    CPUS/MEMORY, on the stack's own network."""
    uid, gid = container_user()
    limits = {}
    if settings.cpus:
        limits["cpus"] = f"{settings.cpus:g}"
    if settings.memory != "0":
        limits["memory"] = settings.memory
    services = {}
    marks = labels.run_labels(run_dir)
    for task in the_cluster.tasks:
        service = {
            "image": image,
            "hostname": task,
            "user": f"{uid}:{gid}",
            **{key: value for key, value in TRAINER.items() if key != "environment"},
            "networks": ["cluster"],
            "volumes": [{"type": "bind", "source": str(run_dir), "target": RUN_MOUNT},
                        {"type": "tmpfs", "target": TMPFS_MOUNT}],
            "environment": {**TRAINER["environment"], **the_cluster.tf_config_env(task)},
            "labels": marks,  # the containers'
            "deploy": {
                "labels": marks,  # the services'
                "replicas": 1,  # one task per service: TF_CONFIG needs a stable index per task
                "endpoint_mode": "dnsrr",  # the name is the task's address; a VIP needs IPVS
                "restart_policy": {"condition": "none"},  # the lab restarts the whole cluster itself
                "placement": {"constraints": [f"node.id == {(placement or {}).get(task, node.node_id)}"]},
                **({"resources": {"limits": limits}} if limits else {}),
            },
        }
        if settings.script:  # the script's folder joins the run folder; its launcher is the command
            script = script_service(settings, script_folder)
            service["volumes"] = service["volumes"] + script.pop("volumes")
            service.update(script)
        if not node.applies_cap_drop:
            del service["cap_drop"]
        services[task] = service
    # No route out and nothing published: TensorFlow's gRPC servers are unauthenticated.
    network = {"driver": "overlay", "internal": settings.network == "internal", "labels": marks,
               **({"driver_opts": {"encrypted": ""}} if encrypted else {})}
    # stack deploy interpolates `$` as Compose does: ARGS and paths are escaped to reach the task as given.
    return literal({"version": STACK_FILE_VERSION, "services": services, "networks": {"cluster": network}})


def created_key(timestamp: str) -> tuple[str, str]:
    """A sort key for swarm's RFC 3339 times, whose fractions drop trailing zeros (.1Z, .12Z)."""
    match = re.fullmatch(r"([^.]+?)(?:\.(\d+))?Z", timestamp)
    if not match:
        return (timestamp, "")
    return (match.group(1), (match.group(2) or "").ljust(9, "0"))


def newest_tasks(tasks: list[dict]) -> dict[str, dict]:
    """service id -> its newest task (a restart leaves the older ones in the service's history)."""
    newest: dict[str, dict] = {}
    for task in tasks:
        current = newest.get(task["ServiceID"])
        if current is None or created_key(task["CreatedAt"]) > created_key(current["CreatedAt"]):
            newest[task["ServiceID"]] = task
    return newest


def exit_code_of(task: dict) -> int | None:
    """A swarm task's exit code, or None while it has not ended."""
    status = task.get("Status", {})
    if status.get("State") in RUNNING_STATES:
        return None
    if not container_of(task):
        return NO_CONTAINER_EXIT
    return int(status["ContainerStatus"].get("ExitCode", 0))


def container_of(task: dict) -> str | None:
    return (task.get("Status", {}).get("ContainerStatus") or {}).get("ContainerID") or None


def lab_stacks(scope: Path) -> list[str]:
    """The stacks of the runs under `scope` (labels.py); none where this engine is no swarm manager."""
    ids = docker.service_ls(labels.RUN_DIR)
    if ids.returncode != 0 or not ids.stdout.split():
        return []
    template = (labels.label_template(labels.RUN_DIR, of=".Spec.Labels") + "\t"
                + labels.label_template(labels.STACK_LABEL, of=".Spec.Labels"))
    found = docker.service_inspect(ids.stdout.split(), template)
    stacks = set()
    for line in found.stdout.splitlines():
        run_dir, _, stack = line.partition("\t")
        if stack and labels.within(run_dir, scope):
            stacks.add(stack)
    return sorted(stacks)


def engine_command(node: str | None, this_node: str, engines: dict[str, str]) -> list[str]:
    """`docker` for this node's containers, `docker -H <engine>` for another node's whose engine is
    known; [] where it is not (then only the swarm's manager can act on that task)."""
    if not node or node == this_node:
        return docker.engine_at(None)
    return docker.engine_at(engines[node]) if node in engines else []


def stack_containers(stack: str, command: list[str] | None = None) -> list[str]:
    return docker.labelled_containers(f"{labels.STACK_LABEL}={stack}", engine=command)


def stack_networks(stack: str) -> list[str]:
    return docker.labelled_networks(f"{labels.STACK_LABEL}={stack}")


def remove_stack(stack: str, engines: list[list[str]] = ()) -> bool:
    """`docker stack rm`, then waits until its containers (here, and on the other nodes' `engines`
    the lab can reach) and network are gone (False if they are not in time): stack rm returns
    before the engines have removed them, and a network can only go once nothing uses it."""
    docker.stack_remove(stack, timeout=120)
    deadline = time.monotonic() + REMOVAL_SECONDS
    while time.monotonic() < deadline:
        if not any(stack_containers(stack, command) for command in [None, *[e for e in engines if e]]):
            networks = stack_networks(stack)
            if not networks:
                return True
            docker.network_remove(*networks)  # stack rm gave up while tasks still used it
        time.sleep(1)
    return False


# make chaos's partition on a swarm. The engine refuses `docker network disconnect` on a
# swarm-scoped network (moby#24988), so the lab cuts a task off inside its own network namespace:
# a throwaway container on the task's node, from the task's own image, joins that namespace with
# NET_ADMIN and sets down the interface that holds the task's overlay address (up again to
# reconnect; the kernel puts the subnet's route back). Its peers then reach nothing at that
# address, as on a node cut off by a firewall. Python's standard library does it: nothing is added
# to the image. The ioctls: SIOCGIFADDR 0x8915, SIOCGIFFLAGS 0x8913, SIOCSIFFLAGS 0x8914; IFF_UP 1.
LINK_SCRIPT = """
import fcntl, socket, struct, sys
address, up = sys.argv[1], sys.argv[2] == "up"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for _, name in socket.if_nameindex():
    request = struct.pack("256s", name.encode())
    try:
        held = socket.inet_ntoa(fcntl.ioctl(s, 0x8915, request)[20:24])
    except OSError:
        continue
    if held == address:
        flags = struct.unpack("H", fcntl.ioctl(s, 0x8913, request)[16:18])[0]
        flags = flags | 1 if up else flags & ~1
        fcntl.ioctl(s, 0x8914, struct.pack("16sH", name.encode(), flags).ljust(40, b"\\0"))
        print(name, "up" if up else "down")
        sys.exit(0)
sys.exit("no interface holds " + address)
"""


def set_link(command: list[str], container: str, network: str, up: bool) -> subprocess.CompletedProcess:
    """Sets the interface of `container` on `network` down or up (LINK_SCRIPT), through `command`,
    the docker of the container's node."""
    found = docker.container_inspect(container, "{{json .NetworkSettings.Networks}} {{.Image}}", engine=command)
    if found.returncode != 0:
        return found
    networks, image = found.stdout.rsplit(" ", 1)
    address = json.loads(networks).get(network, {}).get("IPAddress")
    if not address:
        return subprocess.CompletedProcess([], 1, "", f"container {container} has no address on {network}")
    return docker.run_in_namespace(container, image.strip(), "python3", "-c", LINK_SCRIPT, address,
                                   "up" if up else "down", timeout=60, engine=command)


class SwarmStack:
    """The Backend (backend.py) for BACKEND=swarm: one stack per run, `tflab-<RUN>`."""

    proxied: frozenset[str] = frozenset()  # LINK's delay proxies are Compose services only

    def __init__(self, run_dir: Path, settings: Settings, image: str, node: SwarmNode, the_cluster: Cluster,
                 placement: Placement | None = None, pushed: tuple[str, ...] = ()):
        self.run_dir = run_dir
        self.settings = settings
        self.image = image
        self.node = node
        self.stack = stack_name(run_dir)
        self.cluster = the_cluster  # inside a stack's network every service answers to its short name
        self.tasks = the_cluster.tasks
        self.oom_killed: dict[str, bool] = {}  # swarm tasks carry no OOMKilled
        self.placement = placement or Placement({task: node.node_id for task in self.tasks},
                                                {node.node_id: node.hostname or "this node"}, node.node_id)
        named = node_engine_map(settings.node_engines)
        # node id -> `docker -H` address, for tasks on other nodes: the sim's, and NODE_ENGINES by hostname
        self.engines = {**swarmsim.node_engines(),
                        **{node: named[host] for node, host in self.placement.hostnames.items() if host in named}}
        missing = [NOT_APPLIED] + ([] if node.applies_cap_drop else ["cap_drop (needs engine API 1.41)"])
        # Across nodes TensorFlow's unauthenticated gRPC crosses a network: encrypted where the kernel can.
        self.encrypted = self.placement.across_nodes and kernel_encrypts() is True
        if self.placement.across_nodes and not self.encrypted:
            missing.append("an encrypted overlay (this kernel has no IPsec rfc4106(gcm(aes)); the tasks' traffic "
                           "between nodes is not encrypted)")
        where = (f"across {len(set(self.placement.nodes.values()))} nodes ({self.placement.describe()})"
                 if self.placement.across_nodes else "on this node")
        self.description = (f"swarm (engine {node.engine}), stack {self.stack}, {where}, image {image}; "
                            f"not applied: {', '.join(missing)}")
        self.pushed = pushed  # push()'s tag and digest: this engine's names for the image, which close() takes off
        self._service_ids: dict[str, str] = {}
        self._reported: set[str] = set()
        self._seen: set[str] = set()  # tasks that have had a swarm task

    def service(self, task: str) -> str:
        return f"{self.stack}_{task}"

    def start(self) -> None:
        path = self.run_dir / STACK_FILE
        script_folder = user_script.stage(self.settings, self.run_dir) if self.settings.script else None
        write_json(path, render_stack(self.settings, self.cluster, self.image, self.run_dir, self.node,
                                      self.placement.nodes, self.encrypted, script_folder))
        result = docker.stack_deploy(str(path), self.stack, timeout=300)
        if result.returncode != 0:
            raise LabError(f"docker stack deploy failed: {docker.last_line(result)}")

    def restart(self) -> None:
        """A new task for every service (after all have ended): same spec, same logs. Waits until
        each has one, or the old tasks' exit codes would read as the new run's."""
        before = {service: task["ID"] for service, task in self._newest().items()}
        for task in self.tasks:
            result = docker.service_update_force(self.service(task), timeout=120)
            if result.returncode != 0:
                raise LabError(f"docker service update of {self.service(task)} failed: {docker.last_line(result)}")
        deadline = time.monotonic() + RESTART_SECONDS
        while time.monotonic() < deadline:
            newest = self._newest()
            if len(newest) == len(self.tasks) and not {t["ID"] for t in newest.values()} & set(before.values()):
                return
            time.sleep(0.5)
        raise LabError(f"swarm did not start new tasks within {RESTART_SECONDS} s of `docker service update --force`")

    def _service_names(self) -> dict[str, str]:
        """service id -> task name, learnt once every service exists."""
        if len(self._service_ids) < len(self.tasks):
            found = docker.service_ls(f"{labels.STACK_LABEL}={self.stack}", template="{{.ID}} {{.Name}}")
            for line in found.stdout.splitlines():
                short_id, name = line.split()
                if name.startswith(f"{self.stack}_"):
                    self._service_ids[short_id] = name[len(self.stack) + 1:]
        return self._service_ids

    def _all_tasks(self) -> list[dict]:
        ids = docker.stack_ps(self.stack).stdout.split()
        if not ids:
            return []
        found = docker.inspect_json(ids)
        return json.loads(found.stdout) if found.returncode == 0 and found.stdout.strip() else []

    def _task_name(self, service_id: str) -> str | None:
        # `service ls` prints short ids, tasks carry the full one.
        return next((name for short, name in self._service_names().items() if service_id.startswith(short)), None)

    def _newest(self) -> dict[str, dict]:
        """task name -> its service's newest swarm task."""
        newest = {}
        for service_id, task in newest_tasks(self._all_tasks()).items():
            name = self._task_name(service_id)
            if name:
                newest[name] = task
        return newest

    def exit_codes(self) -> dict[str, int | None]:
        """task -> exit code, or None while its swarm task has not ended."""
        newest = self._newest()
        # A service seen once and gone now was removed from outside the lab.
        codes: dict[str, int | None] = {task: VANISHED if task in self._seen else None for task in self.tasks}
        self._seen |= set(newest)
        for name, task in newest.items():
            codes[name] = exit_code_of(task)
            error = task.get("Status", {}).get("Err")
            if codes[name] == NO_CONTAINER_EXIT and task["ID"] not in self._reported:
                self._reported.add(task["ID"])  # say why once: a task that never ran has no log of its own
                print(f"tflab: {name} never ran: {error or task['Status'].get('State')}", flush=True)
        return codes

    def container(self, task: str) -> str:
        """The id of a task's container (its newest swarm task's)."""
        container = container_of(self._newest().get(task, {}))
        if not container:
            raise LabError(f"task {task} has no container in stack {self.stack}")
        return container

    def network(self) -> str:
        return f"{self.stack}_cluster"

    def docker_for(self, task: str) -> list[str]:
        """The docker command that reaches a task's container: this engine's, or its node's."""
        node = self._newest().get(task, {}).get("NodeID") or self.placement.nodes.get(task)
        return engine_command(node, self.node.node_id, self.engines)

    def cut_off(self, task: str) -> subprocess.CompletedProcess:
        return set_link(self.docker_for(task), self.container(task), self.network(), up=False)

    def reconnect(self, task: str) -> subprocess.CompletedProcess:
        return set_link(self.docker_for(task), self.container(task), self.network(), up=True)

    def _kill(self, tasks: list[str], *signal: str) -> None:
        newest = self._newest()
        by_engine: dict[tuple, list[str]] = {}
        for task in tasks:
            if task in newest and exit_code_of(newest[task]) is None and container_of(newest[task]):
                command = engine_command(newest[task].get("NodeID"), self.node.node_id, self.engines)
                by_engine.setdefault(tuple(command), []).append(container_of(newest[task]))
        for command, containers in by_engine.items():
            docker.kill(containers, *signal, timeout=60, engine=list(command))

    def terminate(self, tasks: list[str]) -> None:
        self._kill(tasks, "SIGTERM")

    def stop(self, tasks: list[str]) -> None:
        self._kill(tasks)

    def save_output(self) -> None:
        """Every container's output, each line prefixed with its task, merged by time (as
        BACKEND=local writes it), then swarm's own account of every task, errors included."""
        lines = []
        for task in self._all_tasks():
            name = self._task_name(task["ServiceID"]) or "?"
            container = container_of(task)
            if container:
                command = engine_command(task.get("NodeID"), self.node.node_id, self.engines)
                # A node whose engine the lab cannot reach: the manager relays its task's logs.
                logs = (docker.logs_merged(container, engine=command, timeout=120) if command else
                        docker.service_task_logs(task["ID"], timeout=120))
                lines += [f"{name} | {line}" for line in logs.splitlines()]
        # docker logs' timestamps have a fixed width, so the text sorts by time; stable within a task.
        lines.sort(key=lambda line: line.split(" | ", 1)[1][:30])
        history = docker.stack_ps(self.stack, "{{.Name}}  {{.CurrentState}}  {{.Error}}").stdout
        (self.run_dir / OUTPUT).write_text("\n".join(lines + ["--- swarm tasks ---", history]))

    def close(self) -> None:
        if not remove_stack(self.stack, [engine_command(node, self.node.node_id, self.engines)
                                         for node in set(self.placement.nodes.values()) - {self.node.node_id}]):
            print(f"tflab: stack {self.stack} was not gone {REMOVAL_SECONDS} s after `docker stack rm`; "
                  "`make down` removes what is left", flush=True)
        # Only names: the image keeps its own tag (make clean's), and one still in use stays.
        for name in self.pushed:
            docker.image_remove(name)
