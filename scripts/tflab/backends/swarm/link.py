"""make chaos's partition on a swarm: a task cut off from its stack's network, and reconnected."""

from __future__ import annotations

import json
import subprocess

from tflab.engine import docker

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

