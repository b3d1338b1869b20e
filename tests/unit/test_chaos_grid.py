"""`make chaos-grid` (issue 43): a job through every fault x moment, each cell a make chaos run on
the runner's own pipeline (here on a stand-in backend), the grid written as json/md/csv/png; a
cell the job cannot reach is n/a with make chaos's refusal, and a grid whose fault never landed
fails."""

import csv
import json

import pytest
from labtest.fakes import FakeEngine
from test_chaos_landing import fake_up, script
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
        ("epoch:1", "n/a", False), ("epoch:3", "n/a", True), ("step:9999", "n/a", True)]
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
