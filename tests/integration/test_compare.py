"""A smoke-size `make compare` on real Compose: every strategy of the default COMPARE runs, and the
report holds a filled row for each."""

import csv
import io

import pytest
from labtest.cli import lab_env, run_lab
from tflab.core.settings import DEFAULT_COMPARE


@pytest.fixture(scope="module")
def compared(trainer_image, tmp_path_factory):
    runs = tmp_path_factory.mktemp("compare")
    result = run_lab("compare", env=lab_env(RUNS_DIR=str(runs), RUN="smoke", EPOCHS="2", EXAMPLES="512"),
                     timeout=1800)
    return result, runs / "smoke"


def test_every_run_is_ok(compared):
    result, folder = compared
    assert result.returncode == 0, result.output[-4000:]
    assert [p.name for p in sorted(folder.iterdir()) if p.is_dir()] == sorted(DEFAULT_COMPARE.split())


def test_the_report_has_a_filled_row_per_strategy(compared):
    result, folder = compared
    assert {"report.md", "report.csv", "report.png"} <= {p.name for p in folder.iterdir()}
    rows = list(csv.DictReader(io.StringIO((folder / "report.csv").read_text())))
    assert [row["run"] for row in rows] == DEFAULT_COMPARE.split()
    for row in rows:
        assert row["status"] == "ok", row
        for key in ("final_loss", "wall_seconds", "time_to_first_step_seconds", "first_step_seconds",
                    "steady_step_seconds", "examples_per_second", "speedup", "efficiency",
                    "peak_rss_per_process_bytes", "peak_rss_total_bytes", "gradient_bytes_per_step"):
            assert row[key] != "", (row["run"], key)
    by_run = {row["run"]: row for row in rows}
    assert float(by_run["single"]["speedup"]) == pytest.approx(1.0)
    # Same data, seed and global batch: the synchronous strategies end on the same loss.
    synchronous = [float(by_run[r]["final_loss"]) for r in by_run if not r.startswith("parameter-server")]
    assert max(synchronous) == pytest.approx(min(synchronous), rel=1e-4)
    assert (folder / "report.png").read_bytes()[:4] == b"\x89PNG"
    markdown = (folder / "report.md").read_text()
    assert all(f"| {run} |" in markdown for run in by_run)
    assert "wrote" in result.stdout and "report.png" in result.stdout


def test_report_rebuilds_the_same_numbers_without_training(compared):
    result, folder = compared
    before = (folder / "report.csv").read_text()
    (folder / "report.csv").unlink()
    rebuilt = run_lab("report", env=lab_env(RUNS_DIR=str(folder.parent), RUN="smoke"))
    assert rebuilt.returncode == 0, rebuilt.output
    assert (folder / "report.csv").read_text() == before
