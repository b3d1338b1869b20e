"""One run from start to end: check everything, write its folder, start its tasks, follow them,
stop what is left, summarise.

Data flows one way: Settings -> the cluster (cluster.build) -> TF_CONFIG per task -> tasks
(containers or processes, through the Backend interface of backends/base.py) -> <task>.jsonl ->
summary.json and the table. Nothing is started until every check has passed, and nothing a run
wrote is ever overwritten or deleted.

`run` is the one pipeline for every kind of run (kind.RunKind: the lab's own, labrun.LabRun, for
every BACKEND, and a TFJob's or TrainJob's replay, replay.run.ReplayRun), which it asks what ends
the job, what a restart is, the deadline and the summary's rows; whatever watches a run beside it
(make chaos's faults, a replay's watcher) is a backend.RunObserver, called at each moment whoever it is.
"""

from __future__ import annotations

import errno
import os
import signal
import time
from pathlib import Path

from tflab import backends
from tflab.backends.base import NO_OBSERVER, Backend, Observers, RunObserver
from tflab.console import StdoutError, display_path, quiet_stdout, say
from tflab.core import cluster, explain, runfolder, runowner
from tflab.core.errors import LabError
from tflab.core.foreign import ForeignFile
from tflab.core.settings import Settings
from tflab.engine import reaper
from tflab.supervisor import setid, stall, summary, table
from tflab.supervisor.kind import FAILED, SUCCEEDED, WAITING, Printer, RunKind
from tflab.supervisor.labrun import LabRun

FAILURE_GRACE_SECONDS = 10  # after one task fails, how long the others get to end by themselves
SERVER_END_SECONDS = 20  # how long parameter servers get to end cleanly after SIGTERM
EVALUATOR_END_SECONDS = 60  # after training, how long the evaluator gets to evaluate the last checkpoint
POLL_SECONDS = 0.5
# TIMEOUT is a bound (issue 44): past the deadline, no wait of the lab's (a server's SIGTERM, the
# stacks asked for before a stop, a restart's start) takes more than this.
PAST_DEADLINE_SECONDS = 2.0
RESTART_START_SECONDS = 300  # how long one restart's start may take, where the deadline leaves that long


class Supervision:
    """A run as the runner follows it: its kind (kind.RunKind), the stall watch over its trainers
    (supervisor/stall.py, as STALL says) and where every task was before the lab stopped them."""

    def __init__(self, kind: RunKind):
        self.kind, self.backend, self.run_dir = kind, kind.backend, kind.run_dir
        self.stall_finding: dict | None = None  # where every task was at a stall, or before the lab stopped them
        self.diagnosis: dict | None = None  # the last such finding of the attempt: the restart decision reads it
        trainers = self.backend.cluster.trainers
        # The CPUs the tasks start on: this host's (the engine's, on Linux), or fewer where CPUS caps each.
        cpus = min(os.cpu_count() or 1, len(trainers) * kind.settings.cpus) if kind.settings.cpus else os.cpu_count()
        self.watch = stall.Watch(self.run_dir, trainers,
                                 stall.Limits.from_setting(kind.settings.stall, len(trainers), cpus),
                                 armed=kind.logs_from_start,
                                 epochs=kind.settings.epochs if kind.logs_from_start else 0)

    def where(self, running: list[str], codes: dict, found: stall.Stall | None = None, moment: str = "stall",
              asked: bool = False, deadline: float | None = None) -> None:
        """Before the lab stops running tasks (a stall, TIMEOUT, a failure's grace, an interrupt, a
        down): where each is, said and kept for the summary; the first finding stays. asked: a stop
        the user asked for (an interrupt, `down`), which says nothing of the run's health: where the
        run was still advancing, where each task was is kept without a diagnosis."""
        wait = stall.STACKS_WAIT_SECONDS if deadline is None else within(deadline, stall.STACKS_WAIT_SECONDS)
        try:
            finding = stall.where(self.backend, self.run_dir, running, codes, found, moment, wait)
        except (OSError, LabError, ForeignFile) as error:  # the stop goes on: it only learns less
            say(f"the lab could not ask {', '.join(running)} where they are ({error})")
            return
        if asked and self.watch.moving():
            finding = stall.while_moving(finding, self.watch.quiet())
        if finding.kind == "no-stacks" and found is None:
            return  # nothing learned: a stop's usual lines say enough
        self.diagnosis = finding.to_dict()
        if self.stall_finding is None:
            self.stall_finding = finding.to_dict()
            for line in stall.finding_lines(self.stall_finding):
                say(line)


def within(deadline: float, seconds: float) -> float:
    """A wait of `seconds` cut to end by the deadline, or PAST_DEADLINE_SECONDS after it once it passed."""
    return max(0.0, min(seconds, max(deadline - time.monotonic(), PAST_DEADLINE_SECONDS)))


def strip_setid(kind: RunKind) -> list[str]:
    """After the tasks are removed, before the summary: every set-ID bit in what they wrote taken
    away (supervisor/setid.py); the lines to say at the run's end."""
    try:
        return setid.strip_run(kind.run_dir, kind.writable_outside(), kind.image())
    except (OSError, LabError, ForeignFile) as error:
        return [f"the set-ID check of what the tasks wrote failed ({error}): look for set-ID files in the run folder "
                "and any writable CLAIMS folder (find FOLDER -perm /6000) before you share them"]


def up(settings: Settings, link_latest: bool = True, observer: RunObserver = NO_OBSERVER) -> int:
    """`make up` (and `make chaos`, with Chaos as its observer): a whole run, restarts included.
    Returns the exit status: 0 only if every task succeeded in the end. An interrupt (Ctrl-C, or
    SIGTERM and SIGHUP, which cli/__init__.py turns into one; `down FORCE=1` sends SIGTERM) asks each
    task where it is, stops and removes every task, writes the summary with outcome "interrupted",
    and is raised again for the caller (compare and soak stop there)."""
    run_dir = runfolder.planned(settings)
    the_cluster = cluster.build(settings)
    observer.check(settings)
    backend = backends.make(settings, run_dir, the_cluster, observer.proxied())
    return run(LabRun(settings, backend, run_dir), link_latest, observer)


def run(kind: RunKind, link_latest: bool = True, observer: RunObserver = NO_OBSERVER) -> int:
    """The one pipeline, for every kind of run: claim, start, supervise, tear down, summarise."""
    backend, run_dir = kind.backend, kind.run_dir
    # The claim comes first of all that writes: a second `up` of the same RUN is refused here, and
    # has started nothing, so it has nothing to clean up (and never cleans up the first one's).
    runfolder.make(run_dir, link_latest, owner=True)
    kind.claimed()
    observers = Observers(observer, *kind.observers())
    guard = reaper.watch(run_dir)
    if hasattr(backend, "guard"):  # a backend of processes (local) tells the reaper their groups
        backend.guard = guard
    started = time.time()
    outcome, interrupt, failure = "failed", None, None
    unsaid: StdoutError | None = None
    stopped: list[str] = []
    codes: dict[str, int | None] = {task: None for task in backend.tasks}
    oom_killed: dict[str, bool] = {}
    seen = Supervision(kind)
    try:
        kind.prepare()
        headline = observers.describe()
        for line in kind.announce() + ([headline] if headline else []):
            say(line)
        backend.start()
        outcome, stopped = supervise(seen, observers, started)
    except KeyboardInterrupt as error:
        interrupt = error
        codes = backend.exit_codes()
        outcome, stopped = "interrupted", [t for t, c in codes.items() if c is None]
        said = describe_interrupt(error, run_dir)
        say(f"{said}: stopping every task")
        # The lab that owns the run asks, before it removes them (`down FORCE=1` signals it and waits)
        seen.where(stopped, codes, moment=interrupt_moment(error, run_dir), asked=True)
        backend.stop(stopped)
    except LabError as error:
        say(str(error))
    except OSError as error:  # the run folder cannot be written (a full disk): said once, below
        failure = error
    except StdoutError as error:
        # `up > /dev/full`: nothing the lab says can be written, and a run no one can watch is not
        # carried on. It ends whole all the same: its tasks stopped and removed, set-ID bits
        # stripped, its summary written (outcome failed); main says the error on stderr, exit 1.
        unsaid = error
        quiet_stdout()
        codes = backend.exit_codes()
        stopped = [t for t, c in codes.items() if c is None]
        backend.stop(stopped)
    finally:
        # Teardown first: what lives outside this process (containers, networks, processes) is
        # released whatever failed before, and before anything is written that could fail too.
        try:
            codes = backend.exit_codes()
            oom_killed = dict(backend.oom_killed)  # read before close removes the containers
            observers.finish(backend)
            backend.save_output()
        except OSError as error:
            failure = failure or error
        finally:
            backend.close()
            guard.release()
    # Nothing a task wrote is handed back with a set-ID bit: once no task can write any more,
    # before anything of the lab's is written that could fail.
    stripped = strip_setid(kind)
    try:
        result = summary.summarise(run_dir, kind.rows(codes, stopped, outcome, oom_killed), outcome, started,
                                   time.time(), kind.restarts_made)
        result.stall = seen.stall_finding  # before the chaos section, whose verdict on a hang names it
        if unsaid is not None:
            result.notes.append(f"the lab stopped the run at once: its standard output could not be written ({unsaid})")
        result.chaos = observers.result(run_dir, result)
        result.write(run_dir)
    except OSError as error:
        for line in stripped:
            say(line)
        raise LabError(unwritable(run_dir, failure or error)) from None
    print(table.table(result))
    for line in stripped:
        say(line)
    if failure is not None:
        raise LabError(unwritable(run_dir, failure))
    if unsaid is not None:
        raise unsaid
    if interrupt is not None:
        raise interrupt
    return 0 if result.ok else 1


def unwritable(run_dir: Path, error: OSError) -> str:
    """One line for a run folder the lab could not write, said after the run was removed."""
    name = Path(error.filename).name if error.filename else "a file"
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (f"the disk holding {display_path(run_dir)} is full: {name} could not be written; the run's "
                "containers and networks are removed, free some space and run again")
    return f"{display_path(run_dir)} could not be written ({name}: {error.strerror or error}); the run is removed"


def describe_interrupt(error: KeyboardInterrupt, run_dir: Path | None = None) -> str:
    if run_dir is not None and runowner.ended_by_down(run_dir):
        return "ended by tflab down"
    number = getattr(error, "signal", None)
    return f"interrupted by {signal.Signals(number).name}" if number else "interrupted"


def interrupt_moment(error: KeyboardInterrupt, run_dir: Path) -> str:
    """The moment of an interrupt's finding, as its heading says it: "where every task was at <it>"."""
    if runowner.ended_by_down(run_dir):
        return "tflab down"
    number = getattr(error, "signal", None)
    return f"{signal.Signals(number).name} to the lab" if number else "the interrupt"


def supervise(seen: Supervision, observer: RunObserver = NO_OBSERVER,
              started: float | None = None) -> tuple[str, list[str]]:
    """Follows the run; after a failure that its kind restarts (RESTART_POLICY; a TFJob: its restart
    policy), restarts every task. The whole cluster restarts, not the one task: a
    MultiWorkerMirroredStrategy worker cannot rejoin a running cluster (its peers abort as soon as
    it goes), and Docker's own restart policy is off after a `docker kill` or `docker stop` anyway.
    The one exception is a kind that restarts a task alone, in place, as a TFJob's OnFailure replica
    is by the kubelet (kind.restart_alone): follow() does that while the others run on."""
    kind, backend = seen.kind, seen.backend
    printer = kind.printers()
    deadline = kind.deadline(time.time() if started is None else started)
    while True:
        outcome, stopped = follow(seen, printer, deadline, observer)
        if outcome == "interrupted":
            return outcome, stopped
        if outcome == "stalled":
            # Its tasks were alive: no cluster restarts a pod that has not failed, whatever its policy.
            say("not restarting: a stall is no failure a restart policy sees (the tasks were alive), and the "
                "same program stalls again")
            return outcome, stopped
        vanished = [task for task, code in backend.exit_codes().items() if code == explain.VANISHED]
        if vanished:
            say(f"not restarting: {', '.join(vanished)} vanished, and the lab does not recreate what was "
                "removed from outside it")
            return outcome, stopped
        if outcome != "failed":
            return outcome, stopped
        if time.monotonic() > deadline:
            # The deadline bounds restarts too: a restart's start alone can take minutes, and a
            # TIMEOUT=120 once ended after 159.5 s (issue 44); a failure at or past it ends the run.
            say(kind.deadline_line([]))
            return "timed out", stopped
        # Decided after the failure's grace, whose end asked every task still running where it is
        # (follow: seen.where): a peer's exit that came first is judged with the stall it met.
        restart, why = kind.restart_verdict(stopped, seen.diagnosis)
        if not restart:
            if why:
                say(f"not restarting: {why}")
            return outcome, stopped
        if why:  # restarted all the same (OnFailure), knowing it will happen again
            say(why)
        left = [task for task, code in backend.exit_codes().items() if code is None]
        backend.stop(left)
        observer.before_restart(backend)
        kind.restarts_made.append(time.time())
        say(kind.restart_line())
        backend.restart()
        if time.monotonic() > deadline:  # the restart's start took the rest of the run's time
            say(kind.deadline_line(backend.tasks))
            backend.stop(backend.tasks)
            return "timed out", list(backend.tasks)
        seen.watch.restarted()
        seen.diagnosis = None
        observer.after_restart(backend)


def follow(seen: Supervision, printer: Printer, deadline: float,
           observer: RunObserver = NO_OBSERVER) -> tuple[str, list[str]]:
    """Prints the tasks' events as they come; returns (outcome, tasks the lab had to stop)."""
    what, backend, watch = seen.kind, seen.backend, seen.watch
    servers = backend.cluster.servers
    evaluators = backend.cluster.evaluators
    failed_at = trained_at = None
    alone: dict[str, tuple[float, float]] = {}  # task -> (when it was seen ended, when it restarts alone)
    while True:
        printer.print_new()
        codes = backend.exit_codes()
        observer.tick(backend, codes)
        alone = {task: due for task, due in alone.items() if codes.get(task) not in (None, 0, explain.VANISHED)}
        running = [task for task, code in codes.items() if code is None]
        watch.read()
        if observer.holds():
            watch.hold()
        found = watch.stalled(running, [task for task, code in codes.items() if code == 0])
        if found is not None:
            say(found.line())
            seen.where(running, codes, found, deadline=deadline)
            say(f"stopping {', '.join(running)}")
            backend.stop(running)
            printer.print_new()
            return "stalled", running
        vanished = [task for task, code in codes.items() if code == explain.VANISHED]
        if vanished and runowner.ended_by_down(backend.run_dir):
            say(f"ended by tflab down: {', '.join(vanished)} removed; stopping every task")
            backend.stop(running)
            return "interrupted", running
        if vanished:
            # Checked first: the peers of a removed task fail within a second, and one read of the
            # states can see both, the removal and the failures it caused.
            say(f"{', '.join(vanished)} vanished: {'its' if len(vanished) == 1 else 'their'} container or "
                "service was removed from outside the lab; ending the run")
            backend.stop(running)
            printer.print_new()
            return "failed", running
        failed = [task for task, code in codes.items() if code not in (None, 0)]
        condition = what.job_condition(codes)
        if condition == WAITING:  # the kind bounds its own wait by the deadline (ReplayRun.job_condition)
            time.sleep(POLL_SECONDS)
            continue
        if condition == SUCCEEDED:
            stopped: list[str] = []
            if running:
                say(what.done_line.format(running=", ".join(running)))
                codes, stopped = end_servers(backend, running, deadline)
            printer.print_new()
            return "ok", stopped
        if condition == FAILED:
            if running:
                say(f"stopping {', '.join(running)}")
                backend.stop(running)
            printer.print_new()
            return "failed", running
        now = time.monotonic()
        for task in failed:  # each new failure of a task its kind restarts alone, in place
            code = codes[task]
            if task not in alone and code is not None and (fate := what.restart_alone(task, code, now)) is not None:
                wait, line = fate
                alone[task] = (now, now + wait)
                say(line)
        # None once a failure its kind does not retry alone is in its grace: the whole job ends or restarts
        restarted = [task for task, (_, due) in alone.items() if due <= now <= deadline and failed_at is None]
        for task in restarted:  # the others run on, untouched: they meet whatever its loss gives them
            observer.before_restart(backend)
            what.restarts_made.append(time.time())
            what.restart_alone_now(task, alone.pop(task)[0], now, min(RESTART_START_SECONDS, deadline - now))
            watch.restarted()
        failed = [task for task in failed if task not in alone and task not in restarted]
        running += restarted
        # A SCRIPT's servers owe no clean exit (clean_exits): training is over once its chief succeeded.
        done = what.clean_exits or (not failed and all(codes[task] == 0 for task in backend.cluster.chiefs))
        if running and done and not alone and set(running) <= set(servers) | set(evaluators):
            # Training is over. The evaluator stops by itself after the last checkpoint (it gets
            # EVALUATOR_END_SECONDS for it, unless a trainer failed); servers would serve forever.
            trained_at = trained_at or time.monotonic()
            if (set(running) & set(evaluators) and not failed
                    and time.monotonic() - trained_at < EVALUATOR_END_SECONDS and time.monotonic() < deadline):
                time.sleep(POLL_SECONDS)
                continue
            say(what.done_line.format(running=", ".join(running)))
            codes, stopped = end_servers(backend, running, deadline)
            printer.print_new()
            if not what.clean_exits:  # ended by SIGTERM, whatever their code: the chief's success is the run's
                return "ok", stopped
            return ("ok" if all(code == 0 for code in codes.values()) else "failed"), stopped
        if not running and (not alone or failed_at is not None):  # none is restarted alone in a failure's grace
            if failed and failed_at is None:  # every task ended between two looks: each failure said still
                say("; ".join(f"{task} exited with code {codes[task]}" for task in failed)
                    + f"; no {what.tasks_word[:-1]} was left running")
            printer.print_new()
            return ("ok" if all(code == 0 for code in codes.values()) else "failed"), []
        if failed and failed_at is None:
            failed_at = time.monotonic()
            say(f"{failed[0]} exited with code {codes[failed[0]]}; the other {what.tasks_word} get "
                f"{FAILURE_GRACE_SECONDS} s to end by themselves")
        if failed_at is not None and time.monotonic() - failed_at > FAILURE_GRACE_SECONDS:
            seen.where(running, codes, moment="the end of the failure's grace", deadline=deadline)
            say(f"stopping {', '.join(running)}")
            backend.stop(running)
            printer.print_new()
            return "failed", running
        if time.monotonic() > deadline:
            say(what.deadline_line(running))
            seen.where(running, codes, moment="TIMEOUT", deadline=deadline)
            backend.stop(running)
            printer.print_new()
            return "timed out", running
        time.sleep(POLL_SECONDS)


def end_servers(backend: Backend, servers: list[str], deadline: float | None = None) -> tuple[dict, list[str]]:
    """SIGTERM to servers that never exit by themselves; SIGKILL to any that ignore it, after
    SERVER_END_SECONDS, or at the run's deadline (PAST_DEADLINE_SECONDS past it at most)."""
    backend.terminate(servers)
    given = SERVER_END_SECONDS if deadline is None else within(deadline, SERVER_END_SECONDS)
    deadline = time.monotonic() + given
    while True:
        codes = backend.exit_codes()
        left = [task for task in servers if codes[task] is None]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(POLL_SECONDS)
    if left:
        say(f"{', '.join(left)} did not end in {given:g} s; killing them")
        backend.stop(left)
        codes = backend.exit_codes()
    return codes, left
