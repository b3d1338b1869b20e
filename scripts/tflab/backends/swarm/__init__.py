"""BACKEND=swarm (`make stack-up`): the same lab as a Docker Swarm stack, one service per task.

Same image, same TF_CONFIG (cluster.compose_address: inside a stack's network every service
answers to its short name, `worker-0`, as a Compose service does), same JSONL logs, the same
supervisor in runner.py. The lab renders the whole stack file into the run folder,
`runs/<RUN>/stack.run.json`, and deploys it with `docker stack deploy`: stack deploy supports
neither `extends` nor profiles, so the Compose file's `task` template cannot be reused as it is,
and the host side cannot read that YAML without a YAML library. `swarm_render.TRAINER` is the same
trainer block built from the task contract (task.py), and a unit test holds it to
docker-compose.yml's `x-trainer` key by key.

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
engine where the lab knows it (swarm_nodes.sim_node_engines), else their logs through `docker service logs`.
Every service uses `endpoint_mode: dnsrr`: a service name resolves to its task's own address, as
TF_CONFIG needs, with no virtual IP (which needs IPVS, missing from some kernels, this one's included).
The stack file is render.py's, the placement and what crosses nodes nodes.py's, the stack's
removal teardown.py's, and chaos's partition link.py's (all in this folder); this module is the
Backend that runs the stack and reads its tasks.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

from tflab.backends import userscript
from tflab.backends.swarm.link import set_link
from tflab.backends.swarm.nodes import (
    Placement,
    check_swarm,
    engine_command,
    kernel_encrypts,
    node_engine_map,
    place,
    push,
    sim_node_engines,
)
from tflab.backends.swarm.render import NOT_APPLIED, STACK_FILE, SwarmNode, check_names, render_stack, stack_name
from tflab.backends.swarm.teardown import REMOVAL_SECONDS, remove_stack
from tflab.core.cluster import Cluster
from tflab.core.commands import lab_command
from tflab.core.errors import LabError
from tflab.core.explain import VANISHED
from tflab.core.runfolder import OUTPUT, write_json, write_whole
from tflab.core.settings import Settings
from tflab.core.stacks import STACKS_SIGNAL
from tflab.engine import docker, dockerswarm, labels

NO_CONTAINER_EXIT = 125  # a task that never got a container, as `docker run` reports its own failures
RESTART_SECONDS = 60
# Task states before a task ends; every other state (complete, failed, shutdown, rejected,
# orphaned, remove) is an end.
RUNNING_STATES = {"new", "allocated", "pending", "assigned", "accepted", "preparing", "ready",
                  "starting", "running"}


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



class SwarmStack:
    """The Backend (backends/base.py) for BACKEND=swarm: one stack per run, `tflab-<RUN>`."""

    name = "swarm"

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
        self.engines = {**sim_node_engines(),
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
        script_folder = userscript.stage(self.settings, self.run_dir) if self.settings.script else None
        write_json(path, render_stack(self.settings, self.cluster, self.image, self.run_dir, self.node,
                                      self.placement.nodes, self.encrypted, script_folder))
        result = dockerswarm.stack_deploy(str(path), self.stack, timeout=300)
        if result.returncode != 0:
            raise LabError(f"docker stack deploy failed: {docker.last_line(result)}")

    def restart(self) -> None:
        """A new task for every service (after all have ended): same spec, same logs. Waits until
        each has one, or the old tasks' exit codes would read as the new run's."""
        before = {service: task["ID"] for service, task in self._newest().items()}
        for task in self.tasks:
            result = dockerswarm.service_update_force(self.service(task), timeout=120)
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
            found = dockerswarm.service_ls(f"{labels.STACK_LABEL}={self.stack}", template="{{.ID}} {{.Name}}")
            for line in found.stdout.splitlines():
                short_id, name = line.split()
                if name.startswith(f"{self.stack}_"):
                    self._service_ids[short_id] = name[len(self.stack) + 1:]
        return self._service_ids

    def _all_tasks(self) -> list[dict]:
        ids = dockerswarm.stack_ps(self.stack).stdout.split()
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

    def _kill(self, tasks: list[str], signal: str | None = None) -> None:
        newest = self._newest()
        by_engine: dict[tuple[str, ...], list[str]] = {}
        for task in tasks:
            container = container_of(newest[task]) if task in newest else None
            if container and exit_code_of(newest[task]) is None:
                command = engine_command(newest[task].get("NodeID"), self.node.node_id, self.engines)
                by_engine.setdefault(tuple(command), []).append(container)
        for engine, containers in by_engine.items():
            docker.kill(containers, signal, timeout=60, engine=list(engine))

    def terminate(self, tasks: list[str]) -> None:
        self._kill(tasks, "SIGTERM")

    def stop(self, tasks: list[str]) -> None:
        self._kill(tasks)

    def dump_stacks(self, tasks: list[str]) -> None:
        """STACKS_SIGNAL to each task's running container, through its node's engine (the stack's
        `init` hands it on); the stacks land in the tasks' space, shared by every node."""
        self._kill(tasks, STACKS_SIGNAL)

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
        history = dockerswarm.stack_ps(self.stack, "{{.Name}}  {{.CurrentState}}  {{.Error}}").stdout
        write_whole(self.run_dir / OUTPUT, "\n".join(lines + ["--- swarm tasks ---", history]))

    def close(self) -> None:
        if not remove_stack(self.stack, [engine_command(node, self.node.node_id, self.engines)
                                         for node in set(self.placement.nodes.values()) - {self.node.node_id}]):
            print(f"tflab: stack {self.stack} was not gone {REMOVAL_SECONDS} s after `docker stack rm`; "
                  f"`{lab_command('down')}` removes what is left", flush=True)
        # Only names: the image keeps its own tag (make clean's), and one still in use stays.
        for name in self.pushed:
            docker.image_remove(name)
