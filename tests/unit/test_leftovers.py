"""`make down` through leftovers.py: what it lists, what it removes, what it says, with a fake engine
(a real `down` here would end other runs on the shared engine)."""

from pathlib import Path

from tflab.backends import leftovers
from tflab.backends.swarm import teardown
from tflab.cli import upkeep
from tflab.core import runfolder, runowner
from tflab.core.settings import Settings
from tflab.engine import docker


def fake_engine(monkeypatch, runs: Path, stack_removed: bool):
    removed = []
    run_dirs = {"tflab-a-1": runs / "a", "tflab-b-2": runs / "b", "tflab-tensorboard-3": None}
    monkeypatch.setattr(docker, "check", lambda: "20.10")
    monkeypatch.setattr(docker, "lab_projects", lambda scope, tensorboard_project=None: sorted(run_dirs))
    monkeypatch.setattr(docker, "project_run_dir", run_dirs.get)
    monkeypatch.setattr(docker, "remove_project", removed.append)
    monkeypatch.setattr(teardown, "stack_run_dirs", lambda scope: {"tflab-c-4": runs / "c", "tflab-d-5": runs / "d"})
    monkeypatch.setattr(teardown, "remove_stack", lambda stack: removed.append(stack) or stack_removed)
    pids = {"b": 4242, "d": 4343}
    monkeypatch.setattr(runowner, "owner_of", lambda run_dir: runowner.Owner(pids.get(run_dir.name)))
    return removed


def test_down_removes_each_leftover_through_its_backend_and_spares_a_live_run(tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    removed = fake_engine(monkeypatch, runs, stack_removed=False)
    monkeypatch.setenv("TFLAB_MAKE_VARIABLES", "")  # as `make down` runs it: the fix names make's command
    assert upkeep.command_down(Settings(runs_dir=str(runs))) == 0
    assert removed == ["tflab-a-1", "tflab-tensorboard-3", "tflab-c-4"]  # b's and d's labs still run
    assert capsys.readouterr().out.splitlines() == [
        "tflab: removed tflab-a-1",
        "tflab: run b is still running (pid 4242); leaving it: `make down RUN=b FORCE=1` ends it",
        "tflab: removed tflab-tensorboard-3",
        "tflab: stack tflab-c-4 is still being removed",
        "tflab: run d is still running (pid 4343); leaving it: `make down RUN=d FORCE=1` ends it",
    ]


def test_leftovers_carry_their_run_folder_and_kind(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    fake_engine(monkeypatch, runs, stack_removed=True)
    assert leftovers.projects(runs)[0] == leftovers.Leftover("project", "tflab-a-1", runs / "a")
    stack = leftovers.stacks(runs)[0]
    assert (stack.kind, stack.run_dir, stack.remove()) == ("stack", runs / "c", True)


def test_down_strips_every_dead_unsummarised_run_though_nothing_of_it_is_left_on_the_engine(tmp_path, monkeypatch,
                                                                                              capsys):
    """Issue 41's last gap: a lab killed mid-run whose containers were then removed by hand left a
    root set-ID shell in its run folder, and `down` found nothing on the engine to remove, so it
    made no set-ID check. Now every claimed run with neither a summary nor a check is checked; a
    live one, a summarised one and a link are not."""
    from test_setid import plant, setid_left

    runs = tmp_path / "runs"
    for name in ("dead", "live", "done", "compare/dead"):
        runfolder.make(runs / name, link_latest=False, owner=True)
        plant(runs / name / "tasks" / "sh")
    runfolder.write_lab_json(runs / "done", runfolder.SUMMARY, {})
    (runs / "elsewhere").symlink_to(runs / "dead")
    monkeypatch.setattr(docker, "check", lambda: "20.10")
    monkeypatch.setattr(leftovers, "projects", lambda scope, tensorboard_project=None: [])
    monkeypatch.setattr(leftovers, "stacks", lambda scope: [])
    monkeypatch.setattr(runowner, "owner_of", lambda run_dir: runowner.Owner(4242 if run_dir.name == "live" else None))
    assert upkeep.command_down(Settings(runs_dir=str(runs))) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[1].startswith("tflab: run compare/dead: stripped the set-ID bit from 1 file a task wrote: tasks/sh")
    assert said[2].startswith("tflab: run dead: stripped the set-ID bit from 1 file a task wrote: tasks/sh"), said
    assert len(said) == 3, said
    assert [name for name in ("dead", "live", "done", "compare/dead") if setid_left(runs / name)] == ["live", "done"]
    assert upkeep.command_down(Settings(runs_dir=str(runs))) == 0  # checked once: setid.json records it
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_down_changes_nothing_in_a_run_folder_it_cannot_prove_it_claimed_and_says_what_it_saw(tmp_path, monkeypatch,
                                                                                               capsys):
    """Issue 56: `down` stripped a dead run only where owner.json was, and said nothing of the others.
    The lab writes owner.json when it claims a run, before any task starts; a folder that seems a
    run (config.json, a tasks' space) with no owner.json file (none, or a link) is not proven the
    lab's: nothing in it is changed, and what has a set-ID bit there is said, with why."""
    from test_setid import plant, setid_left

    runs = tmp_path / "runs"
    runs.mkdir(mode=0o700)
    (runs / "no-owner").mkdir(mode=0o700)
    (runs / "no-owner" / "config.json").write_text("{}")
    plant(runs / "no-owner" / "tasks" / "sh")
    (runs / "link-owner" / "tasks").mkdir(parents=True)
    (runs / "link-owner" / "owner.json").symlink_to(runs / "no-owner" / "config.json")
    plant(runs / "link-owner" / "tasks" / "sh")
    (runs / "one-space").mkdir(mode=0o700)  # a run from before the two spaces: owner.json, and its tasks' files
    (runs / "one-space" / "owner.json").write_text("{}")
    plant(runs / "one-space" / "sh")
    runfolder.make(runs / "claimed", link_latest=False, owner=True)
    plant(runs / "claimed" / "tasks" / "sh")
    (runs / "mine").mkdir()  # a folder of the user's own, nothing like a run: not even looked at
    plant(runs / "mine" / "tool")
    monkeypatch.setattr(docker, "check", lambda: "20.10")
    monkeypatch.setattr(leftovers, "projects", lambda scope, tensorboard_project=None: [])
    monkeypatch.setattr(leftovers, "stacks", lambda scope: [])
    monkeypatch.setattr(runowner, "owner_of", lambda run_dir: runowner.Owner())  # every lab gone
    assert upkeep.command_down(Settings(runs_dir=str(runs))) == 0
    said = capsys.readouterr().out.splitlines()
    assert said[1].startswith("tflab: run claimed: stripped the set-ID bit from 1 file a task wrote: tasks/sh"), said
    assert said[2] == (
        "tflab: run link-owner: set-ID bits left as they are in tasks/sh (uid 0, mode 4755): the lab cannot prove it "
        "claimed this folder (its owner.json is a link, not the file the lab writes), so it changes nothing there; "
        f"check them (find {runs / 'link-owner'} -perm /6000), then chmod u-s,g-s what should not keep its bit")
    assert said[3].startswith("tflab: run no-owner: set-ID bits left as they are in tasks/sh (uid 0, mode 4755): the "
                              "lab cannot prove it claimed this folder (it holds no owner.json, which the lab writes "
                              "when it claims a run)")
    assert said[4].startswith("tflab: run one-space: stripped the set-ID bit from 1 file a task wrote: sh"), said
    assert len(said) == 5, said
    assert [name for name in ("claimed", "no-owner", "link-owner", "one-space", "mine") if setid_left(runs / name)] == [
        "no-owner", "link-owner", "mine"]
    assert not (runs / "no-owner" / runfolder.SETID).exists()  # nothing written there either
