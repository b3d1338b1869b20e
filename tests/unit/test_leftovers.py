"""`make down` through leftovers.py: what it lists, what it removes, what it says, with a fake engine
(a real `down` here would end other runs on the shared engine)."""

from pathlib import Path

from tflab.backends import leftovers
from tflab.backends.swarm import teardown
from tflab.cli import upkeep
from tflab.core import runowner
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
