"""Progress of the lab's long host-side steps (the wheel download, `docker build`), so the first
`make up` is never a silent stretch of minutes: a line per wheel or build step, and a line every
HEARTBEAT_SECONDS while one step takes long. The tools' own output is summarised, not shown; its
tail is kept for the error message when the step fails."""

from __future__ import annotations

import queue
import re
import subprocess
import threading
import time
from typing import Callable

HEARTBEAT_SECONDS = 20
TAIL_CHARACTERS = 6000

# The legacy builder: "Step 3/14 : RUN python3 -m venv /opt/venv"; BuildKit's plain progress:
# "#7 [packages 3/5] RUN python3 -m venv /opt/venv".
LEGACY_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)")
BUILDKIT_STEP = re.compile(r"^#\d+ \[(?:([\w.-]+) )?(\d+)/(\d+)\] (.*)")
PIP_DOWNLOADING = re.compile(r"Downloading (\S+\.whl) \(([\d.]+) (kB|MB|GB)\)")
PIP_HAVE = re.compile(r"File was already downloaded (\S+\.whl)")
UNITS = {"kB": 1e-3, "MB": 1.0, "GB": 1e3}


def build_step(line: str) -> str | None:
    """'step 3/14: RUN python3 -m venv ...' for a line that starts a build step, else None."""
    legacy = LEGACY_STEP.match(line)
    if legacy:
        return f"step {legacy.group(1)}/{legacy.group(2)}: {legacy.group(3)[:70]}"
    buildkit = BUILDKIT_STEP.match(line)
    if buildkit:
        stage = f"{buildkit.group(1)} " if buildkit.group(1) else ""
        return f"{stage}step {buildkit.group(2)}/{buildkit.group(3)}: {buildkit.group(4)[:70]}"
    return None


class WheelCounter:
    """Turns pip download's lines into 'wheel 3 of 40: name (274.3 MB; 300 MB so far)'."""

    def __init__(self, expected: int):
        self.expected = expected
        self.count = 0
        self.megabytes = 0.0

    def __call__(self, line: str) -> str | None:
        downloading, have = PIP_DOWNLOADING.search(line), PIP_HAVE.search(line)
        if have:
            self.count += 1
            return f"wheel {self.count} of {self.expected}: {have.group(1).rsplit('/', 1)[-1]} (already here)"
        if not downloading:
            return None
        self.count += 1
        size = float(downloading.group(2)) * UNITS[downloading.group(3)]
        self.megabytes += size
        return (f"wheel {self.count} of {self.expected}: {downloading.group(1)} ({size:.1f} MB; "
                f"{self.megabytes:.0f} MB so far)")


class InstallCounter:
    """Turns pip install's lines into 'wheel 3 of 39: grpcio-...whl', then 'installing 39 packages',
    and passes the install script's own steps ('compiling: ...', 'checking: ...') through."""

    def __init__(self, expected: int):
        self.expected = expected
        self.count = 0

    def __call__(self, line: str) -> str | None:
        if line.startswith("Processing ") and line.endswith(".whl"):
            self.count += 1
            return f"wheel {self.count} of {self.expected}: {line.rsplit('/', 1)[-1]}"
        if line.startswith("Installing collected packages:"):
            return f"installing {self.count} packages"
        if line.startswith(("compiling:", "checking:")):
            return line
        return None


def finish(lines: queue.Queue, summarise: Callable[[str], str | None], deadline: float) -> None:
    """Reads the rest of an interrupted command's lines through `summarise`, saying nothing, until
    its output ends or the deadline."""
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=min(0.5, max(0.0, deadline - time.monotonic())))
        except queue.Empty:
            continue
        if line is None:
            return
        summarise(line.strip())


def run_summarised(command: list[str], summarise: Callable[[str], str | None], say: Callable[[str], None],
                   what: str, quiet_below: float = 0, env: dict[str, str] | None = None,
                   finish_seconds: float = 0) -> tuple[int, str]:
    """Runs `command`, saying each line `summarise` turns into a message, and every
    HEARTBEAT_SECONDS the last message with the time so far; returns (exit code, output's tail).
    With `quiet_below`, a message is said only once its step has lasted that long: a cached build
    step takes no time and is no news. Interrupted (KeyboardInterrupt), the command is killed and
    the interrupt raised again; with `finish_seconds`, it runs in a session of its own (a terminal's
    Ctrl-C does not reach it) and is first given that long to finish, its lines still read by
    `summarise` (a legacy `docker build` that the engine would finish anyway: its client then says
    what it made)."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env,
                               start_new_session=finish_seconds > 0)
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        assert process.stdout is not None  # piped
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    started = last_said = step_started = time.monotonic()
    current, tail, pending = "starting", "", False
    try:
        while True:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                line = ""
            if line is None:
                break
            tail = (tail + line)[-TAIL_CHARACTERS:]
            message = summarise(line.strip()) if line else None
            now = time.monotonic()
            if message:
                current, pending, step_started = message, True, now
            if pending and now - step_started >= quiet_below:
                say(f"{what}: {current} ({now - started:.0f} s)")
                pending, last_said = False, now
            elif now - last_said >= HEARTBEAT_SECONDS:
                say(f"{what}: still at {current} ({now - started:.0f} s)")
                last_said = now
        return process.wait(), tail
    except KeyboardInterrupt:
        if finish_seconds > 0:
            say(f"{what}: interrupted; letting it finish (at most {finish_seconds:.0f} s) so that what it made can be "
                "removed")
            deadline = time.monotonic() + finish_seconds
            finish(lines, summarise, deadline)
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass  # killed below
        raise
    finally:
        if process.poll() is None:  # interrupted: the tool goes with the lab
            process.kill()
            process.wait()
