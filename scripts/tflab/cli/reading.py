"""The commands that read a run's folder and never the engine: report, summary, why and logs, each
a file the lab did not write refused in one line; and check, which reads the input of the command
`make` is about to build .venv for, so a mistake is said before minutes of building."""

from __future__ import annotations

import codecs
import os
import sys

from tflab import console
from tflab.core import beneath, foreign, runfolder
from tflab.core.commands import lab_command
from tflab.core.errors import LabError
from tflab.core.runsummary import Summary
from tflab.core.settings import Settings
from tflab.reports import compare, report
from tflab.supervisor import setid, summary, table

# What reading a file the lab did not write (or one cut short) raises: JSON and UTF-8 errors are
# ValueErrors, and a file of the wrong shape fails where it is read.
MALFORMED = (ValueError, KeyError, TypeError, AttributeError, IndexError)


def malformed(path, error: Exception) -> LabError:
    reason = foreign.shown(" ".join(f"{type(error).__name__}: {error}".split()), 300)
    return LabError(f"{console.display_path(path)} holds a file the lab did not write, or one cut short ({reason}); "
                    "expected the summary.json, config.json and compare.json of a lab run")


def command_report(settings: Settings) -> int:
    folder = runfolder.existing(settings)
    try:
        found, written = report.write(folder)
        print(report.table(found))
    except LabError:  # foreign.ForeignFile: its one line names the file already
        raise
    except MALFORMED as error:
        raise malformed(folder, error) from None
    print("tflab: wrote " + ", ".join(console.display_path(path) for path in written))
    if not any(path.suffix == ".png" for path in written):
        print(f"tflab: {report.PNG_SKIPPED}")
    return 0


def finished_summary(settings: Settings) -> Summary:
    """RUN's summary.json, read as a foreign file: LabError, one line, where it is missing or malformed."""
    run_dir = runfolder.existing(settings)
    try:
        return Summary.read(run_dir)
    except FileNotFoundError:
        raise LabError(f"run {run_dir.name} has no summary.json: it is still running, or the lab was killed") from None
    except LabError:  # foreign.ForeignFile: its one line names the file already
        raise
    except MALFORMED as error:
        raise malformed(run_dir / runfolder.SUMMARY, error) from None


def command_summary(settings: Settings) -> int:
    print(table.table(finished_summary(settings)))
    return 0


def command_why(settings: Settings) -> int:
    """What broke and what to do, where a restarted script resumed, the audit's findings: the lines
    a test's `lab.why()` starts with, for a run made with make or tflab."""
    result = finished_summary(settings)
    lines = table.why_lines(result) + setid.why_lines(runfolder.existing(settings))
    if all(line.startswith("note: ") for line in lines) and result.outcome in ("timed out", "stalled"):
        # a run that stopped moving is never "nothing to explain", even where the lab learned no more
        logs = lab_command(f"logs RUN={result.run}")
        lines = [f"the run {result.outcome} with no task failed, and the lab has no record of where its tasks were "
                 f"(STALL=off, or no task answered the request for its stacks): read `{logs}`"] + lines
    elif all(line.startswith("note: ") for line in lines):  # nothing but the audit's notes
        notes = [line for line in lines if summary.NOT_AUDITED not in line]
        if result.ok:
            said = "nothing to explain: no task failed, no script restarted, no audit finding"
        else:  # a run that failed with no signature the lab knows: never "nothing to explain"
            reason = f" ({result.reason})" if result.reason else ""
            logs = lab_command(f"logs RUN={result.run}")
            said = (f"{result.outcome}{reason}, and nothing the lab recorded explains it: no known failure, no "
                    f"script restart, no audit finding; the run's output is in `{logs}`")
        lines = [f"{said} ({table.audit_state(result)})"] + notes
    print(f"run {foreign.shown(result.run)}: {foreign.shown(result.outcome)}")
    print("\n".join(foreign.shown(line, limit=0) for line in "\n".join(lines).split("\n")))
    return 0


def command_logs(settings: Settings) -> int:
    run_dir = runfolder.existing(settings)
    try:
        chunks = beneath.chunks(run_dir, runfolder.OUTPUT)  # a regular file, opened with no link followed
    except FileNotFoundError:
        raise LabError(f"run {run_dir.name} has no output.log yet: it is still running, "
                       f"follow it in its <task>.jsonl files in {runfolder.task_space(run_dir)}") from None
    # A task may have written any bytes: read in chunks (a log can be gigabytes), decoded with
    # replacement, every control character but line breaks and tabs escaped, never raw.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        for chunk in chunks:
            sys.stdout.write(foreign.shown(decoder.decode(chunk), limit=0, keep="\n\t"))
        sys.stdout.write(foreign.shown(decoder.decode(b"", final=True), limit=0, keep="\n\t"))
        sys.stdout.flush()
    except BrokenPipeError:  # `tflab logs | head`: the reader has what it wanted
        console.quiet_stdout()
    return 0


CHECKED_FIRST = ("up", "compare", "matrix", "report", "bench", "chaos-grid")  # make builds .venv for these: check first


def command_check(settings: Settings) -> int:
    """What `make compare`, `report`, `bench`, `chaos-grid` (and `up BACKEND=local`) check with the host's own
    Python before make builds .venv, TensorFlow and all: the settings, and the input of the
    command TFLAB_CHECK names. Prints nothing when all is well."""
    command = os.environ.get("TFLAB_CHECK", "")
    if command not in CHECKED_FIRST:
        raise LabError(f"TFLAB_CHECK={command} is not allowed: expected one of {', '.join(CHECKED_FIRST)}")
    if command in ("up", "compare", "matrix", "bench"):
        runfolder.planned(settings)
    if command == "matrix":
        from tflab.reports import matrix

        matrix.plan(settings, runfolder.planned(settings))
    if command == "compare":
        compare.compare_runs(settings)
    elif command == "report":
        check_report(runfolder.existing(settings))
    elif command == "chaos-grid":
        from tflab.faults import grid

        grid.check(settings)
    elif command == "bench":
        from tflab.reports import bench

        bench.plan(settings)
    return 0


def check_report(folder) -> None:
    """Reads and renders, in memory, all that `report` would from a run or compare folder, so a
    broken one is refused before make builds .venv for it (minutes); only report.png is left out."""
    try:
        found = report.rows(folder)
        report.markdown(folder, found), report.csv_text(found), report.table(found)
    except (*MALFORMED, OSError, RecursionError) as error:
        raise malformed(folder, error) from None
