"""`make swarm-sim NODES=3` / `make swarm-sim-down`: a multi-node Docker Swarm simulated on this host.

This host's engine is the manager; NODES-1 more engines run on this host, each in a network
namespace of its own with its own data-root, exec-root, pidfile, socket and daemon.json under
SIM_ROOT/<node>/, and join as workers. Their addresses are on a bridge of the lab's own
(SUBNET, the host .1, node i .(10+i)); the namespaces have no default route, so the nodes reach
one another and this host, never anything beyond it. A registry (Debian's `docker-registry`,
installed if missing) listens on the bridge address over TLS with a certificate of the sim's own
CA, which every engine trusts through /etc/docker/certs.d/<registry>/ca.crt: the host engine
pushes to it without its daemon.json being edited and reloaded (which `insecure-registries`
would need), and the namespaced engines read the same file, since they share this host's
filesystem. Sharing the filesystem is also what makes the run folder reachable from every node
at the same path, as an NFS mount would be on a real swarm (docs/swarm.md).

Traps met when this was first done by hand: `ip netns exec` remounts /sys,
which drops the cgroup v1 mounts dockerd needs, so the launcher mounts them again inside the
namespace; dockerd reads the host's daemon.json unless given `--config-file`; node-to-node
traffic crosses the host's FORWARD chain, whose policy Docker sets to DROP, so one accept rule
for the bridge is added (and removed). The kernel here has no IPVS: services use dnsrr (swarm.py).

STATE (SIM_ROOT/state.json) records every id the sim made, written as each thing is made, so
`swarm-sim-down` (and a failed `swarm-sim`) removes exactly those and leaves the host engine's
swarm as it found it: left if the sim created the swarm, kept (without the sim's nodes) if the
host was a manager already.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tflab.backends.swarm.nodes import SIM_STATE
from tflab.console import say
from tflab.core.errors import LabError
from tflab.core.runfolder import write_json
from tflab.core.settings import Settings
from tflab.engine import docker, dockerswarm
from tflab.engine.docker import run_quiet

STATE = SIM_STATE  # the lab reads the nodes' engines from it (swarm_nodes.sim_node_engines)
SIM_ROOT = STATE.parent
BRIDGE = "tflabsim0"
SUBNET = ipaddress.ip_network("198.18.213.0/24")  # RFC 2544's benchmarking range: no one's real network
PREFIX = SUBNET.prefixlen
HOST_ADDRESS = str(SUBNET.network_address + 1)
REGISTRY_PORT = 5000
REGISTRY = f"{HOST_ADDRESS}:{REGISTRY_PORT}"
CERTS_D = Path("/etc/docker/certs.d") / REGISTRY
ENGINE_READY_SECONDS = 60
REGISTRY_READY_SECONDS = 30
NODES_READY_SECONDS = 60
STOP_SECONDS = 30
INSTALL_SECONDS = 300
FOREIGN_SERVICES_SECONDS = 120
CGROUP_V1 = ("cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids")
# Run inside the node's network namespace, in a UTS namespace of its own: its hostname, the cgroup
# mounts `ip netns exec` took away, then dockerd in place of the shell (so the recorded pid is its).
LAUNCHER = """set -e
hostname "$NODE"
mount -t tmpfs cgroup /sys/fs/cgroup
for hierarchy in {hierarchies}; do
  mkdir -p /sys/fs/cgroup/$hierarchy
  mount -t cgroup -o $hierarchy cgroup /sys/fs/cgroup/$hierarchy
done
mkdir -p /sys/fs/cgroup/systemd
mount -t cgroup -o none,name=systemd cgroup /sys/fs/cgroup/systemd
exec dockerd --config-file "$NODE_DIR/daemon.json"
""".format(hierarchies=" ".join(CGROUP_V1))





def node_name(index: int) -> str:
    return f"tflab-sim-{index}"


def node_address(index: int) -> str:
    return str(SUBNET.network_address + 10 + index)


def node_dir(name: str) -> Path:
    return SIM_ROOT / name


def socket_of(name: str) -> str:
    return f"unix://{node_dir(name) / 'docker.sock'}"


# -- the state file ------------------------------------------------------------------------------


def read_state() -> dict | None:
    try:
        return json.loads(STATE.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise LabError(f"{STATE} cannot be read ({error}); remove what it lists by hand, then the file") from None


def save(state: dict) -> None:
    SIM_ROOT.mkdir(parents=True, exist_ok=True)
    temporary = STATE.with_suffix(".tmp")
    write_json(temporary, state)
    temporary.replace(STATE)





# -- checks --------------------------------------------------------------------------------------


def check_can_run() -> None:
    """Refuses, in one line, where the sim cannot run; nothing is made before this passes."""
    if os.geteuid() != 0:
        raise LabError("make swarm-sim needs root (it creates network namespaces, a bridge and Docker engines); "
                       "run it as root, e.g. `sudo make swarm-sim`")
    for tool, why in (("ip", "iproute2, for network namespaces"), ("dockerd", "Docker Engine's daemon"),
                      ("iptables", "to let the nodes reach one another"), ("unshare", "util-linux"),
                      ("openssl", "for the registry's certificate"), ("docker", "the Docker CLI")):
        if shutil.which(tool) is None:
            raise LabError(f"make swarm-sim needs `{tool}` ({why}), and it is not on PATH")
    probe = run_quiet(["ip", "netns", "list"])
    if probe.returncode != 0:
        raise LabError("make swarm-sim needs network namespaces, and `ip netns list` failed: "
                       f"{docker.last_line(probe)}")
    if not Path("/sys/fs/cgroup/memory").is_dir():
        raise LabError("make swarm-sim needs cgroup v1 hierarchies under /sys/fs/cgroup (as this engine's "
                       "`docker info` Cgroup Version 1); on a cgroup v2 host use real machines instead")
    routes = run_quiet(["ip", "-4", "route", "show"]).stdout
    for line in routes.splitlines():
        destination = line.split()[0]
        if destination == "default" or line.split()[2:3] == [BRIDGE]:
            continue
        try:
            if ipaddress.ip_network(destination, strict=False).overlaps(SUBNET) and BRIDGE not in line:
                raise LabError(f"make swarm-sim uses {SUBNET}, and this host already routes {destination} "
                               f"({line.strip()}); it cannot run here without a clash")
        except ValueError:
            continue


def host_swarm() -> dict:
    info = docker.info_format("{{json .Swarm}}", timeout=30)
    if info.returncode != 0:
        raise LabError(f"Docker is not running ({docker.last_line(info)}); make swarm-sim needs this host's engine")
    return json.loads(info.stdout)


# -- up ------------------------------------------------------------------------------------------


def up(settings: Settings) -> int:
    check_can_run()
    if read_state() is not None:
        raise LabError(f"a simulated swarm is up already ({STATE}); `make swarm-sim-down` removes it first")
    swarm = host_swarm()
    if swarm.get("LocalNodeState") == "active" and not swarm.get("ControlAvailable"):
        raise LabError("this engine is a worker of another swarm; make swarm-sim needs it to be a manager or in "
                       "no swarm (it does not leave a swarm it did not make)")
    if swarm.get("LocalNodeState") == "active" and ipaddress.ip_address(swarm.get("NodeAddr") or "0.0.0.0").is_loopback:
        raise LabError(f"this engine's swarm advertises {swarm['NodeAddr']}, which no other node can reach; make "
                       "swarm-sim joins its nodes to an existing swarm only at a reachable address (or `docker swarm "
                       "leave --force` first, and it makes its own)")
    started = time.monotonic()
    state = {"subnet": str(SUBNET), "bridge": None, "forward_rule": None, "nodes": [], "registry": None,
             "host_swarm_before": swarm.get("LocalNodeState", "inactive"), "host_node_id": None,
             "swarm_created": False}
    save(state)
    try:
        install_registry()
        make_bridge(state)
        for index in range(1, settings.nodes):
            start_engine(state, index)
        start_registry(state)
        join_swarm(state)
    except BaseException as error:  # an interrupt too: nothing half-made is left behind
        say(f"swarm-sim failed ({error}); removing what it made")
        remove(state)
        if isinstance(error, LabError):
            raise
        raise LabError(f"swarm-sim failed: {error}") from None
    seconds = time.monotonic() - started
    names = ", ".join(["this host (manager)"] + [f"{n['name']} ({n['address']})" for n in state["nodes"]])
    say(f"simulated swarm of {settings.nodes} nodes up in {seconds:.1f} s: {names}")
    say(f"registry {REGISTRY} (TLS, the sim's CA in {CERTS_D}); every node shares this host's files")
    say(f"run on it: make stack-up WORKERS={settings.nodes} REGISTRY={REGISTRY} SHARED_RUNS_DIR=1")
    say("remove it: make swarm-sim-down")
    return 0


def install_registry() -> None:
    if shutil.which("docker-registry"):
        return
    say("installing Debian's docker-registry package (apt-get)")
    try:
        result = run_quiet(["apt-get", "install", "-y", "-q", "docker-registry"], timeout=INSTALL_SECONDS,
                           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    except (OSError, subprocess.TimeoutExpired) as error:
        raise LabError(f"apt-get install docker-registry did not finish: {error}") from None
    if result.returncode != 0 or not shutil.which("docker-registry"):
        raise LabError(f"apt-get install docker-registry failed: {docker.last_line(result)}")


def must(command: list[str], what: str, timeout: float = 60) -> str:
    result = run_quiet(command, timeout=timeout)
    if result.returncode != 0:
        raise LabError(f"{what} failed: {docker.last_line(result)}")
    return result.stdout


def make_bridge(state: dict) -> None:
    state["bridge"] = BRIDGE
    save(state)
    must(["ip", "link", "add", BRIDGE, "type", "bridge"], f"creating bridge {BRIDGE}")
    must(["ip", "addr", "add", f"{HOST_ADDRESS}/{PREFIX}", "dev", BRIDGE], "addressing the bridge")
    must(["ip", "link", "set", BRIDGE, "up"], "bringing the bridge up")
    # Bridged traffic between two namespaced nodes passes the host's FORWARD chain (br_netfilter),
    # whose policy Docker sets to DROP.
    rule = ["FORWARD", "-i", BRIDGE, "-o", BRIDGE, "-j", "ACCEPT"]
    must(["iptables", "-I", *rule], "adding the bridge's FORWARD rule")
    state["forward_rule"] = rule
    save(state)


def start_engine(state: dict, index: int) -> None:
    name, address = node_name(index), node_address(index)
    folder = node_dir(name)
    node: dict[str, Any] = {"name": name, "netns": name, "veth": f"tflabsim{index}h", "address": address,
            "dir": str(folder), "socket": socket_of(name), "pid": None, "node_id": None}
    state["nodes"].append(node)
    save(state)
    must(["ip", "netns", "add", name], f"creating network namespace {name}")
    inner = f"tflabsim{index}n"
    must(["ip", "link", "add", node["veth"], "type", "veth", "peer", "name", inner], f"creating {name}'s veth")
    must(["ip", "link", "set", inner, "netns", name], f"moving {name}'s veth")
    must(["ip", "link", "set", node["veth"], "master", BRIDGE, "up"], f"plugging {name} into {BRIDGE}")
    inside = ["ip", "netns", "exec", name]
    must([*inside, "ip", "link", "set", inner, "name", "eth0"], f"naming {name}'s interface")
    must([*inside, "ip", "addr", "add", f"{address}/{PREFIX}", "dev", "eth0"], f"addressing {name}")
    must([*inside, "ip", "link", "set", "eth0", "up"], f"bringing {name}'s link up")
    must([*inside, "ip", "link", "set", "lo", "up"], f"bringing {name}'s loopback up")
    for part in ("data", "exec"):
        (folder / part).mkdir(parents=True, exist_ok=True)
    daemon = {
        "data-root": str(folder / "data"), "exec-root": str(folder / "exec"), "pidfile": str(folder / "docker.pid"),
        "hosts": [node["socket"]], "cgroup-parent": f"/{name}",
        **{key: value for key, value in host_daemon_json().items()
           if key in ("storage-driver", "mtu", "log-driver", "log-opts")},
    }
    write_json(folder / "daemon.json", daemon)
    (folder / "launch.sh").write_text(LAUNCHER)
    with open(folder / "dockerd.log", "ab") as log:
        process = subprocess.Popen(["ip", "netns", "exec", name, "unshare", "--uts", "sh", str(folder / "launch.sh")],
                                   env={**os.environ, "NODE": name, "NODE_DIR": str(folder)},
                                   stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    node["pid"] = process.pid
    save(state)
    wait_for(lambda: node_answers(node) or process.poll() is not None, ENGINE_READY_SECONDS,
             f"{name}'s engine did not answer")
    if process.poll() is not None:
        tail = (folder / "dockerd.log").read_text(errors="replace").strip().splitlines()[-1:]
        raise LabError(f"{name}'s dockerd exited ({tail[0] if tail else 'no log'})")


def host_daemon_json() -> dict:
    """The host engine's storage driver and MTU, so the nodes behave like it (fuse-overlayfs here)."""
    try:
        return json.loads(Path("/etc/docker/daemon.json").read_text())
    except (OSError, ValueError):
        return {}


def node_answers(node: dict) -> bool:
    try:
        return docker.engine_version(docker.engine_at(node["socket"]), timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def start_registry(state: dict) -> None:
    folder = SIM_ROOT / "registry"
    (folder / "data").mkdir(parents=True, exist_ok=True)
    registry: dict[str, Any] = {"dir": str(folder), "pid": None, "certs_d": str(CERTS_D), "address": REGISTRY}
    state["registry"] = registry
    save(state)
    key, cert = folder / "ca.key", folder / "ca.crt"
    must(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30", "-keyout", str(key),
          "-out", str(cert), "-subj", "/CN=tflab swarm-sim CA"], "making the registry's CA")
    must(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(folder / "tls.key"),
          "-out", str(folder / "tls.csr"), "-subj", f"/CN={HOST_ADDRESS}"], "making the registry's key")
    (folder / "san.ext").write_text(f"subjectAltName=IP:{HOST_ADDRESS}\n")
    must(["openssl", "x509", "-req", "-in", str(folder / "tls.csr"), "-CA", str(cert), "-CAkey", str(key),
          "-CAcreateserial", "-days", "30", "-extfile", str(folder / "san.ext"), "-out", str(folder / "tls.crt")],
         "signing the registry's certificate")
    config = {"version": 0.1, "log": {"level": "warn"},
              "storage": {"filesystem": {"rootdirectory": str(folder / "data")}, "delete": {"enabled": True}},
              "http": {"addr": REGISTRY, "secret": os.urandom(16).hex(),
                       "tls": {"certificate": str(folder / "tls.crt"), "key": str(folder / "tls.key")}}}
    write_json(folder / "config.yml", config)  # JSON is YAML
    CERTS_D.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(cert, CERTS_D / "ca.crt")
    with open(folder / "registry.log", "ab") as log:
        process = subprocess.Popen(["docker-registry", "serve", str(folder / "config.yml")], stdin=subprocess.DEVNULL,
                                   stdout=log, stderr=log, start_new_session=True)
    registry["pid"] = process.pid
    save(state)
    wait_for(lambda: registry_answers(cert) or process.poll() is not None, REGISTRY_READY_SECONDS,
             f"the registry did not answer on {REGISTRY}")
    if process.poll() is not None:
        raise LabError(f"the registry exited: see {folder / 'registry.log'}")


def registry_answers(ca: Path) -> bool:
    import ssl
    import urllib.request

    try:
        context = ssl.create_default_context(cafile=str(ca))
        with urllib.request.urlopen(f"https://{REGISTRY}/v2/", timeout=5, context=context) as answer:
            return answer.status == 200
    except OSError:
        return False


def join_swarm(state: dict) -> None:
    if state["host_swarm_before"] != "active":
        must(dockerswarm.swarm_init_command(HOST_ADDRESS, f"{HOST_ADDRESS}:2377"), "docker swarm init")
        state["swarm_created"] = True
        save(state)
        manager = f"{HOST_ADDRESS}:2377"
    else:  # the host's own swarm: the nodes join it at its advertised address, through the bridge
        manager = host_swarm()["RemoteManagers"][0]["Addr"]
        host = manager.rsplit(":", 1)[0]
        for node in state["nodes"]:
            must(["ip", "netns", "exec", node["netns"], "ip", "route", "add", f"{host}/32", "via", HOST_ADDRESS],
                 f"routing {node['name']} to the manager {host}")
    state["host_node_id"] = host_swarm()["NodeID"]
    token = must(dockerswarm.swarm_join_token_command(), "docker swarm join-token").strip()
    for node in state["nodes"]:
        must(dockerswarm.swarm_join_command(token, node["address"], manager, engine=docker.engine_at(node["socket"])),
             f"{node['name']} joining the swarm", timeout=120)
        node["node_id"] = json.loads(must(dockerswarm.swarm_info_command(docker.engine_at(node["socket"])),
                                          f"{node['name']}'s swarm state"))["NodeID"]
        save(state)
    ids = {node["node_id"] for node in state["nodes"]}
    wait_for(lambda: ids <= ready_nodes(), NODES_READY_SECONDS, "the nodes were not Ready")


def ready_nodes() -> set[str]:
    found = dockerswarm.node_ls("{{.ID}} {{.Status}}")
    return {line.split()[0] for line in found.stdout.splitlines() if line.split()[1:] == ["Ready"]}


def wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise LabError(f"{what} within {seconds:g} s")
        time.sleep(0.3)


# -- down ----------------------------------------------------------------------------------------


def down(settings: Settings) -> int:
    if os.geteuid() != 0:
        raise LabError("make swarm-sim-down needs root, as make swarm-sim did")
    state = read_state()
    if state is None:
        say(f"no simulated swarm is up (no {STATE}); nothing to remove")
        return 0
    started = time.monotonic()
    if state.get("swarm_created"):
        # Leaving the swarm the sim made would take every service on it along: wait for others' to end.
        wait_for(lambda: not dockerswarm.service_ls().stdout.split(), FOREIGN_SERVICES_SECONDS,
                 "services still run on the simulated swarm (`docker service ls`); remove them (`make down`), "
                 "then `make swarm-sim-down` again: they were not gone")
    left = remove(state)
    if left:
        raise LabError(f"swarm-sim-down could not remove: {'; '.join(left)} (kept {STATE} for another try)")
    say(f"simulated swarm removed in {time.monotonic() - started:.1f} s; this engine's swarm is "
        f"{host_swarm().get('LocalNodeState')}, as before the sim")
    return 0


def remove(state: dict) -> list[str]:
    """Removes what `state` records, last made first; returns what could not be removed (and then
    keeps the state file, so another `swarm-sim-down` tries again)."""
    left: list[str] = []
    for node in state.get("nodes", []):
        if node.get("pid") and alive(node["pid"]):
            engine = docker.engine_at(node["socket"])
            dockerswarm.swarm_leave(engine, timeout=60)
            containers = docker.all_containers(engine)
            if containers:
                docker.remove_containers(*containers, timeout=120, volumes=False, engine=engine)
    if state.get("swarm_created"):
        result = dockerswarm.swarm_leave(timeout=60)
        if result.returncode != 0 and host_swarm().get("LocalNodeState") != "inactive":
            left.append(f"this engine's swarm ({docker.last_line(result)})")
    else:
        for node in state.get("nodes", []):
            if node.get("node_id"):
                dockerswarm.node_remove(node["node_id"], timeout=60)
    for node in state.get("nodes", []):
        if node.get("pid") and not stop(node["pid"]):
            left.append(f"{node['name']}'s dockerd (pid {node['pid']})")
            continue
        if run_quiet(["ip", "netns", "list"]).stdout.split().count(node["netns"]):
            run_quiet(["ip", "netns", "delete", node["netns"]])  # takes its end of the veth, and so both
        if link_exists(node["veth"]):
            run_quiet(["ip", "link", "delete", node["veth"]])
        shutil.rmtree(node["dir"], ignore_errors=True)
    registry = state.get("registry")
    if registry:
        if registry.get("pid") and not stop(registry["pid"]):
            left.append(f"the registry (pid {registry['pid']})")
        shutil.rmtree(registry["certs_d"], ignore_errors=True)
        shutil.rmtree(registry["dir"], ignore_errors=True)
    if state.get("forward_rule"):
        run_quiet(["iptables", "-D", *state["forward_rule"]])
    if state.get("bridge") and link_exists(state["bridge"]):
        run_quiet(["ip", "link", "delete", state["bridge"]])
    if not left:
        STATE.unlink(missing_ok=True)
        try:
            SIM_ROOT.rmdir()
        except OSError:
            pass
    return left


def alive(pid: int) -> bool:
    """Whether the recorded pid is still one of the sim's processes (a dockerd or the registry),
    and not a zombie or a later process that reuses its number."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    # argv[0] passes through ip, unshare and sh (each execs the next) before it is dockerd.
    return status != "Z" and os.path.basename(command[0]) in (b"dockerd", b"docker-registry", b"ip", b"unshare", b"sh")


def stop(pid: int) -> bool:
    """SIGTERM, then SIGKILL after STOP_SECONDS; True once the process is gone. Only the pid the sim
    recorded: dockerd (which stops its own containerd) or the registry."""
    for number, seconds in ((signal.SIGTERM, STOP_SECONDS), (signal.SIGKILL, 5)):
        if not alive(pid):
            return True
        try:
            os.kill(pid, number)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                reaped, _ = os.waitpid(pid, os.WNOHANG)  # our own child, when up fails
            except ChildProcessError:
                reaped = 0
            if reaped or not alive(pid):
                return True
            time.sleep(0.2)
    return not alive(pid)


def link_exists(name: str) -> bool:
    return run_quiet(["ip", "link", "show", name]).returncode == 0
