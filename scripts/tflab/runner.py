"""One run from start to end: check everything, write its folder, start its tasks, follow them,
stop what is left, summarise.

Data flows one way: Settings -> cluster spec -> TF_CONFIG per task -> tasks (containers or
processes) -> <task>.jsonl -> summary.json and the table. Nothing is started until every check
has passed, and nothing a run wrote is ever overwritten or deleted.

A backend (compose.ComposeStack, swarm.SwarmStack, local.LocalProcesses) offers: `tasks`,
`address` (job, index -> host:port for the cluster spec), `description`, `start(spec)`,
`restart()`, `exit_codes()` (task -> code or None while running), `terminate(tasks)` (SIGTERM),
`stop(tasks)` (SIGKILL), `save_output()` (into output.log) and `close()`; the container backends
also `container(task)`, `network()` and `proxied` (the tasks behind a delay proxy), for chaos.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import time
from datetime import datetime, timezone
from pathlib import Path

from tflab import cluster, compose, explain, images, local, report, summary, swarm
from tflab.errors import LabError
from tflab.linkproxy import Profile
from tflab.schema import attempts, by_event, read_events
from tflab.settings import Settings

FAILURE_GRACE_SECONDS = 10  # after one task fails, how long the others get to end by themselves
SERVER_END_SECONDS = 20  # how long parameter servers get to end cleanly after SIGTERM
EVALUATOR_END_SECONDS = 60  # after training, how long the evaluator gets to evaluate the last checkpoint
POLL_SECONDS = 0.5


def say(message: str) -> None:
    print(f"tflab: {message}", flush=True)


def new_run_id() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def runs_dir(settings: Settings) -> Path:
    """RUNS_DIR, relative to the folder the lab was started from (the checkout, under make)."""
    return Path(settings.runs_dir).absolute()


def planned_run_dir(settings: Settings) -> Path:
    run_dir = runs_dir(settings) / (settings.run or new_run_id())
    if run_dir.exists() or run_dir.is_symlink():
        raise LabError(f"RUN={run_dir.name} already exists ({run_dir}); a run's outputs are never "
                       "overwritten: choose another RUN, or leave it empty for a fresh id")
    return run_dir


def make_backend(settings: Settings, run_dir: Path, proxied: frozenset[str] = frozenset()):
    """Every check a backend needs, done before anything is written or started."""
    if settings.link and settings.backend != "compose":
        raise LabError(f"LINK={settings.link} needs BACKEND=compose: the delay proxies are Compose services")
    if settings.backend == "local":
        return local.LocalProcesses(settings, run_dir, local.find_python())
    compose.check_docker()
    compose.check_cpus("CPUS", settings.cpus)
    if settings.backend == "swarm":
        return swarm.make_stack(run_dir, settings, lambda: task_image(settings))
    cli = compose.find_compose(settings.compose)
    host_gpus = compose.check_gpus(settings)  # before the image: the GPU one is several GB
    image = task_image(settings)
    if settings.link:
        proxied = frozenset(cluster.task_names(settings))
    return compose.ComposeStack(cli, run_dir, settings, image, proxied, host_gpus)


def task_image(settings: Settings) -> str:
    """The image every task runs: the trainer's (CPU or GPU, for PLATFORM), plus a user script's
    requirements where it has them."""
    variant = images.trainer_variant(settings)
    image = images.ensure_image(settings.base_image, variant)
    return images.ensure_script_image(Path(settings.script), image, variant) if settings.script else image


def write_links(settings: Settings, run_dir: Path, backend) -> None:
    """LINK: every proxied task's profile, in place before anything starts."""
    if settings.link:
        for task in getattr(backend, "proxied", ()):
            set_link(run_dir, task, settings.link)


def set_link(run_dir: Path, task: str, link: str) -> None:
    links = run_dir / "links"
    links.mkdir(exist_ok=True)
    temporary = links / f".{task}.json"
    temporary.write_text(json.dumps(Profile.parse(link).to_dict()))  # the proxy polls for it
    temporary.replace(links / f"{task}.json")


def make_folder(path: Path, link_latest: bool) -> None:
    path.mkdir(parents=True)
    uid, gid = compose.container_user()
    if os.getuid() == 0:
        os.chown(path, uid, gid)  # the trainers run as a non-root user and write here
    if link_latest:
        temporary = path.parent / f".latest-{path.name}"
        temporary.symlink_to(path.name)
        temporary.replace(path.parent / "latest")


def run_config(settings: Settings, run: str, spec: dict) -> dict:
    """config.json, what the trainers read: the settings, the cluster spec, every TF_CONFIG."""
    tasks = cluster.task_names(settings)
    return {
        "run": run,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "settings": settings.replace(run=run).to_dict(),
        "cluster": spec,
        "tasks": tasks,
        "tf_config": {task: cluster.tf_config_for(spec, task) if spec else None for task in tasks},
    }


def write_run_folder(settings: Settings, run_dir: Path, spec: dict, link_latest: bool = True) -> None:
    make_folder(run_dir, link_latest)
    compose.write_json(run_dir / "config.json", run_config(settings, run_dir.name, spec))


def up(settings: Settings, link_latest: bool = True, chaos=None) -> int:
    """`make up` (and `make chaos`, with `chaos`): a whole run, restarts included. Returns the
    exit status: 0 only if every task succeeded in the end. An interrupt (Ctrl-C, or SIGTERM and
    SIGHUP, which cli.py turns into one) stops and removes every task, writes the summary with
    outcome "interrupted", and is raised again for the caller (compare and soak stop there)."""
    run_dir = planned_run_dir(settings)
    if chaos:
        chaos.check(settings)
    backend = make_backend(settings, run_dir, chaos.proxied() if chaos else frozenset())
    spec = cluster.cluster_spec(settings, backend.address)
    started = time.time()
    outcome, stopped, restarts, interrupt = "failed", [], [], None
    try:
        write_run_folder(settings, run_dir, spec, link_latest)
        write_links(settings, run_dir, backend)
        say(f"run {run_dir.name}: {describe(settings)} on {backend.description}")
        say(f"outputs in {display_path(run_dir)}/")
        if chaos:
            say(f"chaos: {chaos.describe()}")
        if settings.script:  # the run still starts: the warning may be wrong, the run will tell
            for warning in explain.script_warnings(Path(settings.script), settings.strategy):
                say(f"warning: {warning}")
        backend.start(spec)
        outcome, stopped = supervise(backend, settings, run_dir, chaos, restarts)
    except KeyboardInterrupt as error:
        interrupt = error
        outcome, stopped = "interrupted", [t for t, c in backend.exit_codes().items() if c is None]
        say(f"{describe_interrupt(error)}: stopping every task")
        backend.stop(stopped)
    except LabError as error:
        say(str(error))
    finally:
        codes = backend.exit_codes()
        oom_killed = dict(getattr(backend, "oom_killed", {}))  # read before close removes the containers
        if chaos:
            chaos.finish(backend)
        backend.save_output()
        backend.close()
    result = summary.summarise(settings, run_dir, codes, stopped, outcome, started, time.time(), oom_killed)
    result["restarts"] = restarts
    if chaos:
        result["chaos"] = chaos.result(run_dir, result)
    compose.write_json(run_dir / "summary.json", result)
    print(summary.table(result))
    if interrupt is not None:
        raise interrupt
    return 0 if result["ok"] else 1


def describe_interrupt(error: KeyboardInterrupt) -> str:
    number = getattr(error, "signal", None)
    return f"interrupted by {signal.Signals(number).name}" if number else "interrupted"


def supervise(backend, settings: Settings, run_dir: Path, chaos, restarts: list) -> tuple[str, list[str]]:
    """Follows the run; after a failure that RESTART_POLICY restarts, restarts every task, up to
    RESTARTS times. The whole cluster restarts, not the one task: a MultiWorkerMirroredStrategy
    worker cannot rejoin a running cluster (its peers abort as soon as it goes), and Docker's own
    restart policy is off after a `docker kill` or `docker stop` anyway."""
    printer = summary.ProgressPrinter(settings, run_dir)
    deadline = time.monotonic() + settings.timeout
    while True:
        outcome, stopped = follow(backend, settings, printer, deadline, chaos)
        vanished = [task for task, code in backend.exit_codes().items() if code == compose.VANISHED]
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
        share_backup(run_dir, settings)
        backend.restart()
        if chaos:
            chaos.after_restart(backend)


def failures(backend, settings: Settings, run_dir: Path, stopped: list[str]) -> list[explain.Evidence]:
    """The evidence of every task that failed by itself (not one the lab stopped), for the restart
    decision: its code, the engine's word on memory and its last `error` event (output.log is
    written at the end of the run)."""
    oom_killed = getattr(backend, "oom_killed", {})
    found = []
    for task, code in backend.exit_codes().items():
        if code in (None, 0) or task in stopped:
            continue
        last = (attempts(events_of(run_dir, task)) or [[]])[-1]
        errors = by_event(last, "error")
        found.append(explain.Evidence(task=task, exit_code=code, error=errors[0]["message"] if errors else "",
                                      oom_killed=oom_killed.get(task), memory=settings.memory))
    return found


def share_backup(run_dir: Path, settings: Settings) -> None:
    """Before a restart, gives every worker the chief's backup. Keras restores the model from
    backup/chief on every worker, but TensorFlow's preemption handler reads each worker's own
    backup/workertemp_<i>, which Keras empties after each save: measured here, one worker then
    restored its step counter and the other initialised it, their collectives no longer matched
    ("Collective instance ... expected type 1 ... but got type 0"), and every restart failed."""
    chief = run_dir / "backup" / "chief"
    if settings.strategy != "multiworker" or not chief.is_dir():
        return
    for index in range(0 if settings.chief else 1, settings.workers):  # with CHIEF=1, worker-0 has its own
        own = run_dir / "backup" / f"workertemp_{index}"
        shutil.rmtree(own, ignore_errors=True)
        shutil.copytree(chief, own)
        if os.getuid() == 0:
            uid, gid = compose.container_user()
            for path in [own, *own.iterdir()]:
                os.chown(path, uid, gid)


def follow(backend, settings: Settings, printer, deadline: float, chaos=None) -> tuple[str, list[str]]:
    """Prints the tasks' events as they come; returns (outcome, tasks the lab had to stop)."""
    servers = cluster.server_tasks(settings)
    evaluators = cluster.evaluator_tasks(settings)
    failed_at = trained_at = None
    while True:
        printer.print_new()
        codes = backend.exit_codes()
        if chaos:
            chaos.tick(backend, codes)
        running = [task for task, code in codes.items() if code is None]
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
        vanished = [task for task, code in codes.items() if code == compose.VANISHED]
        if vanished:
            say(f"{', '.join(vanished)} vanished: {'its' if len(vanished) == 1 else 'their'} container or "
                "service was removed from outside the lab; ending the run")
            backend.stop(running)
            printer.print_new()
            return "failed", running
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


def end_servers(backend, servers: list[str]) -> tuple[dict, list[str]]:
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


def describe(settings: Settings) -> str:
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
    if cluster.evaluator_tasks(settings):
        shape += ", an evaluator"
    if settings.gpus:
        shape += f", GPUS={settings.gpus}"
    if settings.script:
        command = " ".join([display_path(Path(settings.script)), settings.args]).rstrip()
        return f"{settings.strategy}, {shape}, {command}"
    return (f"{settings.strategy}, {shape}, {settings.model}, {settings.epochs} epochs of "
            f"{settings.examples} examples, global batch {settings.global_batch}, seed {settings.seed}")


def display_path(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def check_engine(settings: Settings) -> None:
    """What make_backend checks of the engine, for the commands that make several runs in one
    folder (compare, soak): once, before that folder is written."""
    if settings.backend == "local":
        local.find_python()
        return
    compose.check_docker()
    compose.check_cpus("CPUS", settings.cpus)
    if settings.backend == "swarm":
        swarm.check_swarm()
    else:
        compose.find_compose(settings.compose)
        compose.check_gpus(settings)
    task_image(settings)


def compare(settings: Settings) -> int:
    """`make compare`: one run per COMPARE entry, in one folder, then the report of them all."""
    entries = settings.compare_runs()
    folder = planned_run_dir(settings)
    check_engine(settings)
    make_folder(folder, link_latest=True)
    labels = [label for label, _ in entries]
    compose.write_json(folder / "compare.json", {"settings": settings.to_dict(), "runs": labels})
    codes = []
    for label, entry in entries:
        say(f"--- compare {folder.name}: {label} ({len(codes) + 1} of {len(entries)})")
        codes.append(up(entry.replace(runs_dir=str(folder)), link_latest=False))
    found, written = report.write(folder)
    print(report.table(found))
    say("wrote " + ", ".join(display_path(path) for path in written))
    if not any(path.suffix == ".png" for path in written):
        say(report.PNG_SKIPPED)
    return 0 if all(code == 0 for code in codes) else 1


def existing_run_dir(settings: Settings) -> Path:
    """The run a command refers to: RUN, else the newest (runs/latest)."""
    run_dir = runs_dir(settings) / (settings.run or "latest")
    if not (run_dir / "config.json").exists() and not (run_dir / "compare.json").exists():
        if settings.run:
            raise LabError(f"RUN={settings.run} does not exist in {runs_dir(settings)}")
        raise LabError(f"no runs yet in {runs_dir(settings)}; start one with `make up`")
    return run_dir.resolve()


def load_config(run_dir: Path) -> dict:
    return json.loads((run_dir / "config.json").read_text())


def events_of(run_dir: Path, task: str) -> list[dict]:
    return read_events(run_dir / f"{task}.jsonl")
