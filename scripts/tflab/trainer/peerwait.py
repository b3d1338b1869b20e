"""A bound on how long a trainer waits for its peers, kept by a separate watchdog process.

TensorFlow waits forever for a task that never registers, and the wait happens inside its C++
rendezvous: measured here, neither a Python timer thread nor SIGTERM (TF installs its own handler)
ends it. So the trainer starts this tiny process (stdlib only, no TensorFlow) before it builds the
strategy and closes its stdin once the cluster is ready. If that does not happen in time, the
watchdog probes every peer, appends an `error` event naming the ones it cannot reach to the
trainer's log, and SIGKILLs the trainer.

    with PeerWait(60, {"worker-1": "worker-1:2222"}, log_path, "worker-0"):
        strategy = tf.distribute.MultiWorkerMirroredStrategy()

or, where the wait ends somewhere else (parameter_server connects at its first step),
`wait = PeerWait(...).start()` and later `wait.done()`.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tflab.core.schema import EventLog


class PeerWait:
    def __init__(self, seconds: float, peers: dict[str, str], log_path: Path, task: str):
        self.order = {"seconds": seconds, "peers": peers, "log": str(log_path), "task": task,
                      "trainer_pid": os.getpid()}
        self._watchdog: subprocess.Popen | None = None

    def start(self) -> "PeerWait":
        self._watchdog = subprocess.Popen([sys.executable, "-m", "tflab.trainer.peerwait", json.dumps(self.order)],
                                          stdin=subprocess.PIPE)
        return self

    def done(self) -> None:
        if self._watchdog is not None:
            assert self._watchdog.stdin is not None  # piped
            self._watchdog.stdin.close()  # EOF: the wait is over, one way or the other
            self._watchdog.wait()
            self._watchdog = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.done()


def unreachable_because(address: str, timeout: float = 2.0) -> str:
    """Why a TCP connection to host:port fails, or '' when it succeeds."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
        return ""
    except socket.gaierror:
        return "name does not resolve"
    except ConnectionRefusedError:
        return "connection refused"
    except OSError as error:
        return error.strerror or type(error).__name__


def give_up_message(seconds: float, peers: dict[str, str]) -> str:
    unreachable = [f"{name} ({address}: {why})" for name, address in peers.items()
                   if (why := unreachable_because(address))]
    if unreachable:
        return f"gave up after {seconds:g} s waiting for the cluster; could not reach {', '.join(unreachable)}"
    return (f"gave up after {seconds:g} s waiting for the cluster; every peer ({', '.join(peers)}) "
            "accepts connections but the cluster did not form")


def watch(order: dict) -> int:
    ready, _, _ = select.select([sys.stdin], [], [], order["seconds"])
    if ready:
        return 0  # EOF from the trainer: the cluster formed (or the trainer ended first)
    message = give_up_message(order["seconds"], order["peers"])
    log = EventLog(Path(order["log"]), order["task"])
    log.emit("error", message=message)
    log.close()
    print(f"[{order['task']}] {message}", file=sys.stderr, flush=True)
    os.kill(order["trainer_pid"], signal.SIGKILL)
    return 3


if __name__ == "__main__":
    sys.exit(watch(json.loads(sys.argv[1])))
