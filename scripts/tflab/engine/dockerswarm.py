"""A swarm's verbs on the Docker CLI (nodes, services, stacks, joining and leaving): the swarm
backend's and `make swarm-sim`'s, each spelled here on docker.py's `run` and `command`, so the
engine's docker modules stay the one door to the CLI (test_walls.py holds that).

    dockerswarm.stack_deploy(path, stack)    # a CompletedProcess, never an exception for a non-zero exit
    dockerswarm.node_ls("{{.ID}}")
"""

from __future__ import annotations

import subprocess

from tflab.engine import docker


def node_ls(template: str) -> subprocess.CompletedProcess:
    return docker.run("node", "ls", "--format", template)


def node_remove(node_id: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return docker.run("node", "rm", "--force", node_id, timeout=timeout)


def swarm_init_command(address: str, listen: str) -> list[str]:
    return docker.command("swarm", "init", "--advertise-addr", address, "--listen-addr", listen)


def swarm_join_token_command() -> list[str]:
    return docker.command("swarm", "join-token", "--quiet", "worker")


def swarm_join_command(token: str, address: str, manager: str, engine: list[str]) -> list[str]:
    return docker.command("swarm", "join", "--token", token, "--advertise-addr", address, "--listen-addr",
                          f"{address}:2377", manager, engine=engine)


def swarm_info_command(engine: list[str]) -> list[str]:
    return docker.command("info", "--format", "{{json .Swarm}}", engine=engine)


def swarm_leave(engine: list[str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return docker.run("swarm", "leave", "--force", timeout=timeout, engine=engine)


def service_ls(*label_filters: str, template: str | None = None) -> subprocess.CompletedProcess:
    """`docker service ls`: the ids (or `template`'s lines) of the services with these labels."""
    filters = [arg for label in label_filters for arg in ("--filter", f"label={label}")]
    return docker.run("service", "ls", *(["--quiet"] if template is None else []), *filters,
                      *(["--format", template] if template else []))


def service_inspect(ids: list[str], template: str) -> subprocess.CompletedProcess:
    return docker.run("service", "inspect", "--format", template, *ids)


def service_update_force(service: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """A new task for the service, same spec; returns at once."""
    return docker.run("service", "update", "--force", "--detach", "--quiet", service, timeout=timeout)


def service_remove(*services: str) -> subprocess.CompletedProcess:
    return docker.run("service", "rm", *services)


def stack_deploy(path: str, stack: str, timeout: float = 300) -> subprocess.CompletedProcess:
    # --resolve-image never: the image is local, and no registry need be asked for its digest.
    return docker.run("stack", "deploy", "--resolve-image", "never", "--compose-file", path, stack, timeout=timeout)


def stack_ps(stack: str, template: str | None = None) -> subprocess.CompletedProcess:
    """A stack's tasks, old ones included: full ids, or `template`'s lines."""
    return docker.run("stack", "ps", "--no-trunc", *(["--format", template] if template else ["--quiet"]), stack)


def stack_remove(stack: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return docker.run("stack", "rm", stack, timeout=timeout)
