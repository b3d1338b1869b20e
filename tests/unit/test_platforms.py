"""PLATFORM: the trainer image for linux/amd64 or linux/arm64 (Apple Silicon), its pins kept in
step with the x86_64 ones, the base picked or built for the platform, the build's arguments, and
the refusals (GPUS on arm64, an engine that cannot emulate). No engine is needed: `docker` is
faked where the code would call it."""

import subprocess

import pytest
from labtest.cli import REPO
from labtest.fakes import FakeEngine
from tflab import images
from tflab.core.errors import LabError
from tflab.core.settings import Settings, SettingsError
from tflab.engine import docker
from tflab.images import platforms, record


def pins(path) -> dict[str, str]:
    lines = [line.strip() for line in path.read_text().splitlines()]
    return dict(line.split("==") for line in lines if line and not line.startswith("#"))


def test_the_arm64_pins_are_the_x86_64_pins_with_tensorflow_for_tensorflow_cpu():
    """PyPI has no aarch64 tensorflow-cpu; tensorflow is the same release, CPU-only on aarch64.
    Every other package at the same version: pip resolved the same set for aarch64 (2026-12-03),
    with no package only one platform needs. A bump in one file must be made in the other."""
    amd64, arm64 = pins(images.REQUIREMENTS), pins(images.ARM64_REQUIREMENTS)
    assert arm64.pop("tensorflow") == amd64.pop("tensorflow-cpu") == "2.21.0"
    assert arm64 == amd64
    assert arm64["tf-keras"] == "2.21.0"


def test_the_x86_64_image_builds_as_it_always_did():
    cpu = images.variant_for("", images.AMD64)
    assert cpu == images.variant_for("") == images.variant()
    assert (cpu.name, cpu.requirements, cpu.wheels) == ("cpu", images.REQUIREMENTS, images.WHEELS)
    assert cpu.wheel_target == images.WHEEL_TARGET
    assert images.WHEEL_TARGET == ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
                                   "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64",
                                   "--platform", "manylinux_2_27_x86_64", "--platform", "manylinux_2_28_x86_64"]
    assert images.foreign_platform(cpu, native=images.AMD64) == ""


def test_the_arm64_image_is_the_same_dockerfile_with_aarch64_wheels_and_its_own_name():
    arm64 = images.variant_for("", images.ARM64)
    assert arm64.name == "cpu-arm64" and arm64.platform == images.ARM64
    assert [arg for arg in arm64.wheel_target if "manylinux" in arg] == [
        "manylinux2014_aarch64", "manylinux_2_17_aarch64", "manylinux_2_27_aarch64", "manylinux_2_28_aarch64"]
    assert arm64.requirements.is_file() and arm64.wheels.is_dir()
    assert {arm64.wheels, arm64.stamp.parent} & {images.WHEELS, images.GPU_WHEELS} == set()
    # On an x86_64 engine it is built for linux/arm64 (emulated); on an arm64 one (a Mac), natively.
    assert images.foreign_platform(arm64, images.AMD64) == "linux/arm64"
    assert images.foreign_platform(arm64, images.ARM64) == ""
    # A Mac with GPUS: x86_64 + CUDA only.
    with pytest.raises(LabError, match="^GPUS=all is not allowed on a linux/arm64 engine: the GPU image is x86_64"):
        images.variant_for("all", images.ARM64)


def test_the_two_platforms_images_never_share_a_tag():
    amd64, arm64 = images.variant_for("", images.AMD64), images.variant_for("", images.ARM64)
    assert images.image_tag(amd64, "sha256:same").startswith("tflab-trainer:cpu-")
    assert images.image_tag(arm64, "sha256:same").startswith("tflab-trainer:cpu-arm64-")
    assert images.image_tag(amd64, "sha256:same") != images.image_tag(arm64, "sha256:same")


@pytest.mark.parametrize("architecture, platform", [("x86_64", "linux/amd64"), ("aarch64", "linux/arm64")])
def test_the_platform_is_the_engines_own_unless_set(monkeypatch, architecture, platform):
    monkeypatch.setattr(docker, "info", lambda: {"Architecture": architecture})
    assert images.platform_for("") == platform
    assert images.trainer_variant(Settings()).platform == platform
    assert images.platform_for("linux/amd64") == "linux/amd64"  # PLATFORM wins, without asking
    assert images.trainer_variant(Settings(platform="linux/arm64")).name == "cpu-arm64"


def test_an_engine_of_another_architecture_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(docker, "info", lambda: {"Architecture": "s390x"})
    with pytest.raises(LabError, match=r"^the Docker engine's architecture is s390x: .*set PLATFORM") as refused:
        images.platform_for("")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("values, expected", [
    ({"PLATFORM": "arm64"}, "PLATFORM=arm64 is not allowed: expected one of linux/amd64, linux/arm64"),
    ({"PLATFORM": "linux/arm64", "GPUS": "all"},
     "GPUS=all is not allowed with PLATFORM=linux/arm64: the GPU image is x86_64 only"),
    ({"PLATFORM": "linux/arm64", "BACKEND": "local"},
     "PLATFORM=linux/arm64 is not allowed with BACKEND=local"),
])
def test_bad_platform_settings_are_refused_in_one_line(values, expected):
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({}, values)
    assert str(refused.value).startswith(expected) and "\n" not in str(refused.value)
    assert Settings.from_env({}, {"PLATFORM": "linux/amd64", "GPUS": "all"}).platform == "linux/amd64"


class ImagesHere:
    """FakeEngine's answers: images by name -> architecture; pulls that succeed give the platform asked for."""

    def __init__(self, images_here: dict[str, str], registry: bool, native: str):
        self.images, self.registry, self.native = dict(images_here), registry, native

    def __call__(self, command):
        ok = subprocess.CompletedProcess(command, 0, "", "")
        failed = subprocess.CompletedProcess(command, 1, "", "Error: No such image")
        if command[:3] == ["docker", "image", "inspect"]:
            name = command[-1]
            if name not in self.images:
                return failed
            field = self.images[name] if "Architecture" in command[4] else f"sha256:{name}-{self.images[name]}"
            return subprocess.CompletedProcess(command, 0, field + "\n", "")
        if command[:2] == ["docker", "pull"]:
            if not self.registry:
                return failed
            platform = command[command.index("--platform") + 1] if "--platform" in command else f"linux/{self.native}"
            self.images[command[-1]] = platform.split("/")[1]
            return ok
        if command[:2] == ["bash", str(images.BASE_SCRIPT)]:
            self.images[command[2]] = command[3].split("/")[1]
            return ok
        raise AssertionError(f"unexpected command {command}")


def fake_engine(monkeypatch, images_here: dict[str, str], registry: bool, native: str = "amd64") -> FakeEngine:
    engine = FakeEngine(monkeypatch, ImagesHere(images_here, registry, native))
    # images/base/build.sh, which runs its own docker commands, is started by subprocess.run, not docker.run_quiet
    monkeypatch.setattr(images.subprocess, "run", engine.run)
    return engine


def test_the_base_is_taken_only_for_its_platform(monkeypatch, tmp_path):
    """An amd64 python:3.11-slim on the engine is not an arm64 base: with a registry it is pulled
    for linux/arm64; without one, the arm64 Debian base is built under its own tag."""
    monkeypatch.setattr(record, "BUILT", tmp_path / "built.json")  # a base it bootstraps is recorded
    engine = fake_engine(monkeypatch, {"python:3.11-slim": "amd64"}, registry=True)
    assert images.ensure_base("", images.ARM64, images.AMD64) == "python:3.11-slim"
    assert ["docker", "pull", "--quiet", "--platform", "linux/arm64", "python:3.11-slim"] in engine.commands
    engine = fake_engine(monkeypatch, {"python:3.11-slim": "amd64"}, registry=False)
    assert images.ensure_base("", images.ARM64, images.AMD64) == "tflab-base:bookworm-arm64"
    assert ["bash", str(images.BASE_SCRIPT), "tflab-base:bookworm-arm64", "linux/arm64"] in engine.commands
    assert record.built_images("bases") == ["tflab-base:bookworm-arm64"]  # so this checkout's clean removes it
    # x86_64 as before: the image it has, no pull, no --platform.
    engine = fake_engine(monkeypatch, {"python:3.11-slim": "amd64", "tflab-base:bookworm-arm64": "arm64"}, False)
    assert images.ensure_base("", images.AMD64, images.AMD64) == "python:3.11-slim"
    assert not [command for command in engine.commands if command[:2] == ["docker", "pull"]]
    # A Mac: its own platform, pulled without --platform.
    engine = fake_engine(monkeypatch, {}, registry=True, native="arm64")
    assert images.ensure_base("", images.ARM64, images.ARM64) == "python:3.11-slim"
    assert ["docker", "pull", "--quiet", "python:3.11-slim"] in engine.commands


def test_a_base_image_of_the_wrong_platform_is_refused(monkeypatch):
    fake_engine(monkeypatch, {"my/python:3.11": "amd64"}, registry=False)
    with pytest.raises(LabError, match="^BASE_IMAGE=my/python:3.11 is a linux/amd64 image, but the trainer is "
                                       "being built for linux/arm64: .* or set PLATFORM=linux/amd64$"):
        images.ensure_base("my/python:3.11", images.ARM64, images.AMD64)


def test_an_engine_that_cannot_emulate_arm64_is_told_how_to(monkeypatch):
    def cannot(command):
        assert command[:3] == ["docker", "run", "--rm"]
        return subprocess.CompletedProcess(command, 1, "", "exec /usr/bin/true: exec format error\n")

    FakeEngine(monkeypatch, cannot)
    with pytest.raises(LabError) as refused:
        images.check_emulation(images.ARM64, "tflab-base:bookworm-arm64")
    assert str(refused.value) == (
        "this Docker engine cannot run linux/arm64 containers (exec /usr/bin/true: exec format error); "
        + platforms.emulation_hint(images.ARM64) + "; or leave PLATFORM empty for the engine's own")
    assert "sudo scripts/enable-arm64-emulation.sh" in platforms.emulation_hint(images.ARM64)


def test_the_scripts_parse():
    for script in ("scripts/enable-arm64-emulation.sh", "images/base/build.sh"):
        result = subprocess.run(["bash", "-n", str(REPO / script)], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
    assert "scripts/enable-arm64-emulation.sh" in (REPO / ".ci/run").read_text()


HANDLERS = {
    "enabled, F": ("enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: POF\noffset 0\n", True),
    "enabled, no F": ("enabled\ninterpreter /usr/bin/qemu-aarch64-static\nflags: \noffset 0\n", False),
    "disabled, F": ("disabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: OCF\n", False),
    "F only in the interpreter": ("enabled\ninterpreter /opt/F/qemu\nflags: P\n", False),
    "empty": ("", False),
    "not text": (b"\xff\xfe", False),
    "absent": (None, False),
}


@pytest.mark.parametrize("handler", HANDLERS)
def test_the_kernel_emulates_arm64_only_with_an_enabled_handler_with_the_f_flag(handler, tmp_path):
    text, expected = HANDLERS[handler]
    if text is not None:
        path = tmp_path / "qemu-aarch64"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert platforms.kernel_emulates(images.ARM64, tmp_path) is expected
    assert platforms.kernel_emulates(images.AMD64, tmp_path) is False  # another handler's name


def this_linux(monkeypatch, **changes):
    uname = platforms.py_platform.uname()
    info = {"Name": uname.node, "KernelVersion": uname.release, "OperatingSystem": "Debian GNU/Linux 12", **changes}
    monkeypatch.setattr(docker, "info", lambda: info)
    monkeypatch.setattr(platforms.sys, "platform", "linux")


@pytest.mark.parametrize("engine, handler, refused", [
    ({}, "absent", True),
    ({}, "enabled, F", False),
    ({}, "enabled, no F", True),
    ({"OperatingSystem": "Docker Desktop"}, "absent", False),  # its VM emulates; the build will tell
    ({"Name": "another-host"}, "absent", False),  # a remote engine: this kernel's handlers are not its
    ({"KernelVersion": "0.0.0-other"}, "absent", False),
])
def test_missing_emulation_is_told_before_any_image_only_for_this_machines_own_engine(
        engine, handler, refused, monkeypatch, tmp_path):
    this_linux(monkeypatch, **engine)
    text = HANDLERS[handler][0]
    if text is not None:
        (tmp_path / "qemu-aarch64").write_text(text)
    why = images.emulation_missing(images.ARM64, images.AMD64, tmp_path)
    assert (why is not None) is refused
    if refused:
        assert why.startswith("this Docker engine cannot run linux/arm64 containers (this Linux kernel has no "
                              "qemu-aarch64 binfmt handler with the F flag); enable arm64 emulation: sudo ")
    assert images.emulation_missing(images.AMD64, images.AMD64, tmp_path) is None  # the engine's own platform


def test_platform_arm64_without_emulation_is_refused_before_anything_is_announced(monkeypatch, tmp_path, capsys):
    """It once printed "cannot pull ...; building tflab-base:bookworm-arm64" and then failed twice."""
    this_linux(monkeypatch, Architecture="x86_64")
    monkeypatch.setattr(platforms, "BINFMT_MISC", tmp_path)  # no handler
    engine = fake_engine(monkeypatch, {}, registry=False)
    with pytest.raises(LabError) as refused:
        images.ensure_image("", images.variant_for("", images.ARM64))
    assert str(refused.value) == images.emulation_missing(images.ARM64, images.AMD64, tmp_path)
    assert "\n" not in str(refused.value)
    assert capsys.readouterr().out == "" and engine.commands == []  # no pull, no base build, not a word


def test_platform_arm64_with_emulation_goes_on_to_the_base(monkeypatch, tmp_path, capsys):
    this_linux(monkeypatch, Architecture="x86_64")
    (tmp_path / "qemu-aarch64").write_text(HANDLERS["enabled, F"][0])
    monkeypatch.setattr(platforms, "BINFMT_MISC", tmp_path)

    class ReachedTheBase(Exception):
        pass

    def base(*args):
        raise ReachedTheBase

    monkeypatch.setattr(images, "ensure_base", base)
    with pytest.raises(ReachedTheBase):
        images.ensure_image("", images.variant_for("", images.ARM64))
