"""`make chaos-grid` (issue 43): a job through every fault x moment, each cell a make chaos run on
the runner's own pipeline (here on a stand-in backend), the grid written as json/md/csv/png; a
cell the job cannot reach is n/a with make chaos's refusal, and a grid whose fault never landed
fails."""

import csv
import json
import sys

import pytest
from labtest.cli import REPO, lab_env
from labtest.fakes import FakeBackend, FakeEngine
from test_chaos_landing import fake_up, script
from tflab.core import cluster, runfolder, schema
from tflab.core.errors import LabError
from tflab.core.settings import Settings, SettingsError
from tflab.faults import grid

pytestmark = pytest.mark.unit


def test_the_lists_are_checked_word_by_word_and_said_in_one_line():
    assert Settings.from_env({"SCENARIOS": "kill  pause kill", "MOMENTS": "epoch:1 step:40"}).scenarios == "kill pause"
    with pytest.raises(SettingsError) as error:
        Settings.from_env({"SCENARIOS": "kill explode"})
    assert str(error.value).startswith("SCENARIOS=kill explode is not allowed: explode is not one of kill | stop")
    with pytest.raises(SettingsError) as error:
        Settings.from_env({"MOMENTS": "epoch:1 step:0"})
    assert "step:0 is not one of AT's values" in str(error.value)


def test_a_cell_the_job_cannot_reach_is_na_with_make_chaos_refusal(tmp_path):
    settings = Settings(workers=2, epochs=3, scenarios="kill", moments="epoch:1 epoch:3 step:9999")
    cells = [cell for _, cell in grid.cells_of(settings, tmp_path / "g")]
    assert [(cell.at, cell.outcome, bool(cell.landed)) for cell in cells] == [
        ("epoch:1", "not run", False), ("epoch:3", "n/a", True), ("step:9999", "n/a", True)]
    assert "EPOCHS" in cells[1].landed or "epoch" in cells[1].landed
    assert cells[0].run == "01-kill-epoch1"


def test_a_grid_runs_every_cell_writes_its_evidence_and_fails_on_a_fault_never_landed(tmp_path, monkeypatch, capsys,
                                                                                      offline):
    monkeypatch.setattr(grid.backends, "check_engine", lambda settings: None)
    monkeypatch.setattr(grid.chaos.runner, "up", fake_up(epochs_logged=2))
    FakeEngine(monkeypatch)  # docker kill succeeds
    runs = tmp_path / "runs"
    settings = Settings(workers=2, script=script(tmp_path), epochs=3, scenarios="kill", moments="epoch:1 epoch:9",
                        runs_dir=str(runs), run="g1", verdict="off")
    assert grid.grid(settings) == 1  # epoch:9 is past what the script logged: not injected
    folder = runs / "g1"
    cells = json.loads((folder / "grid.json").read_text())["cells"]
    assert [(c["at"], c["outcome"]) for c in cells] == [("epoch:1", "survived"), ("epoch:9", "not injected")]
    assert cells[1]["landed"].startswith("worker-1 never reached the end of epoch 9")
    assert all(isinstance(c["wall_seconds"], float) for c in cells)
    rows = list(csv.DictReader((folder / "grid.csv").open()))
    assert [row["outcome"] for row in rows] == ["survived", "not injected"]
    table = (folder / "grid.md").read_text()
    assert "| fault | AT=epoch:1 | AT=epoch:9 |" in table and "| kill | survived, " in table
    assert "2 of 2 cells ran in" in table
    assert (folder / "grid.png").stat().st_size > 1000
    assert "--- chaos-grid 2 of 2: kill at epoch:9" in capsys.readouterr().out


def test_a_grid_no_cell_of_which_can_run_is_refused_before_anything_is_written(tmp_path):
    settings = Settings(workers=2, epochs=3, scenarios="kill", moments="step:9999", runs_dir=str(tmp_path / "runs"))
    with pytest.raises(LabError) as error:
        grid.grid(settings)
    assert str(error.value).startswith("no cell of this grid can run: kill at step:9999: ")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.parametrize("record", [None, [], {"outcome": 3}, {"outcome": "survived", "restarts": True,
                                                              "detection_seconds": "1", "verdict": {"kind": 7}},
                                    {"outcome": "made up", "landed": ["x"]}])
def test_a_hostile_chaos_record_fills_a_cell_with_what_is_sure(record):
    cell = grid.filled(grid.Cell("kill", "epoch:1", "01"), record, 12.0)
    assert cell.outcome in grid.COLOURS and cell.outcome != grid.NA
    assert cell.restarts is None and cell.detection_seconds is None and cell.verdict == ""
    assert isinstance(cell.landed, str) and cell.words().endswith("12 s")


def test_a_verdict_is_shown_beside_the_outcome_and_a_corrupt_one_fails_the_grid():
    cell = grid.filled(grid.Cell("kill", "step:40", "01"), {"outcome": "survived", "verdict": {"kind": "corrupt"},
                                                            "landed": "at step 40", "restarts": 1}, 61.4)
    assert cell.words() == "survived, corrupt, 61 s"
    assert cell.verdict in grid.FAILING_VERDICTS


class Interrupting(FakeBackend):
    """The lab is sent SIGINT at its `at`-th poll of the run: as the runner's poll raises it."""

    def __init__(self, *args, at: int, **more):
        super().__init__(*args, **more)
        self.interrupt_at = at

    def exit_codes(self):
        if self.poll == self.interrupt_at:
            self.poll += 1
            raise KeyboardInterrupt
        return super().exit_codes()


def interrupted_up(cells_before: int):
    """fake_up's runs for the first `cells_before` calls, then a run the lab is stopped in."""
    calls = []
    plain = fake_up(epochs_logged=2)

    def up(settings, link_latest=True, observer=grid.chaos.runner.NO_OBSERVER):
        calls.append(settings.run)
        if len(calls) <= cells_before:
            return plain(settings, link_latest, observer)
        run_dir = runfolder.planned(settings)
        the_cluster = cluster.build(settings)

        def logs(backend, attempt):
            for task in the_cluster.tasks:
                log = schema.EventLog(runfolder.log_path(runfolder.task_space(run_dir), task), task)
                log.emit("start", role="script", strategy=settings.strategy, cluster={}, versions={}, settings={})
                log.emit("epoch", epoch=1, loss=1.0, seconds=0.1, steps=32)

        backend = Interrupting(the_cluster, run_dir, [[{}] * 20], on_start=logs, at=6)
        return grid.chaos.runner.run(grid.chaos.runner.LabRun(settings, backend, run_dir), link_latest, observer)
    return up, calls


def test_an_interrupted_grid_says_which_cells_never_ran_apart_from_na(tmp_path, monkeypatch, capsys, offline):
    """SIGINT to the lab in the grid's 2nd cell: every cell it never ran read n/a, which the docs keep
    for cells the job cannot reach, and the cell it was in "ended cleanly" (issue 56)."""
    monkeypatch.setattr(grid.backends, "check_engine", lambda settings: None)
    up, calls = interrupted_up(cells_before=1)
    monkeypatch.setattr(grid.chaos.runner, "up", up)
    FakeEngine(monkeypatch)
    runs = tmp_path / "runs"
    settings = Settings(workers=2, script=script(tmp_path), epochs=3, scenarios="kill pause",
                        moments="epoch:1 step:999999999", runs_dir=str(runs), run="g", verdict="off")
    with pytest.raises(KeyboardInterrupt):
        grid.grid(settings)
    assert calls == ["01-kill-epoch1", "02-kill-step999999999"]
    cells = json.loads((runs / "g" / "grid.json").read_text())["cells"]
    assert [(c["at"], c["outcome"]) for c in cells] == [
        ("epoch:1", "survived"), ("step:999999999", "interrupted"), ("epoch:1", "not run"),
        ("step:999999999", "not run")]
    assert cells[3]["landed"] == "the grid was interrupted before this cell ran"
    table = (runs / "g" / "grid.md").read_text()
    assert "n/a" not in table and "| pause | not run | not run |" in table
    assert "| kill | survived, no twin, " in table and " | interrupted, " in table
    assert "interrupted, interrupted" not in table  # the verdict is not said twice
    assert "1 of 4 cells ran in " in table and "; 1 interrupted; 2 not run" in table
    said = capsys.readouterr().out
    assert "chaos-grid: 4 cells to run, one whole make chaos run each" in said
    assert "chaos-grid: 1 ran in " in said and "3 left: about " in said


@pytest.mark.parametrize("strategy, size", [("single", "1 task"), ("mirrored", "1 task of 2 replicas"),
                                            ("multiworker", "3 tasks")])
def test_the_grid_heading_counts_the_tasks_the_cluster_has(strategy, size):
    """STRATEGY=single's grid was headed "2 workers" (WORKERS's default) for its one process."""
    settings = Settings(strategy=strategy, workers=3, replicas=2)
    assert grid.job_words(settings) == f"the lab's trainer ({strategy}, {size}, LOOP=fit, {settings.epochs} epochs)"
    heading = grid.table(settings, [grid.Cell("kill", "epoch:1", "01")], 0)[0]
    assert heading == f"# chaos-grid: {grid.job_words(settings)}"


def test_a_big_grid_says_its_size_and_time_before_it_starts_and_the_time_left_as_it_goes():
    cells = [grid.Cell("kill", f"step:{n}", f"{n:04d}") for n in range(1, 1601)]
    cells[-1].outcome = grid.NA
    assert grid.plan_line(cells) == (
        "chaos-grid: 1599 cells to run, one whole make chaos run each, one after another (1 n/a); a cell of the "
        "lab's trainer took 20-63 s on the 2-core development machine: about 8.9 h to 28.0 h there; the pace here "
        "is said after each cell; Ctrl-C stops it, and grid.md keeps the cells that ran")
    cells[0].outcome, cells[0].wall_seconds = "survived", 30.0
    assert grid.pace_line(cells, 40.0) == "chaos-grid: 1 ran in 40 s, 1598 left: about 17.8 h at this pace"


def test_grid_png_is_said_written_only_where_it_was_drawn(tmp_path, monkeypatch):
    """The host's python3 has no matplotlib (FACTS.md): the grid said "wrote ... grid.png" and wrote none."""
    settings = Settings(scenarios="kill", moments="epoch:1")
    cells = [grid.Cell("kill", "epoch:1", "01")]
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    _, drawn = grid.write(tmp_path, settings, cells, 1.0)
    assert not drawn and not (tmp_path / "grid.png").exists()
    said = grid.wrote_line(tmp_path, drawn)
    assert "grid.png" not in said.split(";")[0] and said.endswith("; " + grid.PNG_SKIPPED)
    assert all((tmp_path / name).exists() for name in ("grid.json", "grid.md", "grid.csv"))


def test_make_chaos_grid_checks_on_the_host_then_runs_on_the_venv(tmp_path):
    """make compare ran on .venv and make chaos-grid on the host's python3, which has no matplotlib:
    grid.png was never drawn on a fresh machine. Now it is checked first, as compare is, and runs on
    .venv; a grid none of whose cells can run is refused before .venv is built."""
    import subprocess

    venv, runs = tmp_path / "venv", tmp_path / "runs"
    refused = subprocess.run(["make", "--no-print-directory", "chaos-grid", "SCENARIOS=kill", "MOMENTS=step:9999",
                              f"VENV={venv}", f"RUNS_DIR={runs}", f"PYTHON={sys.executable}"], cwd=REPO,
                             capture_output=True, text=True, timeout=60, env=lab_env())
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.startswith("tflab: no cell of this grid can run: kill at step:9999: ")
    assert not venv.exists() and "pip" not in refused.stdout
    planned = subprocess.run(["make", "--no-print-directory", "--dry-run", "chaos-grid", "SCENARIOS=kill",
                              "MOMENTS=epoch:1", f"VENV={venv}", f"RUNS_DIR={runs}", f"PYTHON={sys.executable}"],
                             cwd=REPO, capture_output=True, text=True, timeout=60, env=lab_env())
    assert f"{venv}/bin/python -m tflab chaos-grid" in planned.stdout, planned.stdout + planned.stderr
