"""Runs a user's own training script (SCRIPT=...) as one task of the lab, watched from outside.

    python -m tflab.launch -- python /lab/script/train.py --epochs 3

The script runs unmodified, with the environment TensorFlow's multi-worker tutorial expects
(TF_CONFIG for a cluster, nothing for one process), plus TFLAB_LOG, the task's JSONL file, where
the optional `tflab.callback.LabCallback` adds `epoch` events. This wrapper writes what can be
known without looking inside: `start`, then `end` (exit code, wall time, the script's peak
memory) or `error`, and exits with the script's own exit code. Signals reach the script, so a
`docker kill -s SIGTERM` is the script's to handle, as on a real cluster.

The script runs in its task's own working directory, `work/<task>/` of the run folder (writable,
kept with the run; its folder is read-only), and its stdout and stderr pass through as whole lines
(TerminalLines: a Keras progress bar as a terminal leaves it), into `<task>.out` too, which the lab
prints as it comes.

Stdlib only: it imports neither TensorFlow (the script does) nor anything of the host side.
"""

from __future__ import annotations

import codecs
import collections
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tflab.core import processes, runfolder
from tflab.core.runfolder import read_run_config
from tflab.core.schema import EventLog, distribution_version, start_versions
from tflab.core.settings import SettingsError
from tflab.core.stacks import STACKS_SIGNAL
from tflab.core.task import HANG_SIGNAL, RELEASE_SIGNAL
from tflab.core.terminal import TerminalLines
from tflab.core.tracebacks import exception_head

# The script's last stderr lines kept for the `error` event: a whole traceback, even one whose
# TensorFlow message prints tensors (Keras 3's PerReplica error ran to 300 lines).
ERROR_TAIL_LINES = 5000
# The lab's signals, which the launcher hands on to the script's process: Compose's init gives
# a container's signals to its child, the launcher, and no further.
HANDED_ON = tuple(signal.Signals[name] for name in (STACKS_SIGNAL, HANG_SIGNAL, RELEASE_SIGNAL))
# Those of them whose default action ends a process: handed on only to a script's process that
# catches them (inscript's hooks install the handlers, but only once its Python has started: 16
# workers importing on 2 cores took seconds), else the lab's own question would end the task and
# read as the script's exit (issue 56: a 16-worker run said "<its script> exited with code 138").
FATAL_UNCAUGHT: dict[int, str] = {signal.Signals[STACKS_SIGNAL]: "stack request",
                                  signal.Signals[HANG_SIGNAL]: "hang on purpose"}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else argv
    config_path, task = os.environ.get("TFLAB_CONFIG"), os.environ.get("TFLAB_TASK")
    if not command or not config_path or not task:
        print("usage: TFLAB_CONFIG=... TFLAB_TASK=... python -m tflab.launch -- COMMAND...", file=sys.stderr)
        return 2
    started = time.time()
    for signum in HANDED_ON:  # the lab's, before there is a script to hand them on to: nothing to end
        signal.signal(signum, signal.SIG_IGN)
    # The tasks' space (task.RUN_MOUNT in a container): logs, output and working folders go there;
    # config.json is read-only beside it, and the lab's own records are out of reach.
    run_dir = Path(os.environ.get("TFLAB_OUTPUT") or Path(config_path).parent)
    log_path = runfolder.log_path(run_dir, task)
    log = EventLog(log_path, task)
    try:
        config, settings = read_run_config(Path(config_path))
    except SettingsError as error:  # the host's own checks refused it: one line, no traceback
        log.emit("error", message=str(error))
        log.close()
        print(f"[{task}] {error}", file=sys.stderr, flush=True)
        return 2
    try:
        tensorflow = distribution_version("tensorflow-cpu", "tensorflow")  # what the script will find installed
        log.emit("start", role="script", strategy=settings.strategy, cluster=config["cluster"],
                 versions=start_versions(tensorflow), settings=settings.to_dict(), command=command)
        script = next((part for part in command if part.endswith(".py")), None)
        cwd = working_folder(run_dir, task, Path(script).absolute().parent) if script else None
        # TFLAB_OUTPUT: where a script's own outputs outlive the task, shared by every task.
        env = {**os.environ, "TFLAB_LOG": str(log_path), "TFLAB_OUTPUT": str(run_dir)}
        env.setdefault("PYTHONUNBUFFERED", "1")  # its prints as they come, not when a pipe's buffer fills
        with open(runfolder.script_output_path(run_dir, task), "a", buffering=1, errors="replace") as shown:
            code, tail, sent = run(command, env, cwd, shown)
        name = Path(script).name if script else command[0]
        lab_signal = next((s for s in sent if code == 128 + s), None)
        if lab_signal is not None:  # not the script's own exit: the lab's signal, which it did not catch
            log.emit("error", message=f"{name} was ended by the lab's {FATAL_UNCAUGHT[lab_signal]} "
                                      f"({signal.Signals(lab_signal).name}; it has no handler for it), exit {code}")
        elif code != 0:
            # Its traceback's exception (type and the head of its message), else its last line;
            # the rest is in output.log (make logs).
            last = exception_head("".join(tail)) or next(
                (line.strip() for line in reversed(tail) if line.strip()), "")[:1500]
            log.emit("error", message=f"{name} exited with code {code}" + (f": {last}" if last else ""))
        else:
            log.emit("end", role="script", exit_code=code, total_seconds=time.time() - started,
                     peak_rss_bytes=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
        return code
    except OSError as error:  # the interpreter or the script could not even be started
        log.emit("error", message=f"could not start {' '.join(command)}: {error}")
        return 127
    finally:
        log.close()


def working_folder(run_dir: Path, task: str, script_dir: Path) -> Path | None:
    """The script's working directory: work/<task>/ in the run folder, writable and kept with the
    run (the script's folder is mounted read-only), holding a link to each entry of the script's
    folder, so that `open("data.csv")` beside the script reads as in place and `./ckpt` is written
    here. Made once; a restart finds what the attempt before it wrote. None (the script's folder)
    where it cannot be made, said on stderr."""
    work = runfolder.work_path(run_dir, task)
    try:
        work.mkdir(parents=True, exist_ok=True)
        inside = os.path.realpath(run_dir)
        for name in sorted(os.listdir(script_dir)):
            target = os.path.join(script_dir, name)
            # A runs folder inside the script's folder (BACKEND=local in place) would link the run to itself.
            if os.path.lexists(work / name) or (inside + os.sep).startswith(os.path.realpath(target) + os.sep):
                continue
            os.symlink(target, work / name)
    except OSError as error:
        print(f"tflab: the working directory {work} could not be made ({error.strerror or error}); the script "
              f"runs in its own folder, {script_dir}, which is read-only in a container", file=sys.stderr, flush=True)
        return None
    return work


def run(command: list[str], env: dict, cwd: Path | None = None,
        shown=None) -> tuple[int, list[str], set[int]]:
    """Runs the command, passing its stdout and stderr through as terminal lines (TerminalLines),
    each also into `shown` (the task's .out file), and its stderr's into a tail kept for the error
    message; SIGTERM and SIGINT are handed on to it, and the lab's own signals (a stack dump, a
    hang on purpose and its release), which the script's process answers (trainer/signals.py),
    those of FATAL_UNCAUGHT only while it catches them. Its exit code (128+N for a signal N), its
    stderr's tail, and which of FATAL_UNCAUGHT were handed on."""
    # Handlers first, so no signal falls between the child's start and them.
    child: list[subprocess.Popen] = []
    sent: set[int] = set()

    def hand_on(number: int, _frame: object) -> None:
        for process in child:
            if number in FATAL_UNCAUGHT:
                if processes.catches(process.pid, number) is False:  # None: no /proc to tell; handed on
                    print(f"tflab: the lab's {FATAL_UNCAUGHT[number]} ({signal.Signals(number).name}) was not "
                          "handed on to the script: its process has no handler for it (not yet, or none), "
                          "and would have been ended by it", file=sys.stderr, flush=True)
                    continue
                sent.add(number)
            process.send_signal(number)

    for signum in (signal.SIGTERM, signal.SIGINT, *HANDED_ON):
        signal.signal(signum, hand_on)
    process = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.append(process)
    tail: collections.deque[str] = collections.deque(maxlen=ERROR_TAIL_LINES)
    lock = threading.Lock()

    def copy(stream, out, keep: bool) -> None:
        def say(line: str) -> None:
            with lock:
                out.write(line + "\n")
                out.flush()
                if keep:
                    tail.append(line + "\n")
                if shown is not None:
                    try:
                        shown.write(line + "\n")
                    except OSError:
                        pass  # a full disk: the container's own log still has it
        lines = TerminalLines(say)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        while True:
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                break
            lines.feed(decoder.decode(chunk))
        lines.feed(decoder.decode(b"", final=True))
        lines.close()

    readers = [threading.Thread(target=copy, args=(process.stdout, sys.stdout, False), daemon=True),
               threading.Thread(target=copy, args=(process.stderr, sys.stderr, True), daemon=True)]
    for reader in readers:
        reader.start()
    code = process.wait()
    for reader in readers:
        reader.join(timeout=5)
    sys.stdout.flush()
    sys.stderr.flush()
    # A script ended by a signal reports -N; a shell would say 128+N, and so does a container.
    return (128 - code if code < 0 else code), list(tail), sent


if __name__ == "__main__":
    sys.exit(main())
