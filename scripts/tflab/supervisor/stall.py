"""The stall watch: when a run stops moving, the lab knows, shows where every task is, and says
why. The runner calls it at each poll (Watch.read, Watch.stalled) and before any stop it makes
itself (Watch.capture); the rest is pure logic over the tasks' events and stack dumps.

The pace is the run's own. Every trainer's events are read as they come (a task's log, as the
progress printer reads it), and each event that shows training moved (an epoch, a checkpoint, a
fit's start, an audited batch...) ends a gap since the last one: the first gap holds the first
step's tracing, and the largest gap seen so far is the pace (the start, imports and rendezvous
before the first advance are none of it). A stall is no trainer advancing for
FACTOR times the pace, never less than FLOOR_SECONDS nor more than CEILING_SECONDS; before a
step has run (STEPPED), CEILING_SECONDS (a long first step, a slow start); the audit's sampled
steps are no pace, and the unsampled rest of their pass is allowed on top (SAMPLED); but while a
task's sampled steps still come (AUDIT_SAMPLED_STEPS of them a pass), its next one is due within
FACTOR times the widest gap between them, never less than FLOOR_SECONDS, first epoch or not
(Watch.step_limit). STALL=<seconds>
sets the limit instead, STALL=off turns the watch off. The evaluator and parameter servers are
not watched: they wait by design.

At a stall, the lab asks every live task for its Python stacks (Backend.dump_stacks: STACKS_SIGNAL,
answered by faulthandler into tasks/<task>.stacks, core/stacks.py), reads what each appended, and
composes one finding: the task that stopped and where (file, line, function, and the Keras phase:
a callback, the input pipeline, a save, a restore), the tasks waiting for it and in what (an
all-reduce, a barrier, the coordination service), and the fix.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tflab.core import explain, foreign, runfolder, stacks
from tflab.core.schema import AUDIT_SAMPLED_STEPS, problems
from tflab.supervisor import stackdump
from tflab.supervisor.progress import new_lines

FACTOR = 5  # a stall: no trainer advanced for FACTOR x the run's pace ...
# ... never less than this (a run of quick epochs: noise, a checkpoint, a GC pause); between two of the
# audit's sampled steps too, where no checkpoint falls but a batch callback's log line, a slow batch or a
# GC pause may: the lab's fit steps take 18-23 ms (FACTS.md), so 30 s is over a thousand of them
FLOOR_SECONDS = 30.0
CEILING_SECONDS = 300.0  # ... nor more; and the limit while the run has not advanced yet, unless ...
# ... more tasks start than the CPUs can start in that time: a task's start (`import tensorflow`, the
# model, the rendezvous) took about 10 s of one CPU (16 workers all ready after 76-79 s on 2 CPUs,
# FACTS 2026-12-04), and 64 workers on 2 CPUs printed nothing in 300 s on a busy machine (issue 51,
# measured 2026-12-07). Before a step has run the limit is then START_MARGIN x that work over the
# CPUs: 960 s for 64 tasks on 2, the ceiling up to 20.
START_CPU_SECONDS = 10.0
START_MARGIN = 3
STACKS_WAIT_SECONDS = 5.0  # how long the lab waits for the tasks' dumps (faulthandler writes at once)
# The events that show training moved; start, cluster_ready and imported only restart the clock.
ADVANCES = ("epoch", "checkpoint", "fit", "restored", "eval", "audit_batch", "audit_pass", "audit_write",
            "audit_weights", "allreduce", "end")
# The advances only a step that ran can log. Until one, the first step is still running (its tracing,
# a slow first read) and the ceiling bounds it: a fit's start on each worker, a fraction of a second
# apart, is a pace of nothing, which once called a 45 s first step a stall at the 30 s floor.
STEPPED = ("epoch", "eval", "audit_pass", "audit_weights", "allreduce", "end")
# The audit hashes only the first steps of each pass (trainer/audit.py's SAMPLED_STEPS): a burst of
# events, then silence until the pass ends. Their gaps are no pace, and their burst no sign that the
# silence after it will be short: a node slowed to 0.1 CPU (3 s steps, 32 an epoch) was called
# stalled 37 s after its 16th sampled step, its pace taken from the burst. They are signs of life
# only; the gap an epoch's end then closes, the sampled steps' silent tail, is the pace. Their
# steps tell how long that tail will be: the pass's unsampled steps at the sampled steps' pace,
# which the limit then allows on top (a node slowed tenfold mid-run is slow, not stalled). Yet the
# burst has a pace of its own while it lasts: a step numbered below AUDIT_SAMPLED_STEPS (and below
# its pass's steps, where a whole pass showed them) is followed by the next within its widest gap
# (step 1 to 2 included: the first step's end); a worker stuck at the 12th step of the first
# epoch was found only at the ceiling (313.6 s, issue 56).
SAMPLED = ("audit_batch",)


@dataclass(frozen=True)
class Limits:
    """STALL's meaning: auto (FACTOR x pace, within FLOOR_SECONDS..CEILING_SECONDS), a fixed limit, or off."""

    fixed: float | None = None  # STALL=<seconds>
    off: bool = False
    start_seconds: float = CEILING_SECONDS  # auto's limit before a step has run (starting)

    @classmethod
    def from_setting(cls, value: str, tasks: int = 1, cpus: float | None = None) -> Limits:
        """`tasks` start together on `cpus` CPUs (None: unknown, taken as the tasks themselves)."""
        if value == "off":
            return cls(off=True)
        return cls(start_seconds=starting(tasks, cpus)) if value == "auto" else cls(fixed=float(value))

    def limit(self, pace: float | None) -> float:
        if self.fixed is not None:
            return self.fixed
        if pace is None:
            return self.start_seconds
        return min(CEILING_SECONDS, max(FLOOR_SECONDS, FACTOR * pace))


def starting(tasks: int, cpus: float | None) -> float:
    """The auto limit before a step has run, for `tasks` starting on `cpus` CPUs."""
    return max(CEILING_SECONDS, START_MARGIN * START_CPU_SECONDS * tasks / max(cpus or tasks, 0.01))


@dataclass(frozen=True)
class Stall:
    quiet_seconds: float  # since a trainer last advanced
    limit_seconds: float
    pace_seconds: float | None  # the largest gap between advances so far; None: none yet
    tail_seconds: float = 0.0  # allowed on top: the unsampled rest of a pass, at its sampled steps' pace
    step_seconds: float | None = None  # the limit came from a task's sampled steps: their widest gap

    def line(self) -> str:
        pace = (f"{FACTOR} x its pace of {self.pace_seconds:.1f} s" if self.pace_seconds is not None
                else "before its first step")
        if self.step_seconds is not None:
            gap = f"{self.step_seconds:.1f} s" if self.step_seconds >= 1 else f"{self.step_seconds * 1000:.0f} ms"
            pace = f"{FACTOR} x the {gap} between its sampled steps, at least {FLOOR_SECONDS:.0f} s: the next was due"
        if self.tail_seconds:
            pace += f", and {self.tail_seconds:.0f} s for the epoch's steps after the audit's sampled ones"
        return (f"stalled: no task advanced for {self.quiet_seconds:.0f} s (the limit: {self.limit_seconds:.0f} s, "
                f"{pace}); asking every task where it is")


class Watch:
    """One run's watch; `clock` is injected (tests drive it over recorded event streams).

    armed: whether the watched tasks are bound to advance from their start (the lab's trainer,
    which logs every epoch); a SCRIPT's are watched from their first advance (a fit's start, a
    checkpoint), as one that never calls fit says nothing of its pace. A task is watched while it
    trains: once it has logged the last epoch its fit planned, or its end, its silence is no stall
    (a long save or evaluation after training), unless a peer trainer has exited 0 meanwhile (a
    save on the chief alone)."""

    def __init__(self, run_dir: Path, watched: list[str], limits: Limits, clock: Callable[[], float] | None = None,
                 armed: bool = True, epochs: int = 0):
        self.run_dir, self.watched, self.limits = run_dir, list(watched), limits
        self.clock = clock or time.monotonic
        self.offsets = dict.fromkeys(watched, 0)
        self.last = self.clock()  # the last sign of life of any watched task
        self.pace: float | None = None
        self.advancing = False  # the first advance of the run was seen: gaps from then on are its pace
        self.stepped = False  # a step ran (STEPPED): until then the pace bounds nothing, the ceiling does
        self.armed = armed  # the lab's own trainer: bound to advance from its start
        self.training = set(watched) if armed else set()  # the tasks bound to advance now
        self.planned = dict.fromkeys(watched, epochs)  # task -> the epochs its fit planned (0: unknown)
        self.advanced: dict[str, dict] = {}  # task -> its last advancing event
        self.stall: Stall | None = None  # the one it found, once
        self.steps: dict[str, int] = {}  # task -> the steps of its last whole pass (an epoch's `steps`)
        self.sampled: dict[str, tuple[float, float]] = {}  # task -> (its last sampled step's time, the widest gap)
        self.tail = 0.0  # the silence the rest of a sampled pass keeps: its unsampled steps at the sampled pace
        self.sampled_step: dict[str, int] = {}  # task -> its last sampled step of the pass it is in

    def restarted(self) -> None:
        """After a restart: the clock starts again, and the new attempt is held to the ceiling until
        a step of its own ran (its start, imports, rendezvous and restore are no pace: a simulated
        swarm's restart took over 30 s to its first step, and the floor of a 0.8 s pace called it a
        stall); the pace learned stays for after that step."""
        self.last = self.clock()
        self.advancing = self.stepped = False
        self.training = set(self.watched) if self.armed else set()
        self.sampled_step = {}

    def hold(self) -> None:
        """Training is held on purpose now (RunObserver.holds: make chaos's fault, to be undone): the
        clock starts again at each look, so the watch counts from the release, and the held time is
        no gap of the pace."""
        self.last = self.clock()

    def read(self) -> None:
        """Takes in every watched task's new events."""
        for task in self.watched:
            for lines in new_lines(self.run_dir, runfolder.log_name(task), self.offsets, task, lambda why: None):
                for line in lines.split(b"\n"):
                    record, _ = foreign.json_line(line) if line.strip() else (None, "")
                    if record is not None and not problems(record):
                        self.saw(task, record)

    def saw(self, task: str, record: dict) -> None:
        now, event = self.clock(), record.get("event")
        if event in SAMPLED and isinstance(record.get("step"), int):
            # the gaps by the task's own stamps: a poll reads a burst of steps at once, gaps of nothing
            stamp = record["time"] if isinstance(record.get("time"), (int, float)) else now
            at, widest = self.sampled.get(task, (stamp, 0.0))
            widest = 0.0 if record["step"] <= 1 else max(widest, stamp - at)
            self.sampled[task] = (stamp, widest)
            self.tail = max(0.0, (self.steps.get(task, 0) - record["step"]) * widest)
            self.sampled_step[task] = record["step"]
        elif event in ADVANCES:
            self.tail = 0.0
            self.sampled_step.pop(task, None)  # the pass ended (an epoch, a save ...): no step is due
        # an epoch's steps: a whole pass's, or those a fit knows it will take (its first pass has no other)
        if event in ("epoch", "audit_pass", "fit") and isinstance(record.get("steps"), int) and record["steps"] > 0:
            self.steps[task] = record["steps"]
        if event in ADVANCES:
            # the start, imports and rendezvous before the first advance are no pace; nor a sampled burst
            if self.advancing and event not in SAMPLED:
                gap = now - self.last
                self.pace = gap if self.pace is None else max(self.pace, gap)
            self.advancing = True
            # an audit pass of no step (an iterator made and dropped before fit) ran no step either
            self.stepped = self.stepped or (event in STEPPED and record.get("steps") != 0)
            self.advanced[task] = record
            self.training.add(task)
        if event == "fit" and isinstance(record.get("epochs"), int):
            self.planned[task] = record["epochs"]
        epoch = record.get("epoch")
        done = event == "epoch" and isinstance(epoch, int) and 0 < self.planned.get(task, 0) <= epoch
        if done or event in ("end", "error"):
            self.training.discard(task)
        self.last = now

    def quiet(self) -> float:
        """Seconds since a watched task last showed a sign of life."""
        return self.clock() - self.last

    def moving(self) -> bool:
        """Whether training was advancing: it had advanced, and not been quiet past the limit its pace
        sets (the auto one where STALL=off, as an interrupt's finding asks this whatever STALL)."""
        limits = self.limits if self.limits.fixed is not None else Limits(start_seconds=self.limits.start_seconds)
        return self.advancing and self.quiet() <= limits.limit(self.known_pace())

    def known_pace(self) -> float | None:
        """The pace, once a step ran; None before (the first step's length is not known yet)."""
        return self.pace if self.stepped else None

    def stalled(self, running: list[str], done: Sequence[str] = ()) -> Stall | None:
        """A stall, the first time the watched tasks still running have been quiet past the limit;
        done: the trainers that exited 0."""
        watched = set(running) & set(self.watched)
        if self.limits.off or self.stall is not None or not watched:
            return None
        if not (watched & self.training or (done and self.advancing)):
            return None
        quiet, limit = self.clock() - self.last, self.limits.limit(self.known_pace())
        tail = self.tail if self.limits.fixed is None else 0.0  # STALL=<seconds> is the user's own bound
        step = self.step_limit(watched) if self.limits.fixed is None else None
        if step is not None and step[0] < limit + tail:
            if quiet <= step[0]:
                return None
            self.stall = Stall(quiet, step[0], self.known_pace(), step_seconds=step[1])
            return self.stall
        if quiet <= limit + tail:
            return None
        self.stall = Stall(quiet, limit + tail, self.known_pace(), tail)
        return self.stall

    def step_limit(self, running: set[str]) -> tuple[float, float] | None:
        """(the limit, the widest gap) of a running task in the midst of its pass's sampled steps
        (from its second on: a gap measured), whose next sampled step is due; the least such limit
        (any one overdue is a stall), None where no task is there."""
        due = []
        for task in running & self.training:
            step, (_, widest) = self.sampled_step.get(task, 0), self.sampled.get(task, (0.0, 0.0))
            if 2 <= step < min(AUDIT_SAMPLED_STEPS, self.steps.get(task) or AUDIT_SAMPLED_STEPS) and widest > 0:
                due.append((min(CEILING_SECONDS, max(FLOOR_SECONDS, FACTOR * widest)), widest))
        return min(due) if due else None


# -- who waits on whom ---------------------------------------------------------------------------

TF_FILES = re.compile(r"[/\\](?:tensorflow|tf_keras|keras|absl)[/\\]")
PIPELINE_FILES = re.compile(r"[/\\]tensorflow[/\\]python[/\\](?:ops[/\\]script_ops\.py|data[/\\])")
CALLBACK_FILES = re.compile(r"[/\\](?:tf_keras|keras)[/\\].*callbacks?\.py$|[/\\]callbacks[/\\]")
BARRIER = re.compile(r"barrier", re.I)
COORDINATION = re.compile(r"coordination|wait_for_|heartbeat", re.I)


@dataclass
class Place:
    """Where one task is, from its stacks."""

    task: str
    frame: stacks.Frame | None  # where it is: its innermost frame of its own code, else its innermost
    phase: str  # the Keras phase: "a callback (on_epoch_end)", "the input pipeline", "a save", ...
    waiting: str  # "" where it is in its own code; else what it waits in (an all-reduce, a barrier ...)
    text: str = ""  # its main thread's frames as a traceback writes them (explain's patterns read it)

    def words(self) -> str:
        where = f" at {self.frame}" if self.frame else ""
        if self.waiting:
            return f"{self.task} waits in {self.waiting}" + (f" inside {self.phase}" if self.phase else "") + where
        return f"{self.task} stopped in {self.phase or 'its own code'}{where}"


def _frame_text(frame: stacks.Frame) -> str:
    return f'File "{frame.file}", line {frame.line} in {frame.function}'


STDLIB = re.compile(r"[/\\]lib[/\\]python3\.\d+[/\\](?!site-packages|dist-packages)|^<frozen ")
LAB_FILES = re.compile(r"[/\\]tflab[/\\](?:trainer[/\\])?(?:inscript|observe|audit|launch|devices|kerasversion|"
                       r"replayhooks|signals)\.py$")


def _own(frame: stacks.Frame) -> bool:
    """A frame of the task's own code: neither TensorFlow's nor Keras's nor Python's library."""
    return not TF_FILES.search(frame.file) and not STDLIB.search(frame.file) \
        and not re.search(r"[/\\](?:site|dist)-packages[/\\]", frame.file)


def _users(frames: list[stacks.Frame]) -> stacks.Frame | None:
    """The innermost frame of the task's own code, the lab's hooks around a SCRIPT passed over
    (observe.py wraps a script's callbacks); the lab's own trainer is its own code."""
    own = [frame for frame in frames if _own(frame)]
    return next((frame for frame in own if not LAB_FILES.search(frame.file)), own[0] if own else None)


def _phase(frames: list[stacks.Frame]) -> str:
    text = "\n".join(_frame_text(frame) for frame in frames)
    for index, frame in enumerate(frames):  # innermost first: the callback nearest the top of the stack
        if CALLBACK_FILES.search(frame.file) and frame.function.startswith(("on_", "_call")):
            user = _users(frames[:index])
            name = user.function if user else frame.function
            return f"a callback ({name})"
    if re.search(explain.SAVE_FRAMES, text):
        return "a save"
    if re.search(explain.RESTORE_FRAMES, text):
        return "a restore"
    if any(PIPELINE_FILES.search(frame.file) for frame in frames):
        return "the input pipeline"
    if re.search(explain.STEP_FRAMES, text):
        return "model.fit"
    return ""


def place_of(task: str, threads: list[stacks.Thread]) -> Place:
    """Where a task is: its main thread (faulthandler's current: Python runs a signal's handler on
    the main thread) and any input pipeline thread stuck in the task's own code (a generator)."""
    main = next((thread for thread in threads if thread.current), threads[0] if threads else None)
    frames = main.frames if main else []
    for thread in threads:
        if thread is not main and any(PIPELINE_FILES.search(f.file) for f in thread.frames):
            inner = next((f for f in thread.frames if not STDLIB.search(f.file)), None)
            if inner is not None and _own(inner):
                return Place(task, inner, "the input pipeline", "")
    if any(frame.function == "_hang" and LAB_FILES.search(frame.file) for frame in frames[:3]):
        # make chaos SCENARIO=hang: the lab's own handler in the task holds the main thread
        return Place(task, _users(frames), HUNG, "", "\n".join(_frame_text(frame) for frame in frames))
    # Python's own waits (threading, a pool's map) are how TensorFlow waits too: the innermost
    # frame past them says whose wait it is
    innermost = next((frame for frame in frames if not STDLIB.search(frame.file)), None)
    own = _users(frames)
    phase = _phase(frames)
    text = "\n".join(_frame_text(frame) for frame in frames)
    if innermost is not None and TF_FILES.search(innermost.file):
        names = " ".join(frame.function for frame in frames[:6])
        waiting = ("a barrier" if BARRIER.search(names) else
                   "the coordination service" if COORDINATION.search(names) else
                   "an all-reduce" if phase in ("model.fit", "") else f"{phase}'s collective")
        return Place(task, own or innermost, phase, waiting, text)
    return Place(task, own or innermost, phase, "", text)


HUNG = "a hang on purpose (SCENARIO=hang)"
TEARDOWN_CODE = ("https://github.com/tensorflow/tensorflow/blob/master/third_party/xla/xla/tsl/distributed_runtime/"
                 "coordination/coordination_service_agent.cc")
KINDS = {  # the stopped task's phase -> the finding's kind and its fix
    HUNG: ("hang", "nothing to fix in the program: the lab's chaos hung this task's training on purpose; a real "
                   "stall looks the same from its peers"),
    "the input pipeline": ("stuck-input-pipeline",
                           "make the input pipeline return: a generator or a read that blocks (a file, a queue, a "
                           "network source) stops its worker, and every other worker then waits for it in the next "
                           "all-reduce; bound the read with a timeout, or read the data before training"),
    "a save": ("stuck-in-save", "a save that blocks on one worker holds every other in its collective: let every "
                                "worker call save, to paths of their own, and check the path is writable"),
    "a restore": ("deadlock-at-restore", "restore on every worker, from the same checkpoint, at the same point"),
    "a callback": ("stuck-callback",
                   "make the callback return: a callback runs between steps on its worker, and every other worker "
                   "waits for it in the next step's all-reduce; bound what it waits on, or run it on a thread of "
                   "its own"),
}


@dataclass
class Finding:
    kind: str
    what: str
    fix: str
    link: str = explain.TUTORIAL
    places: dict[str, str] = field(default_factory=dict)  # task -> where it is, in words
    quiet_seconds: float | None = None
    limit_seconds: float | None = None
    moment: str = "stall"  # when the lab asked: at a stall, or before a stop of its own (TIMEOUT, ...)
    found_at: float | None = None  # unix time the lab composed it (make bench BENCH=stall: stall to finding)

    def to_dict(self) -> dict:
        return asdict(self)


def finding(places: dict[str, Place], silent: list[str], done: list[str], stall: Stall | None = None) -> Finding:
    """Who waits on whom: the tasks that stopped in their own code, and those waiting for them;
    where none stopped but a peer exited 0, the deadlock explain.PEER_DONE_SIGNATURES names."""
    stopped = [place for place in places.values() if not place.waiting]
    waiting = [place for place in places.values() if place.waiting]
    words = {task: place.words() for task, place in places.items()} | {task: f"{task}: no stacks (it did not answer)"
                                                                        for task in silent}
    quiet, limit = (stall.quiet_seconds, stall.limit_seconds) if stall else (None, None)
    waits = "; ".join(f"{place.task} waits for {'it' if len(stopped) == 1 else 'them'} in {place.waiting}"
                      for place in waiting)
    if stopped:
        first = stopped[0]
        kind, fix = next(((k, f) for phase, (k, f) in KINDS.items() if first.phase.startswith(phase)),
                         ("stuck-task", "find why it does not return from there: every other worker waits for it "
                                        "in its next collective"))
        what = "; ".join(place.words() for place in stopped) + (f"; {waits}" if waits else "")
        return Finding(kind, what, fix, places=words, quiet_seconds=quiet, limit_seconds=limit)
    if waiting and done:
        evidence = explain.Evidence(waiting[0].task, 1, peers_done=tuple(done),
                                    stacks="\n".join(place.text for place in waiting))
        nothing = re.match("", "")  # peer_done's match where no text matched, unread here
        assert nothing is not None
        signature, _ = explain.peer_done(evidence, nothing)
        what = signature.what.format(peers=" and ".join(done))
        return Finding(signature.name, f"{waiting[0].task} {what}", signature.fix, signature.link, words,
                       quiet_seconds=quiet, limit_seconds=limit)
    if waiting:
        return Finding("all-waiting", "every task waits in a collective and none is stopped in its own code: "
                       + "; ".join(place.words() for place in waiting),
                       "the tasks call their collectives in different orders or different numbers (a condition "
                       "on the task's index around a save, an evaluation or a reduce); compare where each is",
                       places=words, quiet_seconds=quiet, limit_seconds=limit)
    if silent and done:
        # Python answers the signal at its next line; a task that cannot, with a peer that finished,
        # has no line left to run: TensorFlow's teardown, whose coordination-service shutdown waits
        # on task 0 (make chaos slow-node showed it on the lab's own trainer before 4c9c44e)
        their = "its" if len(silent) == 1 else "their"
        return Finding("stuck-in-teardown", f"{' and '.join(silent)} did not answer for {their} stacks after "
                       f"{' and '.join(done)} exited 0: past the program's last line of Python, "
                       "in TensorFlow's teardown, whose coordination-service shutdown waits on task 0; a worker that "
                       "gets there after task 0 has gone retries it and never ends",
                       "end every worker together: have task 0 wait for the others before it exits (one last "
                       "all-reduce or strategy.extended barrier after training), or end each process with "
                       "os._exit(0) once its work is written, skipping the teardown",
                       TEARDOWN_CODE, places=words, quiet_seconds=quiet, limit_seconds=limit)
    return Finding("no-stacks", "no task answered the lab's request for its stacks (" + ", ".join(silent)
                   + "): the lab cannot say where they are", "read `tflab logs`; a task in C code that holds the "
                   "GIL cannot run Python's signal handler", places=words, quiet_seconds=quiet, limit_seconds=limit)


def where(backend, run_dir: Path, running: list[str], codes: dict, stall: Stall | None = None,
          moment: str = "stall", wait: float = STACKS_WAIT_SECONDS) -> Finding:
    """At a stall or before a stop the lab makes (moment: TIMEOUT, ...): each running task's
    stacks, waited for at most `wait` seconds, and the finding."""
    dumps = stackdump.capture(backend, running, run_dir, wait)
    places = {task: place_of(task, threads) for task, threads in dumps.items()}
    done = [task for task in backend.cluster.trainers if codes.get(task) == 0]
    found = finding(places, [task for task in running if task not in dumps], done, stall)
    found.moment, found.found_at = moment, time.time()
    return found


def while_moving(found: Finding, quiet: float) -> Finding:
    """A finding at a stop the user asked for (an interrupt, `down`) while training still advanced:
    where each task was, in words, with no diagnosis (mid-step, the tasks wait in their collectives
    as a healthy run does, and one in its own code is merely there)."""
    if found.kind == "no-stacks":
        return found
    return Finding("running", "; ".join(found.places.values()),
                   f"nothing to fix: training was still advancing (its last sign of life {quiet:.0f} s before the "
                   "stop); a run that stops moving is the stall watch's to find (STALL)", "", found.places,
                   moment=found.moment, found_at=found.found_at)


def finding_lines(found: dict) -> list[str]:
    """A finding (Finding.to_dict, as summary.json keeps it) in words: the live output's, the table's and why's."""
    return [f"{heading(found)}: {found['what']}", f"  fix: {found['fix']}"] + (
        [f"  see: {found['link']}"] if found.get("link") else [])


def heading(found: dict) -> str:
    moment = found.get("moment") if isinstance(found.get("moment"), str) else "stall"
    return f"stall ({found['kind']})" if moment == "stall" else f"where every task was at {moment} ({found['kind']})"
