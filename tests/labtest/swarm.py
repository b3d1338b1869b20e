"""A swarm for the tests of BACKEND=swarm. The lab never changes the engine's swarm state, so the
tests do: a one-node swarm where none is active, and, whatever happens, the engine left as found."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=120)


def swarm_state() -> str:
    return docker("info", "--format", "{{.Swarm.LocalNodeState}}").stdout.strip()


def init_swarm() -> None:
    first = docker("swarm", "init", check=False)
    if first.returncode != 0:
        # "could not choose an IP address to advertise": a host with several addresses; one node
        # needs none of them.
        second = docker("swarm", "init", "--advertise-addr", "127.0.0.1", check=False)
        assert second.returncode == 0, f"docker swarm init failed: {first.stderr}{second.stderr}"


@contextlib.contextmanager
def active_swarm() -> Iterator[None]:
    before = swarm_state()
    if before != "active":
        init_swarm()
    try:
        yield
    finally:
        if before != "active":
            docker("swarm", "leave", "--force", check=False)
        assert swarm_state() == before, "the test did not leave the engine's swarm as it found it"


def stack_leftovers(stack: str) -> dict[str, list[str]]:
    """What of a stack is still on the engine after its run: it should be nothing."""
    label = f"label=com.docker.stack.namespace={stack}"
    return {"stacks": [s for s in docker("stack", "ls", "--format", "{{.Name}}").stdout.split() if s == stack],
            "containers": docker("ps", "--all", "--quiet", "--filter", label).stdout.split(),
            "networks": docker("network", "ls", "--quiet", "--filter", label).stdout.split()}
