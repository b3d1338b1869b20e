"""BACKEND=local: every task as a process on this host, talking over loopback.

This is how TensorFlow's multi-worker tutorial runs its workers, and the lab's native baseline:
the same training script, the same TF_CONFIG generator (cluster.py) with localhost addresses in
place of container hostnames, the same JSONL logs. It needs TensorFlow on the host (make venv).
"""

from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from tflab.backends.userscript import script_command, script_environment
from tflab.console import say
from tflab.core import cluster, orphans, processes, runfolder
from tflab.core import task as task_contract
from tflab.core.cluster import Cluster
from tflab.core.errors import LabError
from tflab.core.runfolder import CONFIG, OUTPUT
from tflab.core.settings import Settings
from tflab.core.stacks import STACKS_SIGNAL
from tflab.home import CODE_ROOT, LAB_HOME

if TYPE_CHECKING:
    from tflab.engine.reaper import Guard

# Said at the start where the lab is root: containers run a task as uid 1000 without capabilities,
# a local process as whoever runs the lab.
AS_ROOT = ("BACKEND=local runs the script as the lab's user, root here, with nothing between it and this host "
           "(no container, no other user): run a script you do not trust with BACKEND=compose")


def find_python() -> str:
    """An interpreter that has TensorFlow: $TFLAB_PYTHON, else the checkout's .venv, else (an
    installed lab) the lab's own interpreter."""
    venv = LAB_HOME / ".venv/bin/python"
    python = os.environ.get("TFLAB_PYTHON") or str(venv if venv.exists() else sys.executable)
    try:
        probe = subprocess.run([python, "-c", "import importlib.util, sys; "
                                "sys.exit(importlib.util.find_spec('tensorflow') is None)"],
                               capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        probe = None
    if probe is None or probe.returncode != 0:
        raise LabError(f"BACKEND=local needs TensorFlow on the host, and {python} has none; in a checkout "
                       "run `make venv`, else `pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0`, or set "
                       "TFLAB_PYTHON to a Python that has them")
    return python


def free_ports(count: int) -> list[int]:
    """Ports the kernel has just handed out, all held at once so they differ."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class LocalProcesses:
    """The Backend (backends/base.py) for BACKEND=local."""

    name = "local"

    proxied: frozenset[str] = frozenset()  # no delay proxies between processes
    guard: Guard | None = None  # the run's reaper.Guard, set by the runner: it kills the tasks if the lab is killed

    def __init__(self, settings: Settings, run_dir: Path, the_cluster: Cluster, python: str):
        self.settings, self.run_dir, self.python = settings, run_dir, python
        self.cluster = the_cluster.readdressed(cluster.local_addresses(free_ports(len(the_cluster.tasks))))
        self.tasks = self.cluster.tasks
        self.oom_killed: dict[str, bool] = {}  # a process's kernel OOM kill shows only as SIGKILL
        self.description = f"local processes ({python})"
        self._processes: dict[str, subprocess.Popen] = {}
        self._readers: list[threading.Thread] = []
        self._groups: set[int] = set()
        self._output_lock = threading.Lock()
        self._output: io.TextIOWrapper | None = None  # output.log, from start() on

    def start(self) -> None:
        with runfolder.lab_space(self.run_dir) as folder:
            self._output = io.TextIOWrapper(folder.append(OUTPUT), line_buffering=True)
        if self.settings.script and os.geteuid() == 0:
            say(f"warning: {AS_ROOT}")
        # Before any task starts: whatever a task leaves running on its own comes to the lab (core/orphans.py).
        orphans.subreaper(True)
        self._launch()

    def restart(self) -> None:
        self._launch()

    def _launch(self) -> None:
        for task in self.tasks:
            env = {**os.environ, **self.cluster.tf_config_env(task),
                   "PYTHONPATH": str(CODE_ROOT), "PYTHONUNBUFFERED": "1",
                   **task_contract.LEGACY_KERAS}
            if not self.cluster.spec:
                env.pop("TF_CONFIG", None)
            env.update(TFLAB_CONFIG=str(self.run_dir / CONFIG), TFLAB_TASK=task,
                       TFLAB_OUTPUT=str(self.run_dir / runfolder.TASKS))
            if self.settings.script:  # the same launcher as in a container, the script in place
                command = script_command(self.settings, self.settings.script, self.python)
                env.update(script_environment(self.settings, self.settings.data))
                cwd = Path(self.settings.script).parent
            else:
                command, cwd = [self.python, *task_contract.COMMAND[1:]], None  # this venv's python
            process = subprocess.Popen(
                command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                start_new_session=True)  # Ctrl-C reaches the lab, which ends the tasks itself
            self._processes[task] = process
            self._groups.add(process.pid)  # it leads its group: every attempt's, killed whole by stop()
            if self.guard is not None:  # its own session: a SIGKILL of the lab's group misses it
                self.guard.watch_group(process.pid)
            reader = threading.Thread(target=self._copy_output, args=(task, process), daemon=True)
            reader.start()
            self._readers.append(reader)

    def _copy_output(self, task: str, process: subprocess.Popen) -> None:
        assert process.stdout is not None and self._output is not None  # _launch pipes it, after start opened it
        for line in process.stdout:
            stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
            with self._output_lock:
                self._output.write(f"{task} | {stamp} {line}")

    def exit_codes(self) -> dict[str, int | None]:
        return {task: process.poll() for task, process in self._processes.items()}

    def _signal(self, tasks: list[str], signum: int) -> None:
        """To each task's whole process group (each task leads its own session): a SCRIPT task's
        script is the launcher's child, a trainer's watchdog its own, and neither may outlive it."""
        for task in tasks:
            if self._processes[task].poll() is None:
                try:
                    os.killpg(self._processes[task].pid, signum)
                except ProcessLookupError:
                    pass

    def terminate(self, tasks: list[str]) -> None:
        self._signal(tasks, signal.SIGTERM)

    def dump_stacks(self, tasks: list[str]) -> None:
        """STACKS_SIGNAL to each task's own process, not its group: a SCRIPT's launcher hands it on
        to the script, and the trainer's watchdog, which has no handler, is left alone."""
        for task in tasks:
            process = self._processes.get(task)
            stacks = signal.Signals[STACKS_SIGNAL]
            # Only to a process that catches it: a launcher or trainer still starting has no handler
            # yet, and the lab's own question would end it (128+10, read as the task's exit).
            if process is not None and process.poll() is None and processes.catches(process.pid, stacks) is not False:
                try:
                    os.kill(process.pid, stacks)
                except ProcessLookupError:
                    pass

    def stop(self, tasks: list[str]) -> None:
        # SIGKILL: TensorFlow installs its own SIGTERM handler in multi-worker processes.
        self._signal(tasks, signal.SIGKILL)
        for task in tasks:
            self._processes[task].wait()

    def end_orphans(self) -> None:
        """Kills what the tasks left running on their own (a daemon's double fork: its own session,
        so the groups' SIGKILL missed it), once every task is stopped and before the runner's set-ID
        check, so nothing of the run writes after it; one line where there was any."""
        reaper = self.guard.process if self.guard is not None else None
        killed = orphans.end_orphans(frozenset([reaper.pid]) if reaper is not None else frozenset(),
                                     frozenset(self._groups))
        orphans.subreaper(False)
        if killed:
            say(orphans.said(killed))

    def save_output(self) -> None:
        for reader in self._readers:
            reader.join(timeout=10)

    def close(self) -> None:
        self.stop(list(self._processes))
        self.end_orphans()
        self.save_output()
        if self._output:
            self._output.close()
