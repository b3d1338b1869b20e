"""The set-ID hole (issue 41): a task or a root replica can leave a set-user-ID program in what it
may write, and a host user could run it. The run folder is closed to other users (0700), and before
a run is handed back every set-ID bit in what its tasks could write is taken away
(beneath.strip_setid), with no link followed: real files, made here as the tests' user (root in CI)."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from tflab.core import beneath, runfolder

ROOT = os.geteuid() == 0


def plant(path: Path, mode: int = 0o4755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile("/bin/sh", path)
    path.chmod(mode)
    return path


def modes(root: Path) -> dict[str, int]:
    """Every entry's mode under root (links' own), by path."""
    found = {}
    for folder, names, files in os.walk(root):
        for name in names + files:
            path = Path(folder) / name
            found[str(path.relative_to(root))] = os.lstat(path).st_mode
    return found


def setid_left(root: Path) -> list[str]:
    return sorted(path for path, mode in modes(root).items()
                  if mode & beneath.SETID and not stat.S_ISLNK(mode))


def test_a_run_folder_is_made_only_its_users(tmp_path):
    old = os.umask(0)
    try:
        runfolder.make(tmp_path / "runs" / "r1", link_latest=True, owner=True)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "runs" / "r1").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "runs").st_mode) == 0o700  # a RUNS_DIR the lab made
    (tmp_path / "mine").mkdir(mode=0o755)
    runfolder.make(tmp_path / "mine" / "r2", link_latest=False)
    assert stat.S_IMODE(os.stat(tmp_path / "mine").st_mode) == 0o755  # one the user made is left as it is
    assert stat.S_IMODE(os.stat(tmp_path / "mine" / "r2").st_mode) == 0o700


def test_setuid_setgid_files_and_setgid_folders_lose_their_bits_and_are_recorded(tmp_path):
    plant(tmp_path / "tasks" / "rootsh")
    plant(tmp_path / "volumes" / "data" / "deep" / "g", 0o2755)
    (tmp_path / "volumes" / "shared").mkdir()
    (tmp_path / "volumes" / "shared").chmod(0o2777)
    (tmp_path / "tasks" / "plain").write_text("x")
    before = modes(tmp_path)
    result = beneath.strip_setid(tmp_path)
    assert setid_left(tmp_path) == []
    assert {entry.path: (entry.mode, entry.stripped) for entry in result.found} == {
        "tasks/rootsh": (before["tasks/rootsh"], True), "volumes/data/deep/g": (before["volumes/data/deep/g"], True),
        "volumes/shared": (before["volumes/shared"], True)}
    assert stat.S_IMODE(os.stat(tmp_path / "tasks" / "rootsh").st_mode) == 0o755  # only the bit goes
    assert stat.S_IMODE(os.stat(tmp_path / "volumes" / "shared").st_mode) == 0o777
    assert result.complete and result.found[0].to_dict()["mode"] in ("4755", "2755", "2777")
    assert beneath.strip_setid(tmp_path).found == []  # nothing left to find


def test_a_subtree_is_walked_alone_and_named_from_the_top(tmp_path):
    plant(tmp_path / "tasks" / "a")
    plant(tmp_path / "other" / "b")
    result = beneath.strip_setid(tmp_path, "tasks")
    assert [entry.path for entry in result.found] == ["tasks/a"]
    assert setid_left(tmp_path) == ["other/b"]
    assert beneath.strip_setid(tmp_path, "missing").found == []
    assert beneath.strip_setid(tmp_path / "gone").found == []


def test_links_are_never_followed_nor_their_targets_changed(tmp_path):
    outside = plant(tmp_path / "outside" / "host-setuid")
    (tmp_path / "outside" / "setgid-dir").mkdir()
    (tmp_path / "outside" / "setgid-dir").chmod(0o2755)
    tree = tmp_path / "run"
    (tree / "tasks").mkdir(parents=True)
    (tree / "tasks" / "to-file").symlink_to(outside)
    (tree / "tasks" / "to-dir").symlink_to(tmp_path / "outside")
    (tree / "tasks" / "dangling").symlink_to(tmp_path / "nowhere")
    result = beneath.strip_setid(tree)
    assert result.found == [] and result.complete
    assert stat.S_IMODE(outside.stat().st_mode) == 0o4755
    assert stat.S_IMODE((tmp_path / "outside" / "setgid-dir").stat().st_mode) == 0o2755
    (tmp_path / "link-top").symlink_to(tree)
    assert beneath.strip_setid(tmp_path / "link-top").unentered  # the top itself a link: refused, said
    assert stat.S_IMODE(outside.stat().st_mode) == 0o4755


def test_fifos_sockets_and_devices_are_never_opened(tmp_path):
    """A FIFO would block a reader forever, a device may act on open; both are only looked at."""
    os.mkfifo(tmp_path / "fifo")
    os.chmod(tmp_path / "fifo", 0o4644)
    if ROOT:
        os.mknod(tmp_path / "null", 0o6666 | stat.S_IFCHR, os.makedev(1, 3))
    result = beneath.strip_setid(tmp_path)  # would hang on the FIFO were it opened for reading
    assert setid_left(tmp_path) == []
    assert "fifo" in [entry.path for entry in result.found]


def test_a_folder_swapped_for_a_link_mid_walk_is_not_followed(tmp_path, monkeypatch):
    """Between the listing and the open, a task swaps a folder for a link to a host folder."""
    victim = tmp_path / "host"
    plant(victim / "passwd")
    tree = tmp_path / "run"
    plant(tree / "tasks" / "sub" / "x")
    listdir = os.listdir

    def swapping(fd):
        names = listdir(fd)
        if "sub" in names:
            shutil.rmtree(tree / "tasks" / "sub")
            (tree / "tasks" / "sub").symlink_to(victim)
        return names

    monkeypatch.setattr(os, "listdir", swapping)
    result = beneath.strip_setid(tree)
    assert stat.S_IMODE((victim / "passwd").stat().st_mode) == 0o4755
    assert result.found == []


def test_a_deep_tree_is_cut_at_its_bound_and_says_so(tmp_path):
    deep = tmp_path
    for level in range(12):
        deep = deep / f"d{level}"
    plant(deep / "sh")
    result = beneath.strip_setid(tmp_path, depth=5)
    assert "deeper than 5" in result.cut and not result.complete
    assert beneath.strip_setid(tmp_path).complete
    assert setid_left(tmp_path) == []
    for index in range(30):
        (tmp_path / f"f{index}").write_text("")
    many = beneath.strip_setid(tmp_path, most=10)
    assert "more than 10 entries" in many.cut


@pytest.mark.skipif(not ROOT, reason="needs root to make a file of another uid")
def test_another_users_file_the_lab_cannot_change_is_recorded_not_stripped():
    """A lab that is not root (a laptop's docker group) cannot fchmod a root replica's file: EPERM,
    recorded so the caller can strip it another way (or say it could not)."""
    tmp_path = Path(tempfile.mkdtemp(prefix="tflab-setid-"))  # pytest's own is 0700: uid 1000 could not enter
    try:
        another_users_file(tmp_path)
    finally:
        shutil.rmtree(tmp_path)


def another_users_file(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    plant(tmp_path / "tasks" / "rootsh")
    pid = os.fork()
    if pid == 0:  # a child as uid 1000, the lab on a laptop
        code = 1
        try:
            os.setgid(1000)
            os.setuid(1000)
            result = beneath.strip_setid(tmp_path)
            entry = result.left[0]
            code = 0 if (entry.path, entry.uid, entry.stripped, entry.why) == (
                "tasks/rootsh", 0, False, os.strerror(errno.EPERM)) and not result.complete else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert setid_left(tmp_path) == ["tasks/rootsh"]


def test_a_tree_of_ten_thousand_files_is_walked_within_its_bound(tmp_path):
    for folder in range(100):
        (tmp_path / f"d{folder}").mkdir()
        for index in range(100):
            (tmp_path / f"d{folder}" / f"f{index}").write_bytes(b"")
    plant(tmp_path / "d50" / "sh")
    result = beneath.strip_setid(tmp_path)
    assert result.complete and result.looked_at == 10_101 and [e.path for e in result.found] == ["d50/sh"]
