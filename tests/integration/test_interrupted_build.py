"""An interrupted image build leaves nothing behind: no untagged image that `make clean` does not
know, which would keep the image under it on the engine (builder.run_build, make clean)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import pytest
from tflab.engine import docker
from tflab.images import builder

BASE = "tflab-base:bookworm"  # the lab's own base, made by `make images`; only built on, never removed


def build(dockerfile: str, folder, tag: str) -> None:
    (folder / "Dockerfile").write_text(dockerfile)
    subprocess.run(docker.command("build", "--quiet", "--tag", tag, str(folder)), check=True, capture_output=True,
                   env=builder.build_environment(False))


def a_parent(tmp_path) -> str:
    """A tiny image of the test's own on BASE, which each test removes: the parent of its builds."""
    if not docker.run("image", "inspect", BASE).returncode == 0:
        pytest.skip(f"{BASE} is not on this engine (make images bootstraps it where no registry is reachable)")
    parent = f"tflab-test-parent:{uuid.uuid4().hex[:12]}"
    (tmp_path / "parent").mkdir()
    build(f"FROM {BASE}\nLABEL tflab.test={parent.split(':')[1]}\n", tmp_path / "parent", parent)
    return parent


def interrupt_a_child_build(tmp_path, parent: str, tag: str, sleep_seconds: int | None, at: str = "RUN sleep",
                            payload_bytes: int = 1000) -> None:
    """The lab's build of a child of `parent` (a COPY step, then `RUN sleep` unless `sleep_seconds`
    is None), interrupted as a user's Ctrl-C would be the moment the step `at` starts."""
    child = tmp_path / "child"
    child.mkdir()
    (child / "payload").write_bytes(os.urandom(payload_bytes))
    run = f"RUN sleep {sleep_seconds}\n" if sleep_seconds is not None else ""
    (child / "Dockerfile").write_text(f"FROM {parent}\nCOPY payload /payload\n{run}")
    command = builder.build_command(child / "Dockerfile", child, tmp_path / "image-id", {})

    def say(message: str) -> None:
        if at in message and "interrupted" not in message:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        builder.run_build(command, "building", say, use_buildkit=False, parent=parent, tag=tag,
                          iidfile=tmp_path / "image-id")


def test_an_interrupted_build_removes_what_it_made(engine, trainer_image, tmp_path, monkeypatch):
    """A build that does not finish within the bound it is given after an interrupt: ended, and what
    it had made is found on its parent and removed."""
    monkeypatch.setattr(builder, "INTERRUPTED_FINISH_SECONDS", 1)
    parent = a_parent(tmp_path)
    try:
        interrupt_a_child_build(tmp_path, parent, f"{parent}-child", sleep_seconds=120)
        assert builder.untagged_children(parent) == [], "the interrupted build left an untagged image"
    finally:
        leftovers = builder.remove_untagged_children(parent)
        removed = docker.run("image", "rm", parent, timeout=120)
    assert leftovers == []
    assert removed.returncode == 0, removed.stderr


def build_steps_running(parent: str) -> list[str]:
    """The containers of a build's steps on `parent`: `ancestor` matches the images built on it."""
    return docker.run("ps", "--quiet", "--filter", f"ancestor={parent}").stdout.split()


def test_an_interrupted_build_leaves_no_tag_when_the_engine_finishes_it(engine, trainer_image, tmp_path):
    """The engine finishes a legacy build whose client went: its image came, tagged, 5-8 s after
    the lab had exited (3 of 3 tries). The build is untagged now and the lab tags it only once it
    succeeded: here the step the lab left ends, and neither the tag nor an untagged image stays."""
    parent = a_parent(tmp_path)
    tag = f"{parent}-child"
    try:
        interrupt_a_child_build(tmp_path, parent, tag, sleep_seconds=3)
        # Until the step the engine went on with has ended (it sleeps 3 s; bounded, not timed)
        for _ in range(120):
            if not build_steps_running(parent):
                break
            time.sleep(0.5)
        assert build_steps_running(parent) == [], "the build's step never ended"
        assert docker.run("image", "inspect", tag).returncode != 0, "the interrupted build left its tag"
    finally:
        docker.run("image", "rm", tag)
        leftovers = builder.remove_untagged_children(parent)
        docker.run("image", "rm", parent, timeout=120)
    assert leftovers == [], "the interrupted build left an untagged image"


def test_a_build_interrupted_in_its_one_copy_step_leaves_no_untagged_image(engine, trainer_image, tmp_path):
    """Issue 56: the code layer is one COPY step. A Ctrl-C in it left the lab nothing to find (the
    step's image was not made yet), and the engine, which finishes a legacy build whose client went,
    wrote it 10-20 s later, untagged, on the packages image (2 of 2 tries). The client is now let
    finish and its image, named in its output, removed: none comes afterwards."""
    if builder.buildkit():
        pytest.skip("BuildKit ends a build whose client went, and makes no intermediate image")
    parent = a_parent(tmp_path)
    tag = f"{parent}-child"
    left: list[str] = []
    try:
        interrupt_a_child_build(tmp_path, parent, tag, None, at="COPY payload", payload_bytes=32 * 2**20)
        for _ in range(40):  # 20 s: past the 10-20 s the engine took to write the step's image
            left = builder.untagged_children(parent)
            if left:
                break
            time.sleep(0.5)
        assert docker.run("image", "inspect", tag).returncode != 0, "the interrupted build left its tag"
    finally:
        docker.run("image", "rm", tag)
        leftovers = builder.remove_untagged_children(parent)
        docker.run("image", "rm", parent, timeout=120)
    assert left == [] and leftovers == [], "the interrupted build left an untagged image"


def test_an_untagged_child_is_found_and_removed_before_its_parent(engine, trainer_image, tmp_path):
    """What an interrupted build of an older lab left: `make clean` (command_clean) removes the
    untagged images on each image it removes first, found by their parent, and the parent then goes."""
    parent = a_parent(tmp_path)
    (tmp_path / "child").mkdir()
    child = f"{parent}-child"
    try:
        build(f"FROM {parent}\nRUN echo 1 > /left\n", tmp_path / "child", child)
        build(f"FROM {parent}\nRUN echo 2 > /left\n", tmp_path / "child", child)  # the first: untagged now
        docker.run("image", "rm", child)
        left = builder.untagged_children(parent)
        assert len(left) == 1, left
        parent_id = docker.run("image", "inspect", "--format", "{{.Id}}", parent).stdout.strip()
        assert builder.remove_untagged_children(parent) == left
        assert builder.untagged_children(parent) == []
    finally:
        builder.remove_untagged_children(parent)
        docker.run("image", "rm", "--force", parent, timeout=120)  # as make clean does
    assert docker.run("image", "inspect", parent_id).returncode != 0, "the parent stayed on the engine"
