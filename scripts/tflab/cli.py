"""tflab: TensorFlow multi-node training reproduced on one host with Docker Compose.

    tflab up STRATEGY=multiworker WORKERS=3      # settings as NAME=value, as environment variables,
    tflab up --strategy multiworker --workers 3  # or as flags: one settings table behind all three
    tflab config --workers 3                     # the cluster spec and every TF_CONFIG
    tflab down                                   # remove what runs under ./runs left behind

The Makefile's targets call this same command (`python3 -m tflab` in a checkout). The host side
needs nothing but Python 3.9+ and Docker: it never imports TensorFlow. A user's mistake is one
line on stderr and exit status 2, never a traceback. SIGINT, SIGTERM and SIGHUP (to the lab, or
to the make that runs it) stop and remove the run's containers, write its summary as interrupted,
and exit 128 + the signal's number; a SIGKILL leaves the run to its reaper (reaper.py).
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import difflib
import json
import os
import re
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

from tflab import backends, console, home, images
from tflab.backends import compose
from tflab.core import beneath, foreign, runfolder, versions
from tflab.core.commands import RUNS, lab_command
from tflab.core.errors import LabError
from tflab.core.runfolder import Summary
from tflab.core.settings import SETTINGS, SPECS, Settings, settings_table
from tflab.engine import docker, labels, leftovers
from tflab.home import LAB_HOME
from tflab.k8s import writer as k8s
from tflab.protocol import command_label, given_values, named_values, refuse_not_read, settings_of
from tflab.reports import compare, report, tensorboard
from tflab.supervisor import runner, summary

USAGE_ERROR = 2


def parse_assignments(arguments: list[str]) -> dict[str, str]:
    pairs = {}
    for argument in arguments:
        name, equals, value = argument.partition("=")
        if not equals or not name:
            raise LabError(f"unexpected argument {argument!r}; settings are given as NAME=value")
        pairs[name] = value
    return pairs


def command_up(settings: Settings, given: dict[str, str] | None = None) -> int:
    """given: the settings the user gave (given_values), which a TFJob replay refuses where the TFJob decides."""
    if settings.tfjob or settings.trainjob:
        from tflab.backends import replay  # PyYAML is needed only here

        return replay.up(settings, given)
    return runner.up(settings)


def command_compare(settings: Settings) -> int:
    return compare.compare(settings)


# What reading a file the lab did not write (or one cut short) raises: JSON and UTF-8 errors are
# ValueErrors, and a file of the wrong shape fails where it is read.
MALFORMED = (ValueError, KeyError, TypeError, AttributeError, IndexError)


def malformed(path, error: Exception) -> LabError:
    reason = foreign.shown(" ".join(f"{type(error).__name__}: {error}".split()), 300)
    return LabError(f"{console.display_path(path)} holds a file the lab did not write, or one cut short ({reason}); "
                    "expected the summary.json, config.json and compare.json of a lab run")


def command_matrix(settings: Settings, given: dict[str, str] | None = None) -> int:
    from tflab.reports import matrix

    return matrix.matrix(settings, given or {})


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


def command_bench(settings: Settings) -> int:
    from tflab.reports import bench

    return bench.bench(settings)


def command_chaos(settings: Settings, given: dict[str, str] | None = None) -> int:
    """given: as command_up's, for a replayed job's (TFJOB=, TRAINJOB=) refusals."""
    from tflab import faults as chaos

    return chaos.chaos(settings, given)


def command_soak(settings: Settings) -> int:
    from tflab import faults as chaos

    return chaos.soak(settings)


def command_config(settings: Settings) -> int:
    """Prints the resolved settings, the cluster spec and each task's TF_CONFIG, as JSON."""
    the_cluster, note = backends.config_cluster(settings)
    print(json.dumps({"settings": settings.to_dict(), "addresses": note, "cluster": the_cluster.spec}, indent=2))
    for task in the_cluster.tasks:
        tf_config = json.dumps(the_cluster.tf_config(task)) if the_cluster.spec else "(none: one process)"
        print(f"{task}: TF_CONFIG={tf_config}")
    return 0


def command_k8s(settings: Settings) -> int:
    if settings.tfjob:  # a TFJob as the equivalent TrainJob
        from tflab.k8s import trainjob  # PyYAML is needed only here

        return trainjob.from_tfjob(settings)
    return k8s.write(settings)


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
    print(summary.table(finished_summary(settings)))
    return 0


def command_why(settings: Settings) -> int:
    """What broke and what to do, where a restarted script resumed, the audit's findings: the lines
    a test's `lab.why()` starts with, for a run made with make or tflab."""
    result = finished_summary(settings)
    lines = summary.why_lines(result)
    if all(line.startswith("note: ") for line in lines):  # nothing but the audit's notes
        lines = [f"nothing to explain: no task failed, no script restarted, no audit finding "
                 f"({summary.audit_state(result)})"] + [line for line in lines if summary.NOT_AUDITED not in line]
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
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush is quiet too
    return 0


def command_down(settings: Settings) -> int:
    """Removes what the runs under RUNS_DIR (RUN=<id>: that run, or that compare's runs) left on
    the engine, found by their labels (labels.py); never another folder's runs or project. A run
    whose lab still runs (its owner.json's process) is left alone, and named, unless FORCE=1."""
    docker.check()
    runs = runfolder.runs_dir(settings)
    scope = runs / settings.run if settings.run else runs
    found = leftovers.projects(scope, None if settings.run else labels.tensorboard_project(scope))
    found += leftovers.stacks(scope)
    for leftover in found:  # a run's project or stack alike: its lab, while alive, is asked first
        run_dir = leftover.run_dir
        proof = runfolder.owner_of(run_dir) if run_dir else runfolder.Owner()
        if proof.doubt:
            print(f"tflab: {proof.doubt}; no signal sent to any process")
        owner = proof.pid
        if owner is not None and not settings.force:
            again = lab_command(f"down RUN={run_name(run_dir, runs).split('/')[0]} FORCE=1")
            print(f"tflab: run {run_name(run_dir, runs)} is still running (pid {owner}); leaving it: `{again}` ends it")
            continue
        if owner is not None:
            end_live_run(run_dir, owner, proof.here)
        ended = f" (run {run_name(run_dir, runs)}, ended by tflab down)" if owner else ""
        kind = "stack " if leftover.kind == "stack" else ""
        print(f"tflab: removed {kind}{leftover.name}{ended}" if leftover.remove()
              else f"tflab: {kind}{leftover.name} is still being removed")
    if not found:
        print(f"tflab: nothing of the runs in {console.display_path(scope)} is left on the engine")
    return 0


def refuse_an_empty_run(env, assignments: dict[str, str]) -> None:
    """`make down RUN=`, or `RUN=$id tflab down` with $id empty: left empty by accident, RUN would
    widen down from one run to every run in RUNS_DIR. So here, unlike elsewhere, an empty RUN is
    refused however it is given (an argument, a flag, make's command line, the environment);
    every run is meant by leaving RUN out."""
    value = assignments.get("RUN", env.get("RUN"))
    if value is not None and not value.strip():
        raise LabError(f"RUN={value!r} is not allowed with {command_label('down')}: an empty RUN would remove what "
                       "every run in RUNS_DIR left on the engine; expected a run id (RUN=<id>), or RUN left out "
                       "(unset) for every run")


def run_name(run_dir, runs) -> str:
    """A run as RUN names it: its path under RUNS_DIR (a compare's sub-run: <compare>/<label>)."""
    try:
        return str(run_dir.relative_to(runs))
    except ValueError:
        return run_dir.name


DOWN_WAIT_SECONDS = 60  # how long `down FORCE=1` lets a live run's lab stop and remove it itself


def end_live_run(run_dir, pid: int, here: bool) -> None:
    """Ends a run whose lab is alive the way the lab ends it itself: SIGTERM to the lab, which stops
    and removes its tasks and writes its summary, outcome interrupted. The mark in the run folder
    makes it say "ended by tflab down" (also where its lab is on another host and only the
    containers can be removed: the lab then sees them vanish). What it has not removed when the
    wait is over, `down` removes."""
    try:
        runfolder.mark_ended_by_down(run_dir)
    except (OSError, LabError):
        pass  # the run is still ended; it may only call it "removed from outside the lab"
    if not here:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + DOWN_WAIT_SECONDS
    while time.monotonic() < deadline and runfolder.live_owner(run_dir) == pid:
        time.sleep(0.2)


def command_images(settings: Settings, tag_only: bool = False) -> int:
    docker.check()
    if tag_only:  # stdout is the bare tag, for $(tflab images --tag) and a Dockerfile's FROM
        sys.stdout.flush()
        kept = os.dup(1)
        os.dup2(2, 1)  # the build's progress, the lab's and its subprocesses', goes to stderr meanwhile
        try:
            with contextlib.redirect_stdout(sys.stderr):
                name = images.ensure_image(settings.base_image, images.trainer_variant(settings))
        finally:
            sys.stdout.flush()
            os.dup2(kept, 1)
            os.close(kept)
        print(name)
        return 0
    name = images.ensure_image(settings.base_image, images.trainer_variant(settings))
    size = docker.image_inspect(name, "{{.Size}}").stdout.strip()
    print(f"tflab: {name} is up to date ({int(size) / 1e9:.2f} GB); its tag is a digest of what it is built from")
    return 0


def command_stack_up(settings: Settings) -> int:
    return runner.up(settings.replace(backend="swarm"))


def command_swarm_sim(settings: Settings) -> int:
    from tflab.tools import swarmsim

    return swarmsim.up(settings)


def command_swarm_sim_down(settings: Settings) -> int:
    from tflab.tools import swarmsim

    return swarmsim.down(settings)


def command_wheels(settings: Settings) -> int:
    image = images.keras_variant(settings.tf, settings.keras) if versions.is_keras_release(settings.keras) else \
        images.tf_variant(settings.tf) if settings.tf else images.variant_for(
            settings.gpus, settings.platform or images.machine_platform())
    images.ensure_wheels(image)
    print(f"tflab: {image.wheels.relative_to(LAB_HOME)}/ holds the pinned wheels")
    return 0


def command_clean(settings: Settings) -> int:
    """Removes what the lab can rebuild; never a run's outputs."""
    command_down(settings)
    images.remove_rebuildable()
    runs = runfolder.runs_dir(settings)
    kept = len([p for p in runs.iterdir() if p.is_dir() and not p.is_symlink()]) if runs.exists() else 0
    print(f"tflab: kept {kept} run folder(s) in {runs}: delete them yourself (rm -rf {runs}) if you mean to")
    return 0


def command_tensorboard(settings: Settings) -> int:
    docker.check()
    cli = compose.find_compose(settings.compose)
    runs = runfolder.runs_dir(settings)
    tensorboard.check_port(settings.tensorboard_port, runs)
    runs.mkdir(parents=True, exist_ok=True)
    url = tensorboard.serve(cli, runs, settings.tensorboard_port, images.ensure_image(settings.base_image,
                                                                                 images.trainer_variant(settings)))
    print(f"tflab: TensorBoard shows every run in {console.display_path(runs)}/ at {url} "
          f"(127.0.0.1 only; `{lab_command('down')}` stops it)")
    return 0


# The commands that read none of the lab's own files (home.py), which an installed lab lays out
# only when a command needs them, so these work where its cache folder cannot be made.
READ_NO_LAB_FILES = ("settings", "config", "summary", "logs", "report", "down", "check")
CHECKED_FIRST = ("up", "compare", "matrix", "report", "bench")  # make builds .venv for these: check first


def command_check(settings: Settings) -> int:
    """What `make compare`, `report`, `bench` (and `up BACKEND=local`) check with the host's own
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


HELP_WIDTH = 96  # `make help` and `--help` fit a terminal of 96 columns, or of 80 with a few long words


def settings_rows(names: list[str]) -> list[str]:
    """A table of these settings that fits HELP_WIDTH: the name, the default and what is allowed and
    meant, each wrapped in its column (COMPARE's default alone is 90 characters)."""
    shown = {name: (default or "(empty)", allowed, doc) for name, default, allowed, doc in settings_table()}
    name_width, default_width = max(len(name) for name in SPECS) + 2, 20
    text_width = HELP_WIDTH - 2 - name_width - default_width
    lines = []
    for name in names:
        default, allowed, doc = shown[name]
        defaults = textwrap.wrap(default, default_width - 2, break_on_hyphens=False, break_long_words=False)
        texts = [*textwrap.wrap(allowed, text_width, break_on_hyphens=False),
                 *textwrap.wrap(doc, text_width - 2, initial_indent="  ", subsequent_indent="  ",
                                break_on_hyphens=False)]
        for i in range(max(len(defaults), len(texts))):
            left, middle = name if i == 0 else "", defaults[i] if i < len(defaults) else ""
            right = texts[i] if i < len(texts) else ""
            lines.append(f"  {left:<{name_width}}{middle:<{default_width}}{right}".rstrip())
    return lines


def commands_heading(commands: tuple[str, ...]) -> str:
    """`every run and make images` for a group of settings: RUNS, named in full once, is `every run`."""
    runs = [c for c in RUNS if c in commands]
    extra = ", ".join(c for c in commands if c not in RUNS)
    if len(runs) < len(RUNS) / 2:
        return f"make {', '.join(commands)}"
    but = f" but make {', '.join(c for c in RUNS if c not in commands)}" if len(runs) < len(RUNS) else ""
    return f"every run{but}" + (f" and make {extra}" if extra else "")


def command_settings(settings: Settings) -> int:
    """`make help`: every setting once, under the commands that take it, in a table of HELP_WIDTH."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for spec in SETTINGS:
        groups.setdefault(spec.commands, []).append(spec.name)
    print(f"Every run is make {', '.join(RUNS)}.")
    print(f"  {'setting':<{max(len(name) for name in SPECS) + 2}}{'default':<20}allowed, then what it means")
    for commands, names in groups.items():
        print(f"For {commands_heading(commands)}:")
        print("\n".join(settings_rows(names)))
    return 0


COMMANDS = {
    "up": (command_up, "run a training on the lab and wait for its end"),
    "stack-up": (command_stack_up, "the same run as a Docker Swarm stack (BACKEND=swarm)"),
    "swarm-sim": (command_swarm_sim, "a multi-node swarm simulated on this host: NODES-1 engines in network "
                  "namespaces, a registry (root)"),
    "swarm-sim-down": (command_swarm_sim_down, "remove the simulated swarm, exactly what swarm-sim made"),
    "compare": (command_compare, "run every COMPARE entry side by side and write their report"),
    "matrix": (command_matrix, "run the job on every TF x KERAS x STRATEGIES and say what breaks: matrix.json/md/png"),
    "report": (command_report, "rebuild the report of a compare folder or a run (RUN=...)"),
    "bench": (command_bench, "measure the lab's overhead and the multi-worker step, side by side"),
    "chaos": (command_chaos, "a run with one fault injected: SCENARIO, TARGET, AT, HEAL"),
    "soak": (command_soak, "SOAK runs with random faults; prints survived/ended-cleanly/hung counts"),
    "config": (command_config, "print the cluster spec and every task's TF_CONFIG"),
    "k8s": (command_k8s, "write Kubernetes manifests for the settings: a TFJob, and plain Jobs"),
    "summary": (command_summary, "print a finished run's summary table (RUN=..., default the newest)"),
    "why": (command_why, "say what broke in a finished run and what to do, where a restarted script resumed, "
                         "and the audit's findings (RUN=..., default the newest)"),
    "logs": (command_logs, "print a finished run's merged, timestamped task output"),
    "down": (command_down, "remove what the runs in RUNS_DIR (or RUN=<id>) left on the engine; runs/ stays; "
                           "a live run only with FORCE=1"),
    "images": (command_images, "build the trainer image if its inputs changed; print its tag"),
    "wheels": (command_wheels, "download the trainer's pinned wheels"),
    "clean": (command_clean, "remove the lab's containers, images and wheels (never runs/)"),
    "tensorboard": (command_tensorboard, "serve every run's TensorBoard scalars on 127.0.0.1 (TENSORBOARD_PORT)"),
    "settings": (command_settings, "list every setting with its default"),
    "check": (command_check, "check the settings and the input of the command TFLAB_CHECK names; run nothing"),
}
INTERRUPTING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP (what `timeout`, CI cancels and systemd send), made into what Ctrl-C raises,
    so one path stops and removes a run whatever ended it."""

    def __init__(self, number: int):
        super().__init__(signal.Signals(number).name)
        self.signal = number


def interrupt(number: int, frame) -> None:
    # Only the first signal interrupts: a second one must not cut short the cleanup it started.
    for each in INTERRUPTING:
        signal.signal(each, signal.SIG_IGN)
    raise Interrupted(number)


def make_above() -> int | None:
    """The pid of the make that runs this lab (through the shells between them), or None: not
    under make, or no /proc to tell."""
    pid = os.getppid()
    for _ in range(4):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        name, fields = stat[stat.find("(") + 1:stat.rfind(")")], stat[stat.rfind(")") + 2:].split()
        if name in ("make", "gmake"):
            return pid
        if name not in ("sh", "bash", "dash", "zsh") or len(fields) < 2:
            return None
        pid = int(fields[1])
    return None


def in_handler(pid: int) -> int | None:
    """The signal (SIGINT or SIGHUP) a process is handling now, read from its blocked signals: a
    handler runs with its own signal blocked. None if it handles neither, or is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    blocked = next((int(line.split()[1], 16) for line in status.splitlines() if line.startswith("SigBlk:")), 0)
    return next((number for number in (signal.SIGINT, signal.SIGHUP) if blocked & (1 << (number - 1))), None)


def forward_from_make(make_pid: int) -> None:
    """GNU make passes SIGTERM on to the recipe it runs, but not SIGINT or SIGHUP: it takes those
    for a terminal's, which reach the whole process group anyway, and waits in its handler for its
    children to end. `kill -INT <make's pid>` (a CI cancel, a supervisor) then left the run
    training until TIMEOUT. So a thread watches make: while make sits in its handler for SIGINT or
    SIGHUP (its blocked signals say so, two reads in a row), the lab sends the same signal to
    itself and ends the run as Ctrl-C does; make then exits as it meant to."""
    def watch() -> None:
        seen = None
        while True:
            time.sleep(MAKE_POLL_SECONDS)
            if not Path(f"/proc/{make_pid}").exists():
                return
            number = in_handler(make_pid)
            if number is not None and number == seen:
                os.kill(os.getpid(), number)
                return
            seen = number

    threading.Thread(target=watch, daemon=True, name="make-signals").start()


MAKE_POLL_SECONDS = 0.25


def flag(name: str) -> str:
    return "--" + name.lower().replace("_", "-")


def settings_epilog(command: str) -> str:
    """The settings `command` takes, each with its flag, default and meaning; then the others by
    name, which it refuses (protocol.refuse_not_read)."""
    taken = settings_of(command if command != "check" else "up")
    lines = [f"settings of {command_label(command)}, as --flag VALUE, NAME=value, or NAME in the environment:"]
    for name, default, allowed, doc in settings_table():
        if name in taken:
            lines += textwrap.wrap(f"{flag(name)} ({name}): {allowed}; default {default or '(empty)'}",
                                   width=HELP_WIDTH, initial_indent="  ", subsequent_indent=" " * 6,
                                   break_on_hyphens=False)
            lines += textwrap.wrap(doc, width=HELP_WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 6)
    others = [f"{flag(name)} ({name})" for name in SPECS if name not in taken]
    if command == "check":
        lines = ["settings of the command TFLAB_CHECK names (up's shown), as --flag VALUE, NAME=value, or NAME",
                 "in the environment:"] + lines[1:]
    elif len(others) > 20:  # the commands that read only a few: the rest is the whole table
        lines.append(f"the other {len(others)} settings are other commands' (`tflab settings` lists them all), "
                     "refused here")
    elif others:  # a line breaks between entries only, so each reads whole
        lines.append("other commands' settings, not taken here:")
        for entry in others:
            if len(lines[-1]) + len(entry) + 2 > HELP_WIDTH:
                lines.append(" ")
            lines[-1] += f" {entry},"
        lines[-1] = lines[-1].rstrip(",")
    return "\n".join(lines)


class Parser(argparse.ArgumentParser):
    """argparse, but a mistake is the lab's one line (naming the flag it resembles), not a usage block."""

    def error(self, message: str):
        unknown = re.search(r"unrecognized arguments: (--?[\w-]+)", message)
        if unknown:
            known = [flag(name) for name in SPECS]
            close = difflib.get_close_matches(unknown.group(1).split("=")[0], known, n=1)
            message += f"; did you mean {close[0]}?" if close else "; `tflab <command> --help` lists the settings"
        print(f"{self.prog}: {message}", file=sys.stderr)
        sys.exit(USAGE_ERROR)


def make_parser() -> argparse.ArgumentParser:
    """`tflab --help` and `tflab <command> --help`, generated from COMMANDS and the settings table."""
    parser = Parser(prog="tflab", description=__doc__.split("\n\n")[1], allow_abbrev=False,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="command", required=True, parser_class=Parser)
    for name, (_, doc) in COMMANDS.items():
        sub = commands.add_parser(name, help=doc, description=textwrap.fill(doc, HELP_WIDTH),
                                  epilog=settings_epilog(name), allow_abbrev=False,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
        sub.add_argument("assignments", nargs="*", metavar="NAME=value")
        if name == "images":
            sub.add_argument("--tag", action="store_true", help="print only the image's tag on stdout (the "
                             "build's progress on stderr): FROM $(tflab images --tag) in a Dockerfile or a script")
        for setting in SPECS:
            sub.add_argument(flag(setting), dest=f"setting_{setting}", metavar="VALUE", help=argparse.SUPPRESS)
    return parser


def given_settings(args: argparse.Namespace) -> dict[str, str]:
    """NAME=value arguments and flags together; one setting given both ways is refused."""
    given = parse_assignments(args.assignments)
    for setting in SPECS:
        value = getattr(args, f"setting_{setting}")
        if value is None:
            continue
        if setting in given and given[setting] != value:
            raise LabError(f"{setting} is given twice, as {flag(setting)} {value} and {setting}={given[setting]}; "
                           "give it once")
        given[setting] = value
    return given


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    for number in INTERRUPTING:
        signal.signal(number, interrupt)
    above = make_above()
    if above is not None:
        forward_from_make(above)
    try:
        assignments = given_settings(args)
        given = given_values(os.environ, assignments)
        # Both before the settings' own checks: WORKERS=3's would name GLOBAL_BATCH. Under check, the
        # command TFLAB_CHECK names (command_check refuses any other).
        command = os.environ.get("TFLAB_CHECK", "") if args.command == "check" else args.command
        if "TRAINJOB" in given or "RUNTIME" in given:  # as TFJOB's, in the TrainJob's words
            from tflab.k8s import trainjob

            trainjob.refuse_given(command, given)
        if "TFJOB" in given:  # first: what the TFJob decides is named so, K8S_NAME too, which `up` reads not
            from tflab.k8s import tfjob

            tfjob.refuse_given(command, given)
        if command in COMMANDS:
            refuse_not_read(command, named_values(os.environ, assignments))
        settings = Settings.from_env(os.environ, assignments)
        if args.command == "down":
            refuse_an_empty_run(os.environ, assignments)
        if args.command == "chaos":
            from tflab import faults as chaos

            chaos.refuse_unread(settings, given)
        if args.command not in READ_NO_LAB_FILES:
            home.ensure()  # an installed lab lays its files out on first use: one line if it cannot
        if args.command == "up":
            return command_up(settings, given)
        if args.command == "chaos":
            return command_chaos(settings, given)
        if args.command == "matrix":
            return command_matrix(settings, given)
        if args.command == "images":
            return command_images(settings, args.tag)
        return COMMANDS[args.command][0](settings)
    except LabError as error:
        print(f"tflab: {error}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt as error:
        number = getattr(error, "signal", signal.SIGINT)
        print(f"tflab: interrupted by {signal.Signals(number).name}", file=sys.stderr)
        return 128 + number
