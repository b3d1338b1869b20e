"""TensorFlow's own files, once on the host for every task of an image, so that the tasks share the
pages of its libraries as the processes of one cluster node would (issue 51).

    mount = libraries.shared_mount(image)   # "<home>/images/trainer/.libraries/<id>/tensorflow:<TF>:ro"

Measured here (2026-12-07, Docker 20.10 on fuse-overlayfs): four containers of the trainer's image,
each after `import tensorflow` and a small fit, held 493 MB resident each, 295 MB of it TensorFlow's
mapped files, and no page of those was shared (proportional size = resident size): each container's
overlay mount has its own copy in the page cache. With the package's folder bind-mounted read-only
from one host folder, the same four held 292 MB of shared pages between them, 299 MB proportional
each: 64 tasks need ~64 x 225 MB + 292 MB instead of ~64 x 493 MB.

The folder is copied out of the image by `docker cp` (7.5 s for its 1,003 MB here), whole or not at
all (a staging folder renamed into place), keyed by the image's ID: it is that image's own
TensorFlow, whatever a SCRIPT's requirements or a TF release put there. The tasks read it through a
read-only bind mount, as root-owned files they cannot change. Folders of images the engine no
longer has are removed when a new one is made.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from tflab.console import display_path, say
from tflab.core.errors import LabError
from tflab.engine import docker
from tflab.home import LAB_HOME

FOLDER = LAB_HOME / "images/trainer/.libraries"  # one folder an image ID, git-ignored
PACKAGE = "/opt/venv/lib/python3.11/site-packages/tensorflow"  # every trainer image's (images/trainer/)
ID_LENGTH = 12


def image_id(image: str) -> str:
    result = docker.image_inspect(image, "{{.Id}}")
    if result.returncode != 0:
        raise LabError(f"cannot read the ID of image {image}: {docker.last_line(result)}")
    return result.stdout.strip().removeprefix("sha256:")[:ID_LENGTH]


def shared_mount(image: str) -> str:
    """The read-only bind mount that gives a task `image`'s own TensorFlow from the host's one copy,
    made now where it is not there yet."""
    return f"{ensure(image)}:{PACKAGE}:ro"


def ensure(image: str) -> Path:
    """The host's copy of `image`'s TensorFlow package, whole."""
    key = image_id(image)
    folder = FOLDER / key / "tensorflow"
    if folder.is_dir():
        return folder
    FOLDER.mkdir(parents=True, exist_ok=True)
    staging = FOLDER / f".staging-{uuid.uuid4().hex[:12]}"
    staging.mkdir()
    container = f"tflab-libraries-{uuid.uuid4().hex[:12]}"
    say(f"copying {image}'s TensorFlow to {display_path(FOLDER / key)} once, for its tasks to share (seconds) ...")
    try:
        created = docker.create(container, image, ["true"], ["--network", "none"])
        if created.returncode != 0:
            raise LabError(f"cannot copy TensorFlow out of {image}: {docker.last_line(created)}")
        copied = docker.copy_out(container, PACKAGE, staging / "tensorflow")
        if copied.returncode != 0:
            raise LabError(f"cannot copy TensorFlow out of {image}: {docker.last_line(copied)}")
        try:
            os.rename(staging, FOLDER / key)
        except OSError:  # another lab made it first: its copy is the same image's
            pass
    finally:
        docker.remove_containers(container, volumes=False)
        shutil.rmtree(staging, ignore_errors=True)
    forget_others(key)
    return folder


def forget_others(keep: str) -> None:
    """Removes the copies of images the engine no longer has."""
    for folder in FOLDER.iterdir():
        if folder.name.startswith(".") or folder.name == keep:
            continue
        if docker.image_inspect(folder.name, "{{.Id}}").returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)


def remove_all() -> None:
    """make clean's part: every copy."""
    shutil.rmtree(FOLDER, ignore_errors=True)
