"""`make matrix`: the same job on every TensorFlow (TF), Keras (KERAS), strategy (STRATEGIES) and, for the
lab's own trainer, precision (PRECISIONS) named, one run per cell, and what breaks where.

    make matrix                                  # TF="2.15 2.18 2.21 next" x KERAS="tf-keras keras3"
    make matrix TF="2.15 2.21" KERAS=tf-keras STRATEGIES=multiworker SCRIPT=train.py
    make matrix TF=2.21 KERAS="3.12 3.14 3.15 nightly" STRATEGIES=mirrored SCRIPT=loop.py   # which Keras fixes it
    make matrix TF="2.15 2.21" KERAS=tf-keras TFJOB=tfjob.yaml                # a TFJob (or TRAINJOB=) replayed per cell

Each cell is one run as `make up` makes it, in its own folder inside the matrix's
(runs/<RUN>/tf2-15-tf-keras-multiworker/), one after another: a cell's tasks already take the
engine's CPUs (two on this lab's machines). A TF and KERAS that cannot go together (keras3 on a TF
whose tf.keras is Keras 2, tf-keras where PyPI has none; the lab's EVALUATOR=1 under Keras 3, and
its mixed_float16 over several replicas under any Keras 3 it pins: rules.keras3_refusal) is a
cell marked n/a with the reason, never a refusal of the matrix, and so is a cell whose run failed
because its Keras cannot do its strategy at all (Keras 3 under a replayed job's parameter servers:
keras3-parameter-server); a Keras release pip cannot install with that TF (its lock says so,
keraslock.py) is a cell marked not installable, with pip's reason. A failed cell carries the
explanation of explain.py's table (its signature, what and fix); every cell that ran says the
Keras its chief imported. The matrix writes, in its folder:

    matrix.json   the cells (Matrix below: typed, versioned, written by `write` alone)
    matrix.md     the grid, the verdict, losses per epoch, step time and memory per cell
    matrix.png    the grid: green ok, red failed (its signature written in), grey n/a

and ends with a verdict line. Its exit status is 0 only when every cell that can be is ok. The
lab's own model trains at a small size unless EPOCHS or EXAMPLES are given (MATRIX_SIZE). An
interrupt stops the running cell as `make up` stops a run (every task removed), marks the cells
not yet run, and leaves nothing on the engine.

A replayed job (TFJOB=, TRAINJOB=) is one column, named for its kind: each cell replays it as `make up
TFJOB=` does, with the cell's trainer image in place of every replica's and TF_USE_LEGACY_KERAS as the
cell's KERAS says (in place of the manifest's own, which `make k8s` writes as 1). Only the lab's own image
can be varied so (what `make k8s` writes, tflab-trainer:<tag>): a job naming any other is refused, as is
STRATEGIES (the job fixes its cluster), before anything starts.
"""

from __future__ import annotations

import dataclasses
import json
import math
import textwrap
from pathlib import Path
from typing import Any, Mapping

from tflab import images
from tflab.console import display_path, say
from tflab.core import foreign, runfolder, runsummary, versions
from tflab.core.errors import LabError
from tflab.core.explain import Evidence, explain
from tflab.core.foreign import ForeignFile
from tflab.core.rules import keras3_refusal
from tflab.core.runsummary import Record, SummaryError, checked_record
from tflab.core.schema import by_event, complete
from tflab.core.settings import MATRIX_KERAS, MATRIX_TF, Settings, SettingsError
from tflab.images import keraslock
from tflab.reports import report
from tflab.reports.matrixverdict import (
    KERAS3_LOSS_SCALE,
    NOT_A_RUN,
    NOT_APPLICABLE_SIGNATURES,
    keras3_loss_scale_nan,
    keras_head,
    verdict,
)
from tflab.supervisor import audit, runner

MATRIX = "matrix.json"
MATRIX_VERSION = 3  # 1: the first matrix.json (2026-12); 2: Keras releases, keras_imported, "not installable";
# 3: each cell's precision (PRECISIONS)
READABLE_VERSIONS = (1, 2, 3)  # an older file reads as 3 with no keras_imported, every cell float32
MATRIX_SIZE = {"EPOCHS": 3, "EXAMPLES": 2048}  # the lab's own model, unless given: a cell in seconds
# wrong: the run ended ok and trained wrong (a loss gone NaN, or losses apart from the single-device run's)
OUTCOMES = ("ok", "wrong", "failed", "timed out", "interrupted", "n/a", "not installable", "not run")
# Relative, per epoch: a synchronous strategy's losses against the single-device run's of the same TF
# and Keras. Same data, seed and global batch give the same losses but for the all-reduce's float32
# summing order: 4e-5 apart at most, measured over 5 epochs at 3 replicas (2026-12-02, TF 2.21).
LOSS_TOLERANCE = 1e-3
# Under a mixed precision each replica also rounds its own share of the batch in 16 bits: mixed_float16's
# mirrored-2 against one device, 4.0e-3 apart by epoch 2 (tf-keras, mlp, 1024 examples, 2026-12-07, CPUs);
# mixed_bfloat16's 1.7e-5 on CPUs, where GPUs round bfloat16's 8-bit mantissa for real. 5x float16's.
MIXED_LOSS_TOLERANCE = 2e-2
COMPARABLE = ("mirrored", "multiworker")  # parameter_server's steps are asynchronous: its losses differ
LAB_IMAGE = f"{images.REPOSITORY}:"  # a replayed job's images must all start so: the lab's own, which a cell replaces


@dataclasses.dataclass(eq=False)
class Cell(Record):
    """One TF x KERAS x strategy: a run, or why there is none."""

    tf: str  # 2.15, or 2.22 for TF=next
    tf_release: str  # the tensorflow-cpu release its lock file pins: 2.15.1, 2.22.0rc0
    keras: str  # keras3 | tf-keras | bundled | a Keras release: 3.12, nightly
    strategy: str
    outcome: str  # OUTCOMES
    signature: str | None = None  # a failed cell's explanation (explain.py), e.g. keras3-multiworker
    what: str | None = None  # a failed cell's what happened; an n/a cell's reason
    fix: str | None = None
    final_loss: float | None = None
    steady_step_seconds: float | None = None
    peak_rss_bytes: int | None = None  # the largest process's
    wall_seconds: float | None = None
    losses: list = dataclasses.field(default_factory=list)  # per epoch, the chief's
    run: str | None = None  # its folder inside the matrix's; None where it never ran
    keras_imported: str | None = None  # what the chief's process imported: "keras 3.15.1", "tf-keras 2.21.0"
    precision: str = "float32"  # PRECISIONS: the cell's PRECISION


@dataclasses.dataclass(eq=False)
class Matrix(Record):
    """matrix.json: every cell, the settings shared, and the verdict."""

    run: str
    settings: dict
    cells: list
    verdict: str
    ok: bool
    version: int = MATRIX_VERSION

    @classmethod
    def from_dict(cls, data: Any) -> "Matrix":
        """ValueError (SummaryError, naming the field) for anything the lab did not write."""
        if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
            raise SummaryError("not a matrix: no list of cells")
        if data.get("version") not in READABLE_VERSIONS:
            raise SummaryError(f"version is {json.dumps(data.get('version'))[:20]}, not one of "
                               f"{', '.join(map(str, READABLE_VERSIONS))}")
        cells = [checked_record(Cell, runsummary.numbers(cell), f"cells[{index}].")
                 for index, cell in enumerate(data["cells"])]
        for index, cell in enumerate(cells):
            if cell.outcome not in OUTCOMES:
                raise SummaryError(f"cells[{index}].outcome is {cell.outcome[:40]!r}, not one of {', '.join(OUTCOMES)}")
        result = checked_record(cls, data, "")
        result.cells = cells
        return result

    @classmethod
    def read(cls, folder: Path) -> "Matrix":
        path = folder / MATRIX
        try:
            return cls.from_dict(json.loads(path.read_text()))
        except (UnicodeDecodeError, json.JSONDecodeError, SummaryError) as error:
            raise ForeignFile(f"{display_path(path)} is not a matrix the lab wrote: {error}") from None


def cell_run(tf: str, keras: str, strategy: str, precision: str = "float32") -> str:
    """The cell's run folder name: tf2-15-tf-keras-multiworker, tf2-21-keras3-15-mirrored,
    tf2-21-tf-keras-mirrored-mixed-float16 (a run id has no dots nor underscores)."""
    keras = f"keras{keras}" if versions.is_keras_release(keras) and keras != "nightly" else keras
    mixed = "" if precision == "float32" else "-" + precision.replace("_", "-")
    return f"tf{tf.replace('.', '-')}-{keras.replace('.', '-')}-{strategy}{mixed}"


def replayed(settings: Settings) -> str:
    """A replayed job's one column in place of the strategies: tfjob, trainjob; "" for any other run."""
    return "tfjob" if settings.tfjob else "trainjob" if settings.trainjob else ""


def refuse_foreign(plan) -> None:
    """Before anything starts: a cell can put its own image in place of the lab's trainer image
    only (a foreign image is one TensorFlow, whatever TF says). `plan`: tfjob.Plan (a TrainJob's too)."""
    job = f"{plan.setting}={plan.path}"
    for one in plan.tasks:
        if not one.image.startswith(LAB_IMAGE) or "@" in one.image:
            raise LabError(f"{job}: {one.name}'s image is {foreign.shown(one.image, 120)}, not the lab's trainer "
                           f"image; make matrix can vary only the lab's own ({LAB_IMAGE}<tag>, as make k8s writes "
                           f"it), one per TF and KERAS; run this one as it is with make up {job}")


def recast(plan, image: str, environment: dict[str, str]):
    """The plan of one cell: every replica on the cell's image, with the cell's Keras environment
    (TF_USE_LEGACY_KERAS, versions.legacy_keras_env) over the manifest's."""
    tasks = [dataclasses.replace(one, image=image, service={**one.service, "image": image, "environment": {
        **one.service.get("environment", {}), **environment}}) for one in plan.tasks]
    return dataclasses.replace(plan, tasks=tasks)


def sized(settings: Settings, given: Mapping[str, str]) -> Settings:
    """The lab's own model at MATRIX_SIZE where EPOCHS or EXAMPLES is not given; a SCRIPT or a
    replayed job as it is."""
    if settings.script or replayed(settings):
        return settings
    small = {name.lower(): value for name, value in MATRIX_SIZE.items() if name not in given}
    return settings.replace(**small) if small else settings


def plan(settings: Settings, folder: Path) -> list[tuple[Cell, Settings | None]]:
    """Every cell, with the settings of its run (None: n/a). A setting no cell can run with (a
    GLOBAL_BATCH the workers do not divide) is refused, naming the cell, before anything runs."""
    planned: list[tuple[Cell, Settings | None]] = []
    strategies = [replayed(settings)] if replayed(settings) else settings.strategies.split()
    precisions = ["float32"] if replayed(settings) else (settings.precisions or settings.precision).split()
    for tf in (settings.tf or " ".join(versions.canonical(word) or word for word in MATRIX_TF.split())).split():
        for keras in (settings.keras or MATRIX_KERAS).split():
            for strategy, precision in ((strategy, precision) for strategy in strategies for precision in precisions):
                cell = Cell(tf=tf, tf_release=versions.release(tf), keras=keras, strategy=strategy, outcome="not run",
                            precision=precision)
                shape: dict[str, Any] = {} if replayed(settings) else {"strategy": strategy, "precision": precision}
                refusal = versions.keras_refusal(tf, keras) or keras3_refusal(
                    dataclasses.replace(settings, tf=tf, keras=keras, **shape))  # the cell unvalidated: n/a, not raised
                if refusal:
                    cell.outcome, cell.what = "n/a", refusal.split(": ", 1)[1]
                    planned.append((cell, None))
                    continue
                if versions.is_keras_release(keras):
                    try:
                        lock = keraslock.read(tf, keras)
                    except keraslock.LockError as error:
                        cell.outcome, cell.what = "n/a", str(error)
                        planned.append((cell, None))
                        continue
                    if lock.not_installable:
                        cell.outcome, cell.what = "not installable", f"pip: {lock.not_installable}"
                        planned.append((cell, None))
                        continue
                cell.run = cell_run(tf, keras, strategy, precision)
                try:  # a replayed job fixes its own shape and precision (shape is empty)
                    one = settings.replace(tf=tf, keras=keras, run=cell.run, runs_dir=str(folder), **shape)
                except SettingsError as error:
                    named = "" if replayed(settings) else f" STRATEGY={strategy}" + (
                        "" if precision == "float32" else f" PRECISION={precision}")
                    raise SettingsError(f"matrix cell TF={versions.label(tf)} KERAS={keras}{named}: {error}") from None
                planned.append((cell, one))
    return planned


def fill(cell: Cell, run_dir: Path) -> None:
    """A cell that ran, from its run folder: the report's row and the first failed task's explanation."""
    row = report.run_row(run_dir)
    cell.final_loss, cell.steady_step_seconds = row["final_loss"], row["steady_step_seconds"]
    cell.peak_rss_bytes, cell.wall_seconds, cell.losses = (row["peak_rss_per_process_bytes"], row["wall_seconds"],
                                                           row["losses"])
    try:
        summary = runsummary.Summary.read(run_dir)
    except FileNotFoundError:
        cell.outcome = "failed"
        return
    if summary.tasks:
        cell.keras_imported = imported_keras(run_dir, summary.tasks[0].task)
    cell.outcome = "ok" if summary.ok else summary.outcome if summary.outcome in OUTCOMES else "failed"
    nonfinite = next((finding for finding in summary.findings if finding["kind"] == "non-finite"), None)
    if all(task.status in ("ok", "stopped") for task in summary.tasks) and summary.outcome in ("ok", "failed") and (
            nonfinite or not all(map(math.isfinite, cell.losses))):
        # Exit 0 everywhere (under AUDIT=strict the finding failed the run): it ran, and trained wrong.
        cell.outcome, cell.signature, cell.fix = "wrong", "non-finite-loss", audit.NONFINITE_FIX
        cell.what = nonfinite["message"] if nonfinite else (
            "the chief's loss per epoch was " + " ".join(f"{loss:.6g}" for loss in cell.losses))
        if keras3_loss_scale_nan(cell):
            cell.signature, cell.what, cell.fix = KERAS3_LOSS_SCALE
        return
    if summary.ok:
        return
    explained = [task.explanation for task in summary.tasks if task.explanation]
    found = next((e for e in explained if e["signature"] in NOT_APPLICABLE_SIGNATURES), None) or \
        next(iter(explained), None)
    if found:
        cell.signature, cell.what, cell.fix = found["signature"], found["what"], found["fix"]
        if found["signature"] in NOT_APPLICABLE_SIGNATURES:
            cell.outcome = "n/a"
    else:
        failed = next((task for task in summary.tasks if task.status != "ok"), None)
        cell.what = (failed.error if failed and failed.error else summary.outcome)


def imported_keras(run_dir: Path, task: str) -> str | None:
    """The Keras a task's process imported: a script's own `imported` events (trainer/kerasversion.py:
    "keras 3.15.1", "tf-keras 2.21.0"), else what its start said tf.keras is (the lab's trainer)."""
    records = complete(runfolder.events(run_dir, task))
    imported = [f"{'tf-keras' if record['module'] == 'tf_keras' else record['module']} {record['version']}"
                for record in by_event(records, "imported")]
    if imported:
        return ", ".join(dict.fromkeys(imported))[:200]
    started = by_event(records, "start")
    said = started[0]["versions"].get("keras") if started else None
    return said[:200] if isinstance(said, str) else None


def compare_with_single(cells: list[Cell], settings: Settings) -> None:
    """A synchronous strategy's ok cell whose losses part from the single-device cell's of the same
    TF, Keras and precision beyond LOSS_TOLERANCE is wrong: the same job, trained differently. The lab's own
    trainer only (a script's data and seeds are its own), and only where the single cell ran ok."""
    if settings.script:
        return
    singles = {(cell.tf, cell.keras, cell.precision): cell for cell in cells
               if cell.strategy == "single" and cell.outcome == "ok"}
    for cell in cells:
        single = singles.get((cell.tf, cell.keras, cell.precision))
        if cell.outcome != "ok" or cell.strategy not in COMPARABLE or not single or not cell.losses \
                or len(cell.losses) != len(single.losses):
            continue
        apart = [(epoch, mine, theirs, abs(mine - theirs) / max(abs(theirs), 1e-12))
                 for epoch, (mine, theirs) in enumerate(zip(cell.losses, single.losses), 1)]
        epoch, mine, theirs, relative = max(apart, key=lambda item: item[3])
        tolerance = LOSS_TOLERANCE if cell.precision == "float32" else MIXED_LOSS_TOLERANCE
        if relative > tolerance:
            cell.outcome, cell.signature = "wrong", "losses-differ"
            cell.what = (f"epoch {epoch}: loss {mine:.6g} under {cell.strategy} against {theirs:.6g} on one device "
                         f"({relative:.1e} apart; {cell.precision}'s rounding stays under {tolerance:g}): "
                         "the same data, seed and global batch trained differently")
            cell.fix = ("compare the two runs' matrix.md losses epoch by epoch: a strategy that sums or averages "
                        "the gradients differently (a loss not scaled by the global batch, a metric or a variable "
                        "updated outside strategy.run) parts from the first epoch, one a whole factor of the replicas "
                        "apart is a loss divided by them (keras-loss-in-replica); NaN in one is non-finite-loss")


def not_started(cell: Cell, error: LabError) -> None:
    """A cell whose run could not start: its image did not build, a script's packages did not install."""
    cell.outcome, cell.run = "failed", None
    found = explain(Evidence(task="image", exit_code=1, error=str(error), output=str(error)))
    if found and found.signature not in ("exception", "exit code"):
        cell.signature, cell.what, cell.fix = found.signature, found.what, found.fix
    else:
        cell.what = str(error)


def passed(cells: list[Cell]) -> bool:
    return any(cell.outcome == "ok" for cell in cells) and all(cell.outcome in ("ok", *NOT_A_RUN) for cell in cells)


def write(folder: Path, settings: Settings, cells: list[Cell]) -> Matrix:
    """matrix.json, matrix.md and matrix.png: the matrix's one writer. Returns what it wrote."""
    result = Matrix(run=folder.name, settings=settings.to_dict(), cells=cells, verdict=verdict(cells),
                    ok=passed(cells))
    runfolder.write_json(folder / MATRIX, result.to_dict())
    runfolder.write_whole(folder / "matrix.md", markdown(result))
    report.replace_file(folder / "matrix.png", lambda temporary: plot(result, temporary))
    return result


def columns(cells: list[Cell]) -> list[tuple[str, str, str]]:
    return list(dict.fromkeys((cell.keras, cell.strategy, cell.precision) for cell in cells))


def column_head(keras: str, strategy: str, precision: str, between: str = " ") -> str:
    """A column's head: its Keras and strategy, and its precision where it is a mixed one."""
    return f"{keras_head(keras)}{between}{strategy}" + ("" if precision == "float32" else f" {precision}")


def mark(cell: Cell) -> str:
    if cell.outcome == "ok":
        return "ok"
    if cell.outcome in NOT_A_RUN:
        return cell.outcome
    return f"{cell.outcome}: {cell.signature}" if cell.signature else cell.outcome


def said(cell: Cell) -> str:
    """A cell in the grid: its mark, and the Keras its chief imported where it ran."""
    return mark(cell) + (f" ({cell.keras_imported})" if cell.keras_imported else "")


def grid(result: Matrix) -> list[list[str]]:
    """Rows of the grid: a header, then one row per TF."""
    heads = columns(result.cells)
    by = {(cell.tf, cell.keras, cell.strategy, cell.precision): cell for cell in result.cells}
    rows = [["TF", *[column_head(*one) for one in heads]]]
    for tf in dict.fromkeys(cell.tf for cell in result.cells):
        rows.append([versions.label(tf), *[said(by[(tf, *head)]) if (tf, *head) in by else "" for head in heads]])
    return rows


def _number(value, fmt: str) -> str:
    return format(value, fmt) if isinstance(value, (int, float)) else "-"


def markdown(result: Matrix) -> str:
    rows = grid(result)
    lines = [f"# Matrix {result.run}", "", f"**{result.verdict}**", "",
             "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0]),
             *["| " + " | ".join(row) + " |" for row in rows[1:]], "",
             "## Cells", "", "| TF | release | Keras | imported | strategy | precision | outcome | final loss | "
             "steady step (ms) | peak RSS (MB) | wall (s) | run |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for cell in result.cells:
        lines.append(f"| {versions.label(cell.tf)} | {cell.tf_release} | {versions.keras_label(cell.keras)} | "
                     f"{cell.keras_imported or '-'} | {cell.strategy} | {cell.precision} | "
                     f"{mark(cell)} | {_number(cell.final_loss, '.6g')} | "
                     f"{_number(cell.steady_step_seconds and cell.steady_step_seconds * 1000, '.2f')} | "
                     f"{_number(cell.peak_rss_bytes and cell.peak_rss_bytes / 1e6, '.0f')} | "
                     f"{_number(cell.wall_seconds, '.1f')} | {cell.run or '-'} |")
    explained = [cell for cell in result.cells if cell.outcome != "ok" and cell.what]
    if explained:
        lines += ["", "## Why", ""]
        for cell in explained:
            where = column_head(cell.keras, cell.strategy, cell.precision, ", ")
            lines.append(f"- TF {versions.label(cell.tf)}, {where}: {mark(cell)}: "
                         f"{cell.what}"
                         + (f" Fix: {cell.fix}" if cell.fix else ""))
    with_losses = [cell for cell in result.cells if cell.losses]
    if with_losses:
        lines += ["", "## Losses per epoch", ""]
        lines += [f"- {cell.run}: " + " ".join(f"{loss:.6g}" for loss in cell.losses) for cell in with_losses]
    return "\n".join(lines) + "\n"


COLOURS = {"ok": "#4caf50", "wrong": "#fb8c00", "n/a": "#bdbdbd", "not installable": "#9e9e9e",
           "not run": "#eeeeee"}  # any other: red
RED = "#e53935"


def plot(result: Matrix, path: Path) -> bool:
    """matrix.png, the grid; False (and no file) where matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    heads = columns(result.cells)
    tfs = list(dict.fromkeys(cell.tf for cell in result.cells))
    by = {(cell.tf, cell.keras, cell.strategy, cell.precision): cell for cell in result.cells}
    figure, axes = plt.subplots(figsize=(2.4 * len(heads) + 1.5, 0.9 * len(tfs) + 2.2))
    for row, tf in enumerate(tfs):
        for column, head in enumerate(heads):
            cell = by.get((tf, *head))
            if cell is None:
                continue
            axes.add_patch(plt.Rectangle((column, row), 0.96, 0.92, color=COLOURS.get(cell.outcome, RED)))
            text = mark(cell).replace(": ", "\n", 1)
            axes.text(column + 0.48, row + 0.46, text, ha="center", va="center", fontsize=8, wrap=True)
    axes.set_xlim(0, len(heads))
    axes.set_ylim(len(tfs), 0)
    axes.set_xticks([i + 0.48 for i in range(len(heads))], [column_head(*one, between="\n") for one in heads],
                    fontsize=9)
    axes.set_yticks([i + 0.46 for i in range(len(tfs))], [f"TF {versions.label(tf)}" for tf in tfs], fontsize=9)
    axes.tick_params(length=0)
    for side in axes.spines.values():
        side.set_visible(False)
    width = max(40, int(22 * len(heads) + 10))  # characters a line of the title holds at this size
    axes.set_title(textwrap.fill(result.verdict, width), fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def matrix(settings: Settings, given: Mapping[str, str] | None = None) -> int:
    """Runs every cell one after another; writes the matrix after each; 0 only if every cell that
    can be is ok."""
    given = dict(given or {})
    settings = sized(settings, given)
    folder = runfolder.planned(settings)
    planned = plan(settings, folder)
    from tflab import backends

    job = None
    if replayed(settings):  # the manifest read and checked whole before the engine is asked anything
        from tflab import replay  # PyYAML is needed only here

        job = replay.load_plan(settings)
        replay.refuse_decided(job, dict(given))
        refuse_foreign(job)

    runnable = [(cell, one) for cell, one in planned if one is not None]
    if runnable:  # the engine, Compose and the first cell's image, before the folder is written
        backends.check_engine(runnable[0][1])
    runfolder.make(folder, link_latest=True)
    cells = [cell for cell, _ in planned]
    write(folder, settings, cells)
    for number, (cell, one) in enumerate(runnable, 1):
        say(f"--- matrix {folder.name}: TF {versions.label(cell.tf)}, {versions.keras_label(cell.keras)}, "
            f"{cell.strategy}{'' if cell.precision == 'float32' else ', ' + cell.precision} "
            f"({number} of {len(runnable)})")
        try:
            if job is None:
                runner.up(one, link_latest=False)
            else:
                image = images.ensure_image(one.base_image, images.trainer_variant(one))
                environment = versions.legacy_keras_env(one.tf, one.keras)
                replay.up(one, dict(given), recast=lambda plan: recast(plan, image, environment), link_latest=False)
        except KeyboardInterrupt:
            cell.outcome = "interrupted"
            write(folder, settings, cells)
            raise
        except LabError as error:  # its image, or a script's packages, could not be had
            say(str(error))
            not_started(cell, error)
        else:
            try:
                fill(cell, folder / one.run)  # the cell's run (plan)
            except (LabError, OSError) as error:  # a run folder it cannot read: the cell failed, said so
                cell.outcome, cell.what = "failed", f"its run folder could not be read: {error}"
            compare_with_single(cells, settings)  # the single cell may come before or after
        write(folder, settings, cells)
    result = write(folder, settings, cells)
    print(table(result))
    say("wrote " + ", ".join(display_path(folder / name) for name in (MATRIX, "matrix.md", "matrix.png")
                             if (folder / name).exists()))
    say(f"verdict: {result.verdict}")
    return 0 if result.ok else 1


def table(result: Matrix) -> str:
    rows = grid(result)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(text.ljust(width) for text, width in zip(row, widths)).rstrip() for row in rows)
