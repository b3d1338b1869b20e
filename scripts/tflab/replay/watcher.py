"""A replay's replicas watched from outside (their images run no launcher of the lab's): each
start and end from the engine's state, and the lab's hooks' events (or the lab's own program's,
copied there) from each replica's own folder, into <task>.jsonl as a script's; and which replicas
the hooks never reached, for the summary's "not audited" notes."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from tflab.backends.base import NoObserver
from tflab.core import beneath, foreign, runfolder
from tflab.core.foreign import ForeignFile
from tflab.core.schema import EventLog, SchemaError, problems
from tflab.k8s.pod import hooks_file
from tflab.k8s.tfjob import Plan
from tflab.replay.volumes import hooks_mark
from tflab.supervisor import summary
from tflab.trainer import replayhooks


class Watcher(NoObserver):
    """Each task's start and end, from outside, into <task>.jsonl as a script's (role "script"): a
    backend.RunObserver of the replay (ReplayRun.observers), which looks at the engine's states at
    every poll, once an attempt's replicas ended before they are restarted, and last before they
    are removed. `states`: the replay's stack's (ReplayStack.state)."""

    def __init__(self, plan: Plan, run_dir: Path, states: Callable[[], dict[str, dict]]):
        self.plan, self.run_dir, self.states = plan, run_dir, states
        space = run_dir / runfolder.TASKS  # the lab's watcher writes each replica's log; no replica mounts it
        self.logs = {task.name: EventLog(runfolder.log_path(space, task.name), task.name) for task in plan.tasks}
        self.seen: dict[str, tuple[str, str]] = {}  # task -> (StartedAt, FinishedAt) last logged
        self.offsets: dict[str, int] = {}  # task -> bytes of its hooks' log copied
        self.skipped: dict[str, int] = {}  # task -> lines of its hooks' log that were no hooks' event
        self.peak: dict[str, int] = {}

    # -- as a RunObserver: it looks at these moments, and has nothing to check, say or add ------

    def tick(self, backend, codes: dict[str, int | None]) -> None:
        self.record(self.states())

    def before_restart(self, backend) -> None:
        self.record(self.states())  # the attempt's ends, before a restart's start replaces them

    def finish(self, backend) -> None:
        try:
            self.record(self.states())  # the last ends, before the containers go
        finally:
            self.close()

    # -- what it logs ---------------------------------------------------------------------

    def record(self, states: dict[str, dict]) -> None:
        """Each replica's start and end that `states` show and its log does not have yet."""
        for task in self.plan.tasks:
            state = states.get(task.name)
            if not state or state.get("StartedAt", "0001").startswith("0001"):
                continue  # not started yet
            started, finished = state["StartedAt"], state.get("FinishedAt", "")
            last = self.seen.get(task.name)
            if last is None or last[0] != started:
                self.seen[task.name] = (started, "")
                self.peak[task.name] = 0
                self.logs[task.name].emit("start", role="script", strategy="tfjob", cluster=self.plan.spec,
                                          versions={"image": task.image}, settings={"tfjob": str(self.plan.path)})
                print(f"[{task.name}] started as {task.host} ({task.image})", flush=True)
            self.copy_hooks_events(task.name)
            if state.get("Running"):
                self.peak[task.name] = max(self.peak.get(task.name, 0), cgroup_peak(state["Id"]))
            elif state.get("Status") in ("exited", "dead") and self.seen[task.name][1] != finished:
                self.seen[task.name] = (started, finished)
                seconds = max(0.0, _unix(finished) - _unix(started))
                code = int(state.get("ExitCode", -1))
                self.logs[task.name].emit("end", role="script", exit_code=code, total_seconds=seconds,
                                          peak_rss_bytes=self.peak.get(task.name, 0))
                print(f"[{task.name}] exited with code {code} after {seconds:.1f} s", flush=True)

    def copy_hooks_events(self, task: str) -> None:
        """The new whole lines of the hooks' log in the replica's own folder, read as foreign (a
        replica may write anything there): each event of the hooks' kinds, with its fields of their
        types, into <task>.jsonl under the task's own name; anything else is skipped, counted."""
        try:
            data = beneath.read(self.run_dir, hooks_file(task, replayhooks.EVENTS), foreign.MAX_LOG_BYTES,
                                offset=self.offsets.get(task, 0), whole=False)
        except (OSError, ForeignFile):
            return
        lines = data[: data.rfind(b"\n") + 1]
        if not lines and len(data) > foreign.MAX_LINE_BYTES:
            lines = data  # no end in sight: no line of the hooks'
        self.offsets[task] = self.offsets.get(task, 0) + len(lines)
        for line in lines.split(b"\n"):
            record, _ = foreign.json_line(line) if line.strip() else (None, "")
            if record is None or problems(record) or record.get("event") not in HOOKS_EVENTS:
                self.skipped[task] = self.skipped.get(task, 0) + bool(line.strip())
                continue
            fields = {key: value for key, value in record.items() if key not in ("event", "task", "time")}
            try:
                self.logs[task].emit(record["event"], **fields)
            except (SchemaError, OSError):
                self.skipped[task] = self.skipped.get(task, 0) + 1

    def close(self) -> None:
        for task in self.logs:
            self.copy_hooks_events(task)
        for log in self.logs.values():
            log.close()


class BackOffHold(NoObserver):
    """The replay's other RunObserver (ReplayRun.observers): it holds (RunObserver.holds) while the
    lab itself waits out a back-off before it restarts a replica alone (the kubelet's, the Job
    controller's), so the stall watch counts none of that wait (stall.Watch.hold, as for make
    chaos's fault): the peers that wait for the lost replica then wait on the lab, not stall."""

    def __init__(self, clock: Callable[[], float]):
        self.clock = clock
        self.due: dict[str, float] = {}  # task -> when (on `clock`) the lab restarts it

    def waiting(self, task: str, due: float) -> None:
        self.due[task] = due

    def done(self, task: str | None = None) -> None:
        """The task restarted (None: every one, the whole job restarted or ended)."""
        if task is None:
            self.due.clear()
        else:
            self.due.pop(task, None)

    def holds(self) -> bool:
        now = self.clock()
        return any(due > now for due in self.due.values())


# What the hooks log (observe, kerasversion, audit), and of the lab's own program what a script's
# hooks would: the watcher alone logs a replica's start and end (the program's own end, its step
# times and weights, summary.own_attempt reads where it lies).
HOOKS_EVENTS = frozenset({"epoch", "fit", "restored", "checkpoint", "imported", "audit_batch", "audit_pass",
                          "audit_write", "audit_weights"})


def unaudited(plan: Plan, run_dir: Path, images: dict[str, dict] | None) -> list[str]:
    """"not audited: <tasks> (<image>): why" for each replica the hooks did not reach, grouped."""
    groups: dict[str, list[str]] = {}
    for task in plan.tasks:
        mark = hooks_mark(run_dir, task.name) if images is not None else ""
        if mark.startswith("hooked") or mark == replayhooks.LAB_MARK:
            continue  # the hooks' events, or the lab's own program's copied, are in <task>.jsonl
        if images is None:
            why = "the lab's hooks were not put in"
        elif mark.startswith("lab"):  # an image of an older lab's, whose program copies no event
            why = ("it runs the lab's own program, which logs only where its TFLAB_OUTPUT says (an image older than "
                   "this lab's, or its events could not be copied: rebuild it with make images)")
        elif mark.startswith("failed"):
            why = f"the lab's hooks failed in its Python ({foreign.shown(mark.partition(': ')[2], 300)})"
        else:
            command = list(task.service.get("entrypoint") or (images.get(task.image) or {}).get("Entrypoint") or [])
            command += list(task.service["command"] if "command" in task.service else
                            (images.get(task.image) or {}).get("Cmd") or [])
            first = os.path.basename(str(command[0])) if command else ""
            why = (f"no Python of its started (its command starts with {foreign.shown(first, 80)}, not Python; a shell "
                   "that starts Python would have passed the hooks on)" if first and not PYTHON.fullmatch(first) else
                   "its Python never loaded the lab's hooks (the image has no Python, its Python ignores "
                   "PYTHONPATH: -E or -I, or it ended first)")
        groups.setdefault(f"({foreign.shown(task.image, 200)}): {why}", []).append(task.name)
    return [f"{summary.NOT_AUDITED}{', '.join(tasks)} {why}" for why, tasks in groups.items()]


PYTHON = re.compile(r"python[0-9.]*")


def cgroup_peak(container: str) -> int:
    """The container's peak memory so far, from its cgroup where the host can read it (v1, or v2's
    memory.peak); 0 where it cannot (an engine in a VM)."""
    for path in (f"/sys/fs/cgroup/memory/docker/{container}/memory.max_usage_in_bytes",
                 f"/sys/fs/cgroup/system.slice/docker-{container}.scope/memory.peak"):
        try:
            return int(Path(path).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return 0


def _unix(stamp: str) -> float:
    """Docker's RFC 3339 time with nanoseconds -> unix seconds."""
    from datetime import datetime

    main, _, rest = stamp.rstrip("Z").partition(".")
    fraction = float("0." + (rest[:6] or "0"))
    return datetime.fromisoformat(main + "+00:00").timestamp() + fraction
