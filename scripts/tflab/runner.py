"""One run from start to end: check everything, write its folder, start its tasks, follow them,
stop what is left, summarise.

Data flows one way: Settings -> the cluster (cluster.build) -> TF_CONFIG per task -> tasks
(containers or processes, through the Backend interface of backend.py) -> <task>.jsonl ->
summary.json and the table. Nothing is started until every check has passed, and nothing a run
wrote is ever overwritten or deleted.
"""

from __future__ import annotations

import errno
import json
import signal
import time
from pathlib import Path

from tflab import backends, cluster, explain, reaper, runfolder, summary
from tflab.backend import Backend
from tflab.console import describe_run, display_path, say
from tflab.errors import LabError
from tflab.linkproxy import Profile
from tflab.schema import attempts, by_event
from tflab.settings import Settings

FAILURE_GRACE_SECONDS = 10  # after one task fails, how long the others get to end by themselves
SERVER_END_SECONDS = 20  # how long parameter servers get to end cleanly after SIGTERM
EVALUATOR_END_SECONDS = 60  # after training, how long the evaluator gets to evaluate the last checkpoint
POLL_SECONDS = 0.5


def write_links(settings: Settings, run_dir: Path, backend: Backend) -> None:
    """LINK: every proxied task's profile, in place before anything starts."""
    if settings.link:
        for task in backend.proxied:
            set_link(run_dir, task, settings.link)


def set_link(run_dir: Path, task: str, link: str) -> None:
    path = runfolder.link_path(run_dir, task)
    path.parent.mkdir(exist_ok=True)
    temporary = path.with_name(f".{path.name}")
    temporary.write_text(json.dumps(Profile.parse(link).to_dict()))  # the proxy polls for it
    temporary.replace(path)


def up(settings: Settings, link_latest: bool = True, chaos=None) -> int:
    """`make up` (and `make chaos`, with `chaos`): a whole run, restarts included. Returns the
    exit status: 0 only if every task succeeded in the end. An interrupt (Ctrl-C, or SIGTERM and
    SIGHUP, which cli.py turns into one) stops and removes every task, writes the summary with
    outcome "interrupted", and is raised again for the caller (compare and soak stop there)."""
    run_dir = runfolder.planned(settings)
    the_cluster = cluster.build(settings)
    if chaos:
        chaos.check(settings)
    backend = backends.make(settings, run_dir, the_cluster, chaos.proxied() if chaos else frozenset())
    the_cluster = backend.cluster  # at the backend's addresses
    # The claim comes first of all that writes: a second `up` of the same RUN is refused here, and
    # has started nothing, so it has nothing to clean up (and never cleans up the first one's).
    runfolder.make(run_dir, link_latest, owner=True)
    guard = reaper.watch(run_dir)
    if hasattr(backend, "guard"):  # a backend of processes (local) tells the reaper their groups
        backend.guard = guard
    started = time.time()
    outcome, stopped, restarts, interrupt, failure = "failed", [], [], None, None
    codes, oom_killed = {task: None for task in backend.tasks}, {}
    try:
        runfolder.write_config(run_dir, settings, the_cluster)
        write_links(settings, run_dir, backend)
        say(f"run {run_dir.name}: {describe_run(settings, the_cluster)} on {backend.description}")
        say(f"outputs in {display_path(run_dir)}/")
        if chaos:
            say(f"chaos: {chaos.describe()}")
        if settings.script:  # the run still starts: the warning may be wrong, the run will tell
            for warning in explain.script_warnings(Path(settings.script), settings.strategy):
                say(f"warning: {warning}")
        backend.start()
        outcome, stopped = supervise(backend, settings, run_dir, chaos, restarts)
    except KeyboardInterrupt as error:
        interrupt = error
        outcome, stopped = "interrupted", [t for t, c in backend.exit_codes().items() if c is None]
        say(f"{describe_interrupt(error, run_dir)}: stopping every task")
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
            if chaos:
                chaos.finish(backend)
            backend.save_output()
        except OSError as error:
            failure = failure or error
        finally:
            backend.close()
            guard.release()
    try:
        result = summary.summarise(settings, the_cluster, run_dir, codes, stopped, outcome, started, time.time(),
                                   oom_killed, restarts)
        if chaos:
            result.chaos = chaos.result(run_dir, result)
        result.write(run_dir)
    except OSError as error:
        raise LabError(unwritable(run_dir, failure or error)) from None
    print(summary.table(result))
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
    if run_dir is not None and runfolder.ended_by_down(run_dir):
        return "ended by tflab down"
    number = getattr(error, "signal", None)
    return f"interrupted by {signal.Signals(number).name}" if number else "interrupted"


def supervise(backend: Backend, settings: Settings, run_dir: Path, chaos, restarts: list) -> tuple[str, list[str]]:
    """Follows the run; after a failure that RESTART_POLICY restarts, restarts every task, up to
    RESTARTS times. The whole cluster restarts, not the one task: a MultiWorkerMirroredStrategy
    worker cannot rejoin a running cluster (its peers abort as soon as it goes), and Docker's own
    restart policy is off after a `docker kill` or `docker stop` anyway."""
    printer = summary.ProgressPrinter(settings, backend.cluster, run_dir)
    deadline = time.monotonic() + settings.timeout
    while True:
        outcome, stopped = follow(backend, settings, printer, deadline, chaos)
        if outcome == "interrupted":
            return outcome, stopped
        vanished = [task for task, code in backend.exit_codes().items() if code == explain.VANISHED]
        if vanished:
            say(f"not restarting: {', '.join(vanished)} vanished, and the lab does not recreate what was "
                "removed from outside it")
            return outcome, stopped
        if outcome != "failed" or len(restarts) >= settings.restarts:
            if outcome == "failed" and settings.restarts:
                say(f"not restarting: all {settings.restarts} restarts (RESTARTS) are spent")
            return outcome, stopped
        restart, why_not = explain.restart_verdict(settings.restart_policy,
                                                   failures(backend, settings, run_dir, stopped))
        if not restart:
            say(f"not restarting: {why_not}")
            return outcome, stopped
        left = [task for task, code in backend.exit_codes().items() if code is None]
        backend.stop(left)
        restarts.append(time.time())
        resume = "from the last backup" if settings.backup != "off" and settings.loop == "fit" else "from the start"
        say(f"restarting every task ({len(restarts)} of {settings.restarts}): training resumes {resume}")
        backend.restart()
        if chaos:
            chaos.after_restart(backend)


def failures(backend: Backend, settings: Settings, run_dir: Path, stopped: list[str]) -> list[explain.Evidence]:
    """The evidence of every task that failed by itself (not one the lab stopped), for the restart
    decision: its code, the engine's word on memory and its last `error` event (output.log is
    written at the end of the run)."""
    oom_killed = backend.oom_killed
    found = []
    for task, code in backend.exit_codes().items():
        if code in (None, 0) or task in stopped:
            continue
        last = (attempts(runfolder.events(run_dir, task)) or [[]])[-1]
        errors = by_event(last, "error")
        found.append(explain.Evidence(task=task, exit_code=code, error=errors[0]["message"] if errors else "",
                                      oom_killed=oom_killed.get(task), memory=settings.memory))
    return found


def follow(backend: Backend, settings: Settings, printer, deadline: float, chaos=None) -> tuple[str, list[str]]:
    """Prints the tasks' events as they come; returns (outcome, tasks the lab had to stop)."""
    servers = backend.cluster.servers
    evaluators = backend.cluster.evaluators
    failed_at = trained_at = None
    while True:
        printer.print_new()
        codes = backend.exit_codes()
        if chaos:
            chaos.tick(backend, codes)
        running = [task for task, code in codes.items() if code is None]
        vanished = [task for task, code in codes.items() if code == explain.VANISHED]
        if vanished and runfolder.ended_by_down(backend.run_dir):
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
        if running and set(running) <= set(servers) | set(evaluators):
            # Training is over. The evaluator stops by itself after the last checkpoint (it gets
            # EVALUATOR_END_SECONDS for it, unless a trainer failed); servers would serve forever.
            trained_at = trained_at or time.monotonic()
            failed = any(code not in (None, 0) for code in codes.values())
            if (set(running) & set(evaluators) and not failed
                    and time.monotonic() - trained_at < EVALUATOR_END_SECONDS):
                time.sleep(POLL_SECONDS)
                continue
            say(f"the chief is done; ending {', '.join(running)}")
            codes, stopped = end_servers(backend, running)
            printer.print_new()
            return ("ok" if all(code == 0 for code in codes.values()) else "failed"), stopped
        if not running:
            printer.print_new()
            return ("ok" if all(code == 0 for code in codes.values()) else "failed"), []
        failed = [task for task, code in codes.items() if code not in (None, 0)]
        if failed and failed_at is None:
            failed_at = time.monotonic()
            say(f"{failed[0]} exited with code {codes[failed[0]]}; the other tasks get "
                f"{FAILURE_GRACE_SECONDS} s to end by themselves")
        if failed_at is not None and time.monotonic() - failed_at > FAILURE_GRACE_SECONDS:
            say(f"stopping {', '.join(running)}")
            backend.stop(running)
            printer.print_new()
            return "failed", running
        if time.monotonic() > deadline:
            say(f"TIMEOUT={settings.timeout:g} s passed; stopping {', '.join(running)}")
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
