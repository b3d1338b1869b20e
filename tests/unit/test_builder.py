"""builder.py: the build command for either builder, the images a legacy build leaves (read from
its own output), and the per-build context. No engine is needed."""

import dataclasses
import json
import multiprocessing
import os
from pathlib import Path

import pytest
from labtest.fakes import FakeEngine, answered
from tflab import images
from tflab.images import builder, progress, record

# The legacy builder's output for the packages image: a fresh install stage, then a final stage
# whose first steps came from an earlier build's cache. Recorded from Docker 20.10 (ids shortened).
LEGACY_OUTPUT = """\
Sending build context to Docker daemon  350.2MB
Step 1/13 : ARG BASE_IMAGE=python:3.11-slim
Step 2/13 : FROM ${BASE_IMAGE} AS install
 ---> 42a0fbab8b5b
Step 3/13 : LABEL tflab.image=trainer-install-stage
 ---> Running in 5d1c0e0b7a11
Removing intermediate container 5d1c0e0b7a11
 ---> 0a1b2c3d4e5f
Step 4/13 : COPY requirements.txt /tmp/requirements.txt
 ---> 1a1b2c3d4e5f
Step 5/13 : COPY wheels/ /tmp/wheels/
 ---> 2a1b2c3d4e5f
Step 6/13 : RUN python3 -m venv /opt/venv && pip install ...
 ---> Running in 9f9f9f9f9f9f
Removing intermediate container 9f9f9f9f9f9f
 ---> 3a1b2c3d4e5f
Step 7/13 : FROM ${BASE_IMAGE}
 ---> 42a0fbab8b5b
Step 8/13 : LABEL tflab.image=trainer
 ---> Using cache
 ---> 4a1b2c3d4e5f
Step 9/13 : ENV PATH=/opt/venv/bin:/usr/bin
 ---> Using cache
 ---> 5a1b2c3d4e5f
Step 10/13 : COPY --from=install /opt/venv /opt/venv
 ---> 6a1b2c3d4e5f
Successfully built 6a1b2c3d4e5f
Successfully tagged tflab-trainer-packages:cpu-0123456789ab
"""


def read(output: str) -> builder.LegacyOutput:
    reader = builder.LegacyOutput()
    for line in output.splitlines():
        reader(line.strip())  # as progress.run_summarised hands lines over
    return reader


def test_a_legacy_build_leaves_only_its_install_stage_to_remove():
    reader = read(LEGACY_OUTPUT)
    assert reader.final == "6a1b2c3d4e5f"
    # The install stage's last image is the 2 GB one with wheels and packages; the final stage's is
    # the image itself; the base (a FROM's image) is never ours.
    assert reader.leftovers() == ["3a1b2c3d4e5f"]


def test_stage_images_taken_from_cache_are_an_earlier_builds_and_stay():
    install = LEGACY_OUTPUT.split("Step 7/13")[0]
    for step in ("Running in 5d1c0e0b7a11\nRemoving intermediate container 5d1c0e0b7a11",
                 "Running in 9f9f9f9f9f9f\nRemoving intermediate container 9f9f9f9f9f9f"):
        install = install.replace(step, "Using cache")
    for step in ("Step 4/13 : COPY requirements.txt /tmp/requirements.txt\n",
                 "Step 5/13 : COPY wheels/ /tmp/wheels/\n"):
        install = install.replace(step, step + " ---> Using cache\n")
    reader = read(install + "Step 7/13" + LEGACY_OUTPUT.split("Step 7/13")[1])
    assert reader.stage_images == ["", "6a1b2c3d4e5f"] and reader.leftovers() == []


def test_a_failed_legacy_build_leaves_its_finished_steps_to_remove():
    failed = LEGACY_OUTPUT.split("Step 6/13")[0] + "Step 6/13 : RUN false\n ---> Running in 9f9f\n" \
        "The command '/bin/sh -c false' returned a non-zero code: 1\n"
    reader = read(failed)
    assert reader.final == "" and reader.leftovers() == ["2a1b2c3d4e5f"]


def test_the_reader_still_says_each_step():
    reader = builder.LegacyOutput()
    assert reader("Step 6/13 : RUN python3 -m venv /opt/venv") == progress.build_step(
        "Step 6/13 : RUN python3 -m venv /opt/venv") == "step 6/13: RUN python3 -m venv /opt/venv"


def test_the_build_command_for_each_builder():
    context = Path("/ctx")
    iid = Path("/tmp/b/image-id")
    legacy = builder.build_command(context / "Dockerfile", context, iid, {"PACKAGES_IMAGE": "p:1"})
    assert legacy == ["docker", "build", "--force-rm", "--file", "/ctx/Dockerfile", "--build-arg",
                      "PACKAGES_IMAGE=p:1", "--iidfile", "/tmp/b/image-id", "/ctx"]
    buildkit = builder.build_command(context / "Dockerfile", context, iid, {}, "linux/arm64", use_buildkit=True)
    assert buildkit == ["docker", "build", "--progress=plain", "--load", "--file", "/ctx/Dockerfile",
                        "--platform", "linux/arm64", "--iidfile", "/tmp/b/image-id", "/ctx"]
    assert builder.build_environment(True)["DOCKER_BUILDKIT"] == "1"
    assert builder.build_environment(False)["DOCKER_BUILDKIT"] == "0"


def test_buildkit_plain_progress_is_said_step_by_step():
    assert progress.build_step("#9 [install 3/4] RUN python3 -m venv /opt/venv") == \
        "install step 3/4: RUN python3 -m venv /opt/venv"


def test_a_context_holds_only_what_it_is_given_as_hard_links(tmp_path):
    wheels = tmp_path / "wheels"
    code = tmp_path / "code"
    (code / "__pycache__").mkdir(parents=True)
    wheels.mkdir()
    (wheels / "a.whl").write_text("a")
    (wheels / "b.whl").write_text("b")
    (code / "train.py").write_text("x")
    (code / "__pycache__" / "train.cpython-311.pyc").write_text("compiled")
    with builder.context(wheels.parent, {"wheels/a.whl": wheels / "a.whl", "tflab": code}) as root:
        found = sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())
        assert found == ["tflab/train.py", "wheels/a.whl"]
        assert os.stat(root / "wheels/a.whl").st_ino == os.stat(wheels / "a.whl").st_ino
        assert builder.context_bytes(root) == 2
    assert not root.exists()


def test_builds_recorded_side_by_side_are_all_recorded(monkeypatch, tmp_path):
    """Eight processes record sixteen images at once (a suite's workers building side by side):
    without the record's lock a read-modify-write lost tags, and `make clean` left their images."""
    monkeypatch.setattr(record, "BUILT", tmp_path / "built.json")
    context = multiprocessing.get_context("fork")  # the children see the patched BUILT
    tags = [f"tflab-trainer:cpu-{n:012x}" for n in range(16)]
    with context.Pool(8) as pool:
        pool.map(record.record_built, tags)
    assert sorted(record.built_images()) == tags

def test_clean_removes_what_is_built_on_an_image_before_it_and_only_this_checkouts_base(monkeypatch, tmp_path):
    monkeypatch.setattr(record, "BUILT", tmp_path / "built.json")
    record.record_built("tflab-trainer-packages:cpu-0123456789ab")
    record.record_built("tflab-trainer:cpu-aaaaaaaaaaaa")
    assert record.removal_order() == ["tflab-trainer:cpu-aaaaaaaaaaaa", "tflab-trainer-packages:cpu-0123456789ab"]
    record.record_built("tflab-base:bookworm", key="bases")
    assert record.removal_order()[-1] == "tflab-base:bookworm"
    assert json.loads(record.BUILT.read_text())["bases"] == ["tflab-base:bookworm"]
    record.forget_built({"tflab-trainer:cpu-aaaaaaaaaaaa"})
    assert record.built_images() == ["tflab-trainer-packages:cpu-0123456789ab"]


@pytest.mark.parametrize("code, found", [(0, True), (1, False)])
def test_buildkit_is_used_where_the_cli_has_buildx(monkeypatch, code, found):
    FakeEngine(monkeypatch, lambda command: answered(command, code))
    assert builder.buildkit() is found


def test_pip_installs_lines_become_progress():
    count = progress.InstallCounter(39)
    assert count("Processing /tmp/tflab-install/wheels/absl_py-2.5.1-py3-none-any.whl") == \
        "wheel 1 of 39: absl_py-2.5.1-py3-none-any.whl"
    assert count("Installing collected packages: absl-py, numpy") == "installing 1 packages"
    assert count("Successfully installed absl-py-2.5.1") is None
    assert count("compiling: the packages' Python, on every CPU") == "compiling: the packages' Python, on every CPU"


@pytest.mark.parametrize("install_code", [0, 3])
def test_the_install_container_is_committed_once_it_succeeded_and_removed_either_way(monkeypatch, install_code):
    commands = FakeEngine(monkeypatch).commands
    monkeypatch.setattr(builder.progress, "run_summarised", lambda command, *args, **kwargs: (
        commands.append(command) or (install_code, "pip's tail")))
    code, tail = builder.install_and_commit("tflab-base:bookworm", Path("/ctx"), "/tmp/in", ["sh", "/tmp/in/x.sh"],
                                            "p:1", ["USER 1000:1000"], "tflab.image=trainer", "making p:1",
                                            lambda message: None, lambda line: None)
    name = commands[0][commands[0].index("--name") + 1]
    assert commands[0][-5:] == ["--volume", "/ctx:/tmp/in:ro", "tflab-base:bookworm", "sh", "/tmp/in/x.sh"]
    assert {"--network", "none", "--user", "0:0"} <= set(commands[0])
    assert commands[1] == ["docker", "start", "--attach", name]
    commits = [command for command in commands if command[:2] == ["docker", "commit"]]
    assert commits == ([["docker", "commit", "--change", "USER 1000:1000", name, "p:1"]] if install_code == 0 else [])
    assert commands[-1] == ["docker", "rm", "--force", "--volumes", name] and code == install_code


@pytest.mark.parametrize("native_code", [0, 3])
def test_another_platforms_packages_are_unpacked_natively_and_only_checked_emulated(monkeypatch, native_code):
    """issue 46: pip and compileall under qemu made the arm64 build 16 minutes. A native container
    unpacks and compiles; its /opt/venv is copied into the arm64 one, which only runs the check."""
    commands = FakeEngine(monkeypatch).commands
    monkeypatch.setattr(builder.progress, "run_summarised", lambda command, *args, **kwargs: (
        commands.append(command) or ((native_code, "unpacked") if command[-1].endswith("-native") else (0, "ok"))))
    copies = []
    monkeypatch.setattr(builder.docker, "copy_between", lambda *args: copies.append(args) or answered([], 0))
    unpacked = builder.Unpacked("tflab-base:bookworm", ["sh", "/tmp/in/x.sh", "unpack", "aarch64"], "/opt/venv")
    code, tail = builder.install_and_commit("tflab-base:bookworm-arm64", Path("/ctx"), "/tmp/in",
                                            ["sh", "/tmp/in/x.sh", "check"], "p:1", [], "tflab.image=trainer",
                                            "making p:1", lambda message: None, lambda line: None,
                                            "linux/arm64", unpacked)
    emulated = commands[0][commands[0].index("--name") + 1]
    native = commands[1][commands[1].index("--name") + 1]
    assert native == f"{emulated}-native"
    assert commands[0][-4:] == ["tflab-base:bookworm-arm64", "sh", "/tmp/in/x.sh", "check"]
    assert commands[0][commands[0].index("--platform") + 1] == "linux/arm64"
    assert commands[1][-5:] == ["tflab-base:bookworm", "sh", "/tmp/in/x.sh", "unpack", "aarch64"]
    assert "--platform" not in commands[1] and "/ctx:/tmp/in:ro" in commands[1]
    assert commands[2] == ["docker", "start", "--attach", native]
    commits = [command for command in commands if command[:2] == ["docker", "commit"]]
    if native_code == 0:
        assert copies == [(native, "/opt/venv", emulated, "/opt")]
        assert ["docker", "start", "--attach", emulated] in commands
        assert commits == [["docker", "commit", emulated, "p:1"]] and code == 0
    else:  # nothing is copied, started emulated or committed
        assert copies == [] and ["docker", "start", "--attach", emulated] not in commands and commits == []
        assert (code, tail) == (3, "unpacked")
    assert commands[-1] == ["docker", "rm", "--force", "--volumes", emulated, native]


@pytest.mark.parametrize("native", [images.AMD64, images.ARM64])
def test_a_foreign_platforms_packages_are_unpacked_on_the_engines_own_base(monkeypatch, tmp_path, native):
    seen = {}

    def install(base, folder, mounted_at, command, tag, changes, label, what, say, summarise, platform="",
                unpacked=None):
        seen.update(base=base, command=command, platform=platform, unpacked=unpacked)
        return 0, ""

    monkeypatch.setattr(images.builder, "install_and_commit", install)
    monkeypatch.setattr(images, "ensure_wheels", lambda image: None)
    monkeypatch.setattr(images, "ensure_base", lambda requested, platform, native: images.LOCAL_BASES[platform])
    for module in (images, record):
        monkeypatch.setattr(module, "image_id", lambda name: None)
    monkeypatch.setattr(record, "BUILT", tmp_path / "built.json")
    image = dataclasses.replace(images.variant(platform=images.ARM64), wheels=tmp_path / "wheels")
    images.ensure_packages(image, "tflab-base:bookworm-arm64", "sha256:base", native)
    script = ["sh", "/tmp/tflab-install/install-packages.sh"]
    if native == images.ARM64:  # its own platform: all of it in one container, as on a Mac
        assert seen == {"base": "tflab-base:bookworm-arm64", "command": script, "platform": "", "unpacked": None}
    else:
        assert seen == {"base": "tflab-base:bookworm-arm64", "command": [*script, "check"], "platform": images.ARM64,
                        "unpacked": builder.Unpacked("tflab-base:bookworm", [*script, "unpack", "aarch64"],
                                                     "/opt/venv")}


class Engine:
    """The images an engine holds, by name, as images.py asks for them (image_id, image rm)."""

    def __init__(self, monkeypatch, tmp_path):
        import subprocess

        self.names: set[str] = set()
        monkeypatch.setattr(record, "BUILT", tmp_path / "built.json")
        base = "tflab-base:bookworm"  # the base every build here is on, kept out of `names`
        for module in (images, record):  # image_id is read in both: the builds, and the record's removals
            monkeypatch.setattr(module, "image_id", lambda name: "sha256:0f" if name in {*self.names, base} else None)
        monkeypatch.setattr(images.builder, "remove_untagged_children", lambda name, since=None: [])

        def remove(name, force=False, timeout=60):
            found = name in self.names
            self.names.discard(name)
            return subprocess.CompletedProcess(["docker", "image", "rm", name], 0 if found else 1)

        monkeypatch.setattr(images.docker, "image_remove", remove)


def trainer_image_build(monkeypatch, tmp_path, build) -> str:
    """images.ensure_image up to its `docker build`, which `build(tag)` stands in for."""
    from contextlib import contextmanager

    @contextmanager
    def context(beside, files):
        yield tmp_path

    monkeypatch.setattr(images, "engine_platform", lambda: images.AMD64)
    monkeypatch.setattr(images, "emulation_missing", lambda platform, native: None)
    monkeypatch.setattr(images, "ensure_base", lambda requested, platform, native: "tflab-base:bookworm")
    monkeypatch.setattr(images, "ensure_packages", lambda image, base, base_id, native: "tflab-trainer-packages:cpu-1")
    monkeypatch.setattr(images.builder, "context", context)
    monkeypatch.setattr(images, "docker_build", lambda dockerfile, folder, tag, args, platform="": build(tag))
    return images.ensure_image()


def test_an_interrupted_build_records_its_tag_so_an_image_the_engine_tags_afterwards_is_removed(monkeypatch,
                                                                                                   tmp_path):
    """Ctrl-C ends the build's client, and `tflab images` returned while the engine went on to
    tag the image: recorded nowhere, nothing (make clean, the next build) ever removed it."""
    engine = Engine(monkeypatch, tmp_path)
    tags = []

    def interrupted(tag):
        tags.append(tag)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        trainer_image_build(monkeypatch, tmp_path, interrupted)
    assert record.built_images() == tags  # recorded before the build began
    engine.names.add(tags[0])  # the engine finishes its last layer and tags it, the lab long gone
    images.remove_built()  # make clean
    assert engine.names == set()


def test_an_image_the_engine_tagged_before_the_interrupt_was_handled_is_removed_at_once(monkeypatch, tmp_path):
    engine = Engine(monkeypatch, tmp_path)

    def tagged_then_interrupted(tag):
        engine.names.add(tag)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        trainer_image_build(monkeypatch, tmp_path, tagged_then_interrupted)
    assert engine.names == set() and record.built_images() == []


def test_a_failed_build_is_not_recorded_and_a_built_one_replaces_the_last(monkeypatch, tmp_path):
    engine = Engine(monkeypatch, tmp_path)

    def failed(tag):
        raise images.LabError("building failed")

    with pytest.raises(images.LabError):
        trainer_image_build(monkeypatch, tmp_path, failed)
    assert record.built_images() == []
    record.record_built("tflab-trainer:cpu-aaaaaaaaaaaa")  # an interrupted build's, never made
    record.record_built("tflab-trainer:cpu-bbbbbbbbbbbb")  # an older build's, on the engine
    engine.names.add("tflab-trainer:cpu-bbbbbbbbbbbb")
    tag = trainer_image_build(monkeypatch, tmp_path, engine.names.add)
    assert record.built_images() == [tag] and engine.names == {tag}


def test_a_build_is_tagged_only_once_it_succeeded(monkeypatch, tmp_path):
    """The engine finishes a legacy build whose client went, and tagged its image 5-8 s after an
    interrupted lab had exited (3 of 3 tries). The build is untagged (--iidfile); the lab tags the
    image it wrote only after the build succeeded, so an interrupted one leaves no tag."""
    engine = FakeEngine(monkeypatch, stdout="")
    iidfile = tmp_path / "image-id"
    command = builder.build_command(tmp_path / "Dockerfile", tmp_path, iidfile, {})
    assert "--tag" not in command and command[command.index("--iidfile") + 1] == str(iidfile)

    def built(command, summarise, say, what, **kwargs):
        iidfile.write_text("sha256:" + "ab" * 32)
        return 0, "Successfully built abababababab"

    monkeypatch.setattr(progress, "run_summarised", built)
    code, _ = builder.run_build(command, "building t:1", print, False, tag="t:1", iidfile=iidfile)
    assert code == 0 and ("tag", "sha256:" + "ab" * 32, "t:1") in [call[0] for call in engine.calls]

    engine.commands.clear()

    def interrupted(command, summarise, say, what, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(progress, "run_summarised", interrupted)
    monkeypatch.setattr(builder, "remove_interrupted", lambda named, parent, since: None)
    with pytest.raises(KeyboardInterrupt):
        builder.run_build(command, "building t:1", print, False, tag="t:1", iidfile=iidfile)
    assert not [call for call in engine.calls if call[0][0] == "tag"]

    def failed(command, summarise, say, what, **kwargs):
        return 1, "The command '/bin/sh -c false' returned a non-zero code: 1"

    monkeypatch.setattr(progress, "run_summarised", failed)
    assert builder.run_build(command, "building t:1", print, False, tag="t:1", iidfile=iidfile)[0] == 1
    assert not [call for call in engine.calls if call[0][0] == "tag"]


# The code layer's build, one COPY step, as the legacy builder prints it (Docker 20.10).
CODE_LAYER_OUTPUT = """\
Step 1/3 : ARG PACKAGES_IMAGE=tflab-trainer-packages
Step 2/3 : FROM ${PACKAGES_IMAGE}
 ---> e30cdbc20847
Step 3/3 : COPY tflab/ /opt/tflab/tflab/
 ---> 385248c8209d
Successfully built 385248c8209d
"""


def test_an_interrupted_legacy_build_let_finish_removes_the_image_it_made_and_nothing_else(monkeypatch, tmp_path):
    """Issue 56: a Ctrl-C in the code layer's COPY step found nothing to remove, and the engine wrote
    the step's image 10-20 s later, untagged. Let finish, the build names its image: that one goes,
    and no search of the parent's untagged images (another build's, maybe) is made."""
    engine = FakeEngine(monkeypatch, stdout="")
    iidfile = tmp_path / "image-id"
    command = builder.build_command(tmp_path / "Dockerfile", tmp_path, iidfile, {})
    given = {}

    def interrupted_then_finished(command, summarise, say, what, **kwargs):
        given.update(kwargs)
        for line in CODE_LAYER_OUTPUT.splitlines():
            summarise(line.strip())
        raise KeyboardInterrupt

    def searched(*args):
        raise AssertionError("a finished build's images are known by name")

    monkeypatch.setattr(progress, "run_summarised", interrupted_then_finished)
    monkeypatch.setattr(builder, "remove_interrupted", searched)
    with pytest.raises(KeyboardInterrupt):
        builder.run_build(command, "building t:1", print, False, parent="p:1", tag="t:1", iidfile=iidfile)
    assert given["finish_seconds"] == builder.INTERRUPTED_FINISH_SECONDS
    assert [call[0] for call in engine.calls if call[0][:2] == ("image", "rm")] == [("image", "rm", "385248c8209d")]
    assert not [call for call in engine.calls if call[0][0] == "tag"]


def test_an_interrupted_command_is_let_finish_its_lines_still_read(tmp_path):
    """run_summarised's finish_seconds: the interrupt is raised again once the command ended by
    itself, its lines after the interrupt read (the build's image is named in them); without it, the
    command is killed at once."""
    for finish_seconds, expected in ((10, ["one", "two"]), (0, ["one"])):
        read = []

        def summarise(line: str) -> str | None:
            read.append(line)
            return line

        def say(message: str) -> None:
            if message.startswith("echo: one"):
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            progress.run_summarised(["sh", "-c", "echo one; sleep 0.5; echo two"], summarise, say, "echo",
                                    finish_seconds=finish_seconds)
        assert read == expected, finish_seconds
