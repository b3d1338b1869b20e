"""A RUNS_DIR another user may write (issue 56): that user could rename a live run's folder away
(the lab then exited 2, its containers and networks left, no summary, no set-ID check) or plant
`latest` before every run. Such a folder, or one on the path above it, is refused before anything
starts, in one line naming it, its owner and mode, and what is allowed (OpenSSH's StrictModes, with
Debian's user-group-modes patch, and the sticky bit above RUNS_DIR as for /tmp:
hostfiles.others_may_write). Made here as root (CI): chown to another uid needs it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from labtest.cli import lab_env, run_lab
from tflab.core import hostfiles, runfolder
from tflab.core.errors import LabError
from tflab.core.settings import Settings

ROOT = os.geteuid() == 0
OTHER = 1000  # a user of this host who is not the lab's


def refused(runs: Path) -> str:
    with pytest.raises(LabError) as error:
        runfolder.planned(Settings(runs_dir=str(runs)))
    return str(error.value)


@pytest.mark.parametrize("mode, why", [
    (0o777, "is writable by every user"),
    (0o1777, "is writable by every user"),  # sticky: another still plants `latest`, or a run's name
    (0o770, "is writable by its group (gid 1234), which holds other users"),
])
def test_a_runs_dir_others_may_write_is_refused_before_anything_is_made(tmp_path, mode, why):
    runs = tmp_path / "runs"
    runs.mkdir()
    runs.chmod(mode)
    if mode == 0o770:
        os.chown(runs, -1, 1234)  # a group no user's own: no private group of the owner's
    said = refused(runs)
    assert said == (f"RUNS_DIR={runs} is not allowed: {runs} (uid {os.geteuid()}, mode {mode:o}) {why}, so another "
                    "user could rename or replace a run's folder while it runs; " + runfolder.runs_dir_safe())
    with pytest.raises(LabError):
        runfolder.make(runs / "r1", link_latest=True, owner=True)
    assert list(runs.iterdir()) == []


@pytest.mark.skipif(not ROOT, reason="needs root to give a folder to another uid")
def test_a_runs_dir_or_a_folder_above_it_that_another_user_owns_is_refused(tmp_path):
    above = tmp_path / "theirs"
    (above / "runs").mkdir(parents=True)
    os.chown(above, OTHER, OTHER)
    assert f"{above} (uid {OTHER}, mode 755) is another user's" in refused(above / "runs")
    assert f"{above} (uid {OTHER}, mode 755) is another user's" in refused(above / "new" / "runs")
    os.chown(above, 0, 0)
    os.chown(above / "runs", OTHER, OTHER)
    assert f"{above / 'runs'} (uid {OTHER}, mode 755) is another user's" in refused(above / "runs")


def test_a_sticky_folder_above_runs_dir_and_a_closed_one_are_taken(tmp_path):
    """/tmp: everyone may write it, but only an entry's owner may rename that entry."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    runfolder.make(runfolder.planned(Settings(runs_dir=str(shared / "runs"), run="r1")), link_latest=True, owner=True)
    assert stat.S_IMODE((shared / "runs").stat().st_mode) == 0o700
    assert os.readlink(shared / "runs" / "latest") == "r1"
    shared.chmod(0o777)  # the same without the sticky bit: anyone may rename runs/ itself
    assert f"{shared} (uid {os.geteuid()}, mode 777) is writable by every user" in refused(shared / "runs")
    assert hostfiles.others_may_write(tmp_path) == ""


@pytest.mark.skipif(not ROOT, reason="needs root to give a link to another uid")
def test_a_latest_link_another_user_left_does_not_block_a_run(tmp_path):
    """In a RUNS_DIR only the lab's user may write, no one else can plant `latest`; a link left
    by another (one chown'd, one from before the folder was closed) is replaced by the lab's."""
    runs = tmp_path / "runs"
    runs.mkdir(mode=0o700)
    (runs / "latest").symlink_to("/etc")
    os.lchown(runs / "latest", OTHER, OTHER)
    runfolder.make(runfolder.planned(Settings(runs_dir=str(runs), run="r1")), link_latest=True, owner=True)
    assert os.readlink(runs / "latest") == "r1" and os.lstat(runs / "latest").st_uid == os.geteuid()


def test_up_in_a_runs_dir_everyone_may_write_is_one_line_and_writes_nothing(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    runs.chmod(0o777)
    (tmp_path / "bin").mkdir()  # no docker: nothing could start anyway
    result = run_lab("up", f"RUNS_DIR={runs}", "BACKEND=local", env=lab_env(PATH=str(tmp_path / "bin")))
    assert result.returncode == 2 and result.stdout == "" and "Traceback" not in result.stderr, result.output
    assert result.stderr.splitlines() == [
        f"tflab: RUNS_DIR={runs} is not allowed: {runs} (uid {os.geteuid()}, mode 777) is writable by every user, so "
        f"another user could rename or replace a run's folder while it runs; {runfolder.runs_dir_safe()}"]
    assert list(runs.iterdir()) == []
