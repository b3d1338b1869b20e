"""The swarm stack file of a run (BACKEND=swarm): one service per task, rendered into the run folder.

Stack deploy supports neither `extends` nor profiles, so the Compose file's `task` template cannot
be reused as it is. `TRAINER` below is the trainer block built from the task contract (task.py),
and a unit test holds it to docker-compose.yml's `x-trainer` key by key. What a stack applies
differently from Compose is listed in backends/swarm/__init__.py's docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tflab.backends.compose import literal
from tflab.backends.userscript import script_service
from tflab.core import runfolder
from tflab.core import task as task_contract
from tflab.core.cluster import Cluster
from tflab.core.errors import LabError
from tflab.core.runfolder import container_user
from tflab.core.settings import Settings
from tflab.engine import labels

STACK_FILE = "stack.run.json"  # the run's whole stack, in its folder
STACK_FILE_VERSION = "3.9"  # the newest format docker stack deploy reads; `init` needs 3.7
CAP_DROP_API = (1, 41)  # the engine API from which a service's cap_drop is applied (Docker 20.10)
NOT_APPLIED = "no-new-privileges (stack deploy ignores security_opt)"
MAX_SERVICE_NAME = 63  # swarm service names are DNS labels

# docker-compose.yml's x-trainer block, as a stack service (see backends/swarm/__init__.py's docstring).
TRAINER: dict[str, Any] = {  # a Compose service, as JSON
    "init": True,  # a real PID 1, so signals reach the trainer and its watchdog is reaped
    "read_only": True,
    "cap_drop": ["ALL"],
    "environment": dict(task_contract.ENV),
    "command": list(task_contract.COMMAND),
}
RUN_MOUNT = task_contract.RUN_MOUNT
TMPFS_MOUNT = task_contract.TMPFS_MOUNT  # HOME and scratch space; the tasks' space is the only other writable path


@dataclass(frozen=True)
class SwarmNode:
    node_id: str
    engine: str  # the engine's version, for the run's description
    api: tuple[int, int]  # the engine's API version
    hostname: str = ""

    @property
    def applies_cap_drop(self) -> bool:
        return self.api >= CAP_DROP_API


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
            # Of the run folder, the tasks' space (writable) and config.json (read-only), as on Compose.
            "volumes": [{"type": "bind", "source": str(run_dir / runfolder.TASKS), "target": RUN_MOUNT},
                        {"type": "bind", "source": str(run_dir / runfolder.CONFIG), "target": task_contract.CONFIG,
                         "read_only": True},
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
            service["environment"] = {**service["environment"], **script.pop("environment")}
            service.update(script)
        if not node.applies_cap_drop:
            del service["cap_drop"]
        services[task] = service
    # No route out and nothing published: TensorFlow's gRPC servers are unauthenticated.
    network = {"driver": "overlay", "internal": settings.network == "internal", "labels": marks,
               **({"driver_opts": {"encrypted": ""}} if encrypted else {})}
    # stack deploy interpolates `$` as Compose does: ARGS and paths are escaped to reach the task as given.
    return literal({"version": STACK_FILE_VERSION, "services": services, "networks": {"cluster": network}})

