"""`make tensorboard`: the optional `tensorboard` Compose service, serving every run of a runs folder."""

from __future__ import annotations

import os
import socket
import time
import urllib.request
from pathlib import Path

from tflab.backends.compose import COMPOSE_FILE, ComposeCli
from tflab.core.errors import LabError
from tflab.engine import docker, labels
from tflab.home import LAB_HOME

WAIT_SECONDS = 60  # until it answers HTTP: its first scan of the runs folder included


def check_port(port: int, runs_dir: Path) -> None:
    """TENSORBOARD_PORT is free on 127.0.0.1, or this runs folder's TensorBoard serves on it
    already (then `make tensorboard` keeps it)."""
    if not docker.published(labels.tensorboard_project(runs_dir), port):
        check_port_free(port)


def check_port_free(port: int) -> None:
    """Binds 127.0.0.1:port for a moment, as Docker will, so that a busy port is one line before
    Compose creates a container and networks it would then leave behind."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            raise LabError(f"TENSORBOARD_PORT={port} is not free on 127.0.0.1 ({error.strerror}); expected a free "
                           "port from 1024 to 65535, such as TENSORBOARD_PORT=6007") from None


def serve(cli: ComposeCli, runs_dir: Path, port: int, image: str) -> str:
    """Starts (or keeps) the tensorboard service on 127.0.0.1:port, serving every run under
    runs_dir, and returns its URL once it answers; `make down` removes it."""
    # The run folders are the lab's user's alone (runfolder.PRIVATE, 0700), so TensorBoard reads
    # them as that user: as the trainers' user (1000 under a root lab) it could enter none of them.
    # The container keeps the trainers' hardening (no capabilities, read-only, the runs read-only).
    uid, gid = os.getuid(), os.getgid()
    env = {**os.environ, "TFLAB_IMAGE": image, "TFLAB_RUNS_DIR": str(runs_dir), "TFLAB_UID": str(uid),
           "TFLAB_GID": str(gid), "TFLAB_TENSORBOARD_PORT": str(port), "COMPOSE_PROFILES": "tensorboard"}
    project = ["--project-name", labels.tensorboard_project(runs_dir), "--project-directory", str(LAB_HOME),
               "-f", str(COMPOSE_FILE)]
    result = cli.run(*project, "up", "--detach", "--no-build", "tensorboard", timeout=300, env=env)
    if result.returncode != 0:
        # Whatever failed (the port taken since, the image...), nothing half-made is left behind.
        cli.run(*project, "down", "--remove-orphans", timeout=180, env=env)
        raise LabError(f"could not start TensorBoard on 127.0.0.1:{port}: {docker.last_line(result)}")
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + WAIT_SECONDS
    while True:
        try:
            with urllib.request.urlopen(f"{url}/data/runs", timeout=5):
                return url
        except OSError as error:
            if time.monotonic() > deadline:
                logs = cli.run(*project, "logs", "--no-color", "--tail", "5", "tensorboard", env=env)
                raise LabError(f"TensorBoard did not answer at {url} in {WAIT_SECONDS} s ({error}); "
                               f"its last words: {docker.last_line(logs)}") from None
            time.sleep(1)
