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

This module parses the command line and dispatches; the commands' bodies are training.py's (a run
and its layout), reading.py's (a run's folder) and upkeep.py's (images, down, clean), the help is
help.py's and make's signals makesignals.py's.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import signal
import sys
import textwrap

from tflab import console, home
from tflab.cli import makesignals, reading, training, upkeep
from tflab.cli.help import HELP_WIDTH, command_settings, flag, settings_epilog
from tflab.cli.protocol import given_values, named_values, refuse_empty_inputs, refuse_not_read
from tflab.core.errors import LabError
from tflab.core.settings import SPECS, Settings

USAGE_ERROR = 2


def parse_assignments(arguments: list[str]) -> dict[str, str]:
    pairs = {}
    for argument in arguments:
        name, equals, value = argument.partition("=")
        if not equals or not name:
            raise LabError(f"unexpected argument {argument!r}; settings are given as NAME=value")
        pairs[name] = value
    return pairs


# The commands that read none of the lab's own files (home.py), which an installed lab lays out
# only when a command needs them, so these work where its cache folder cannot be made.
READ_NO_LAB_FILES = ("settings", "config", "summary", "logs", "report", "down", "check")


COMMANDS = {
    "up": (training.command_up, "run a training on the lab and wait for its end"),
    "stack-up": (training.command_stack_up, "the same run as a Docker Swarm stack (BACKEND=swarm)"),
    "swarm-sim": (training.command_swarm_sim, "a multi-node swarm simulated on this host: NODES-1 engines in network "
                  "namespaces, a registry (root)"),
    "swarm-sim-down": (training.command_swarm_sim_down, "remove the simulated swarm, exactly what swarm-sim made"),
    "compare": (training.command_compare, "run every COMPARE entry side by side and write their report"),
    "matrix": (training.command_matrix, "run the job on every TF x KERAS x STRATEGIES and say what breaks: "
               "matrix.json/md/png"),
    "report": (reading.command_report, "rebuild the report of a compare folder or a run (RUN=...)"),
    "bench": (training.command_bench,
              "measure the lab's overhead and the multi-worker step, or the stall watch (BENCH=stall)"),
    "chaos": (training.command_chaos, "a run with one fault injected: SCENARIO, TARGET, AT, HEAL"),
    "chaos-grid": (training.command_chaos_grid, "one job through every SCENARIOS x MOMENTS fault, a make chaos run "
                   "each: grid.json/md/csv/png"),
    "soak": (training.command_soak, "SOAK runs with random faults; prints survived/ended-cleanly/hung counts"),
    "config": (training.command_config, "print the cluster spec and every task's TF_CONFIG"),
    "k8s": (training.command_k8s, "write Kubernetes manifests for the settings: a TFJob, and plain Jobs"),
    "migrate": (training.command_migrate, "replay a TFJob and the TrainJob `k8s TFJOB=` writes for it, under the same "
                "fault (SCENARIO), and say what differs and which field makes it: migrate.md/json"),
    "summary": (reading.command_summary, "print a finished run's summary table (RUN=..., default the newest)"),
    "why": (reading.command_why, "say what broke in a finished run and what to do, where a restarted script resumed, "
                         "and the audit's findings (RUN=..., default the newest)"),
    "logs": (reading.command_logs, "print a finished run's merged, timestamped task output"),
    "down": (upkeep.command_down, "remove what the runs in RUNS_DIR (or RUN=<id>) left on the engine; runs/ stays; "
                           "a live run only with FORCE=1"),
    "images": (upkeep.command_images, "build the trainer image if its inputs changed; print its tag"),
    "wheels": (upkeep.command_wheels, "download the trainer's pinned wheels"),
    "clean": (upkeep.command_clean, "remove the lab's containers, images and wheels (never runs/)"),
    "tensorboard": (upkeep.command_tensorboard, "serve every run's TensorBoard scalars on 127.0.0.1 "
                    "(TENSORBOARD_PORT)"),
    "settings": (command_settings, "list every setting with its default"),
    "check": (reading.command_check, "check the settings and the input of the command TFLAB_CHECK names; run nothing"),
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


WRITE_ERROR = 1  # stdout could not be written: not the user's settings, but the command did not do its job


def main(argv: list[str] | None = None) -> int:
    """The command, with what it prints guarded: a write error on stdout (a full disk, /dev/full)
    is one line on stderr and exit 1, a closed pipe (`tflab settings | head`) a quiet exit 0, in
    every command and in argparse's --help alike. Flushed here, so that no write is left to the
    interpreter's exit, where it could only print a traceback-like "Exception ignored"."""
    console.guard_stdout()
    try:
        try:
            code = run_command(argv)
        except SystemExit:  # argparse's --help and its errors
            sys.stdout.flush()
            raise
        sys.stdout.flush()
        return code
    except BrokenPipeError:  # `tflab settings | head`: the reader has what it wanted, no traceback
        console.quiet_stdout()
        return 0
    except console.StdoutError as error:
        console.quiet_stdout()
        print(f"tflab: cannot write to standard output: {error}", file=sys.stderr)
        return WRITE_ERROR


def run_command(argv: list[str] | None) -> int:
    args = make_parser().parse_args(argv)
    for number in INTERRUPTING:
        signal.signal(number, interrupt)
    stop_forwarding = makesignals.forward_from_make()
    try:
        assignments = given_settings(args)
        given = given_values(os.environ, assignments)
        # Both before the settings' own checks: WORKERS=3's would name GLOBAL_BATCH. Under check, the
        # command TFLAB_CHECK names (reading.command_check refuses any other).
        command = os.environ.get("TFLAB_CHECK", "") if args.command == "check" else args.command
        refuse_empty_inputs(command, os.environ, assignments)
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
            upkeep.refuse_an_empty_run(os.environ, assignments)
        if args.command == "chaos":
            from tflab.faults import registry

            registry.refuse_unread(settings, given)
        if args.command not in READ_NO_LAB_FILES:
            home.ensure()  # an installed lab lays its files out on first use: one line if it cannot
        if args.command == "up":
            return training.command_up(settings, given)
        if args.command == "chaos":
            return training.command_chaos(settings, given)
        if args.command == "matrix":
            return training.command_matrix(settings, given)
        if args.command == "migrate":
            return training.command_migrate(settings, given)
        if args.command == "images":
            return upkeep.command_images(settings, args.tag)
        return COMMANDS[args.command][0](settings)
    except LabError as error:
        print(f"tflab: {error}", file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt as error:
        number = getattr(error, "signal", signal.SIGINT)
        print(f"tflab: interrupted by {signal.Signals(number).name}", file=sys.stderr)
        return 128 + number
    finally:
        stop_forwarding()  # its watcher ends with the command, called in-process (the tests) included
