"""One run from start to end: check everything, write its folder, start its tasks, follow them,
stop what is left, summarise.

Data flows one way: Settings -> the cluster (cluster.build) -> TF_CONFIG per task -> tasks
(containers or processes, through the Backend interface of backends/base.py) -> <task>.jsonl ->
summary.json and the table. Nothing is started until every check has passed, and nothing a run
wrote is ever overwritten or deleted.

`run` is the one pipeline for every kind of run: the lab's own (LabRun, for every BACKEND) and a
TFJob's replay (replay.run.ReplayRun); whatever watches a run beside it (make chaos's faults) is a
backend.RunObserver, called at each moment whoever it is.
"""

from __future__ import annotations

import errno
import signal
import time
from pathlib import Path

from tflab import backends
from tflab.backends.base import NO_OBSERVER, Backend, RunObserver
from tflab.console import describe_run, display_path, say
from tflab.core import cluster, explain, runfolder, runowner
from tflab.core.errors import LabError
from tflab.core.foreign import ForeignFile
from tflab.core.runsummary import Summary
from tflab.core.schema import attempts
from tflab.core.settings import Settings
from tflab.engine import reaper
from tflab.supervisor import progress, resume, setid, stall, summary, table

FAILURE_GRACE_SECONDS = 10  # after one task fails, how long the others get to end by themselves
SERVER_END_SECONDS = 20  # how long parameter servers get to end cleanly after SIGTERM
EVALUATOR_END_SECONDS = 60  # after training, how long the evaluator gets to evaluate the last checkpoint
POLL_SECONDS = 0.5
OUTPUT_TAIL_BYTES = 256 * 1024  # what the restart decision reads of a SCRIPT task's output: its traceback
SUCCEEDED, FAILED, WAITING = "succeeded", "failed", "waiting"  # LabRun.job_condition's answers


def write_links(settings: Settings, run_dir: Path, backend: Backend) -> None:
    """LINK: every proxied task's profile, in place before anything starts."""
    if settings.link:
        for task in backend.proxied:
            runfolder.set_link(run_dir, task, settings.link)


class LabRun:
    """What `up` runs: the lab's trainers (or a SCRIPT) on BACKEND. What another kind of run does
    differently (replay.run.ReplayRun: a TFJob's replicas) is these methods; the runner's loop,
    restarts, teardown and summary are the same for every kind."""

    tasks_word = "tasks"  # how the runner's lines name them
    done_line = "the chief is done; ending {running}"

    def __init__(self, settings: Settings, backend: Backend, run_dir: Path):
        self.settings, self.backend, self.run_dir = settings, backend, run_dir
        self.timeout, self.restarts = settings.timeout, settings.restarts
        self.restarts_made: list[float] = []  # when each restart was made
        self.stall_finding: dict | None = None  # where every task was at a stall, or before the lab stopped them
        self.watch: stall.Watch | None = None  # the stall watch supervise follows the run with

    def stall_watch(self) -> stall.Watch:
        """The run's stall watch (supervisor/stall.py) over its trainers, as STALL says."""
        # The lab's own trainer logs every epoch from its start; a script's or a replica's program is
        # watched from its first advance (a replica the hooks did not reach never advances)
        own = not (self.settings.script or self.settings.tfjob or self.settings.trainjob)
        self.watch = stall.Watch(self.run_dir, self.backend.cluster.trainers,
                                 stall.Limits.from_setting(self.settings.stall), armed=own,
                                 epochs=self.settings.epochs if own else 0)
        return self.watch

    def where(self, running: list[str], codes: dict, found: stall.Stall | None = None, moment: str = "stall",
              asked: bool = False) -> None:
        """Before the lab stops running tasks (a stall, TIMEOUT, a failure's grace, an interrupt, a
        down): where each is, said and kept for the summary; the first finding stays. asked: a stop
        the user asked for (an interrupt, `down`), which says nothing of the run's health: where the
        run was still advancing, where each task was is kept without a diagnosis."""
        try:
            finding = stall.where(self.backend, self.run_dir, running, codes, found, moment)
        except (OSError, LabError, ForeignFile) as error:  # the stop goes on: it only learns less
            say(f"the lab could not ask {', '.join(running)} where they are ({error})")
            return
        if asked and self.watch is not None and self.watch.moving():
            finding = stall.while_moving(finding, self.watch.quiet())
        if finding.kind == "no-stacks" and found is None:
            return  # nothing learned: a stop's usual lines say enough
        if self.stall_finding is None:
            self.stall_finding = finding.to_dict()
            for line in stall.finding_lines(self.stall_finding):
                say(line)

    @property
    def clean_exits(self) -> bool:
        """Whether a task ended by SIGTERM owes the lab exit 0. The lab's own tasks do (their handler
        exits 0), so a non-zero code then is a failure; a TFJob's replicas owe no such exit
        (replay.run.ReplayRun), and neither do a SCRIPT's servers (TF's tutorial: `server.join()`), which have no
        handler of the lab's: once the chief succeeded they are ended as a TFJob's `cleanPodPolicy: Running` ends its
        pods, and their exit code then says nothing of the run."""
        return not (self.settings.script and self.backend.cluster.servers)

    def claimed(self) -> None:
        """Right after the claim, before the run starts: a refusal here is one line and no summary."""

    def prepare(self) -> None:
        """The run folder's config.json and link profiles, before anything starts."""
        runfolder.write_config(self.run_dir, self.settings, self.backend.cluster)
        write_links(self.settings, self.run_dir, self.backend)

    def announce(self) -> list[str]:
        return [f"run {self.run_dir.name}: {describe_run(self.settings, self.backend.cluster)} on "
                f"{self.backend.description}", f"outputs in {display_path(self.run_dir)}/"]

    def warnings(self) -> list[str]:
        if not self.settings.script:  # the run still starts: the warning may be wrong, the run will tell
            return []
        return [f"warning: {w}" for w in explain.script_warnings(Path(self.settings.script), self.settings.strategy)]

    def progress(self):
        """What prints the tasks' events as they come (print_new at every poll); a SCRIPT's output too."""
        events = progress.ProgressPrinter(self.settings, self.backend.cluster, self.run_dir)
        if not self.settings.script:
            return events
        return progress.Printers(events, progress.ScriptOutputPrinter(self.backend.cluster, self.run_dir))

    def job_condition(self, codes: dict) -> str | None:
        """The job's end as this kind of run decides it from the exit codes so far: SUCCEEDED (end
        what runs), FAILED (stop what runs; no restart), WAITING (it succeeded; poll again while
        what is left ends by itself); None: the runner's own rules, the lab's (chief, servers,
        grace, restarts). A TFJob's operator decides its job's end (replay.run.ReplayRun)."""
        return None

    def deadline(self, started: float) -> float:
        """TIMEOUT counts from the tasks' start."""
        return time.monotonic() + self.timeout

    def deadline_line(self, running: list[str]) -> str:
        return f"TIMEOUT={self.timeout:g} s passed; stopping {', '.join(running)}"

    def restart_verdict(self, stopped: list[str]) -> tuple[bool, str]:
        """Whether a failed run restarts (RESTART_POLICY, from each failure's evidence), and why not."""
        if len(self.restarts_made) >= self.restarts:
            return False, f"all {self.restarts} restarts (RESTARTS) are spent" if self.restarts else ""
        return explain.restart_verdict(self.settings.restart_policy,
                                       failures(self.backend, self.settings, self.run_dir, stopped))

    def restart_line(self) -> str:
        settings = self.settings
        count = f"restarting every task ({len(self.restarts_made)} of {self.restarts})"
        if settings.script:
            return f"{count}: {script_restart(self.run_dir, self.backend.cluster.chief)}"
        resumes = "from the last backup" if settings.backup != "off" and settings.loop == "fit" else "from the start"
        return f"{count}: training resumes {resumes}"

    def finish(self) -> None:
        """Once the run ended, before its tasks are removed."""

    def writable_outside(self) -> dict[str, Path]:
        """Host folders outside the run folder that its tasks could write (a replay's writable
        CLAIMS), by the name its lines give them: the set-ID check walks them too."""
        return {}

    def image(self) -> str:
        """An image of the run's, for the set-ID check's container where the lab is not root."""
        return getattr(self.backend, "image", "")

    def strip_setid(self) -> list[str]:
        """After the tasks are removed, before the summary: every set-ID bit in what they wrote
        taken away (supervisor/setid.py); the lines to say at the run's end."""
        try:
            return setid.strip_run(self.run_dir, self.writable_outside(), self.image())
        except (OSError, LabError, ForeignFile) as error:
            return [f"the set-ID check of what the tasks wrote failed ({error}); the run folder is 0700, so no other "
                    "user of this host can reach it"]

    def summarise(self, codes: dict, stopped: list[str], outcome: str, started: float, ended: float,
                  oom_killed: dict) -> Summary:
        return summary.summarise(self.settings, self.backend.cluster, self.run_dir, codes, stopped, outcome, started,
                                 ended, oom_killed, self.restarts_made, servers_owe_no_exit=not self.clean_exits)


def script_restart(run_dir: Path, chief: str) -> str:
    """A script's restart: where it resumes is its own doing, said once its tasks log it; what the
    chief's fit's backup lets one expect, where it has one."""
    try:
        expected = resume.expectation(runfolder.events(run_dir, chief))
    except ForeignFile:
        expected = ""
    return ("each runs the script again from its first line, and the lab will say where it resumed"
            + (f"; {chief}: {expected}" if expected else ""))


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


def run(what: LabRun, link_latest: bool = True, observer: RunObserver = NO_OBSERVER) -> int:
    """The one pipeline, for every kind of run: claim, start, supervise, tear down, summarise."""
    backend, run_dir = what.backend, what.run_dir
    # The claim comes first of all that writes: a second `up` of the same RUN is refused here, and
    # has started nothing, so it has nothing to clean up (and never cleans up the first one's).
    runfolder.make(run_dir, link_latest, owner=True)
    what.claimed()
    guard = reaper.watch(run_dir)
    if hasattr(backend, "guard"):  # a backend of processes (local) tells the reaper their groups
        backend.guard = guard
    started = time.time()
    outcome, interrupt, failure = "failed", None, None
    stopped: list[str] = []
    codes: dict[str, int | None] = {task: None for task in backend.tasks}
    oom_killed: dict[str, bool] = {}
    try:
        what.prepare()
        for line in what.announce():
            say(line)
        headline = observer.describe()
        if headline:
            say(headline)
        for line in what.warnings():
            say(line)
        backend.start()
        outcome, stopped = supervise(backend, what, observer, started)
    except KeyboardInterrupt as error:
        interrupt = error
        codes = backend.exit_codes()
        outcome, stopped = "interrupted", [t for t, c in codes.items() if c is None]
        said = describe_interrupt(error, run_dir)
        say(f"{said}: stopping every task")
        # The lab that owns the run asks, before it removes them (`down FORCE=1` signals it and waits)
        what.where(stopped, codes, moment=interrupt_moment(error, run_dir), asked=True)
        backend.stop(stopped)
    except LabError as error:
        say(str(error))
    except OSError as error:  # the run folder cannot be written (a full disk): said once, below
        failure = error
    finally:
        # Teardown first: what lives outside this process (containers, networks, processes) is
        # released whatever failed before, and before anything is written that could fail too.
        try:
            codes = backend.exit_codes()
            oom_killed = dict(backend.oom_killed)  # read before close removes the containers
            what.finish()
            observer.finish(backend)
            backend.save_output()
        except OSError as error:
            failure = failure or error
        finally:
            backend.close()
            guard.release()
    # Nothing a task wrote is handed back with a set-ID bit: once no task can write any more,
    # before anything of the lab's is written that could fail.
    stripped = what.strip_setid()
    try:
        result = what.summarise(codes, stopped, outcome, started, time.time(), oom_killed)
        result.chaos = observer.result(run_dir, result)
        result.stall = what.stall_finding
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


def supervise(backend: Backend, what: LabRun, observer: RunObserver = NO_OBSERVER,
              started: float | None = None) -> tuple[str, list[str]]:
    """Follows the run; after a failure that RESTART_POLICY restarts (a TFJob: its restart policy),
    restarts every task, up to RESTARTS times. The whole cluster restarts, not the one task: a
    MultiWorkerMirroredStrategy worker cannot rejoin a running cluster (its peers abort as soon as
    it goes), and Docker's own restart policy is off after a `docker kill` or `docker stop` anyway."""
    printer = what.progress()
    watch = what.stall_watch()
    deadline = what.deadline(time.time() if started is None else started)
    while True:
        outcome, stopped = follow(backend, what, printer, deadline, observer, watch)
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
        restart, why = what.restart_verdict(stopped)
        if not restart:
            if why:
                say(f"not restarting: {why}")
            return outcome, stopped
        if why:  # restarted all the same (OnFailure), knowing it will happen again
            say(why)
        left = [task for task, code in backend.exit_codes().items() if code is None]
        backend.stop(left)
        what.restarts_made.append(time.time())
        say(what.restart_line())
        backend.restart()
        watch.restarted()
        observer.after_restart(backend)


def failures(backend: Backend, settings: Settings, run_dir: Path, stopped: list[str]) -> list[explain.Evidence]:
    """The evidence of every task that failed by itself (not one the lab stopped), for the restart
    decision: what the summary reads of it (summary.evidence_of), its output from a SCRIPT's own
    `<task>.out` (output.log is written at the end of the run)."""
    oom_killed = backend.oom_killed
    codes = backend.exit_codes()
    found = []
    for task, code in codes.items():
        if code in (None, 0) or task in stopped:
            continue
        records = runfolder.events(run_dir, task)
        last = (attempts(records) or [[]])[-1]
        # a SCRIPT's traceback is in its <task>.out as it ran (its frames name a deadlock: a save ...)
        output = stall.tail_of(run_dir, runfolder.output_name(task), OUTPUT_TAIL_BYTES) if settings.script else ""
        found.append(summary.evidence_of(task, last, records, code, settings, output, oom_killed.get(task),
                                         summary.peers_done(backend.cluster, codes, task)))
    return found


def follow(backend: Backend, what: LabRun, printer, deadline: float,
           observer: RunObserver = NO_OBSERVER, watch: stall.Watch | None = None) -> tuple[str, list[str]]:
    """Prints the tasks' events as they come; returns (outcome, tasks the lab had to stop)."""
    servers = backend.cluster.servers
    evaluators = backend.cluster.evaluators
    failed_at = trained_at = None
    while True:
        printer.print_new()
        codes = backend.exit_codes()
        observer.tick(backend, codes)
        running = [task for task, code in codes.items() if code is None]
        if watch is not None:
            watch.read()
            found = watch.stalled(running, [task for task, code in codes.items() if code == 0])
            if found is not None:
                say(found.line())
                what.where(running, codes, found)
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
        if condition == WAITING:
            time.sleep(POLL_SECONDS)
            continue
        if condition == SUCCEEDED:
            stopped: list[str] = []
            if running:
                say(what.done_line.format(running=", ".join(running)))
                codes, stopped = end_servers(backend, running)
            printer.print_new()
            return "ok", stopped
        if condition == FAILED:
            if running:
                say(f"stopping {', '.join(running)}")
                backend.stop(running)
            printer.print_new()
            return "failed", running
        # A SCRIPT's servers owe no clean exit (clean_exits): training is over once its chief succeeded.
        done = what.clean_exits or (not failed and all(codes[task] == 0 for task in backend.cluster.chiefs))
        if running and done and set(running) <= set(servers) | set(evaluators):
            # Training is over. The evaluator stops by itself after the last checkpoint (it gets
            # EVALUATOR_END_SECONDS for it, unless a trainer failed); servers would serve forever.
            trained_at = trained_at or time.monotonic()
            if (set(running) & set(evaluators) and not failed
                    and time.monotonic() - trained_at < EVALUATOR_END_SECONDS):
                time.sleep(POLL_SECONDS)
                continue
            say(what.done_line.format(running=", ".join(running)))
            codes, stopped = end_servers(backend, running)
            printer.print_new()
            if not what.clean_exits:  # ended by SIGTERM, whatever their code: the chief's success is the run's
                return "ok", stopped
            return ("ok" if all(code == 0 for code in codes.values()) else "failed"), stopped
        if not running:
            printer.print_new()
            return ("ok" if all(code == 0 for code in codes.values()) else "failed"), []
        if failed and failed_at is None:
            failed_at = time.monotonic()
            say(f"{failed[0]} exited with code {codes[failed[0]]}; the other {what.tasks_word} get "
                f"{FAILURE_GRACE_SECONDS} s to end by themselves")
        if failed_at is not None and time.monotonic() - failed_at > FAILURE_GRACE_SECONDS:
            what.where(running, codes, moment="the end of the failure's grace")
            say(f"stopping {', '.join(running)}")
            backend.stop(running)
            printer.print_new()
            return "failed", running
        if time.monotonic() > deadline:
            say(what.deadline_line(running))
            what.where(running, codes, moment="TIMEOUT")
            backend.stop(running)
            printer.print_new()
            return "timed out", running
        time.sleep(POLL_SECONDS)


def end_servers(backend: Backend, servers: list[str]) -> tuple[dict, list[str]]:
    """SIGTERM to servers that never exit by themselves; SIGKILL to any that ignore it."""
    backend.terminate(servers)
    deadline = time.monotonic() + SERVER_END_SECONDS
    while True:
        codes = backend.exit_codes()
        left = [task for task in servers if codes[task] is None]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(POLL_SECONDS)
    if left:
        say(f"{', '.join(left)} did not end in {SERVER_END_SECONDS} s; killing them")
        backend.stop(left)
        codes = backend.exit_codes()
    return codes, left
