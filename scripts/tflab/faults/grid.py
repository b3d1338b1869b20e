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
before the first runs; a cell not run yet, or never (the grid was interrupted first), is `not run`.
Exit 0 only where no cell hung, none missed its fault and no resume was
called corrupt: a grid whose fault never landed proved nothing.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tflab import backends, console
from tflab.core import cluster, runfolder
from tflab.core.errors import LabError
from tflab.core.foreign import ForeignFile
from tflab.core.runsummary import Summary
from tflab.core.settings import Settings
from tflab.faults import chaos, registry

NA = "n/a"  # a cell the job cannot reach: make chaos refuses it
NOT_RUN = "not run"  # a cell the job can reach that has not run (yet, or ever: the grid was interrupted)
FAILING = ("hung", chaos.NOT_INJECTED)  # outcomes that fail the grid, as they fail make soak
FAILING_VERDICTS = ("corrupt",)  # a resume that loaded a torn checkpoint fails it too
COLOURS = {"survived": "#4caf50", "ended cleanly": "#fb8c00", "hung": "#e53935", chaos.NOT_INJECTED: "#9e9e9e",
           chaos.INTERRUPTED: "#bdbdbd", NA: "#eeeeee", NOT_RUN: "#ffffff"}
RAN = ("survived", "ended cleanly", "hung", chaos.NOT_INJECTED, chaos.INTERRUPTED)  # a run's chaos outcomes
# A cell of the lab's trainer on the 2-core development machine, 2026-12-07 (docs/faults.md's grid):
# what a grid's first estimate is said from, until its own cells have a pace.
CELL_SECONDS = (20, 63)
BIG = 50  # cells: past this, the estimate is said in hours and how to stop it too


@dataclass
class Cell:
    """One fault at one moment, as its run ended (or n/a, with the reason; or not run)."""

    scenario: str
    at: str
    run: str
    outcome: str = NOT_RUN
    verdict: str = ""  # the resume's verdict (equivalent, lossy, corrupt, hang, failed), where the run gives one
    landed: str = ""  # where the fault landed, or why the cell is n/a, or why it was not injected
    restarts: int | None = None
    detection_seconds: float | None = None
    recovery_seconds: float | None = None
    wall_seconds: float | None = None  # the cell's run, start to summary (its cost)

    def words(self) -> str:
        """The cell as the table shows it: "survived, equivalent, 61 s"."""
        parts = [self.outcome] + ([self.verdict] if self.verdict and self.verdict != self.outcome else [])
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
                cell.outcome, cell.landed = NA, str(refused)
            planned.append((trial, cell))
    return planned


def filled(cell: Cell, found: dict | None, wall_seconds: float) -> Cell:
    """The cell once its run ended, from its summary's chaos record (read as foreign)."""
    cell.wall_seconds = wall_seconds
    if not isinstance(found, dict):
        cell.outcome, cell.landed = "hung", "its run wrote no chaos record"
        return cell
    outcome = found.get("outcome")
    cell.outcome = outcome if isinstance(outcome, str) and outcome in RAN else "hung"
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


def check(settings: Settings) -> tuple[Path, list[tuple[Settings, Cell]]]:
    """Everything refused before anything runs (make checks it with the host's Python before it
    builds .venv): the folder, the backend, every cell, and a grid none of whose cells can run."""
    folder = runfolder.planned(settings)
    registry.check_backend(settings, tuple(settings.scenarios.split()))
    planned = cells_of(settings, folder)
    if all(cell.outcome == NA for _, cell in planned):
        raise LabError(f"no cell of this grid can run: {planned[0][1].scenario} at {planned[0][1].at}: "
                       f"{planned[0][1].landed}")
    return folder, planned


def grid(settings: Settings) -> int:
    """Runs every cell that can be, one after another; writes the grid after each. Interrupted
    (Ctrl-C, SIGTERM), it writes the grid with the cells it never ran `not run`, then stops."""
    folder, planned = check(settings)
    backends.check_engine(settings)
    runfolder.make(folder, link_latest=True)
    cells = [cell for _, cell in planned]
    console.say(plan_line(cells))
    started = time.time()
    try:
        for index, (trial, cell) in enumerate(planned):
            if cell.outcome == NA:
                console.say(f"--- chaos-grid {index + 1} of {len(planned)}: {cell.scenario} at {cell.at}: n/a: "
                            f"{cell.landed}")
                continue
            console.say(f"--- chaos-grid {index + 1} of {len(planned)}: {cell.scenario} at {cell.at}")
            begun = time.monotonic()
            try:
                chaos.chaos(trial)
            except KeyboardInterrupt:  # its run wrote its summary (outcome interrupted) before it stopped
                found = chaos_record(folder / trial.run)
                filled(cell, found, time.monotonic() - begun)
                if found is None:
                    cell.outcome = chaos.INTERRUPTED
                    cell.landed = "the grid was interrupted before its run wrote a summary"
                raise
            filled(cell, chaos_record(folder / trial.run), time.monotonic() - begun)
            write(folder, settings, cells, time.time() - started)
            said = pace_line(cells, time.time() - started)
            if said:
                console.say(said)
    except KeyboardInterrupt:
        for cell in cells:
            if cell.outcome == NOT_RUN:
                cell.landed = "the grid was interrupted before this cell ran"
        written = write(folder, settings, cells, time.time() - started)
        console.say(wrote_line(folder, written[1]))
        raise
    lines, drawn = write(folder, settings, cells, time.time() - started)
    print("\n".join(lines))
    console.say(wrote_line(folder, drawn))
    failing = [cell for cell in cells if cell.outcome in FAILING or cell.verdict in FAILING_VERDICTS]
    return 1 if failing else 0


def chaos_record(run_dir: Path) -> dict | None:
    try:
        return Summary.read(run_dir).chaos
    except (OSError, ForeignFile, LabError, ValueError):
        return None


PNG_SKIPPED = ("grid.png not drawn: matplotlib is not installed for this Python (make chaos-grid uses .venv's; "
               "an installed lab: pip install matplotlib)")


def wrote_line(folder: Path, drawn: bool) -> str:
    """What is on disk, said so: grid.png only where it was drawn, and why not where it was not."""
    names = ["grid.json", "grid.md", "grid.csv"] + (["grid.png"] if drawn else [])
    said = "wrote " + ", ".join(console.display_path(folder / name) for name in names)
    return said if drawn else f"{said}; {PNG_SKIPPED}"


def plan_line(cells: list[Cell]) -> str:
    """Said before the first cell: how many will run, and how long that took elsewhere."""
    count = sum(cell.outcome != NA for cell in cells)
    skipped = len(cells) - count
    low, high = (count * seconds for seconds in CELL_SECONDS)
    line = (f"chaos-grid: {count} cell{'s' * (count != 1)} to run, one whole make chaos run each, one after another"
            f"{f' ({skipped} n/a)' if skipped else ''}; a cell of the lab's trainer took {CELL_SECONDS[0]}-"
            f"{CELL_SECONDS[1]} s on the 2-core development machine: about {_duration(low)} to {_duration(high)} "
            "there; the pace here is said after each cell")
    if count > BIG:
        line += "; Ctrl-C stops it, and grid.md keeps the cells that ran"
    return line


def pace_line(cells: list[Cell], elapsed: float) -> str:
    """After a cell: how many are left, and the time that leaves at this grid's own pace."""
    ran = [cell for cell in cells if cell.wall_seconds is not None]
    left = sum(cell.outcome == NOT_RUN for cell in cells)
    if not ran or not left:
        return ""
    return (f"chaos-grid: {len(ran)} ran in {_duration(elapsed)}, {left} left: about "
            f"{_duration(left * elapsed / len(ran))} at this pace")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def job_words(settings: Settings) -> str:
    """The job, with the tasks its cluster really has (STRATEGY=single: one task, whatever WORKERS says)."""
    tasks = len(cluster.build(settings).tasks)
    size = f"{tasks} task{'s' * (tasks != 1)}" + (
        f" of {settings.replicas_in_sync} replicas" if settings.strategy == "mirrored" else "")
    if settings.script:
        return f"{settings.script} ({settings.strategy}, {size})"
    return f"the lab's trainer ({settings.strategy}, {size}, LOOP={settings.loop}, {settings.epochs} epochs)"


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
    unrun = sum(cell.outcome == NOT_RUN for cell in cells)
    stopped = sum(cell.outcome == chaos.INTERRUPTED for cell in cells)
    ran = [cell for cell in ran if cell.outcome != chaos.INTERRUPTED]
    lines += ["", f"{len(ran)} of {len(cells)} cells ran in {cost:.0f} s"
              + (f" (a cell {min(c.wall_seconds or 0 for c in ran):.0f}-{max(c.wall_seconds or 0 for c in ran):.0f} s)"
                 if ran else "") + (f"; {stopped} interrupted" if stopped else "")
              + (f"; {unrun} not run" if unrun else ""), ""]
    for cell in cells:
        timing = (f"; restarts {cell.restarts}, detected after {_seconds(cell.detection_seconds)}, training again "
                  f"after {_seconds(cell.recovery_seconds)}" if cell.wall_seconds is not None else "")
        lines.append(f"- {cell.scenario} at {cell.at} ({cell.run}): {cell.words()}; {cell.landed or '-'}{timing}")
    return lines


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def write(folder: Path, settings: Settings, cells: list[Cell], cost: float) -> tuple[list[str], bool]:
    """grid.json, grid.md, grid.csv and grid.png (where matplotlib is there); returns grid.md's
    lines and whether grid.png was drawn."""
    lines = table(settings, cells, cost)
    runfolder.write_json(folder / "grid.json", {"job": job_words(settings), "cost_seconds": round(cost, 1),
                                                "cells": [asdict(cell) for cell in cells]})
    runfolder.write_whole(folder / "grid.md", "\n".join(lines) + "\n")
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(asdict(cells[0])), lineterminator="\n")
    writer.writeheader()
    writer.writerows(asdict(cell) for cell in cells)
    runfolder.write_whole(folder / "grid.csv", text.getvalue())
    drawn = runfolder.replace_whole(folder / "grid.png", lambda temporary: plot(settings, cells, temporary))
    return lines, drawn


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

