"""The trainer image: its base, its wheelhouse and its build, each done only when its inputs changed.

- Base: BASE_IMAGE if given; else python:3.11-slim if the engine has it or can pull it; else
  (no registry, as on this lab's CI machines) tflab-base:bookworm, bootstrapped from Debian's
  packages by images/base/build.sh. The same Dockerfile builds on every one of them.
- Wheelhouse: requirements/trainer.txt downloaded by the host's pip into images/trainer/wheels/,
  so `docker build` needs no network; a stamp file remembers for which pins it was filled.
- Build: skipped when the image is the one the lab last built from the same inputs (the base's
  image id, the Dockerfile, the pins, the lab's code), so a warm `make up` costs no build at all.
  The record lives on the host (images/trainer/.built.json): an image label would need a build
  step after the 1.6 GB package layer, which costs ~10 s on slow storage drivers.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tflab.compose import REPO, run_quiet
from tflab.errors import LabError

IMAGE = "tflab-trainer:latest"
PUBLIC_BASE = "python:3.11-slim"
LOCAL_BASE = "tflab-base:bookworm"
DOCKERFILE = REPO / "images/trainer/Dockerfile"
SCRIPT_DOCKERFILE = REPO / "images/script/Dockerfile"
SCRIPT_IMAGE = "tflab-script"  # tagged with a digest of the requirements and the trainer image
BASE_SCRIPT = REPO / "images/base/build.sh"
REQUIREMENTS = REPO / "requirements/trainer.txt"
WHEELS = REPO / "images/trainer/wheels"
WHEEL_STAMP = WHEELS / ".pins-sha256"
BUILT = REPO / "images/trainer/.built.json"  # {"image_id": ..., "inputs": ...} of the last build
# The image's interpreter and platform, which the wheels must match.
WHEEL_TARGET = ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
                *[arg for tag in ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_27_x86_64",
                                  "manylinux_2_28_x86_64") for arg in ("--platform", tag)]]


def say(message: str) -> None:
    print(f"tflab: {message}", flush=True)


def image_id(name: str) -> str | None:
    result = run_quiet(["docker", "image", "inspect", "--format", "{{.Id}}", name])
    return result.stdout.strip() if result.returncode == 0 else None


def pull(name: str) -> bool:
    say(f"pulling {name}")
    try:
        result = run_quiet(["docker", "pull", "--quiet", name], timeout=600)
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0


def ensure_base(requested: str) -> str:
    """The base image to build on, made available locally."""
    if requested:
        if image_id(requested) or pull(requested):
            return requested
        raise LabError(f"BASE_IMAGE={requested} is not available: it is not on this engine and "
                       "cannot be pulled; give an image you have, or leave BASE_IMAGE empty")
    if image_id(PUBLIC_BASE):
        return PUBLIC_BASE
    if image_id(LOCAL_BASE):
        return LOCAL_BASE
    if pull(PUBLIC_BASE):
        return PUBLIC_BASE
    say(f"cannot pull {PUBLIC_BASE} (no registry reachable); building {LOCAL_BASE} from Debian's "
        "packages with debootstrap instead (about a minute, once)")
    build = subprocess.run(["bash", str(BASE_SCRIPT), LOCAL_BASE])
    if build.returncode != 0 or not image_id(LOCAL_BASE):
        raise LabError(f"could not build the local base image {LOCAL_BASE} (see above); or set "
                       "BASE_IMAGE to a Python 3.11 image you have")
    return LOCAL_BASE


def ensure_wheels() -> None:
    """Fills the wheelhouse for the pins in requirements/trainer.txt, unless it already holds them."""
    pins = hashlib.sha256(REQUIREMENTS.read_bytes() + " ".join(WHEEL_TARGET).encode()).hexdigest()
    if WHEEL_STAMP.exists() and WHEEL_STAMP.read_text().strip() == pins:
        return
    say(f"downloading the trainer's wheels into {WHEELS.relative_to(REPO)}/ (about 334 MB, once)")
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
               "--no-deps", "--only-binary=:all:", *WHEEL_TARGET, "--dest", str(WHEELS),
               "-r", str(REQUIREMENTS)]
    if subprocess.run(command).returncode != 0:
        raise LabError("downloading the trainer's wheels failed (pip's message above); "
                       f"`{sys.executable} -m pip` needs to reach PyPI once")
    WHEEL_STAMP.write_text(pins + "\n")


def build_inputs_digest(base_id: str) -> str:
    digest = hashlib.sha256(base_id.encode())
    for path in [DOCKERFILE, REPO / ".dockerignore", REQUIREMENTS,
                 *sorted((REPO / "scripts/tflab").rglob("*.py"))]:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def ensure_image(base_image: str = "", image: str = IMAGE) -> str:
    """Builds the trainer image if any of its inputs changed; returns its name."""
    base = ensure_base(base_image)
    inputs = build_inputs_digest(image_id(base))
    try:
        built = json.loads(BUILT.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        built = {}
    if built.get("inputs") == inputs and built.get("image_id") == image_id(image):
        return image
    ensure_wheels()
    say(f"building {image} on {base} (minutes when the package layer is not cached)")
    build = subprocess.run(["docker", "build", "--file", str(DOCKERFILE), "--build-arg", f"BASE_IMAGE={base}",
                            "--tag", image, str(REPO)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if build.returncode != 0:
        print(build.stdout[-6000:], file=sys.stderr)
        raise LabError(f"building {image} failed (docker build's output above)")
    BUILT.write_text(json.dumps({"image_id": image_id(image), "inputs": inputs}) + "\n")
    return image


def ensure_script_image(script: Path, trainer_image: str) -> str:
    """SCRIPT: the trainer image, or where a requirements.txt sits next to the script, the trainer
    image plus those packages (images/script/Dockerfile), built once per requirements."""
    requirements = script.parent / "requirements.txt"
    if not requirements.is_file():
        return trainer_image
    digest = hashlib.sha256(requirements.read_bytes() + (image_id(trainer_image) or "").encode()
                            + SCRIPT_DOCKERFILE.read_bytes()).hexdigest()[:16]
    image = f"{SCRIPT_IMAGE}:{digest}"
    if image_id(image):
        return image
    with tempfile.TemporaryDirectory(prefix="tflab-script-") as context:
        shutil.copy(requirements, Path(context) / "requirements.txt")
        say(f"downloading the wheels {requirements} asks for")
        # Constrained by the trainer's pins, so nothing the image has is replaced.
        download = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                                   "--only-binary=:all:", *WHEEL_TARGET, "--dest", context,
                                   "-r", str(requirements), "-c", str(REQUIREMENTS)])
        if download.returncode != 0:
            raise LabError(f"downloading the packages of {requirements} failed (pip's message above); "
                           "every one must be on PyPI as a wheel for CPython 3.11 on manylinux x86_64")
        say(f"building {image}: {trainer_image} plus {requirements}")
        build = subprocess.run(["docker", "build", "--file", str(SCRIPT_DOCKERFILE),
                                "--build-arg", f"TRAINER_IMAGE={trainer_image}", "--tag", image, context],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if build.returncode != 0:
        print(build.stdout[-6000:], file=sys.stderr)
        raise LabError(f"building {image} failed (docker build's output above)")
    return image
