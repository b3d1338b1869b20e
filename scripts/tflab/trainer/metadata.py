"""A stand-in for GCE's metadata server on the run's own network: make chaos SCENARIO=preempt NOTICE=gce.

    TFLAB_METADATA_TASKS=worker-0,worker-1 TFLAB_METADATA_CONTROL=/lab/metadata python -m tflab.metadata

Google Cloud tells a VM it is about to go through its metadata server: `instance/preempted`
turns TRUE (spot and preemptible VMs) and `instance/maintenance-event` turns
TERMINATE_ON_HOST_MAINTENANCE. TensorFlow's PreemptionCheckpointHandler reads exactly these, at
`http://$GCE_METADATA_IP/computeMetadata/v1/...` with the header `Metadata-Flavor: Google`, and
decides it runs on Google Cloud when `instance/hostname` answers 200
(tensorflow/python/distribute/failure_handling/failure_handling_util.py). This server answers
those the way GCE does, one VM per port: task i of TFLAB_METADATA_TASKS is port BASE_PORT + i,
so each task's GCE_METADATA_IP is `metadata:<its port>` and each one hears only of its own
preemption. A request without the header gets 403, as on GCE; any other path 404.

What a VM is told comes from `<control>/<task>.json` (`{"preempted": true}`), read at every
request, which the lab writes at the moment of the fault and removes when the task has gone
(the VM that replaces a preempted one is told nothing). Standard library only: it runs in the
trainer image, its own container, with no route out (the cluster network is internal).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BASE_PORT = 8080
SERVICE = "metadata"  # its Compose service and hostname
PREFIX = "/computeMetadata/v1/"
MAX_CONTROL_BYTES = 4096


def address_for(tasks: list[str], task: str) -> str:
    """The GCE_METADATA_IP a task is given: this server's host and that task's port."""
    return f"{SERVICE}:{BASE_PORT + tasks.index(task)}"


def preempted(control: Path, task: str) -> bool:
    """Whether the lab has posted the task's notice; a control file it cannot read is no notice."""
    try:
        with open(control / f"{task}.json", "rb") as file:
            return json.loads(file.read(MAX_CONTROL_BYTES)).get("preempted") is True
    except (OSError, ValueError, AttributeError):
        return False


def answer(control: Path, task: str, path: str, flavor: str | None) -> tuple[int, str]:
    """(status, body) for one GET, as GCE's server gives it."""
    if not path.startswith(PREFIX):
        return 404, "not found"
    if flavor != "Google":
        return 403, "Missing required header: Metadata-Flavor"
    key = path[len(PREFIX):].split("?")[0]
    notice = preempted(control, task)
    values = {
        "instance/hostname": f"{task}.c.tflab.internal",
        "instance/name": task,
        "instance/preempted": "TRUE" if notice else "FALSE",
        "instance/maintenance-event": "TERMINATE_ON_HOST_MAINTENANCE" if notice else "NONE",
    }
    return (200, values[key]) if key in values else (404, "not found")


def handler_for(control: Path, task: str):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            status, body = answer(control, task, self.path, self.headers.get("Metadata-Flavor"))
            data = body.encode()
            self.send_response(status)
            self.send_header("Metadata-Flavor", "Google")
            self.send_header("Content-Type", "application/text")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):  # TF polls every second: no line per request
            pass

    return Handler


def main() -> int:
    tasks = [t for t in os.environ.get("TFLAB_METADATA_TASKS", "").split(",") if t]
    control = Path(os.environ.get("TFLAB_METADATA_CONTROL", "/lab/metadata"))
    if not tasks:
        print("TFLAB_METADATA_TASKS is empty: expected the run's tasks, comma-separated", file=sys.stderr)
        return 2
    servers = [ThreadingHTTPServer(("0.0.0.0", BASE_PORT + index), handler_for(control, task))
               for index, task in enumerate(tasks)]
    for server in servers[1:]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"metadata stand-in for {', '.join(tasks)} on ports {BASE_PORT}-{BASE_PORT + len(tasks) - 1}", flush=True)
    servers[0].serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
