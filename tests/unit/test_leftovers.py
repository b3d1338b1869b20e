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
