"""The run's reaper: nothing of a run outlives the lab that owns it by more than a few seconds,
whatever ends the lab (SIGKILL from a CI job's timeout included).

    guard = reaper.watch(run_dir)      # right after the run is claimed, before anything starts
    ...                                # the run
    guard.release()                    # after the lab removed everything itself: the reaper exits

Why a process and not a container: testcontainers' Ryuk is a container that removes what carries
its session's labels once the client's TCP connection drops. The lab does the same with a small
process of the host's Python, started in its own session (setsid), which reads a pipe whose only
writer is the lab. When the lab ends, however it ends, the kernel closes that pipe, so the reaper
sees end-of-file at once: no polling, no pid that could be reused. Its own session puts it
outside the lab's process group, which a CI timeout kills whole (and outside the terminal's, so a
Ctrl-C or a closed terminal does not reach it). A container would need the Docker socket mounted
into it (root on the host, for a process that only has to run `docker rm`), a port for the lab to
hold open, and an image with a Docker client in it: there is no registry here, and the base image
has none. The process's limit: whoever kills every process of the host or of a cgroup (a CI job
run in its own container, `systemctl stop`) kills it too; Ryuk survives that, this does not.

The reaper removes only what carries this run's folder label (labels.RUN_DIR, the folder's
absolute path: one claimed folder, one run), and the process groups of BACKEND=local's tasks the
lab told it of, with any process whose environment names the run's config.json (a daemon a task
left), and only when the lab ended without releasing it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tflab.core import orphans, processes, runfolder
from tflab.engine import docker, dockerswarm, labels

RELEASED = b"released\n"  # the lab's last word when it removed everything itself
SETTLE_SECONDS = 3.0  # the reaper stops once nothing of the run has been seen for this long
GIVE_UP_SECONDS = 120.0  # ... or after this long: a `compose up` the lab left may still be creating


class Guard:
    """The lab's end of the pipe."""

    def __init__(self, process: subprocess.Popen | None):
        self.process = process

    def watch_group(self, pid: int) -> None:
        """A task process that leads its own process group (BACKEND=local): killed with its group
        if the lab dies. Its start time goes along, so a pid reused meanwhile is left alone."""
        if self.process is None or self.process.stdin is None:  # stdin: piped where there is a process
            return
        try:
            self.process.stdin.write(f"group {pid} {processes.process_start(pid)}\n".encode())
            self.process.stdin.flush()
        except OSError:
            pass

    def release(self) -> None:
        """The run removed itself: the reaper exits without touching anything."""
        process, self.process = self.process, None
        if process is None or process.stdin is None:
            return
        try:
            process.stdin.write(RELEASED)
            process.stdin.close()
        except OSError:  # it died: nothing to release
            pass
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def watch(run_dir: Path) -> Guard:
    """Starts the reaper of this run; a Guard that does nothing where it cannot start (the lab
    still removes its run itself on every end but SIGKILL)."""
    code_root = str(Path(__file__).resolve().parents[2])  # the folder holding the tflab package
    try:
        process = subprocess.Popen([sys.executable, "-m", "tflab.engine.reaper", str(run_dir)], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd="/",
                                   env={**os.environ, "PYTHONPATH": code_root},
                                   start_new_session=True)
    except OSError:
        return Guard(None)
    return Guard(process)


def _docker(verb, *args, empty=""):
    """A docker.py verb whose failure to run at all (no docker, no answer in its time) reads as
    finding nothing: the reaper tries again until it gives up."""
    try:
        return verb(*args)
    except (OSError, subprocess.TimeoutExpired):
        return empty


def leftovers(run_dir: str) -> tuple[list[str], list[str], list[str]]:
    """The run's containers, swarm services and networks, by its folder label alone."""
    label = f"{labels.RUN_DIR}={run_dir}"
    return (_docker(docker.labelled_containers, label, empty=[]),
            _docker(lambda: dockerswarm.service_ls(label).stdout.split(), empty=[]),
            _docker(docker.labelled_networks, label, empty=[]))


def reap(run_dir: str) -> None:
    """Removes the run's objects until none has been seen for SETTLE_SECONDS: a `compose up` the
    lab started may outlive it by a moment and create one more."""
    quiet_since = time.monotonic()
    give_up = time.monotonic() + GIVE_UP_SECONDS
    while time.monotonic() < give_up and time.monotonic() - quiet_since < SETTLE_SECONDS:
        containers, services, networks = leftovers(run_dir)
        if containers:
            _docker(lambda: docker.remove_containers(*containers, timeout=60))
        if services:
            _docker(dockerswarm.service_remove, *services)
        if networks:
            _docker(docker.network_remove, *networks)
        if containers or services or networks:
            quiet_since = time.monotonic()
        time.sleep(0.5)


def kill_groups(groups: list[tuple[int, str]]) -> None:
    """SIGKILL to each task's process group whose leader is gone or is still the same process."""
    for pid, started in groups:
        now = processes.process_start(pid)
        if now is not None and now not in ("ended", started):
            continue  # the pid is another process's now
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


MARK_ROUNDS = 10  # a daemon that forks again is found again, its child keeping the mark


def kill_marked(run_dir: str) -> None:
    """SIGKILL to every process whose environment names this run's config.json: the lab sets it in
    every local task's (TFLAB_CONFIG), and a daemon a task started keeps it, unless it cleared it.
    The lab's subreaper ends those while it lives; this is for a lab killed with SIGKILL."""
    for _ in range(MARK_ROUNDS):
        found = orphans.marked(f"TFLAB_CONFIG={os.path.join(run_dir, runfolder.CONFIG)}")
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.2)


def main(argv: list[str]) -> int:
    run_dir = argv[0]
    groups = []
    for line in sys.stdin.buffer:  # blocks until the lab closes its end, or dies
        if line == RELEASED:
            return 0
        words = line.decode(errors="replace").split()
        if len(words) == 3 and words[0] == "group" and words[1].isdigit():
            groups.append((int(words[1]), words[2]))
    kill_groups(groups)
    if groups:  # BACKEND=local: what its tasks left running on their own, by the run's mark (core/orphans.py)
        kill_marked(run_dir)
    reap(run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
