"""Reports: one row per run, computed from the runs' own logs, side by side.

    python3 -m tflab report RUN=<id>     # a `make compare` folder (one row per run in it) or one run

Writes <folder>/report.md (the table and what it means), report.csv (the same numbers, raw) and
report.png (loss per epoch, examples/s against replicas, first step against steady step, peak
memory). Nothing here trains: `make report` rebuilds a report from runs made any time before.
A run that failed, or a task that wrote nothing, is a row that says so, never a missing row.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from tflab.console import cell, columns
from tflab.core import foreign, runfolder
from tflab.core.foreign import ForeignFile, shown
from tflab.core.grammars import RUN_ID_PATTERN
from tflab.core.runfolder import COMPARE, CONFIG, TASK_NAME, events, log_path, read_config, task_space
from tflab.core.runsummary import Summary
from tflab.core.schema import by_event, complete, loss_value

FLOAT32_BYTES = 4


def run_folders(folder: Path) -> list[Path]:
    """The runs a report covers: every run inside a compare folder, in COMPARE order, or the run itself."""
    compare = folder / COMPARE
    if compare.exists() or compare.is_symlink():
        data = runfolder.read_lab_json(folder, COMPARE)
        labels = data.get("runs") if isinstance(data, dict) else None
        if not isinstance(labels, list) or not all(isinstance(label, str) and RUN_ID_PATTERN.fullmatch(label)
                                                   for label in labels):
            raise ForeignFile(f"{foreign.named(compare)}'s runs are {shown(json.dumps(labels)[:100], 100)}, "
                              "not a list of run names")
        return [folder / label for label in labels]
    return [folder]


REPLAY_KINDS = {"TFJob": "tfjob", "TrainJob": "trainjob"}  # config.json's "replay" -> the report's strategy


def replayed_kind(config: dict) -> str | None:
    """"tfjob" or "trainjob" for a replay's config.json (its "replay" key; a config written before
    it had one names its manifest as "tfjob", a TrainJob's too), None for a lab run's."""
    kind = config.get("replay")
    if isinstance(kind, str) and kind in REPLAY_KINDS:
        return REPLAY_KINDS[kind]
    return "tfjob" if "tfjob" in config else None


def run_row(run_dir: Path) -> dict:
    """One report row from a run's config.json, summary.json and task logs."""
    config = read_config(run_dir) if (run_dir / CONFIG).exists() or (run_dir / CONFIG).is_symlink() else {}
    settings, tasks = config.get("settings", {}), config.get("tasks", [])
    if not isinstance(settings, dict) or not isinstance(tasks, list) or not all(
            isinstance(task, str) and TASK_NAME.fullmatch(task) for task in tasks):
        raise ForeignFile(f"{foreign.named(run_dir / CONFIG)} is not a config the lab wrote: its settings are not "
                          "an object, or its tasks not a list of task names (letters, digits and . _ -)")
    try:
        summary = Summary.read(run_dir)
    except FileNotFoundError:
        summary = None
    logs = {}
    for task in tasks:
        records = events(run_dir, task)  # a task name that is no file name is refused here
        if records.skipped:
            where = foreign.named(log_path(task_space(run_dir), task))
            print(f"tflab: skipped {len(records.skipped)} line(s) of {where} "
                  f"that are not the lab's events (first: {shown(records.skipped[0], 200)})")
        logs[task] = complete(records)
    chief = tasks[0] if tasks else None
    chief_log = logs.get(chief, [])
    end = (by_event(chief_log, "end") or [{}])[-1]
    ready = (by_event(chief_log, "cluster_ready") or [{}])[-1]
    probes = by_event(chief_log, "allreduce")
    peaks = [r["peak_rss_bytes"] for log in logs.values() for r in by_event(log, "end")]
    steady = end.get("steady_step_seconds")
    # A replay's settings hold a strategy the lab guessed for its shape (multiworker, where no PS),
    # not one the job chose: its row says what it replayed, as matrix and summary.json do.
    strategy = replayed_kind(config) or _scalar(settings.get("strategy"))
    replicas = _number(settings.get("workers")) if strategy == "parameter_server" else ready.get("replicas")
    parameters = end.get("parameters")
    moves_gradients = strategy == "parameter_server" or (replicas or 1) > 1
    return {
        "run": run_dir.name,
        "strategy": strategy,
        "status": status_of(summary, logs),
        "processes": len(tasks),
        "replicas": replicas,
        "final_loss": loss_value(end["final_loss"]) if "final_loss" in end else None,
        "single_loss": None,  # filled by `rows`: the single run's of the same precision
        "precision": _scalar(settings.get("precision")) or "float32",  # a config from before PRECISION: float32
        "wall_seconds": summary.wall_seconds if summary else None,
        "time_to_first_step_seconds": (end["first_step_at"] - summary.launched_at)
        if summary and "first_step_at" in end else None,
        "first_step_seconds": end.get("first_step_seconds"),
        "steady_step_seconds": steady,
        "examples_per_second": _number(settings.get("global_batch")) / steady
        if steady and _number(settings.get("global_batch")) else None,
        "speedup": None,  # filled against the single run by `rows`
        "efficiency": None,
        "peak_rss_per_process_bytes": max(peaks) if peaks else None,
        "peak_rss_total_bytes": sum(peaks) if len(peaks) == len(tasks) and peaks else None,
        "gradient_bytes_per_step": parameters * FLOAT32_BYTES if parameters and moves_gradients else (
            0 if parameters else None),
        "allreduce_seconds": probes[-1]["median_seconds"] if probes else None,
        "losses": list({r["epoch"]: loss_value(r["loss"]) for r in by_event(chief_log, "epoch")}.values()),
        **{key: _scalar(settings.get(key)) for key in ("model", "loop", "steps_per_execution", "collective",
                                                       "bytes_per_pack", "backend", "global_batch", "epochs",
                                                       "examples", "seed")},
    }


def _number(value) -> int | float | None:
    """A setting read from a foreign config.json that the report computes with: a number, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or abs(value) > 2**63:
        return None
    return value


def _scalar(value) -> str | int | float | bool | None:
    """A setting the report shows: a short scalar as it is; anything else (a nested object, a
    very long string) as None, shown as missing."""
    if isinstance(value, str):
        return value if len(value) <= 200 else None
    return value if value is None or isinstance(value, bool) or _number(value) is not None else None


def status_of(summary: Summary | None, logs: dict[str, list[dict]]) -> str:
    if summary is None:
        return "incomplete: no summary.json (still running, or the lab was killed)"
    if summary.ok:
        return "ok"
    bad = [row for row in summary.tasks if row.status != "ok"]
    first = bad[0] if bad else {"task": "?", "status": summary.outcome, "exit_code": None, "error": None}
    why = f"{first['task']} {first['status']} (exit {first['exit_code']})"
    error = first.get("error")
    if isinstance(error, str) and error:
        why += f": {error.splitlines()[0][:120]}"
    return f"{summary.outcome}: {why}"


def rows(folder: Path) -> list[dict]:
    found = [run_row(run_dir) for run_dir in run_folders(folder)]
    singles: dict = {}  # precision -> the first single run trained at it (make compare PRECISIONS=)
    for row in found:
        if row["strategy"] == "single":
            singles.setdefault(row["precision"], row)
    for row in found:
        single = singles.get(row["precision"])
        row["single_loss"] = single["final_loss"] if single else None
        if single and single["examples_per_second"] and row["examples_per_second"]:
            row["speedup"] = row["examples_per_second"] / single["examples_per_second"]
            row["efficiency"] = row["speedup"] / row["replicas"] if row["replicas"] else None
    return found


PNG_SKIPPED = ("report.png skipped: matplotlib is not installed for this Python (make's targets use .venv's; "
               "an installed lab: pip install matplotlib)")
COLUMNS = [  # header, key, format, scale
    ("run", "run", "{}", 1),
    ("strategy", "strategy", "{}", 1),
    ("processes", "processes", "{}", 1),
    ("replicas", "replicas", "{}", 1),
    ("precision", "precision", "{}", 1),
    ("final loss", "final_loss", "{:.4f}", 1),
    ("single's loss", "single_loss", "{:.4f}", 1),
    ("wall s", "wall_seconds", "{:.1f}", 1),
    ("to first step s", "time_to_first_step_seconds", "{:.1f}", 1),
    ("first step s", "first_step_seconds", "{:.2f}", 1),
    ("steady step ms", "steady_step_seconds", "{:.2f}", 1000),
    ("examples/s", "examples_per_second", "{:.0f}", 1),
    ("speed-up", "speedup", "{:.2f}", 1),
    ("efficiency", "efficiency", "{:.2f}", 1),
    ("peak RSS/process MB", "peak_rss_per_process_bytes", "{:.0f}", 1e-6),
    ("peak RSS total MB", "peak_rss_total_bytes", "{:.0f}", 1e-6),
    ("gradient bytes/step", "gradient_bytes_per_step", "{}", 1),
    ("status", "status", "{}", 1),
]
SHARED = ("model", "loop", "steps_per_execution", "collective", "bytes_per_pack", "backend", "global_batch",
          "epochs", "examples", "seed")


def markdown(folder: Path, found: list[dict]) -> str:
    lines = [f"# tflab report: {folder.name}", ""]
    shared = {key: sorted({str(r[key]) for r in found if r[key] is not None}) for key in SHARED}
    lines.append("Shared by every run: " + ", ".join(f"{key} {'/'.join(values)}" for key, values in shared.items()))
    lines += ["", "| " + " | ".join(c[0] for c in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in found:
        lines.append("| " + " | ".join(cell(row.get(key), fmt, scale).replace("|", "\\|")
                                      for _, key, fmt, scale in COLUMNS) + " |")
    lines += ["", *NOTES]
    return "\n".join(shown(line, limit=0) for line in lines) + "\n"  # a foreign value is never written raw


NOTES = [
    "- steady step: the chief's median step time after the first epoch; examples/s is the global batch over it.",
    "- single's loss: the final loss of the `single` run at the same precision, beside each run's own; speed-up: "
    "examples/s over that run's; efficiency: speed-up over the replicas (1.0 is linear).",
    "- to first step: from the lab starting the tasks to the chief's first finished step (imports, "
    "rendezvous and tracing); first step: from fit's start, tracing included.",
    "- gradient bytes/step: the float32 gradient each replica all-reduces per step (parameter_server: each "
    "worker pushes it to the ps and reads the variables back); 0 where one replica has nobody to reduce with.",
    "- peak RSS: each process's peak resident memory; total sums every process of the run.",
]


def csv_text(found: list[dict]) -> str:
    keys = [key for _, key, _, _ in COLUMNS] + ["allreduce_seconds", *SHARED, "losses"]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=keys, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in found:
        writer.writerow({**row, "losses": " ".join(f"{loss:.6g}" for loss in row["losses"])})
    return out.getvalue()


def plot(found: list[dict], path: Path) -> bool:
    """report.png; False (and no file) where matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, axes = plt.subplots(2, 2, figsize=(13, 9))
    loss_axes, speed_axes, step_axes, memory_axes = axes.flat
    for row in found:
        if row["losses"]:
            loss_axes.plot(range(1, len(row["losses"]) + 1), row["losses"], marker="o", label=row["run"])
    loss_axes.set(title="training loss per epoch (equal losses draw one line)", xlabel="epoch",
                  ylabel="loss (MSE)", yscale="log")
    loss_axes.legend(fontsize=8)

    for strategy in dict.fromkeys(r["strategy"] for r in found):
        points = sorted((r["replicas"], r["examples_per_second"]) for r in found
                        if r["strategy"] == strategy and r["examples_per_second"] and r["replicas"])
        if points:
            speed_axes.plot(*zip(*points), marker="o", label=strategy)
    speed_axes.set(title="steady-state throughput", xlabel="replicas (parameter_server: workers)",
                   ylabel="examples/s", yscale="log")
    speed_axes.legend(fontsize=8)

    labels = [r["run"] for r in found]
    positions = range(len(found))
    first = [r["first_step_seconds"] or 0 for r in found]
    steady = [r["steady_step_seconds"] or 0 for r in found]
    step_axes.bar([p - 0.2 for p in positions], first, width=0.4, label="first step (tracing included)")
    step_axes.bar([p + 0.2 for p in positions], steady, width=0.4, label="steady step (median)")
    step_axes.set(title="step time: first step vs steady state", ylabel="seconds", yscale="log")
    step_axes.set_xticks(list(positions), labels, rotation=30, ha="right", fontsize=8)
    step_axes.legend(fontsize=8)

    per_process = [(r["peak_rss_per_process_bytes"] or 0) / 1e6 for r in found]
    total = [(r["peak_rss_total_bytes"] or 0) / 1e6 for r in found]
    memory_axes.bar([p - 0.2 for p in positions], per_process, width=0.4, label="largest process")
    memory_axes.bar([p + 0.2 for p in positions], total, width=0.4, label="all processes")
    memory_axes.set(title="peak resident memory", ylabel="MB")
    memory_axes.set_xticks(list(positions), labels, rotation=30, ha="right", fontsize=8)
    memory_axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return True


def table(found: list[dict]) -> str:
    lines = columns([c[0] for c in COLUMNS[:-1]],
                    [[cell(r.get(key), fmt, scale) for _, key, fmt, scale in COLUMNS[:-1]] for r in found])
    lines += [f"{r['run']}: {shown(r['status'], limit=0)}" for r in found if r["status"] != "ok"]
    return "\n".join(lines)


def write(folder: Path) -> tuple[list[dict], list[Path]]:
    """Builds and writes the report for a folder; returns its rows and the files written."""
    found = rows(folder)
    written = [folder / "report.md", folder / "report.csv"]
    texts = [markdown(folder, found), csv_text(found)]
    for path, text in zip(written, texts):
        replace_file(path, lambda temporary, text=text: temporary.write_text(text))
    if replace_file(folder / "report.png", lambda temporary: plot(found, temporary)):
        written.append(folder / "report.png")
    return found, written


def replace_file(path: Path, write) -> bool:
    """runfolder.replace_whole (`write` makes the file by name, then it replaces `path` whole),
    refusing a folder where the file goes (ForeignFile, one line)."""
    if path.is_dir() and not path.is_symlink():
        raise ForeignFile(f"{foreign.named(path)} is a folder; the report writes a file there")
    return runfolder.replace_whole(path, write)
