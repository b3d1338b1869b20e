"""`make chaos-grid`: one job through every fault x moment, one make chaos run a cell, and the
evidence in one table and one picture: what each cell's run did (survived, ended cleanly, hung,
not injected), where its fault landed, the resume's verdict where the run gives one, and what
each cell cost. The verdict's undisturbed twin (VERDICT=auto, faults/twin.py) is run once, in the
grid's folder, and every cell of the same job is judged against it.

    make chaos-grid SCENARIOS="kill pause" MOMENTS="epoch:1 step:40"
    make chaos-grid SCRIPT=train.py SCENARIOS=kill MOMENTS="epoch:2 seconds:20"

The lab's own cluster: its trainer or a SCRIPT (a replayed TFJob or TrainJob is make chaos's).

Writes runs/<RUN>/grid.json, grid.md, grid.csv and grid.png (as make compare and make matrix
write theirs), a run folder a cell inside it. A cell the job cannot reach (a step past its last, a
moment the run has no way to) is `n/a` with make chaos's one-line refusal, checked for every cell
before the first runs. Exit 0 only where no cell hung, none missed its fault and no resume was
called corrupt: a grid whose fault never landed proved nothing.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tflab import backends, console
from tflab.core import runfolder
from tflab.core.errors import LabError
from tflab.core.foreign import ForeignFile
from tflab.core.runsummary import Summary
from tflab.core.settings import Settings
from tflab.faults import chaos, registry

NA = "n/a"
FAILING = ("hung", chaos.NOT_INJECTED)  # outcomes that fail the grid, as they fail make soak
FAILING_VERDICTS = ("corrupt",)  # a resume that loaded a torn checkpoint fails it too
COLOURS = {"survived": "#4caf50", "ended cleanly": "#fb8c00", "hung": "#e53935", chaos.NOT_INJECTED: "#9e9e9e",
           NA: "#eeeeee"}


@dataclass
class Cell:
    """One fault at one moment, as its run ended (or n/a, with the reason)."""

    scenario: str
    at: str
    run: str
    outcome: str = NA
    verdict: str = ""  # the resume's verdict (equivalent, lossy, corrupt, hang, failed), where the run gives one
    landed: str = ""  # where the fault landed, or why the cell is n/a, or why it was not injected
    restarts: int | None = None
    detection_seconds: float | None = None
    recovery_seconds: float | None = None
    wall_seconds: float | None = None  # the cell's run, start to summary (its cost)

    def words(self) -> str:
        """The cell as the table shows it: "survived, equivalent, 61 s"."""
        parts = [self.outcome] + ([self.verdict] if self.verdict else [])
        if self.wall_seconds is not None:
            parts.append(f"{self.wall_seconds:.0f} s")
        return ", ".join(parts)


def cells_of(settings: Settings, folder: Path) -> list[tuple[Settings, Cell]]:
    """Every SCENARIOS x MOMENTS cell's settings (a make chaos run in `folder`) and its Cell; a
    cell make chaos refuses is n/a with the refusal, and runs nothing."""
    planned: list[tuple[Settings, Cell]] = []
    for scenario in settings.scenarios.split():
        for at in settings.moments.split():
            name = f"{len(planned) + 1:02d}-{scenario}-{at.replace(':', '')}"
            trial = settings.replace(runs_dir=str(folder), run=name, scenario=scenario, at=at)
            cell = Cell(scenario, at, name)
            try:
                chaos.Chaos(trial).check(trial)
            except LabError as refused:
                cell.landed = str(refused)
            planned.append((trial, cell))
    return planned


def filled(cell: Cell, found: dict | None, wall_seconds: float) -> Cell:
    """The cell once its run ended, from its summary's chaos record (read as foreign)."""
    cell.wall_seconds = wall_seconds
    if not isinstance(found, dict):
        cell.outcome, cell.landed = "hung", "its run wrote no chaos record"
        return cell
    outcome = found.get("outcome")
    cell.outcome = outcome if isinstance(outcome, str) and outcome in COLOURS else "hung"
    verdict = found.get("verdict")
    kind = verdict.get("kind") if isinstance(verdict, dict) else None  # faults/verdict.py's judge
    cell.verdict = kind if isinstance(kind, str) else ""
    said = found.get("not_injected") or found.get("landed")
    cell.landed = said if isinstance(said, str) else ""
    for name in ("detection_seconds", "recovery_seconds"):
        value = found.get(name)
        setattr(cell, name, float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None)
    restarts = found.get("restarts")
    cell.restarts = restarts if isinstance(restarts, int) and not isinstance(restarts, bool) else None
    return cell


def grid(settings: Settings) -> int:
    """Runs every cell that can be, one after another; writes the grid after each."""
    folder = runfolder.planned(settings)
    registry.check_backend(settings, tuple(settings.scenarios.split()))
    planned = cells_of(settings, folder)
    if all(cell.landed for _, cell in planned):
        raise LabError(f"no cell of this grid can run: {planned[0][1].scenario} at {planned[0][1].at}: "
                       f"{planned[0][1].landed}")
    backends.check_engine(settings)
    runfolder.make(folder, link_latest=True)
    started = time.time()
    for index, (trial, cell) in enumerate(planned):
        if cell.landed and cell.outcome == NA:
            console.say(f"--- chaos-grid {index + 1} of {len(planned)}: {cell.scenario} at {cell.at}: n/a: "
                        f"{cell.landed}")
            continue
        console.say(f"--- chaos-grid {index + 1} of {len(planned)}: {cell.scenario} at {cell.at}")
        begun = time.monotonic()
        chaos.chaos(trial)
        try:
            found = Summary.read(folder / trial.run).chaos
        except (OSError, ForeignFile, LabError, ValueError):
            found = None
        filled(cell, found, time.monotonic() - begun)
        write(folder, settings, [c for _, c in planned], time.time() - started)
    cells = [cell for _, cell in planned]
    lines = write(folder, settings, cells, time.time() - started)
    print("\n".join(lines))
    console.say("wrote " + ", ".join(console.display_path(folder / name) for name in
                                     ("grid.json", "grid.md", "grid.csv", "grid.png")))
    failing = [cell for cell in cells if cell.outcome in FAILING or cell.verdict in FAILING_VERDICTS]
    return 1 if failing else 0


def job_words(settings: Settings) -> str:
    if settings.script:
        return f"{settings.script} ({settings.strategy}, {settings.workers} workers)"
    return (f"the lab's trainer ({settings.strategy}, {settings.workers} workers, LOOP={settings.loop}, "
            f"{settings.epochs} epochs)")


def table(settings: Settings, cells: list[Cell], cost: float) -> list[str]:
    """grid.md's lines: the grid (a row a fault, a column a moment), then each cell's landing."""
    moments = list(dict.fromkeys(cell.at for cell in cells))
    by = {(cell.scenario, cell.at): cell for cell in cells}
    ran = [cell for cell in cells if cell.wall_seconds is not None]
    lines = [f"# chaos-grid: {job_words(settings)}", "",
             "| fault | " + " | ".join(f"AT={at}" for at in moments) + " |",
             "|---|" + "---|" * len(moments)]
    for scenario in dict.fromkeys(cell.scenario for cell in cells):
        lines.append(f"| {scenario} | " + " | ".join(by[(scenario, at)].words() for at in moments) + " |")
    lines += ["", f"{len(ran)} of {len(cells)} cells ran in {cost:.0f} s"
              + (f" (a cell {min(c.wall_seconds or 0 for c in ran):.0f}-{max(c.wall_seconds or 0 for c in ran):.0f} s)"
                 if ran else ""), ""]
    for cell in cells:
        timing = (f"; restarts {cell.restarts}, detected after {_seconds(cell.detection_seconds)}, training again "
                  f"after {_seconds(cell.recovery_seconds)}" if cell.wall_seconds is not None else "")
        lines.append(f"- {cell.scenario} at {cell.at} ({cell.run}): {cell.words()}; {cell.landed or '-'}{timing}")
    return lines


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def write(folder: Path, settings: Settings, cells: list[Cell], cost: float) -> list[str]:
    """grid.json, grid.md, grid.csv and grid.png (where matplotlib is there); returns grid.md's lines."""
    lines = table(settings, cells, cost)
    runfolder.write_json(folder / "grid.json", {"job": job_words(settings), "cost_seconds": round(cost, 1),
                                                "cells": [asdict(cell) for cell in cells]})
    runfolder.write_whole(folder / "grid.md", "\n".join(lines) + "\n")
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(asdict(cells[0])), lineterminator="\n")
    writer.writeheader()
    writer.writerows(asdict(cell) for cell in cells)
    runfolder.write_whole(folder / "grid.csv", text.getvalue())
    runfolder.replace_whole(folder / "grid.png", lambda temporary: plot(settings, cells, temporary))
    return lines


def plot(settings: Settings, cells: list[Cell], path: Path) -> bool:
    """grid.png: a square a cell, coloured by its outcome, its words written in; False (and no
    file) where matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    moments = list(dict.fromkeys(cell.at for cell in cells))
    scenarios = list(dict.fromkeys(cell.scenario for cell in cells))
    by = {(cell.scenario, cell.at): cell for cell in cells}
    figure, axes = plt.subplots(figsize=(2.2 * len(moments) + 1.5, 0.9 * len(scenarios) + 1.8))
    for row, scenario in enumerate(scenarios):
        for column, at in enumerate(moments):
            cell = by[(scenario, at)]
            axes.add_patch(plt.Rectangle((column, row), 0.96, 0.92, color=COLOURS.get(cell.outcome, "#e53935")))
            axes.text(column + 0.48, row + 0.46, cell.words().replace(", ", "\n"), ha="center", va="center",
                      fontsize=8)
    axes.set_xlim(0, len(moments))
    axes.set_ylim(len(scenarios), 0)
    axes.set_xticks([i + 0.48 for i in range(len(moments))], [f"AT={at}" for at in moments], fontsize=9)
    axes.set_yticks([i + 0.46 for i in range(len(scenarios))], scenarios, fontsize=9)
    axes.tick_params(length=0)
    for side in axes.spines.values():
        side.set_visible(False)
    axes.set_title(f"chaos-grid: {job_words(settings)}"[:90], fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True

