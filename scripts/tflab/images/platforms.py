"""The platforms the trainer image is made for (linux/amd64, linux/arm64): the engine's own, an
image's, the local base's name for each, and whether the engine can run a platform that is not its
own (emulation: qemu's binfmt handler on this Linux kernel, or a container that runs), told with
how to enable it.
"""

from __future__ import annotations

import platform as py_platform
import subprocess
import sys
from pathlib import Path

from tflab.core.errors import LabError
from tflab.engine import docker

AMD64, ARM64 = "linux/amd64", "linux/arm64"
PLATFORMS = (AMD64, ARM64)
ENGINE_ARCHITECTURES = {"x86_64": AMD64, "amd64": AMD64, "aarch64": ARM64, "arm64": ARM64}  # docker info's
MACHINES = {AMD64: "x86_64", ARM64: "aarch64"}  # the platforms' names in wheel tags
LOCAL_BASES = {AMD64: "tflab-base:bookworm", ARM64: "tflab-base:bookworm-arm64"}
LOCAL_BASE = LOCAL_BASES[AMD64]


def engine_platform() -> str:
    """The engine's own platform, from `docker info`'s Architecture (x86_64 -> linux/amd64,
    aarch64 -> linux/arm64: Docker Desktop on Apple Silicon)."""
    architecture = docker.info().get("Architecture", "")
    if architecture not in ENGINE_ARCHITECTURES:
        raise LabError(f"the Docker engine's architecture is {architecture or 'unknown'}: the lab's images are "
                       f"for {' and '.join(PLATFORMS)}; set PLATFORM to one of them (it then runs emulated)")
    return ENGINE_ARCHITECTURES[architecture]


def machine_platform() -> str:
    """This machine's own platform, for what needs no engine (`make wheels`)."""
    return ENGINE_ARCHITECTURES.get(py_platform.machine(), AMD64)


def platform_for(requested: str) -> str:
    """PLATFORM if given, else the engine's own."""
    return requested or engine_platform()


def image_platform(name: str) -> str:
    """The platform an image on this engine is for, as linux/amd64 or linux/arm64; empty if unknown."""
    result = docker.image_inspect(name, "{{.Architecture}}")
    architecture = result.stdout.strip() if result.returncode == 0 else ""
    return ENGINE_ARCHITECTURES.get(architecture, architecture and f"linux/{architecture}")


def emulation_hint(platform: str) -> str:
    """How to let this machine's engine run `platform` containers."""
    if platform == ARM64:
        return ("enable arm64 emulation: sudo scripts/enable-arm64-emulation.sh (Debian's qemu-user-static, "
                "its qemu-aarch64 handler registered with binfmt_misc's F flag)")
    return ("enable amd64 emulation: Docker Desktop's 'Use Rosetta for x86_64/amd64 emulation' setting, or "
            "qemu-user-static's qemu-x86_64 binfmt handler with the F flag on Linux")


BINFMT_MISC = Path("/proc/sys/fs/binfmt_misc")
BINFMT_HANDLERS = {ARM64: "qemu-aarch64", AMD64: "qemu-x86_64"}  # qemu-user-static's names


def kernel_emulates(platform: str, binfmt: Path | None = None) -> bool:
    """Whether this Linux kernel runs `platform` binaries in containers: qemu's handler registered,
    enabled, and with the F flag (the emulator opened once, at registration, so a container's root
    file system needs no copy of it)."""
    try:
        lines = ((binfmt or BINFMT_MISC) / BINFMT_HANDLERS[platform]).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return False
    flags = [line.split(":", 1)[1] for line in lines if line.startswith("flags:")]
    return lines[:1] == ["enabled"] and any("F" in each for each in flags)


def engine_is_this_linux(info: dict) -> bool:
    """Whether the engine runs on this Linux machine's own kernel, whose binfmt handlers are then
    its: not Docker Desktop (a VM of its own, with its own emulation), not a remote engine."""
    uname = py_platform.uname()
    return (sys.platform == "linux" and "Docker Desktop" not in info.get("OperatingSystem", "")
            and info.get("Name") == uname.node and info.get("KernelVersion") == uname.release)


def emulation_missing(platform: str, native: str, binfmt: Path | None = None) -> str | None:
    """Why the engine cannot run `platform` containers, where that can be told before any image of
    that platform exists (the engine is this Linux machine's and its kernel has no handler); None
    otherwise. check_emulation, after the base, tells for the other engines."""
    if platform == native or not engine_is_this_linux(docker.info()) or kernel_emulates(platform, binfmt):
        return None
    return (f"this Docker engine cannot run {platform} containers (this Linux kernel has no "
            f"{BINFMT_HANDLERS[platform]} binfmt handler with the F flag); {emulation_hint(platform)}; "
            "or leave PLATFORM empty for the engine's own")


def check_emulation(platform: str, base: str) -> None:
    """LabError, with how to enable it, unless the engine runs `platform` containers: `true` in the
    base, a second under emulation. Checked every time, since a reboot drops a binfmt handler."""
    try:
        result = docker.run_isolated(base, "true", timeout=120)
    except subprocess.TimeoutExpired:
        result = subprocess.CompletedProcess([], 1, "", "timed out")
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or ["no reason given"])[-1]
        raise LabError(f"this Docker engine cannot run {platform} containers ({reason}); {emulation_hint(platform)}; "
                       "or leave PLATFORM empty for the engine's own")
