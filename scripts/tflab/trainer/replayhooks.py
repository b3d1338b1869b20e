"""The lab's in-process hooks in a TFJob replica's own image (`tflab up TFJOB=`), which runs no
launcher of the lab's: loaded by a sitecustomize the replay mounts, read-only, with the lab's package.

Why a sitecustomize: a replica runs its image's own command (`python3 /app/train.py`, an
entrypoint script, anything), and the lab must not change the image or the command; the one thing
every CPython reads at start-up, whatever it runs, is `sitecustomize` on its path. So the replay
puts a folder holding only a sitecustomize first on PYTHONPATH (before the image's own PYTHONPATH,
which it keeps), and the lab's package last on sys.path (the image's own modules, and a `tflab`
of its own in the lab's images, win). The sitecustomize calls start(), which runs the image's own
sitecustomize, if it has one (Python would have run it, and ours hides it), then installs
inscript's hooks (observe, audit, Keras version, devices) exactly as a SCRIPT's process gets them:
each waits for its module's import, so a process that never imports TensorFlow (pip, a shell
helper) logs nothing. What a replica cannot be given this way (no Python, or a Python that ignores
PYTHONPATH: -E, -I) leaves no mark, and the summary says "not audited" and why.

The hooks log to the replica's own folder of the run (mounted writable at /opt/tflab-hooks/log,
one a replica); the host reads it as foreign and copies each valid event into <task>.jsonl. A
mark file says whether the hooks are in (`hooked`), failed (`failed: why`) or stood aside for the
lab's own program (`lab`), which logs itself and copies each event to that same folder
(schema.EventLog, COPY_ENV). Nothing here may stop the replica's own program.

Stdlib only until a hook's module is imported by the program.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

# Where the replay mounts the hooks in a replica: tflab/, site/ and config.json read-only, log/ writable.
# start() finds them from its site folder, never from this module's own path: in the lab's own
# images `tflab` is the image's (/opt/tflab), and this module is that copy.
ROOT = "/opt/tflab-hooks"
LOG = "log"
CONFIG = "config.json"
TASK_ENV = "TFLAB_HOOKS_TASK"  # set on the replica by the replay: the hooks' task name
MARK = "hooks"  # log/hooks: what became of the hooks, one line
EVENTS = "events.jsonl"  # log/events.jsonl: the hooks' events, which the host copies into <task>.jsonl
# In the mark where the hooked process is the child of the replica's PID 1 (the replay's `init`),
# which hands it the lab's signals: its stacks can be asked for. Under a shell that stays (an
# entrypoint script), the signal would reach the shell, which it ends: the lab sends none.
ANSWERS = "answers the lab's signals"
# The lab's own program, which logs itself: its trainer or launcher (python -m), or a script the
# launcher runs (TFLAB_LOG, which only the launcher sets). Not TFLAB_TASK or TFLAB_CONFIG alone: a
# TrainJob node's tfconfig sets TFLAB_TASK for whatever command it runs, and make k8s's manifests
# set TFLAB_CONFIG on a container a user may have given a command of its own (`python -c ...`).
LAB_MODULES = ("tflab.train", "tflab.launch", "tflab.trainer.train", "tflab.trainer.launch")
LAB_LOG_ENV = "TFLAB_LOG"
LAB_MARK = "lab: the lab's own program runs here, its events copied to this folder"
# Runs a node's own command in its place (os.execvp): that command's Python decides, not this one.
PASS_THROUGH = ("tflab.trainer.tfconfig",)
OPTIONS_WITH_VALUE = ("-W", "-X", "-Q", "--check-hash-based-pycs")  # options that take the next word


def mark(log_dir: str, text: str) -> None:
    """The first process's word on the hooks (O_EXCL: a later Python process of the replica's
    leaves it be); never raises."""
    try:
        descriptor = os.open(os.path.join(log_dir, MARK), os.O_WRONLY | os.O_CREAT | os.O_EXCL
                             | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(descriptor, "w") as file:
            file.write(text[:1000] + "\n")
    except OSError:
        pass


def run_own_sitecustomize(here: str) -> None:
    """The image's own sitecustomize (Debian's, a venv's), found on sys.path past ours and run as
    Python would have run it; its failure is said on stderr, as Python says it."""
    for entry in sys.path:
        if os.path.abspath(entry or os.curdir) == here:
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is None or spec.loader is None:
            continue
        try:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules["sitecustomize"] = module
        except Exception as error:  # noqa: BLE001 - as site.py: said, and start-up goes on
            print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(error).__name__}: {error}",
                  file=sys.stderr)
        return


def command_line() -> list[str]:
    """This process's command line as it was started (sys.argv at start-up holds only "-m" or "-c"):
    sys.orig_argv (Python 3.10 on), else /proc/self/cmdline; [] where neither can be read."""
    if hasattr(sys, "orig_argv"):
        return list(sys.orig_argv)
    try:
        with open("/proc/self/cmdline", "rb") as file:
            return [word.decode(errors="replace") for word in file.read(65536).split(b"\0") if word]
    except OSError:
        return []


def run_module(argv: list[str]) -> str:
    """The module `python [options] -m MODULE ...` runs; "" for -c, a script, or stdin."""
    words = iter(argv[1:])
    for word in words:
        if word == "-m":
            return next(words, "")
        if word.startswith("-m") and not word.startswith("--"):
            return word[2:]
        if word in OPTIONS_WITH_VALUE:
            next(words, None)
        elif word == "-c" or word.startswith("-c") or not word.startswith("-") or word == "-":
            return ""
    return ""


def start(here: str) -> None:
    """Called by the replay's sitecustomize (in folder `here`, ROOT/site) in every Python process of a replica."""
    run_own_sitecustomize(here)
    task = os.environ.get(TASK_ENV, "")
    if not task:
        return
    root = os.path.dirname(here)
    log_dir = os.path.join(root, LOG)
    module = run_module(command_line())
    if module in PASS_THROUGH:
        return
    if LAB_LOG_ENV in os.environ or module in LAB_MODULES:
        # It logs itself, where its manifest says (a pod's emptyDir, often, which the host cannot
        # see): each event is copied here too (schema.EventLog), and its children inherit that.
        try:
            from tflab.core.schema import COPY_ENV  # the lab's program imports it at once anyway
        except Exception as error:  # noqa: BLE001 - the program runs on, its events uncopied
            mark(log_dir, f"lab: the lab's own program runs here, its events not copied: {error!r}")
            return
        os.environ[COPY_ENV] = os.path.join(log_dir, EVENTS)
        mark(log_dir, LAB_MARK)
        return
    set_here = {"TFLAB_LOG": os.path.join(log_dir, EVENTS), "TFLAB_TASK": task,
                "TFLAB_CONFIG": os.path.join(root, CONFIG)}
    before = {name: os.environ[name] for name in set_here if name in os.environ}  # tfconfig's, a manifest's
    try:
        from tflab.trainer import inscript

        os.environ.update(set_here)
        inscript.task_log()  # cached for every hook: the program's environment stays its own
        inscript.run_settings()
        inscript.install_hooks()
        mark(log_dir, f"hooked: python {sys.version.split()[0]}" + (f"; {ANSWERS}" if os.getppid() == 1 else ""))
    except Exception as error:  # noqa: BLE001 - the replica's program runs on without the hooks
        mark(log_dir, f"failed: {type(error).__name__}: {error}")
        print(f"tflab: the lab's hooks could not load, and the program runs on without them: "
              f"{type(error).__name__}: {error}", file=sys.stderr, flush=True)
    finally:
        for name in set_here:
            os.environ.pop(name, None)
        os.environ.update(before)
