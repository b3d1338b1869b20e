"""The trainer image: its base, its wheelhouse and its build, each done only when its inputs changed.

- Base: BASE_IMAGE if given; else python:3.11-slim if the engine has it or can pull it; else
  (no registry, as on this lab's CI machines) tflab-base:bookworm, bootstrapped from Debian's
  packages by images/base/build.sh. The same Dockerfile builds on every one of them.
- Wheelhouse: requirements/trainer.txt downloaded by the host's pip into images/trainer/wheels/,
  so `docker build` needs no network; a stamp file remembers for which pins it was filled.
- Tag: tflab-trainer:<variant>-<digest>, the digest of everything the image is built from (the
  base's image id, the Dockerfile, the pins, the lab's code). Two checkouts or versions of the lab
  on one engine therefore never overwrite or silently reuse each other's image, and a warm
  `make up` costs no build at all: the tag exists. (A label would need a build step after the
  1.6 GB package layer, which costs ~10 s on slow storage drivers; the tag costs nothing.)
  images/trainer/.built.json records the tags this checkout built, so `make clean` removes those
  and no other checkout's, and a rebuild removes the image it replaces.
- GPU variant (GPUS set): the same Dockerfile with two build arguments, REQUIREMENTS and WHEELS,
  selecting requirements/trainer-gpu.txt (tensorflow[and-cuda]: TensorFlow with CUDA's libraries
  as wheels, several GB) and its own wheelhouse, images/trainer/wheels-gpu/; tagged
  tflab-trainer:gpu-<digest>.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tflab import progress
from tflab.compose import REPO, run_quiet
from tflab.errors import LabError

REPOSITORY = "tflab-trainer"  # tagged <variant>-<digest of the build's inputs>
PUBLIC_BASE = "python:3.11-slim"
LOCAL_BASE = "tflab-base:bookworm"
DOCKERFILE = REPO / "images/trainer/Dockerfile"
SCRIPT_DOCKERFILE = REPO / "images/script/Dockerfile"
SCRIPT_IMAGE = "tflab-script"  # tagged with a digest of the requirements and the trainer image
BASE_SCRIPT = REPO / "images/base/build.sh"
REQUIREMENTS = REPO / "requirements/trainer.txt"
WHEELS = REPO / "images/trainer/wheels"
WHEEL_STAMP = WHEELS / ".pins-sha256"
BUILT = REPO / "images/trainer/.built.json"  # {"images": [tags this checkout built, oldest first]}
# What the Dockerfile's REQUIREMENTS and WHEELS build arguments are for the GPU image, relative to
# the build context (the repository).
GPU_BUILD_ARGS = {"REQUIREMENTS": "requirements/trainer-gpu.txt", "WHEELS": "images/trainer/wheels-gpu"}
GPU_REQUIREMENTS = REPO / GPU_BUILD_ARGS["REQUIREMENTS"]
GPU_WHEELS = REPO / GPU_BUILD_ARGS["WHEELS"]
GPU_WHEEL_STAMP = GPU_WHEELS / ".pins-sha256"
DIGEST_LENGTH = 12  # hex digits of the inputs' sha256 in a tag
BUILD_STEP_QUIET_SECONDS = 3  # a build step is said once it has taken this long (cached ones take none)
# The image's interpreter and platform, which the wheels must match.
WHEEL_TARGET = ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
                *[arg for tag in ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_27_x86_64",
                                  "manylinux_2_28_x86_64") for arg in ("--platform", tag)]]


@dataclass(frozen=True)
class Variant:
    """One trainer image and what it is built from."""

    name: str  # cpu | gpu: the tag's first part
    requirements: Path
    wheels: Path
    stamp: Path  # which pins the wheelhouse was filled for
    wheels_size: str  # for the user's patience
    build_args: tuple[str, ...]  # beyond BASE_IMAGE


def variant(gpu: bool = False) -> Variant:
    """The CPU image, or the GPU one. Built from the module's names at each call, so tests can
    point those elsewhere."""
    if not gpu:
        return Variant("cpu", REQUIREMENTS, WHEELS, WHEEL_STAMP, "about 334 MB", ())
    return Variant("gpu", GPU_REQUIREMENTS, GPU_WHEELS, GPU_WHEEL_STAMP,
                   "several GB: CUDA's libraries come as wheels",
                   tuple(arg for name, value in GPU_BUILD_ARGS.items() for arg in ("--build-arg", f"{name}={value}")))


def variant_for(gpus: str) -> Variant:
    """The image a run with GPUS=`gpus` needs."""
    return variant(gpu=bool(gpus))


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


def ensure_wheels(image: Variant | None = None) -> None:
    """Fills the wheelhouse for the image's pinned requirements, unless it already holds them."""
    image = image or variant()
    pins = hashlib.sha256(image.requirements.read_bytes() + " ".join(WHEEL_TARGET).encode()).hexdigest()
    if image.stamp.exists() and image.stamp.read_text().strip() == pins:
        return
    say(f"downloading the trainer's wheels into {image.wheels} ({image.wheels_size}, once)")
    command = [sys.executable, "-m", "pip", "download", "--progress-bar", "off", "--disable-pip-version-check",
               "--no-deps", "--only-binary=:all:", *WHEEL_TARGET, "--dest", str(image.wheels),
               "-r", str(image.requirements)]
    pins_count = len([line for line in image.requirements.read_text().splitlines()
                      if line.strip() and not line.lstrip().startswith("#")])
    code, tail = progress.run_summarised(command, progress.WheelCounter(pins_count), say, "wheels")
    if code != 0:
        print(tail, file=sys.stderr)
        raise LabError("downloading the trainer's wheels failed (pip's message above); "
                       f"`{sys.executable} -m pip` needs to reach PyPI once")
    image.stamp.write_text(pins + "\n")


def build_inputs_digest(base_id: str, requirements: Path = REQUIREMENTS) -> str:
    digest = hashlib.sha256(base_id.encode())
    for path in [DOCKERFILE, REPO / ".dockerignore", requirements,
                 *sorted((REPO / "scripts/tflab").rglob("*.py"))]:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def image_tag(image: Variant, base_id: str) -> str:
    """The trainer image's name for these inputs: tflab-trainer:cpu-0123456789ab."""
    return f"{REPOSITORY}:{image.name}-{build_inputs_digest(base_id, image.requirements)[:DIGEST_LENGTH]}"


def build_command(image: Variant, base: str, tag: str) -> list[str]:
    return ["docker", "build", "--file", str(DOCKERFILE), "--build-arg", f"BASE_IMAGE={base}",
            *image.build_args, "--tag", tag, str(REPO)]


def built_images() -> list[str]:
    """The trainer images this checkout built and has not removed, oldest first."""
    try:
        recorded = json.loads(BUILT.read_text()).get("images", [])
    except (FileNotFoundError, json.JSONDecodeError, AttributeError):
        return []
    return [tag for tag in recorded if isinstance(tag, str) and tag.startswith(REPOSITORY + ":")]


def record_built(tag: str, forget: set[str] = frozenset()) -> None:
    kept = [old for old in built_images() if old != tag and old not in forget]
    BUILT.write_text(json.dumps({"images": [*kept, tag]}) + "\n")


def ensure_image(base_image: str = "", image: Variant | None = None) -> str:
    """Builds the trainer image (the CPU one unless told) unless one from the same inputs exists;
    returns its tag. The image this checkout built before for the same variant is removed, so
    code changes do not pile images up (an image a container still uses is kept)."""
    image = image or variant()
    base = ensure_base(base_image)
    tag = image_tag(image, image_id(base))
    if image_id(tag):
        return tag
    ensure_wheels(image)
    say(f"building {tag} on {base} (minutes when the package layer is not cached)")
    docker_build(build_command(image, base, tag), tag)
    replaced = [old for old in built_images() if old.startswith(f"{REPOSITORY}:{image.name}-") and old != tag]
    removed = {old for old in replaced if run_quiet(["docker", "image", "rm", old]).returncode == 0}
    record_built(tag, forget=removed)
    return tag


def script_images() -> list[str]:
    """Every image ensure_script_image built (one per requirements file and trainer image)."""
    found = run_quiet(["docker", "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", SCRIPT_IMAGE])
    return found.stdout.split() if found.returncode == 0 else []


def docker_build(command: list[str], image: str) -> None:
    """Runs a `docker build`, a line per build step and a heartbeat while one is long; on failure
    its output's end and a LabError."""
    code, tail = progress.run_summarised(command, progress.build_step, say, f"building {image}",
                                         quiet_below=BUILD_STEP_QUIET_SECONDS)
    if code != 0:
        print(tail, file=sys.stderr)
        raise LabError(f"building {image} failed (docker build's output above)")


def script_constraints(pins: str) -> str:
    """The trainer's pins as pip constraints for a script's packages, so that whatever they share
    with the image keeps the image's version. Extras dropped: pip refuses `tensorflow[and-cuda]`
    in a constraints file."""
    return "\n".join(re.sub(r"\[[^]]*\]", "", line) for line in pins.splitlines()) + "\n"


def ensure_script_image(script: Path, trainer_image: str, trainer: Variant) -> str:
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
        constraints = Path(context) / "constraints.txt"
        constraints.write_text(script_constraints(trainer.requirements.read_text()))
        # Constrained by the trainer's pins, so what the image already has keeps its version.
        download = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                                   "--only-binary=:all:", *WHEEL_TARGET, "--dest", context,
                                   "-r", str(requirements), "-c", str(constraints)])
        if download.returncode != 0:
            raise LabError(f"downloading the packages of {requirements} failed (pip's message above); "
                           "every one must be on PyPI as a wheel for CPython 3.11 on manylinux x86_64")
        say(f"building {image}: {trainer_image} plus {requirements}")
        docker_build(["docker", "build", "--file", str(SCRIPT_DOCKERFILE),
                      "--build-arg", f"TRAINER_IMAGE={trainer_image}", "--tag", image, context], image)
    return image
