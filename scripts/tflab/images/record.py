"""The build record: images/trainer/.built.json, the images this checkout made (trainer, packages
and script images, and a local base it bootstrapped), so `make clean` removes those and no other
checkout's, and a rebuild removes the image it replaces. Changed under a lock and replaced whole,
as builds run side by side.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import tempfile
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from tflab.core.errors import LabError
from tflab.engine import docker
from tflab.home import LAB_HOME as REPO
from tflab.images import builder
from tflab.images.platforms import LOCAL_BASES

if TYPE_CHECKING:
    from tflab.images import Variant

REPOSITORY = "tflab-trainer"  # tagged <variant>-<digest of the build's inputs>
PACKAGES_REPOSITORY = "tflab-trainer-packages"  # tagged <variant>-<digest of base, pins, install script, settings>
SCRIPT_IMAGE = "tflab-script"  # tagged with a digest of the requirements and the trainer image
BUILT = REPO / "images/trainer/.built.json"  # {"images": [tags this checkout built, oldest first], "bases": [...]}


def image_id(name: str) -> str | None:
    result = docker.image_inspect(name, "{{.Id}}")
    return result.stdout.strip() if result.returncode == 0 else None


def existing_id(name: str) -> str:
    """The id of an image the lab has just built, pulled or found; LabError where the engine no
    longer has it (removed meanwhile), instead of a tag computed from no id."""
    found = image_id(name)
    if found is None:
        raise LabError(f"image {name} is no longer on the engine (removed while the lab was using it?); run again")
    return found


def built_images(key: str = "images") -> list[str]:
    """The images this checkout built and has not removed, oldest first: trainer and packages
    images, or with key="bases" the local base images it bootstrapped."""
    recorded = _built_record().get(key, [])
    if not isinstance(recorded, list):
        return []
    names = {"images": (f"{REPOSITORY}:", f"{PACKAGES_REPOSITORY}:"), "scripts": (f"{SCRIPT_IMAGE}:",),
             "bases": tuple(LOCAL_BASES.values())}[key]
    return [tag for tag in recorded if isinstance(tag, str) and tag.startswith(names)]


def _built_record() -> dict:
    try:
        record = json.loads(BUILT.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return record if isinstance(record, dict) else {}


@contextmanager
def _built_record_changed() -> Iterator[dict]:
    """The record, to change in place, under a lock and replaced whole: builds run side by side (a
    test suite's workers, two makes), and a read-modify-write without both lost a tag (the TF=2.15
    packages image went unrecorded, so `make clean` would have left it on the engine)."""
    BUILT.parent.mkdir(parents=True, exist_ok=True)
    with open(BUILT.with_name(".built.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = _built_record()
        yield record
        with tempfile.NamedTemporaryFile("w", dir=BUILT.parent, prefix=".built.", delete=False) as new:
            new.write(json.dumps(record) + "\n")
        os.replace(new.name, BUILT)


def record_built(tag: str, key: str = "images") -> None:
    with _built_record_changed() as record:
        old = record.get(key)
        recorded = old if isinstance(old, list) else []
        record[key] = [*[old for old in recorded if old != tag], tag]


def forget_built(names: set[str]) -> None:
    with _built_record_changed() as record:
        for key, value in record.items():
            if isinstance(value, list):
                record[key] = [name for name in value if name not in names]


def remove_replaced(repository: str, image: Variant, keep: str) -> None:
    """Removes the images of this repository and variant that this checkout built, but `keep`
    (an image a container still uses stays, and stays recorded; one never made is forgotten)."""
    prefix = f"{repository}:{image.name}-"
    replaced = [old for old in built_images() if old.startswith(prefix) and old != keep
                and re.fullmatch(r"[0-9a-f]+", old[len(prefix):])]  # cpu- is not cpu-arm64-
    forget_built({old for old in replaced if docker.image_remove(old).returncode == 0 or not image_id(old)})


@contextmanager
def building(tag: str, key: str = "images") -> Iterator[None]:
    """Around a build of `tag`: the tag is recorded as this checkout's before the build starts, as
    the engine may still make it after the lab is gone. Interrupted, the build's client ends at
    once, but the engine finishes what it was at (a `docker commit`, a build's last layer) and
    tags the image after `tflab images` returned; recorded, that image is removed by `make clean`,
    or replaced by the next build (remove_replaced), instead of staying on the engine, named by
    nothing the lab knows. What the engine made already is removed here. A build that failed
    leaves no record of an image that does not exist."""
    record_built(tag, key)
    try:
        yield
    except KeyboardInterrupt:
        if image_id(tag) and docker.image_remove(tag).returncode == 0:
            forget_built({tag})
        raise
    except BaseException:
        if not image_id(tag):
            forget_built({tag})
        raise


def remove_built() -> None:
    """Removes the images this checkout built, each before the one it is built on."""
    for name in removal_order():
        if image_id(name):
            # An interrupted build's untagged images on it first: left, they keep it on the engine.
            builder.remove_untagged_children(name)
            docker.image_remove(name, force=True, timeout=120)
            print(f"tflab: removed image {name}")


def removal_order() -> list[str]:
    """What `make clean` removes of the images this checkout built, each before what it is built
    on: scripts' images, trainer images, Keras releases' layers, packages images, then a local base it bootstrapped (a
    base another checkout bootstrapped stays: that checkout's images are built on it)."""
    built = built_images()
    return (built_images("scripts") + [tag for tag in built if tag.startswith(f"{REPOSITORY}:")]
            + [tag for tag in built if tag.startswith(f"{PACKAGES_REPOSITORY}:") and "-keras" in tag]  # layers first
            + [tag for tag in built if tag.startswith(f"{PACKAGES_REPOSITORY}:") and "-keras" not in tag]
            + built_images("bases"))
