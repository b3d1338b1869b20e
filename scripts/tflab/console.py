"""What the lab says on the terminal: one `tflab: ` line per thing, paths as the user typed them."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for the annotations: the console imports nothing of the lab's
    from tflab.core.cluster import Cluster
    from tflab.core.settings import Settings


class StdoutError(Exception):
    """Standard output cannot be written (`tflab settings > /dev/full`): said in one line, not a
    traceback. A closed pipe is not one: the reader has what it wanted (BrokenPipeError)."""


class GuardedStdout:
    """sys.stdout, whose write and flush turn an OSError other than a closed pipe into StdoutError,
    so that the lab tells its own write errors from any other OSError (a file it reads, the engine)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as error:
            raise StdoutError(error.strerror or str(error)) from None

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            raise
        except OSError as error:
            raise StdoutError(error.strerror or str(error)) from None

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


def guard_stdout() -> None:
    if not isinstance(sys.stdout, GuardedStdout) and sys.stdout is not None:
        sys.stdout = GuardedStdout(sys.stdout)


def quiet_stdout() -> None:
    """After a reader closed the pipe (`tflab logs | head`) or a write failed (a full disk):
    stdout goes to /dev/null, so that the exit's flush of what is still buffered raises nothing."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def say(message: str) -> None:
    print(f"tflab: {message}", flush=True)


def display_path(path: Path) -> str:
    """A path relative to the folder the lab was started from, where it is under it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def columns(header: list[str], rows: list[list[str]], left: int = 2) -> list[str]:
    """Rows of cells as aligned text lines: the first `left` columns to the left, numbers to the right."""
    cells = [header, *rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  ".join(value.ljust(width) if i < left else value.rjust(width)
                      for i, (value, width) in enumerate(zip(row, widths))) for row in cells]


def cell(value, fmt: str, scale: float = 1) -> str:
    """One table cell: `-` for a missing value, else the value (scaled) in its format; a value its
    format does not take (a string where a number was, an integer too large for a float: a file
    the lab did not write) is shown as `?`, escaped characters and all never raw."""
    if value is None:
        return "-"
    try:
        text = fmt.format(value * scale if scale != 1 else value)
    except (TypeError, ValueError, OverflowError):
        return "?"
    return "".join(repr(char)[1:-1] if not char.isprintable() else char for char in text[:80])


def describe_run(settings: Settings, the_cluster: Cluster) -> str:
    """The run's shape in words, for its first line and the manifests' comments."""
    if settings.strategy == "multiworker":
        shape = "a chief, " * settings.chief + f"{settings.workers} worker{'s' * (settings.workers != 1)}"
    elif settings.strategy == "parameter_server":
        shape = f"a chief, {settings.workers} worker{'s' * (settings.workers != 1)}, {settings.ps} ps"
    elif settings.strategy == "mirrored" and settings.gpus == "all":
        shape = "a replica per GPU"
    elif settings.strategy == "mirrored":
        replicas = settings.replicas_in_sync
        shape = f"{replicas} replica{'s' * (replicas != 1)}"
    else:
        shape = "1 replica"
    if the_cluster.evaluators:
        shape += ", an evaluator"
    if settings.gpus:
        shape += f", GPUS={settings.gpus}"
    if settings.script:
        command = " ".join([display_path(Path(settings.script)), settings.args]).rstrip()
        return f"{settings.strategy}, {shape}, {command}"
    precision = "" if settings.precision == "float32" else f", {settings.precision}"
    return (f"{settings.strategy}, {shape}, {settings.model}{precision}, {settings.epochs} epochs of "
            f"{settings.examples} examples, global batch {settings.global_batch}, seed {settings.seed}")
