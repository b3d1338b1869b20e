"""Whether tests/integration/test_arm64.py runs, is skipped, or fails, on this machine: the arm64
image runs under emulation on an x86_64 engine, which a fresh machine does not have."""

from __future__ import annotations

from typing import Callable

from tflab import images
from tflab.core.errors import LabError

RUN, SKIP, FAIL = "run", "skip", "fail"
HOW = "run scripts/enable-arm64-emulation.sh as root (make test does so itself when run as root)"


def verdict(ci: bool, opted_out: bool, unavailable: Callable[[], str | None]) -> tuple[str, str]:
    """(RUN, "") where the engine can run arm64; else SKIP with one line saying how to include the
    tests, or under CI FAIL with why: CI must test the arm64 image, and a machine without emulation
    there is a broken CI machine, not a reason to pass. TFLAB_SKIP_ARM64=1 (`opted_out`) is a
    person's explicit choice, honoured anywhere, and asks the engine nothing."""
    if opted_out:
        return SKIP, "TFLAB_SKIP_ARM64=1: the arm64 image is not tested on this machine"
    why = unavailable()
    if why is None:
        return RUN, ""
    if ci:
        return FAIL, f"CI=true requires the arm64 tests, and {why}; {HOW}"
    return SKIP, f"arm64 image not tested: {why}; to include it, {HOW}"


def unavailable() -> str | None:
    """Why this engine cannot run arm64 containers, where that can be told without an arm64 image:
    an x86_64 Linux engine on this machine without the qemu-aarch64 binfmt handler (F flag). Docker
    Desktop (a VM, which has its own emulation) is left to the lab's own check before its build,
    and an engine that does not answer to the `engine` fixture, which fails saying so."""
    try:
        if images.emulation_missing(images.ARM64, images.engine_platform()) is None:
            return None
    except LabError:
        return None
    return "this x86_64 machine cannot run arm64 containers (no qemu-aarch64 binfmt handler with the F flag)"
