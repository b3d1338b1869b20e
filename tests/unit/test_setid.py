"""The set-ID hole (issue 41): a task or a root replica can leave a set-user-ID program in what it
may write, and a host user could run it. The run folder is closed to other users (0700), and before
a run is handed back every set-ID bit in what its tasks could write is taken away
(setidbits.strip_setid), with no link followed: real files, made here as the tests' user (root in CI)."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from tflab.core import runfolder, setidbits

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
                  if mode & setidbits.SETID and not stat.S_ISLNK(mode))


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
    result = setidbits.strip_setid(tmp_path)
    assert setid_left(tmp_path) == []
    assert {entry.path: (entry.mode, entry.stripped) for entry in result.found} == {
        "tasks/rootsh": (before["tasks/rootsh"], True), "volumes/data/deep/g": (before["volumes/data/deep/g"], True),
        "volumes/shared": (before["volumes/shared"], True)}
    assert stat.S_IMODE(os.stat(tmp_path / "tasks" / "rootsh").st_mode) == 0o755  # only the bit goes
    assert stat.S_IMODE(os.stat(tmp_path / "volumes" / "shared").st_mode) == 0o777
    assert result.complete and result.found[0].to_dict()["mode"] in ("4755", "2755", "2777")
    assert setidbits.strip_setid(tmp_path).found == []  # nothing left to find


def test_a_subtree_is_walked_alone_and_named_from_the_top(tmp_path):
    plant(tmp_path / "tasks" / "a")
    plant(tmp_path / "other" / "b")
    result = setidbits.strip_setid(tmp_path, "tasks")
    assert [entry.path for entry in result.found] == ["tasks/a"]
    assert setid_left(tmp_path) == ["other/b"]
    assert setidbits.strip_setid(tmp_path, "missing").found == []
    assert setidbits.strip_setid(tmp_path / "gone").found == []


def test_links_are_never_followed_nor_their_targets_changed(tmp_path):
    outside = plant(tmp_path / "outside" / "host-setuid")
    (tmp_path / "outside" / "setgid-dir").mkdir()
    (tmp_path / "outside" / "setgid-dir").chmod(0o2755)
    tree = tmp_path / "run"
    (tree / "tasks").mkdir(parents=True)
    (tree / "tasks" / "to-file").symlink_to(outside)
    (tree / "tasks" / "to-dir").symlink_to(tmp_path / "outside")
    (tree / "tasks" / "dangling").symlink_to(tmp_path / "nowhere")
    result = setidbits.strip_setid(tree)
    assert result.found == [] and result.complete
    assert stat.S_IMODE(outside.stat().st_mode) == 0o4755
    assert stat.S_IMODE((tmp_path / "outside" / "setgid-dir").stat().st_mode) == 0o2755
    (tmp_path / "link-top").symlink_to(tree)
    assert setidbits.strip_setid(tmp_path / "link-top").unentered  # the top itself a link: refused, said
    assert stat.S_IMODE(outside.stat().st_mode) == 0o4755


def test_fifos_sockets_and_devices_are_never_opened(tmp_path):
    """A FIFO would block a reader forever, a device may act on open; both are only looked at."""
    os.mkfifo(tmp_path / "fifo")
    os.chmod(tmp_path / "fifo", 0o4644)
    if ROOT:
        os.mknod(tmp_path / "null", 0o6666 | stat.S_IFCHR, os.makedev(1, 3))
    result = setidbits.strip_setid(tmp_path)  # would hang on the FIFO were it opened for reading
    assert setid_left(tmp_path) == []
    assert "fifo" in [entry.path for entry in result.found]


@pytest.mark.parametrize("when", ["after the listing", "before its turn"])
def test_a_folder_swapped_for_a_link_mid_walk_is_not_followed(tmp_path, monkeypatch, when):
    """Between the listing and the open, or between the open that strips a folder's own bit and the
    one that walks it (breadth first: its turn comes later), a task swaps a folder for a link to a
    host folder."""
    victim = tmp_path / "host"
    plant(victim / "passwd")
    tree = tmp_path / "run"
    plant(tree / "tasks" / "sub" / "x")
    scandir, reopen = os.scandir, setidbits._reopen

    def swap() -> None:
        if not (tree / "tasks" / "sub").is_symlink():
            shutil.rmtree(tree / "tasks" / "sub")
            (tree / "tasks" / "sub").symlink_to(victim)

    def swapping(fd):
        with scandir(fd) as listing:
            entries = list(listing)
        if "sub" in [entry.name for entry in entries]:
            swap()
        return contextlib.nullcontext(entries)

    def swapping_before(start, parts, path, result):
        if parts[-1:] == ("sub",):
            swap()
        return reopen(start, parts, path, result)

    if when == "after the listing":
        monkeypatch.setattr(os, "scandir", swapping)
    else:
        monkeypatch.setattr(setidbits, "_reopen", swapping_before)
    result = setidbits.strip_setid(tree)
    assert stat.S_IMODE((victim / "passwd").stat().st_mode) == 0o4755
    assert result.found == []
    assert result.unentered == ([] if when == "after the listing" else [
        "tasks/sub (no longer a folder: a link or file since it was listed, not followed)"])


def chain(top: Path, levels: int) -> Path:
    deep = top
    for level in range(levels):
        deep = deep / f"d{level}"
    deep.mkdir(parents=True)
    return deep


def named_above(path: str, result: setidbits.Stripping) -> bool:
    """Whether an entry lies in a subtree the walk named as not (wholly) looked into."""
    return any(path.startswith(f"{skipped.split(' (')[0]}/") for skipped in result.skipped + result.unentered)


def test_a_chain_deeper_than_the_bound_is_named_and_the_walk_goes_on(tmp_path):
    """Issue 56: a SCRIPT that first makes a 70-deep chain of folders kept a shallow `tasks/sh1000`
    4755, as the walk stopped at its first bound. Now the deep subtree is named, and every entry
    the walk could reach, listed before or after it, loses its bit."""
    deep = chain(tmp_path / "tasks" / "a", 70)
    plant(deep / "deep-sh")
    plant(tmp_path / "tasks" / "sh1000")
    plant(tmp_path / "tasks" / "z" / "sh")
    result = setidbits.strip_setid(tmp_path)
    assert setid_left(tmp_path) == [str((deep / "deep-sh").relative_to(tmp_path))]  # past 64: named, below
    assert {entry.path for entry in result.found} == {"tasks/sh1000", "tasks/z/sh"}
    beyond = "tasks/a/" + "/".join(f"d{level}" for level in range(63))
    assert result.skipped == [f"{beyond} (not looked into: deeper than 64 folders below the top)"]
    assert not result.complete and result.looked_at == 1 + 3 + 1 + 63  # tasks; a, sh1000, z; z/sh; d0 to d62
    assert setidbits.strip_setid(tmp_path, depth=80).complete
    assert setid_left(tmp_path) == []


def test_the_entry_bound_strips_every_shallower_entry_first_and_names_what_it_left(tmp_path):
    """Breadth first: past the bound on entries, only deeper (or later, at the bound's own level)
    entries are left, and the folders holding them are named."""
    for index in range(30):
        (tmp_path / "wide" / f"f{index:02}").mkdir(parents=True)
        plant(tmp_path / "wide" / f"f{index:02}" / "sh")
    plant(tmp_path / "shallow")
    result = setidbits.strip_setid(tmp_path, most=20)
    assert result.looked_at == 20 and "shallow" not in setid_left(tmp_path)
    assert stat.S_IMODE((tmp_path / "shallow").stat().st_mode) == 0o755
    named = {entry.split(" (")[0] for entry in result.skipped}
    assert len(named) == 19 and "wide" in named  # 18 of its folders listed but not entered (in listing order)
    assert len(setid_left(tmp_path)) == 30
    assert all(named_above(left, result) for left in setid_left(tmp_path))
    assert "wide (only partly looked at: the walk looks at 20 entries of a tree at most)" in result.skipped
    assert setidbits.strip_setid(tmp_path).complete and setid_left(tmp_path) == []


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
            result = setidbits.strip_setid(tmp_path)
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
    result = setidbits.strip_setid(tmp_path)
    assert result.complete and result.looked_at == 10_101 and [e.path for e in result.found] == ["d50/sh"]


# A replay with a claim volume of the run's, a claim CLAIMS gives a host folder, and the lab's hooks
CLAIM_JOB = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: job}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: Never
      template:
        spec:
          securityContext: {runAsUser: 0}
          containers:
          - name: tensorflow
            image: img:1
            volumeMounts: [{name: data, mountPath: /d}, {name: out, mountPath: /out}]
          volumes:
          - {name: data, persistentVolumeClaim: {claimName: data}}
          - {name: out, persistentVolumeClaim: {claimName: out}}
"""


class Guard:
    def release(self) -> None:
        pass


def test_a_replays_teardown_strips_every_folder_its_replicas_could_write_before_the_summary(
        tmp_path, monkeypatch, capsys):
    """runner.run's teardown, which up, chaos, soak, compare, the fixture and a replay all end with:
    after the replicas are removed (the stand-in is closed), before summary.json, every set-ID bit
    in the run folder (tasks/, the hooks folders, the claim volume) and the writable CLAIMS folder
    is gone, recorded in setid.json and said in one line after the table."""
    from labtest.fakes import FakeBackend
    from tflab.core.settings import Settings
    from tflab.k8s import tfjob
    from tflab.replay.run import ReplayRun
    from tflab.supervisor import runner, setid

    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(runner.reaper, "watch", lambda run_dir: Guard())
    (tmp_path / "tfjob.yaml").write_text(CLAIM_JOB)
    closed = tmp_path / "claims"
    (closed / "out").mkdir(parents=True)
    closed.chmod(0o700)
    settings = Settings.from_env({"TFJOB": str(tmp_path / "tfjob.yaml"), "RUNS_DIR": str(tmp_path / "runs"),
                                  "RUN": "r1", "CLAIMS": f"out={closed / 'out'}"})
    plan = tfjob.load(settings)
    run_dir = tmp_path / "runs" / "r1"
    planted = []

    def plant_everywhere(backend, attempt):
        volumes = run_dir / "volumes"
        for folder in (run_dir / "tasks", volumes / "tflab-hooks" / "worker-0", volumes / "data", closed / "out"):
            planted.append(plant(folder / "rootsh"))
        (run_dir / "volumes" / "data" / "setgid").mkdir()
        (run_dir / "volumes" / "data" / "setgid").chmod(0o2777)

    project = FakeBackend(plan.as_cluster(), run_dir, [[{"worker-0": 0, "worker-1": 0}]], on_start=plant_everywhere)
    strip_run = setid.strip_run
    seen = {}

    def watched(*args, **kwargs):
        seen["closed"], seen["summary"] = project.closed, (run_dir / runfolder.SUMMARY).exists()
        return strip_run(*args, **kwargs)

    monkeypatch.setattr(setid, "strip_run", watched)
    assert runner.run(ReplayRun(plan, settings, project, run_dir)) == 0
    assert seen == {"closed": True, "summary": False}
    assert setid_left(run_dir) == [] and setid_left(closed) == []
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o755 for path in planted)
    out = capsys.readouterr().out
    line = out.strip().splitlines()[-1]
    assert line.startswith("tflab: stripped the set-ID bits from 5 files a task wrote: ")
    assert "(uid 0, was 4755)" in line
    assert "and 2 more (setid.json)" in line
    record = runfolder.read_lab_json(run_dir, runfolder.SETID)
    assert {entry["path"] for entry in record["run"]["found"]} == {
        "tasks/rootsh", "volumes/tflab-hooks/worker-0/rootsh", "volumes/data/rootsh", "volumes/data/setgid"}
    assert [entry["path"] for entry in record["CLAIMS out"]["found"]] == ["rootsh"]
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700


def test_a_clean_run_says_nothing_of_set_id_bits(tmp_path):
    from tflab.supervisor import setid

    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "a.jsonl").write_text("{}")
    assert setid.strip_run(tmp_path) == []
    assert runfolder.read_lab_json(tmp_path, runfolder.SETID)["run"]["found"] == []


def test_what_was_left_or_not_looked_at_is_said_with_what_truly_keeps_others_out(tmp_path, monkeypatch):
    """Issue 56: the line said "the run folder is 0700" of a CLAIMS folder outside it. Each tree's
    line now says what was left in it and which folder on its path keeps other users out, or that none does."""
    from tflab.supervisor import setid

    run_dir, closed = tmp_path / "run", tmp_path / "closed"
    for folder in (run_dir, closed / "out"):
        folder.mkdir(parents=True)
    run_dir.chmod(0o700)
    closed.chmod(0o700)
    (closed / "out").chmod(0o777)
    open_claim = Path(tempfile.mkdtemp(prefix="tflab-open-claim-"))  # under /tmp: no folder on its path closed
    open_claim.chmod(0o777)
    left = setidbits.SetId("tasks/rootsh", 0, 0o104755, False, "Operation not permitted")
    monkeypatch.setattr(setidbits, "strip_setid", lambda folder, *a: setidbits.Stripping(
        found=[left] if folder == run_dir else [], skipped=["deep/d63 (not looked into: deeper than 64 folders)"]))
    try:
        said = setid.strip_run(run_dir, {"CLAIMS out": closed / "out", "CLAIMS open": open_claim})
    finally:
        shutil.rmtree(open_claim)
    assert said == [
        "could not strip set-ID bits from tasks/rootsh (uid 0, mode 4755: Operation not permitted); did not look for "
        "set-ID bits in deep/d63 (not looked into: deeper than 64 folders): no other user of this host can reach the "
        "run folder (mode 700); remove these before you share or open it up",
        "did not look for set-ID bits in CLAIMS out:deep/d63 (not looked into: deeper than 64 folders): no other user "
        f"of this host can reach CLAIMS out ({closed / 'out'}) ({closed} is 700, closed to them); remove these before "
        "you share or open it up",
        "did not look for set-ID bits in CLAIMS open:deep/d63 (not looked into: deeper than 64 folders): other users "
        f"of this host can reach CLAIMS open ({open_claim}): no folder on its path is closed to them, so remove these "
        "now"]
    record = runfolder.read_lab_json(run_dir, runfolder.SETID)
    assert record["CLAIMS out"]["skipped"] == ["deep/d63 (not looked into: deeper than 64 folders)"]


def test_down_strips_a_run_whose_lab_died_and_its_writable_claims(tmp_path):
    """`tflab down` removes what a dead lab left on the engine; it also takes the set-ID check the
    lab never made, over the run folder and the writable CLAIMS its config.json names."""
    from tflab.supervisor import setid

    run_dir, out, data = tmp_path / "r1", tmp_path / "out", tmp_path / "data"
    for folder in (run_dir, out, data):
        folder.mkdir()
    runfolder.write_lab_json(run_dir, runfolder.CONFIG, {"settings": {"claims": f"out={out}:rw,data={data}:ro"}})
    plant(run_dir / "tasks" / "sh")
    plant(out / "sh")
    plant(data / "sh")  # read-only to the replicas: not theirs, left alone
    assert setid.outside_of(run_dir) == {"CLAIMS out": out}
    said = setid.strip_run(run_dir, setid.outside_of(run_dir))
    assert said[0].startswith("stripped the set-ID bits from 2 files a task wrote: tasks/sh (uid 0, was 4755), "
                              "CLAIMS out:sh (uid 0, was 4755)"), said
    assert setid_left(run_dir) == [] and setid_left(out) == [] and setid_left(data) == ["sh"]


@pytest.mark.parametrize("modes_on_path, reachable", [
    ((0o755, 0o755, 0o777), True),  # every folder open: anyone can reach the claim
    ((0o755, 0o700, 0o777), False),  # a closed parent of the lab's user
    ((0o755, 0o750, 0o777), True),  # its group may enter
    ((0o755, 0o755, 0o700), False),  # the claim itself closed (and so to the replicas: refused)
    ((0o755, 0o744, 0o777), False),  # readable but not searchable by others: closed all the same
])
def test_a_writable_claim_other_users_can_reach_is_refused_in_one_line(tmp_path, modes_on_path, reachable):
    from tflab.core import hostfiles
    from tflab.core.settings import Settings

    base = Path(tempfile.mkdtemp(prefix="tflab-claims-"))  # under /tmp, itself open to all
    try:
        path = base / "a" / "b"
        path.mkdir(parents=True)
        for folder, mode in zip((base, base / "a", path), modes_on_path):
            folder.chmod(mode)
        assert hostfiles.open_to_others(path) is reachable
        (tmp_path / "tfjob.yaml").write_text(CLAIM_JOB)
        given = {"TFJOB": str(tmp_path / "tfjob.yaml"), "CLAIMS": f"out={path}"}
        if modes_on_path[-1] & 0o005 != 0o005:  # closed to the replicas too: refused as DATA's would be, first
            for claims in (f"out={path}", f"out={path}:ro"):
                with pytest.raises(Exception) as error:
                    Settings.from_env({**given, "CLAIMS": claims})
                assert "is not readable by everyone" in str(error.value)
            return
        if reachable:
            with pytest.raises(Exception) as error:
                Settings.from_env(given)
            assert str(error.value) == (
                f"CLAIMS out={path} is not allowed: other users of this host can reach it (no folder on its path is "
                "closed to them), and a replica that writes there could leave a set-ID program for them; expected a "
                "writable claim inside a folder only you can enter (mkdir -m 700 ~/claims, then the claim inside it), "
                "or :ro")
        else:
            Settings.from_env(given)
        Settings.from_env({**given, "CLAIMS": f"out={path}:ro"})  # read-only: nothing a replica writes lands there
    finally:
        for folder in (base, base / "a"):
            folder.chmod(0o755)
        shutil.rmtree(base)


def test_a_replay_says_before_it_starts_which_replicas_run_as_root_and_what_they_can_write(tmp_path):
    from tflab import (
        backends,  # noqa: F401  (the registry, before the replay package)
        replay,
    )
    from tflab.core.settings import Settings
    from tflab.k8s import tfjob

    closed = tmp_path / "claims"
    (closed / "out").mkdir(parents=True)
    (tmp_path / "tfjob.yaml").write_text(CLAIM_JOB)
    settings = Settings.from_env({"TFJOB": str(tmp_path / "tfjob.yaml"), "CLAIMS": f"out={closed / 'out'}"})
    plan = tfjob.load(settings)
    assert replay.as_root(plan, settings, {"img:1": {"User": "1000"}}) == (
        "worker-0, worker-1 (runAsUser: 0) run as root: they can write their hooks folders and the claim volumes data "
        f"in the run folder, CLAIMS out ({closed / 'out'}) as root; the run folder (0700) and a writable CLAIMS folder "
        "are closed to other users of this host, and set-ID bits are stripped from them at the end")
    by_image = CLAIM_JOB.replace("          securityContext: {runAsUser: 0}\n", "")
    (tmp_path / "tfjob.yaml").write_text(by_image)
    plan = tfjob.load(settings)
    for user in ("", "0", "root", "0:0", "root:staff"):
        said = replay.as_root(plan, settings, {"img:1": {"User": user}})
        assert said.startswith("worker-0, worker-1 (their image's user) run as root: "), (user, said)
    for user in ("1000", "1000:0", "nobody"):
        assert replay.as_root(plan, settings, {"img:1": {"User": user}}) == ""
    nonroot = by_image.replace("spec:\n          containers:", "spec:\n          securityContext: {runAsUser: 1000}\n"
                               "          containers:")
    (tmp_path / "tfjob.yaml").write_text(nonroot)
    assert replay.as_root(tfjob.load(settings), settings, {"img:1": {"User": ""}}) == ""


def test_why_names_what_was_stripped_and_nothing_where_nothing_was(tmp_path):
    from tflab.supervisor import setid

    assert setid.why_lines(tmp_path) == []  # no record: a run from before the check
    plant(tmp_path / "tasks" / "su")
    setid.strip_run(tmp_path)
    assert setid.why_lines(tmp_path) == [
        "finding: set-ID programs a task left: tasks/su (uid 0, was 4755, stripped) (setid.json); the run folder is "
        "closed to other users of this host; a task that plants them is worth reading"]
    runfolder.write_lab_json(tmp_path, runfolder.SETID, {"run": {"found": [{"path": 3}, "x"]}, "y": []})
    assert setid.why_lines(tmp_path) == []  # a record the lab did not write says nothing, raises nothing


def test_the_labs_own_runs_teardown_strips_the_tasks_space_too(tmp_path, monkeypatch, capsys):
    """labrun.LabRun: what up, chaos, soak, compare, bench, matrix, Swarm's stack-up and the
    fixture run (each through runner.up, then runner.run), whatever the backend: a SCRIPT task's
    set-ID program in tasks/ (Swarm's shared runs folder holds the same tasks/) loses its bit."""
    from labtest.fakes import FakeBackend
    from tflab.core import cluster
    from tflab.core.settings import Settings
    from tflab.supervisor import runner
    from tflab.supervisor.labrun import LabRun

    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(runner.reaper, "watch", lambda run_dir: Guard())
    settings = Settings(workers=2, backend="swarm", runs_dir=str(tmp_path / "runs"), run="r1")
    run_dir = tmp_path / "runs" / "r1"
    the_cluster = cluster.build(settings)
    backend = FakeBackend(the_cluster, run_dir, [[dict.fromkeys(the_cluster.tasks, 0)]],
                          on_start=lambda backend, attempt: plant(run_dir / "tasks" / "work" / "worker-1" / "su"))
    runner.run(LabRun(settings, backend, run_dir))
    assert setid_left(run_dir) == [] and (run_dir / "tasks" / "work" / "worker-1" / "su").exists()
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "tflab: stripped the set-ID bit from 1 file a task wrote: tasks/work/worker-1/su (uid 0, was 4755)")
