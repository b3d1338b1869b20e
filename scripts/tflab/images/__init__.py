"""The trainer image: its base, its wheelhouse and its build, each done only when its inputs changed.

- Base: BASE_IMAGE if given; else python:3.11-slim if the engine has it or can pull it; else
  (no registry, as on this lab's CI machines) tflab-base:bookworm, bootstrapped from Debian's
  packages by images/base/build.sh. The same Dockerfile builds on every one of them.
- Wheelhouse: requirements/trainer.txt downloaded by the host's pip into images/trainer/wheels/,
  so `docker build` needs no network; a stamp file remembers for which pins it was filled.
- Two steps: the packages image, tflab-trainer-packages:<variant>-<digest of base, pins, install
  script and settings> (TensorFlow and the rest, 1.25 GB, a minute or two), made only when those
  change; and on it the trainer image, which adds the lab's code as one small layer (seconds).
  The packages are installed by images/trainer/install-packages.sh in a container of the base with
  the wheelhouse mounted read-only, and that container is committed: no wheel lands in a layer,
  and nothing is copied twice, where a Dockerfile would need BuildKit's RUN --mount or a second
  stage (the legacy builder: the wheels copied in, then 1.25 GB copied across, 3 min 19 s against
  73-85 s here). The code image is a `docker build` (builder.py: BuildKit or the legacy builder) from a
  context of the Dockerfile and the code alone. Neither leaves an untagged image.
- Tag: tflab-trainer:<variant>-<digest>, the digest of everything the image is made from (the
  base's image id, the install script and settings, the Dockerfile, the pins, the lab's code). Two
  checkouts or versions of the lab on one engine therefore never overwrite or silently reuse each
  other's image, and a warm `make up` costs no build at all: the tag exists. (A label would need a
  build step above the packages, seconds on slow storage drivers; the tag costs nothing.)
  images/trainer/.built.json (record.py) records the images this checkout made (trainer, packages
  and script images, and the local base if it bootstrapped it), so `make clean` removes those and
  no other checkout's, and a rebuild removes the image it replaces.
- Keras release (KERAS=3.12, nightly): a thin layer on the TF line's packages image, committed as
  tflab-trainer-packages:<TF variant>-keras<release>-<digest>: a container of that image, with the
  release's lock (requirements/keras/<tf>-<keras>.txt: only what differs from the TF line's, hashed)
  and its few wheels mounted, uninstalls the TF line's Keras and installs the release with --no-deps
  (images/trainer/install-keras.sh): 15-22 MB on the engine and 78-83 s cold on this lab's busy
  2 CPUs (docs/matrix.md), where an image of its own per TF x Keras would be 1.25 GB and minutes.
  A release the TF line has already is the line's own image.
- GPU variant (GPUS set): made the same way from other pins: requirements/trainer-gpu.txt
  (tensorflow[and-cuda]: TensorFlow with CUDA's libraries as wheels, several GB) and its
  wheelhouse, images/trainer/wheels-gpu/; tagged
  tflab-trainer:gpu-<digest>. x86_64 only.
- Platform: the engine's own (`docker info`'s Architecture), or PLATFORM. linux/amd64 is the CPU
  image above; linux/arm64 (Apple Silicon under Docker Desktop) is made the same way with
  requirements/trainer-arm64.txt (`tensorflow`: PyPI has no aarch64 `tensorflow-cpu`), wheels
  downloaded for manylinux aarch64 into images/trainer/wheels-arm64/, an arm64 base
  (tflab-base:bookworm-arm64, or python:3.11-slim pulled for linux/arm64); tagged
  tflab-trainer:cpu-arm64-<digest>. A platform other than the engine's own runs under emulation,
  which the engine must have (checked before the build: one line saying how to get it; platforms.py).
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

from tflab.console import say
from tflab.core import task, versions
from tflab.core.errors import LabError
from tflab.core.rules import GPU_IMAGE_AMD64_ONLY
from tflab.core.settings import Settings
from tflab.engine import docker
from tflab.home import LAB_HOME as REPO
from tflab.images import builder, keraslock, libraries, progress, record
from tflab.images.platforms import (
    AMD64,
    ARM64,
    LOCAL_BASES,
    MACHINES,
    check_emulation,
    emulation_missing,
    engine_platform,
    image_platform,
    platform_for,
)
from tflab.images.record import (
    PACKAGES_REPOSITORY,
    REPOSITORY,
    SCRIPT_IMAGE,
    building,
    existing_id,
    image_id,
    record_built,
    remove_built,
    remove_replaced,
)

PUBLIC_BASE = "python:3.11-slim"
DOCKERFILE = REPO / "images/trainer/Dockerfile"  # the code, on the packages image
INSTALL_SCRIPT = REPO / "images/trainer/install-packages.sh"
KERAS_INSTALL_SCRIPT = REPO / "images/trainer/install-keras.sh"  # a Keras release's layer on a TF line's packages
# The settings every trainer runs with, given to the packages image as it is committed (the code
# image inherits them): a Dockerfile step for each above 1.25 GB of packages would cost seconds.
PACKAGES_CONFIG = ("ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                   "ENV PYTHONPATH=/opt/tflab", "ENV PYTHONUNBUFFERED=1", "ENV PYTHONDONTWRITEBYTECODE=1",
                   "ENV HOME=/tmp", *[f"ENV {key}={value}" for key, value in task.LEGACY_KERAS.items()],
                   "USER 1000:1000", "WORKDIR /tmp", "CMD " + json.dumps(list(task.COMMAND)))
IMAGE_LABEL = "tflab.image=trainer"  # on every image the lab makes for the trainer
CODE = REPO / "scripts/tflab"
SCRIPT_DOCKERFILE = REPO / "images/script/Dockerfile"
BASE_SCRIPT = REPO / "images/base/build.sh"
REQUIREMENTS = REPO / "requirements/trainer.txt"
WHEELS = REPO / "images/trainer/wheels"
WHEEL_STAMP = WHEELS / ".pins-sha256"
# The GPU image's pins and wheelhouse.
GPU_REQUIREMENTS = REPO / "requirements/trainer-gpu.txt"
GPU_WHEELS = REPO / "images/trainer/wheels-gpu"
GPU_WHEEL_STAMP = GPU_WHEELS / ".pins-sha256"
# The same for the arm64 CPU image.
ARM64_REQUIREMENTS = REPO / "requirements/trainer-arm64.txt"
ARM64_WHEELS = REPO / "images/trainer/wheels-arm64"
ARM64_WHEEL_STAMP = ARM64_WHEELS / ".pins-sha256"
# TF=<minor>: one lock file per TensorFlow line (versions.py), its own wheelhouse and image name.
TF_REQUIREMENTS = REPO / "requirements/tf"  # <minor>.txt, written by tflab.tools.lock
TF_WHEELS = REPO / "images/trainer"  # wheels-tf<minor>/
DIGEST_LENGTH = 12  # hex digits of the inputs' sha256 in a tag
BUILD_STEP_QUIET_SECONDS = 3  # a build step is said once it has taken this long (cached ones take none)


def wheel_target(platform: str = AMD64) -> list[str]:
    """pip's arguments for the image's interpreter and platform, which the wheels must match."""
    machine = MACHINES[platform]
    return ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
            *[arg for tag in (f"manylinux2014_{machine}", f"manylinux_2_17_{machine}", f"manylinux_2_27_{machine}",
                              f"manylinux_2_28_{machine}") for arg in ("--platform", tag)]]


WHEEL_TARGET = wheel_target(AMD64)


@dataclass(frozen=True)
class Variant:
    """One trainer image and what it is built from."""

    name: str  # cpu | gpu | cpu-arm64: the tag's first part
    requirements: Path
    wheels: Path
    stamp: Path  # which pins the wheelhouse was filled for
    wheels_size: str  # for the user's patience
    platform: str = AMD64
    parent: "Variant | None" = None  # a Keras release's layer: the TF line's image it goes on

    @property
    def wheel_target(self) -> list[str]:
        return wheel_target(self.platform)


def tf_variant(tf: str) -> Variant:
    """The CPU image of one TensorFlow line (TF=2.15): tflab-trainer:cpu-tf2.15-<digest>, from
    requirements/tf/2.15.txt and images/trainer/wheels-tf2.15/. The lab's own line (2.21) is the
    lab's own image, variant()."""
    if not tf or tf == versions.DEFAULT:
        return variant()
    wheels = TF_WHEELS / f"wheels-tf{tf}"
    return Variant(f"cpu-tf{tf}", TF_REQUIREMENTS / f"{tf}.txt", wheels, wheels / ".pins-sha256",
                   "about 300 MB")


def keras_variant(tf: str, keras: str) -> Variant:
    """A Keras release on a TF line (KERAS=3.12): the TF line's image plus a layer from
    requirements/keras/<tf>-<keras>.txt, tflab-trainer:<TF variant>-keras3.12-<digest>; the TF line's
    image itself where it has that release already. LabError where the lock is missing, stale, not
    the lab's, or says pip cannot install the pair (pip's reason)."""
    parent = tf_variant(tf)
    try:
        lock = keraslock.read(tf, keras)
    except keraslock.LockError as error:
        raise LabError(str(error)) from None
    if lock.not_installable:
        raise LabError(f"TF={versions.label(tf)} KERAS={keras} is not installable: pip says: {lock.not_installable}; "
                       f"({keraslock.relative(lock.path)})")
    if lock.empty:
        return parent
    wheels = TF_WHEELS / f"wheels-{parent.name}-keras{keras}"
    return Variant(f"{parent.name}-keras{keras}", lock.path, wheels, wheels / ".pins-sha256", "a few MB",
                   parent=parent)


def tf_variants() -> list[Variant]:
    """Every TF= line's own image, the lab's own left out: what `make clean` looks for."""
    return [tf_variant(tf) for tf in versions.RELEASES if tf != versions.DEFAULT]


def variant(gpu: bool = False, platform: str = AMD64) -> Variant:
    """The CPU image, or the GPU one, for a platform. Built from the module's names at each call,
    so tests can point those elsewhere."""
    if platform == ARM64:
        if gpu:
            raise LabError(GPU_AMD64_ONLY)
        return Variant("cpu-arm64", ARM64_REQUIREMENTS, ARM64_WHEELS, ARM64_WHEEL_STAMP, "about 340 MB", ARM64)
    if not gpu:
        return Variant("cpu", REQUIREMENTS, WHEELS, WHEEL_STAMP, "about 334 MB")
    return Variant("gpu", GPU_REQUIREMENTS, GPU_WHEELS, GPU_WHEEL_STAMP, "several GB: CUDA's libraries come as wheels")


GPU_AMD64_ONLY = (f"GPUS is not allowed on linux/arm64: {GPU_IMAGE_AMD64_ONLY}; leave GPUS empty for the arm64 CPU "
                  "image, or run GPUS on an x86_64 machine")


def variant_for(gpus: str, platform: str = AMD64) -> Variant:
    """The image a run with GPUS=`gpus` needs on `platform` (resolved: see platform_for)."""
    if gpus and platform == ARM64:
        raise LabError(f"GPUS={gpus} is not allowed on a linux/arm64 engine: {GPU_IMAGE_AMD64_ONLY}; leave GPUS "
                       "empty for the arm64 CPU image, or use an x86_64 machine")
    return variant(gpu=bool(gpus), platform=platform)


def trainer_variant(settings: Settings) -> Variant:
    """The image a run with these settings needs: TF (rules.py refuses it with GPUS or
    PLATFORM=linux/arm64), else GPUS and PLATFORM (or the engine's)."""
    for name, value in (("TF", settings.tf), ("KERAS", settings.keras)):
        if len(value.split()) > 1:
            raise LabError(f"{name}={value} is not allowed for one run: expected one value (a list is for make "
                           "matrix)")
    if versions.is_keras_release(settings.keras):
        return keras_variant(settings.tf, settings.keras)
    if settings.tf and settings.tf != versions.DEFAULT:
        return tf_variant(settings.tf)
    return variant_for(settings.gpus, platform_for(settings.platform))


def pull(name: str, platform: str = "") -> bool:
    """Pulls `name`; for `platform` where it is not the engine's own."""
    say(f"pulling {name}" + (f" for {platform}" if platform else ""))
    try:
        result = docker.pull(name, platform, timeout=600)
    except subprocess.TimeoutExpired:
        return False
    return result.returncode == 0


def ensure_base(requested: str, platform: str = AMD64, native: str = AMD64) -> str:
    """The base image to build on for `platform`, made available locally; `native` is the
    engine's own platform. A tag holds one platform's image on an engine, so each candidate is
    taken only when it is for `platform` (python:3.11-slim pulled for arm64 replaces the amd64 one,
    and the other way round)."""
    foreign = platform if platform != native else ""
    if requested:
        if not image_id(requested) and not pull(requested, foreign):
            raise LabError(f"BASE_IMAGE={requested} is not available: it is not on this engine and "
                           "cannot be pulled; give an image you have, or leave BASE_IMAGE empty")
        found = image_platform(requested)
        if found != platform:
            raise LabError(f"BASE_IMAGE={requested} is a {found or 'unknown-platform'} image, but the trainer is "
                           f"being built for {platform}: give a {platform} image, or set PLATFORM={found}")
        return requested
    local = LOCAL_BASES[platform]
    for candidate in (PUBLIC_BASE, local):
        if image_id(candidate) and image_platform(candidate) == platform:
            return candidate
    if pull(PUBLIC_BASE, foreign) and image_platform(PUBLIC_BASE) == platform:
        return PUBLIC_BASE
    slow = " (minutes under emulation)" if foreign else " (about a minute, once)"
    say(f"cannot pull {PUBLIC_BASE} (no registry reachable); building {local} from Debian's "
        f"packages with debootstrap instead{slow}")
    build = subprocess.run(["bash", str(BASE_SCRIPT), local, platform])
    if build.returncode != 0 or not image_id(local):
        raise LabError(f"could not build the local base image {local} (see above); or set "
                       "BASE_IMAGE to a Python 3.11 image you have")
    record_built(local, key="bases")  # so that this checkout's `make clean` removes it, and no other's
    return local


def ensure_wheels(image: Variant | None = None) -> None:
    """Fills the wheelhouse for the image's pinned requirements, unless it already holds them."""
    image = image or variant()
    pins = hashlib.sha256(image.requirements.read_bytes() + " ".join(image.wheel_target).encode()).hexdigest()
    if image.stamp.exists() and image.stamp.read_text().strip() == pins:
        return
    say(f"downloading the trainer's wheels into {image.wheels} ({image.wheels_size}, once)")
    command = [sys.executable, "-m", "pip", "download", "--progress-bar", "off", "--disable-pip-version-check",
               "--no-deps", "--only-binary=:all:", *image.wheel_target, "--dest", str(image.wheels),
               "-r", str(image.requirements)]
    pins_count = len([line for line in image.requirements.read_text().splitlines()
                      if line.strip() and not line.lstrip().startswith("#")])
    code, tail = progress.run_summarised(command, progress.WheelCounter(pins_count), say, "wheels")
    if code != 0:
        print(tail, file=sys.stderr)
        raise LabError("downloading the trainer's wheels failed (pip's message above); "
                       f"`{sys.executable} -m pip` needs to reach PyPI once")
    image.stamp.write_text(pins + "\n")


def _digest(base_id: str, paths: list[Path]) -> str:
    digest = hashlib.sha256(base_id.encode() + "\n".join(PACKAGES_CONFIG).encode())
    for path in paths:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def packages_inputs(requirements: Path = REQUIREMENTS, parent: Variant | None = None) -> list[Path]:
    """What a packages image is made from: the install script and the pins; for a Keras release's
    layer, its parent's inputs, then the layer's script and lock."""
    if parent is not None:
        return [*packages_inputs(parent.requirements, parent.parent), KERAS_INSTALL_SCRIPT, requirements]
    return [INSTALL_SCRIPT, requirements]


def packages_inputs_digest(base_id: str, requirements: Path = REQUIREMENTS, parent: Variant | None = None) -> str:
    return _digest(base_id, packages_inputs(requirements, parent))


def build_inputs_digest(base_id: str, requirements: Path = REQUIREMENTS, parent: Variant | None = None) -> str:
    """The trainer image's inputs: the packages image's and the code's."""
    inputs = packages_inputs(requirements, parent)
    return _digest(base_id, [*inputs[:1], DOCKERFILE, *inputs[1:], *sorted(CODE.rglob("*.py"))])


def image_tag(image: Variant, base_id: str) -> str:
    """The trainer image's name for these inputs: tflab-trainer:cpu-0123456789ab."""
    digest = build_inputs_digest(base_id, image.requirements, image.parent)
    return f"{REPOSITORY}:{image.name}-{digest[:DIGEST_LENGTH]}"


def packages_tag(image: Variant, base_id: str) -> str:
    """The packages image's name: tflab-trainer-packages:cpu-0123456789ab."""
    digest = packages_inputs_digest(base_id, image.requirements, image.parent)
    return f"{PACKAGES_REPOSITORY}:{image.name}-{digest[:DIGEST_LENGTH]}"


def foreign_platform(image: Variant, native: str) -> str:
    # Only for a foreign platform: the legacy builder takes the base's anyway, but BuildKit
    # (Docker Desktop) would otherwise build for the engine's own.
    return image.platform if image.platform != native else ""


def remove_rebuildable() -> None:
    """make clean's part: the images this checkout built, its record of them, and the wheelhouses."""
    variants = [variant(gpu=False), variant(gpu=True), variant(platform=ARM64), *tf_variants()]
    remove_built()
    record.BUILT.unlink(missing_ok=True)
    libraries.remove_all()
    variants += [Variant(folder.name, Path(), folder, folder / ".pins-sha256", "")  # Keras releases' wheelhouses
                 for folder in sorted(TF_WHEELS.glob("wheels-*-keras*")) if folder.is_dir()]
    for image in variants:
        for wheel in image.wheels.glob("*.whl"):
            wheel.unlink()
        image.stamp.unlink(missing_ok=True)
    print("tflab: removed the wheelhouses")


def ensure_keras_layer(image: Variant, parent: Variant, base: str, base_id: str, native: str) -> str:
    """A Keras release's packages image: its parent's (built unless it exists), with the TF line's
    Keras uninstalled and the release's wheels installed, committed; its tag."""
    tag = packages_tag(image, base_id)
    if image_id(tag):
        return tag
    parent_tag = ensure_packages(parent, base, base_id, native)
    ensure_wheels(image)
    wanted = pinned_wheels(image)
    say(f"making {tag} on {parent_tag}: Keras from {image.requirements.relative_to(REPO)} ({len(wanted)} wheel(s))")
    files = {"install-keras.sh": KERAS_INSTALL_SCRIPT, "requirements.txt": image.requirements,
             **{f"wheels/{wheel.name}": wheel for wheel in wanted}}
    with builder.context(image.wheels.parent, files) as context:
        code, tail = builder.install_and_commit(
            parent_tag, context, "/tmp/tflab-install", ["sh", "/tmp/tflab-install/install-keras.sh"], tag,
            [*PACKAGES_CONFIG, f"LABEL {IMAGE_LABEL}"], IMAGE_LABEL, f"making {tag}", say,
            progress.InstallCounter(len(wanted)), foreign_platform(image, native))
    if code != 0:
        print(tail, file=sys.stderr)
        raise LabError(f"making {tag} failed (the install's output above)")
    record_built(tag)
    return tag


def pinned_wheels(image: Variant) -> list[Path]:
    """The wheels of the wheelhouse that the variant's pins name (a wheel's file name starts with its
    name, - as _, and ==version as -version-)."""
    names = [line.split(" ", 1)[0].split("==") for line in image.requirements.read_text().splitlines()
             if line and not line.startswith("#")]
    wanted = {f"{name.replace('-', '_')}-{version}-".lower() for name, version in names}
    return [wheel for wheel in sorted(image.wheels.glob("*.whl"))
            if any(wheel.name.lower().startswith(prefix) for prefix in wanted)]


def ensure_packages(image: Variant, base: str, base_id: str, native: str) -> str:
    """The packages image for this variant on this base, built unless it exists; its tag."""
    if image.parent is not None:
        return ensure_keras_layer(image, image.parent, base, base_id, native)
    tag = packages_tag(image, base_id)
    if image_id(tag):
        return tag
    ensure_wheels(image)
    foreign = foreign_platform(image, native)
    install = ["sh", "/tmp/tflab-install/install-packages.sh"]
    unpacked = None
    if foreign:  # unpacked and compiled natively; only the check runs emulated (install-packages.sh)
        unpacked = builder.Unpacked(ensure_base("", native, native), [*install, "unpack", MACHINES[image.platform]],
                                    "/opt/venv")
        install = [*install, "check"]
    slow = f"; {image.platform}: its import check emulated, about 3 minutes more" if foreign else ""
    say(f"making {tag} on {base}: TensorFlow and its packages, once (a minute or two{slow})")
    files = {"install-packages.sh": INSTALL_SCRIPT, "requirements.txt": image.requirements,
             **{f"wheels/{wheel.name}": wheel for wheel in sorted(image.wheels.glob("*.whl"))}}
    image.wheels.mkdir(parents=True, exist_ok=True)
    with builder.context(image.wheels.parent, files) as context, building(tag):
        code, tail = builder.install_and_commit(
            base, context, "/tmp/tflab-install", install, tag,
            [*PACKAGES_CONFIG, f"LABEL {IMAGE_LABEL}"], IMAGE_LABEL, f"making {tag}", say,
            progress.InstallCounter(len(files) - 2), foreign, unpacked)
        if code != 0:
            print(tail, file=sys.stderr)
            raise LabError(f"making {tag} failed (the install's output above)")
    return tag


def ensure_image(base_image: str = "", image: Variant | None = None) -> str:
    """Builds the trainer image (the CPU one unless told) unless one from the same inputs exists;
    returns its tag. The packages image under it is built only when the base or the pins changed.
    The images this checkout built before for the same variant are removed, so code changes do not
    pile images up (an image a container still uses is kept)."""
    image = image or variant()
    native = engine_platform()
    missing = emulation_missing(image.platform, native)
    if missing:  # before the base, whose pull or build would be announced first and fail besides
        raise LabError(missing)
    base = ensure_base(base_image, image.platform, native)
    if image.platform != native:
        check_emulation(image.platform, base)
    base_id = existing_id(base)
    tag = image_tag(image, base_id)
    if image_id(tag):
        return tag
    packages = ensure_packages(image, base, base_id, native)
    say(f"building {tag}: the lab's code on {packages}")
    with builder.context(image.wheels.parent, {"Dockerfile": DOCKERFILE, "tflab": CODE}) as context, building(tag):
        docker_build(context / "Dockerfile", context, tag, {"PACKAGES_IMAGE": packages},
                     foreign_platform(image, native))
    remove_replaced(REPOSITORY, image, tag)
    remove_replaced(PACKAGES_REPOSITORY, image, packages)
    return tag


def docker_build(dockerfile: Path, context: Path, image: str, build_args: dict[str, str], platform: str = "") -> None:
    """Runs a `docker build` with BuildKit where the CLI has it, else the legacy builder, a line
    per build step and a heartbeat while one is long, and leaves no intermediate image; on failure
    its output's end and a LabError."""
    use_buildkit = builder.buildkit()
    # The image both Dockerfiles build FROM: an interrupted build's images are found on it.
    parent = build_args.get("PACKAGES_IMAGE") or build_args.get("TRAINER_IMAGE", "")
    with tempfile.TemporaryDirectory(prefix="tflab-build-") as folder:  # outside the context: never sent
        iidfile = Path(folder) / "image-id"
        command = builder.build_command(dockerfile, context, iidfile, build_args, platform, use_buildkit)
        code, tail = builder.run_build(command, f"building {image}", say, use_buildkit,
                                       quiet_below=BUILD_STEP_QUIET_SECONDS, parent=parent, tag=image, iidfile=iidfile)
    if code != 0:
        print(tail, file=sys.stderr)
        raise LabError(f"building {image} failed (docker build's output above)")


def script_constraints(pins: str) -> str:
    """The trainer's pins as pip constraints for a script's packages, so that whatever they share
    with the image keeps the image's version. Extras dropped: pip refuses `tensorflow[and-cuda]`
    in a constraints file."""
    return "\n".join(re.sub(r"\[[^]]*\]| --hash=\S+", "", line) for line in pins.splitlines()) + "\n"


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
                                   "--only-binary=:all:", *trainer.wheel_target, "--dest", context,
                                   "-r", str(requirements), "-c", str(constraints)], stderr=subprocess.PIPE, text=True)
        if download.returncode != 0:
            print(download.stderr, end="", file=sys.stderr)
            # pip's first ERROR line (what cannot be installed) goes into the message, which explain.py's
            # table reads (make matrix).
            errors = [line for line in download.stderr.splitlines() if line.startswith("ERROR:")]
            raise LabError(f"downloading the packages of {requirements} failed"
                           + (f" ({errors[0][:300]})" if errors else " (pip's message above)")
                           + f" for the pins of {trainer.requirements.name}; every one must be on PyPI as a wheel "
                           f"for CPython 3.11 on manylinux {MACHINES[trainer.platform]}")
        say(f"building {image}: {trainer_image} plus {requirements}")
        with building(image, key="scripts"):
            docker_build(SCRIPT_DOCKERFILE, Path(context), image, {"TRAINER_IMAGE": trainer_image})
    return image
