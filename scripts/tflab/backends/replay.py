"""`tflab up TFJOB=...`: the replay of a TFJob (tfjob.py's Plan; `TRAINJOB=`, a Trainer v2 TrainJob that
trainjob.py translates into the same Plan) as a run of the lab's one
pipeline (runner.run): its replicas as one Compose project (ReplayStack), watched from outside
(Watcher: each replica's start and end into <task>.jsonl), followed, restarted and summarised as
ReplayRun says where a TFJob differs from the lab's own run. tfjob.py reads and plans; this module
is what touches the engine and the run folder.
"""

from __future__ import annotations

import codecs
import json
import os
import re
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from tflab import console, home
from tflab.backends import compose
from tflab.core import beneath, foreign, runfolder
from tflab.core.commands import lab_command
from tflab.core.errors import LabError
from tflab.core.explain import VANISHED
from tflab.core.foreign import ForeignFile
from tflab.core.grammars import DATA_DIR, claim_folders
from tflab.core.runfolder import Summary
from tflab.core.schema import EventLog, SchemaError, problems
from tflab.core.settings import Settings
from tflab.core.terminal import TerminalLines
from tflab.engine import docker, labels
from tflab.k8s import manifest, tfoperator
from tflab.k8s.manifest import ManifestError, shown
from tflab.k8s.tfjob import HOOKS, Plan, describe, load, refuse_decided, replay_settings
from tflab.supervisor import runner, summary
from tflab.trainer import replayhooks

COMPOSE_FILE = "compose.tfjob.json"


def check_images(plan: Plan) -> None:
    """Every image on the engine already: the lab pulls and builds nothing for a TFJob. And what
    the manifest asks of the engine that only the engine can answer: the image's own user where
    runAsNonRoot leaves it to the image (the kubelet's check), CPU limits within the engine's CPUs."""
    for image in sorted({task.image for task in plan.tasks}):
        found = docker.image_user(image)
        if found.returncode != 0:
            raise LabError(f"image {image} is not on this Docker engine; build it (docker build -t {image} ...; "
                           "an example's Dockerfile builds on the lab's image without a registry: with `ARG BASE` "
                           f"and `FROM $BASE`, docker build --build-arg BASE=$({tag_command()}) "
                           f"-t {image} FOLDER) or pull it (docker pull {image}) first")
        if any(task.non_root for task in plan.tasks if task.image == image):
            try:
                check_non_root(image, found.stdout.strip())
            except ManifestError as error:
                raise ManifestError(f"{plan.setting}={plan.path}: {error}") from None
    limited = [task for task in plan.tasks if "cpus" in task.service]
    if limited:
        engine_cpus = docker_cpus()
        for task in limited:
            if engine_cpus and task.service["cpus"] > engine_cpus:
                raise ManifestError(f"{plan.setting}={plan.path}: {task.name}'s resources.limits.cpu is "
                                    f"{task.service['cpus']:g}, more than this Docker engine's {engine_cpus} CPUs; "
                                    f"expected at most {engine_cpus}")


def tag_command() -> str:
    """The command that prints the lab's image tag bare (docs/images.md), as the user can type it:
    make has no --tag, so under make it is the checkout's python3 -m tflab."""
    command = lab_command("images --tag")
    return "PYTHONPATH=scripts python3 -m tflab images --tag" if command.startswith("make ") else command


def image_configs(plan: Plan) -> dict[str, dict]:
    """image -> its Config (Env, Entrypoint, Cmd), read once before the run: the hooks keep the
    image's PYTHONPATH, and the summary names the command where they could not reach its Python."""
    found = {}
    for image in sorted({task.image for task in plan.tasks}):
        result = docker.image_inspect(image, "{{json .Config}}")
        try:
            config = json.loads(result.stdout) if result.returncode == 0 else {}
        except ValueError:
            config = {}
        found[image] = config if isinstance(config, dict) else {}
    return found


def image_env(config: dict) -> dict[str, str]:
    pairs = [entry.split("=", 1) for entry in config.get("Env") or [] if isinstance(entry, str) and "=" in entry]
    return dict(pairs)


def check_non_root(image: str, user_json: str) -> None:
    """The kubelet's verifyRunAsNonRoot: the image's user must be a number other than 0 (a name
    cannot be checked, so it is refused), where runAsNonRoot is true and runAsUser unset."""
    try:
        user = json.loads(user_json or '""')
    except ValueError:
        user = ""
    uid = str(user).split(":", 1)[0] if isinstance(user, str) else ""
    if not uid.isdigit() or int(uid) == 0:
        what = "root" if uid in ("", "0", "root") else f"the non-numeric user {shown(uid)}"
        raise ManifestError(f"image {image} runs as {what}, but its pod asks runAsNonRoot: true (the kubelet "
                            "refuses it); give securityContext.runAsUser a non-zero uid, or build the image with a "
                            "numeric non-root USER")


def docker_cpus() -> int:
    """The engine's CPUs (docker info's NCPU), 0 where it does not say."""
    found = docker.info_format("{{.NCPU}}")
    text = found.stdout.strip() if found.returncode == 0 else ""
    return int(text) if text.isdigit() else 0


def volume_path(run_dir: Path, relative: str) -> Path:
    """run_dir/volumes/<relative>: the one way write_volumes and render build a host path from
    the manifest's names (manifest.path_under: plain parts, no link, resolving under volumes/)."""
    root = run_dir / "volumes"
    try:
        root.mkdir(exist_ok=True)
    except OSError as error:
        raise ManifestError(f"cannot make {root}: {error.strerror or error}") from None
    if root.is_symlink() or os.path.realpath(root) != os.path.join(os.path.realpath(run_dir), "volumes"):
        raise ManifestError(f"{root} is a link; the run's volumes must be its own folder")
    return manifest.path_under(root, relative)


def host_folders(plan: Plan, settings: Settings | None) -> dict[str, tuple[str, bool]]:
    """The replay's volumes that are the host's, not the run's: claim -> (its folder, read-only),
    as CLAIMS gives them (never the manifest: it names claims, and a hostPath is refused). One
    line where CLAIMS names a claim no replica mounts."""
    given = claim_folders(settings.claims) if settings is not None else {}
    claims = {volume["claim"] for volume in plan.volumes.values() if "claim" in volume}
    for claim in given:
        if claim not in claims:
            raise LabError(f"CLAIMS names the claim {claim}, which no replica of TFJOB={plan.path} mounts; expected "
                           f"{', '.join(sorted(claims)) or 'no CLAIMS: the TFJob mounts no claim'}")
    return given


def write_volumes(plan: Plan, run_dir: Path, settings: Settings | None = None) -> None:
    """ConfigMaps as read-only folders of files (volumes/configmaps/<name>/); each claim a folder
    (volumes/<claim>/) that every task mounting it shares, as a ReadWriteMany claim would be, where
    CLAIMS gives it none of the host's (host_folders).
    Every path comes from volume_path; a file is created, never followed or overwritten."""
    given = host_folders(plan, settings)
    for folder_name, volume in plan.volumes.items():
        if volume.get("claim") in given:
            continue
        folder = volume_path(run_dir, folder_name)
        try:
            folder.mkdir(exist_ok=True)
        except OSError as error:
            raise ManifestError(f"cannot make {folder}: {error.strerror or error}") from None
        if folder.is_symlink() or not folder.is_dir():
            raise ManifestError(f"{folder} is not a folder of the run's")
        if "claim" in volume:
            folder.chmod(0o777)  # whatever user the image runs as may write, as on a fresh volume
            continue
        data = plan.config_maps[volume["configMap"]]
        for item in volume["items"] or [{"key": key, "path": key} for key in data]:
            path = volume_path(run_dir, f"{folder_name}/{item['path']}")
            try:
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
                with os.fdopen(descriptor, "w") as file:
                    file.write(data[item["key"]])
            except OSError as error:
                raise ManifestError(f"cannot write {path}: {error.strerror or error}") from None


# The lab's hooks in a replica's own Python (trainer/replayhooks.py says why a sitecustomize): this
# file, the lab's package and the hooks' config read-only, and a log folder of the replica's own.
SITE_FILE = """\
# Written by the lab for a TFJob replay (tflab up TFJOB=), first on PYTHONPATH: loads the lab's hooks
# (tflab/trainer/replayhooks.py), then the image's own sitecustomize. Read-only; the image is unchanged.
import os, sys
_here = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.dirname(_here))  # the lab's package, last: the image's own modules come first
try:
    from tflab.trainer import replayhooks
except Exception as error:
    print("tflab: the lab's hooks could not load, and the program runs on without them:", repr(error),
          file=sys.stderr)
else:
    replayhooks.start(_here)
"""


def write_hooks(plan: Plan, run_dir: Path, settings: Settings) -> None:
    """volumes/tflab-hooks/: site/sitecustomize.py, config.json (the settings the hooks read:
    AUDIT's), and one writable folder a replica for its events and its mark."""
    try:
        root = volume_path(run_dir, HOOKS)
        root.mkdir()
        (root / "site").mkdir()
        (root / "site" / "sitecustomize.py").write_text(SITE_FILE)
        runfolder.write_json(root / "config.json", {"settings": {"audit": settings.audit}, "cluster": plan.spec})
        for task in plan.tasks:
            (root / task.name).mkdir()
            (root / task.name).chmod(0o777)  # whatever user the image runs as writes its own events
    except OSError as error:
        raise ManifestError(f"cannot write the lab's hooks for the replay: {error.strerror or error}") from None


def hooks_service(run_dir: Path, task: str, python_path: str) -> tuple[list[str], dict[str, str]]:
    """A replica's mounts and environment for the hooks: PYTHONPATH our site folder first, then the
    manifest's or the image's own (python_path), which Compose's environment would otherwise hide."""
    root = volume_path(run_dir, HOOKS)
    at = replayhooks.ROOT
    mounts = [f"{root / 'site'}:{at}/site:ro", f"{home.PACKAGE}:{at}/tflab:ro",
              f"{root / 'config.json'}:{at}/{replayhooks.CONFIG}:ro", f"{root / task}:{at}/{replayhooks.LOG}"]
    path = ":".join(filter(None, [f"{replayhooks.ROOT}/site", python_path]))
    return mounts, {"PYTHONPATH": path, replayhooks.TASK_ENV: task}


def render(plan: Plan, run_dir: Path, settings: Settings | None = None, images: dict | None = None) -> dict:
    """The replay's Compose file: each replica's service, its volumes bound (binds), and the run's
    network: internal (no route out) unless NETWORK=bridge lets the replicas out, as a cluster's
    pods reach the network."""
    services = {}
    marks = compose.literal(labels.run_labels(run_dir))
    for task in plan.tasks:
        service = dict(task.service)
        service["environment"] = dict(service["environment"])
        service["volumes"] = binds(plan, run_dir, service.pop("x-mounts"), settings)
        if settings is not None and settings.data:
            service["environment"]["TFLAB_DATA"] = DATA_DIR
        if images is not None:  # the hooks, where write_hooks wrote their folder
            environment = service["environment"]
            own = environment.get("PYTHONPATH", image_env(images.get(task.image, {})).get("PYTHONPATH", ""))
            mounts, env = hooks_service(run_dir, task.name, own)
            service["volumes"] += mounts
            environment.update(env)
        if not service["volumes"]:
            del service["volumes"]
        service["labels"] = marks
        services[task.name] = service
    internal = settings is None or settings.network == "internal"
    network = {"internal": True, "driver_opts": {"com.docker.network.bridge.inhibit_ipv4": "true"}} if internal else {}
    return compose.literal({"services": services, "networks": {"cluster": {**network, "labels": marks}}})


def binds(plan: Plan, run_dir: Path, mounts: list, settings: Settings | None) -> list[str]:
    """A replica's bind mounts: the manifest's volumes from the run folder (volume_path), a claim
    CLAIMS gives a host folder from there (read-only where either says so), and DATA read-only at
    /lab/data. The one place a replay's host paths meet its mounts."""
    given = host_folders(plan, settings)
    found = []
    for folder, target, read_only in mounts:
        if folder in given:
            source, read_only = given[folder][0], read_only or given[folder][1]
        else:
            source = str(volume_path(run_dir, folder))
        found.append(f"{source}:{target}{':ro' if read_only else ''}")
    if settings is not None and settings.data:
        found.append(f"{settings.data}:{DATA_DIR}:ro")
    return found


class ReplayCluster:
    """A Plan as the runner reads a run's cluster (cluster.Cluster's names): the replay's tasks,
    its chief as the summary reads it, and the spec. No servers or evaluators: the runner's own
    rule for them (the lab's training is over once only they run) is not the operator's, and
    ReplayRun.job_condition decides the job's end instead."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.tasks = [task.name for task in plan.tasks]
        self.chiefs = plan.chief
        self.chief = self.chiefs[0] if self.chiefs else self.tasks[0]
        self.servers: list[str] = []
        self.evaluators: list[str] = []
        self.spec = plan.spec

    def role(self, task: str) -> str:
        return "script"  # every replica runs its own command, watched from outside


class ReplayStack(compose.ComposeStack):
    """compose.ComposeStack with the manifest's services instead of the lab's template."""

    def __init__(self, cli: compose.ComposeCli, run_dir: Path, plan: Plan, settings: Settings | None = None,
                 images: dict[str, dict] | None = None):
        self.plan, self.replay_settings = plan, settings
        self.images = images  # image -> its Config (image_configs): with it, the lab's hooks go in
        self.init_project(cli, run_dir, ReplayCluster(plan), frozenset(), [run_dir / COMPOSE_FILE])
        self.output = FoldedOutput(run_dir, runfolder.OUTPUT)  # folded, as a SCRIPT's launcher folds

    def start(self, spec: dict = None) -> None:
        runfolder.write_json(self.run_dir / COMPOSE_FILE, render(self.plan, self.run_dir, self.replay_settings,
                                                                 self.images))
        self.watch()
        self._start_attached(self.tasks)

    def state(self) -> dict[str, dict]:
        """task -> the engine's State of its container (Status, ExitCode, StartedAt, FinishedAt, Pid)."""
        ids = docker.project_containers(self.project)
        found = docker.inspect(ids, labels.label_template(labels.SERVICE_LABEL) + "\t{{.Id}}\t{{json .State}}")
        states = {}
        for line in found.splitlines():
            service, container, state = line.split("\t", 2)
            states[service] = {**json.loads(state), "Id": container}
        return states


class FoldedOutput(compose.TaskOutput):
    """output.log of a replay, as a SCRIPT run's: a replica's image runs no launcher of the lab's,
    so its streams come raw (a Keras progress bar once came through as one line of 19,973
    characters); here each stream is folded as the launcher folds a script's (TerminalLines: each
    line the task printed once, a redrawn bar as it stands every few seconds and its last drawing),
    and each line goes into output.log (`<task> | <time> line`) and `<task>.out`, which the run
    prints as it comes (summary.ScriptOutputPrinter)."""

    def __init__(self, run_dir: Path, name: str):
        super().__init__(run_dir, name)

    def _launch(self, task: str, stamp: bool, container: str, attach: bool, since: float | None = None) -> None:
        try:
            process = docker.open_output(container, attach, since, apart=True)
        except OSError as error:
            raise LabError(f"cannot run docker for {task}'s output: {error}") from None
        process.container = container
        shown = self._task_output(task)
        readers = [threading.Thread(target=self._fold, args=(task, stream, not stamp, shown), daemon=True)
                   for stream in (process.stdout, process.stderr)]
        for reader in readers:
            reader.start()
        closer = threading.Thread(target=self._close_after, args=(readers, shown), daemon=True)
        closer.start()
        self.followers.append((task, process, closer))

    def _task_output(self, task: str) -> int | None:
        """`<task>.out`, appended to (a restart's lines after the last attempt's), never through a link."""
        try:
            with beneath.Beneath(self.run_dir) as folder:
                return folder.open_fd(runfolder.in_tasks(self.run_dir, runfolder.output_name(task)), beneath.APPEND)
        except OSError:
            return None  # output.log still has every line

    @staticmethod
    def _close_after(readers: list[threading.Thread], shown: int | None) -> None:
        for reader in readers:
            reader.join()
        if shown is not None:
            os.close(shown)

    def _fold(self, task: str, stream, stamped: bool, shown: int | None) -> None:
        prefix = f"{task} | ".encode()

        def say(line: str) -> None:
            data = line.encode(errors="replace")
            now = datetime.now(timezone.utc).isoformat(timespec="microseconds").encode()
            with self.lock:
                self.last[task] = data
                if self.file is not None:
                    try:
                        self.file.write(prefix + now + b" " + data + b"\n")
                        self.file.flush()
                    except OSError as error:  # named as output.log, which the one line then says
                        self.error = self.error or OSError(error.errno, error.strerror, str(self.path))
                if shown is not None:
                    try:
                        os.write(shown, data + b"\n")
                    except OSError:
                        pass  # a full disk: output.log's line is the one the summary reads

        lines = TerminalLines(say)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        if stamped:  # `docker logs --timestamps` after a restart: whole lines, each after its time
            for raw in stream:
                stamp, _, text = raw.partition(b" ")
                lines.feed(decoder.decode(text if ENGINE_STAMP.fullmatch(stamp) else raw))
        else:  # `docker start --attach`: the container's own bytes, as they come
            while chunk := os.read(stream.fileno(), 65536):
                lines.feed(decoder.decode(chunk))
        lines.feed(decoder.decode(b"", final=True))
        lines.close()


ENGINE_STAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")


class Watcher:
    """Each task's start and end, from outside, into <task>.jsonl as a script's (role "script")."""

    def __init__(self, plan: Plan, run_dir: Path):
        self.plan, self.run_dir = plan, run_dir
        space = run_dir / runfolder.TASKS  # the lab's watcher writes each replica's log; no replica mounts it
        self.logs = {task.name: EventLog(runfolder.log_path(space, task.name), task.name) for task in plan.tasks}
        self.seen: dict[str, tuple[str, str]] = {}  # task -> (StartedAt, FinishedAt) last logged
        self.offsets: dict[str, int] = {}  # task -> bytes of its hooks' log copied
        self.skipped: dict[str, int] = {}  # task -> lines of its hooks' log that were no hooks' event
        self.peak: dict[str, int] = {}

    def tick(self, states: dict[str, dict]) -> None:
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


# What the hooks log (observe, kerasversion, audit); the watcher alone logs a replica's start and end.
HOOKS_EVENTS = frozenset({"epoch", "fit", "restored", "checkpoint", "imported", "audit_batch", "audit_pass",
                          "audit_write", "audit_weights"})


def hooks_folder(run_dir: Path, task: str) -> Path:
    return volume_path(run_dir, f"{HOOKS}/{task}")


def hooks_file(task: str, name: str) -> str:
    """A file of a replica's own hooks folder, relative to the run folder: read from its handle
    (beneath), no link followed, as every file a task may write."""
    return f"volumes/{HOOKS}/{task}/{name}"


def hooks_mark(run_dir: Path, task: str) -> str:
    """The replica's mark (replayhooks.mark): hooked, failed: why, lab; '' where none was left."""
    try:
        text = beneath.read(run_dir, hooks_file(task, replayhooks.MARK), 4096).decode(errors="replace")
    except (OSError, ForeignFile):
        return ""
    return text.strip().splitlines()[0] if text.strip() else ""


def unaudited(plan: Plan, run_dir: Path, images: dict[str, dict] | None) -> list[str]:
    """"not audited: <tasks> (<image>): why" for each replica the hooks did not reach, grouped."""
    groups: dict[str, list[str]] = {}
    for task in plan.tasks:
        mark = hooks_mark(run_dir, task.name) if images is not None else ""
        if mark.startswith("hooked"):
            continue
        if images is None:
            why = "the lab's hooks were not put in"
        elif mark.startswith("lab"):
            why = "it runs the lab's own program, which logs itself (its events are where its TFLAB_CONFIG says)"
        elif mark.startswith("failed"):
            why = f"the lab's hooks failed in its Python ({foreign.shown(mark.partition(': ')[2], 300)})"
        else:
            command = list(task.service.get("entrypoint") or (images.get(task.image) or {}).get("Entrypoint") or [])
            command += list(task.service.get("command") if "command" in task.service else
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


def up(settings: Settings, given: dict[str, str] | None = None, observer=None) -> int:
    """`tflab up TFJOB=...`: checks everything, then runs the job (runner.run, as ReplayRun says)
    until its chief (or every worker) is done, restarting the whole job as its restart policy says;
    0 only if it succeeded. `given`: the settings the user gave (given_values), refused where the
    TFJob decides them."""
    if settings.trainjob:
        from tflab.k8s import trainjob  # a TrainJob is translated into the same plan

        plan = trainjob.load(settings)
    else:
        plan = load(settings)
    refuse_decided(plan, given or {})
    watching = None
    if observer is not None:  # make chaos: its fault on the replicas, checked before anything else
        check_chaos(settings, plan)
        watching = observer(ReplayCluster(plan))
        watching.check(settings)
    run_dir = runfolder.planned(settings)
    docker.check()
    cli = compose.find_compose(settings.compose)
    check_images(plan)
    check_ways_in(plan, settings)
    console.say("not applied: " + ("; ".join(plan.not_applied) if plan.not_applied else "nothing"))
    for line in ways_in(plan, settings):
        console.say(line)
    images = image_configs(plan)
    stack = ReplayStack(cli, run_dir, plan, settings, images)
    if watching is None:
        return runner.run(ReplayRun(plan, settings, stack, run_dir))
    return runner.run(ReplayRun(plan, settings, stack, run_dir), observer=watching)


def check_chaos(settings: Settings, plan: Plan) -> None:
    """What make chaos cannot do to a replayed job, in one line before anything starts: a replica
    has no delay proxy in front of it, and no GCE metadata stand-in beside it."""
    from tflab.faults import REPLAY_SCENARIOS

    if settings.scenario not in REPLAY_SCENARIOS:
        raise LabError(f"SCENARIO={settings.scenario} is not allowed with {plan.setting}: a replayed job's replicas "
                       f"have no delay proxy in front of them; expected one of {', '.join(REPLAY_SCENARIOS)}")
    if settings.scenario == "preempt" and settings.notice == "gce":
        raise LabError(f"NOTICE=gce is not allowed with {plan.setting}: a replay has no GCE metadata stand-in beside "
                       "its replicas; expected NOTICE=sigterm (the kubelet's notice) or none")


def check_ways_in(plan: Plan, settings: Settings) -> None:
    """DATA's mount and CLAIMS's claims against the manifest's, before anything starts: one line each."""
    host_folders(plan, settings)
    if settings.data:
        for task in plan.tasks:
            for _, target, _ in task.service["x-mounts"]:
                if target == DATA_DIR or target.startswith(DATA_DIR + "/") or DATA_DIR.startswith(target + "/"):
                    raise LabError(f"DATA={settings.data} is mounted at {DATA_DIR}, where {task.name} already mounts "
                                   f"a volume of TFJOB={plan.path} ({target}); leave DATA out, or mount that volume "
                                   "elsewhere")
            for entry in task.service.get("tmpfs", []):
                target = entry.split(":", 1)[0]
                if target == DATA_DIR or DATA_DIR.startswith(target + "/") or target.startswith(DATA_DIR + "/"):
                    raise LabError(f"DATA={settings.data} is mounted at {DATA_DIR}, where {task.name} mounts an "
                                   f"emptyDir ({target}); leave DATA out, or mount the emptyDir elsewhere")


def ways_in(plan: Plan, settings: Settings) -> list[str]:
    """What the replay's replicas reach beyond each other, said before they start: the network,
    DATA and the claims' folders."""
    lines = ["network: the replicas may reach the internet (NETWORK=bridge), as a cluster's pods may"
             if settings.network == "bridge" else
             "network: the replicas reach each other only (NETWORK=internal); NETWORK=bridge lets them out, as a "
             "cluster's pods are"]
    if settings.data:
        lines.append(f"data: {console.display_path(Path(settings.data))} read-only at {DATA_DIR} in every replica "
                     "($TFLAB_DATA)")
    for claim, (folder, read_only) in host_folders(plan, settings).items():
        lines.append(f"claim {claim}: {console.display_path(Path(folder))}, "
                     f"{'read-only' if read_only else 'writable where the manifest mounts it so'} (CLAIMS)")
    return lines


class ReplayRun(runner.LabRun):
    """A TFJob's replicas, as runner.run runs them, ended as the training operator would end the
    job (tfoperator: its code's rules): a replica's failure restarts or fails the job by its
    restartPolicy and backoffLimit, success is the chief's (or worker-0's, or every worker's), and
    the deadline is activeDeadlineSeconds. Where the operator would restart one replica in place,
    the lab restarts every replica (a MultiWorkerMirroredStrategy worker cannot rejoin). What its
    cleanPodPolicy would leave running is said; the lab still removes every replica at the end."""

    tasks_word = "replicas"
    done_line = "the job is done; ending {running}"

    def __init__(self, plan: Plan, settings: Settings, stack: ReplayStack, run_dir: Path):
        super().__init__(settings, stack, run_dir)
        self.plan = plan
        self.timeout = plan.timeout
        self.watcher: Watcher | None = None
        self.reason: str | None = None  # the operator's reason, and which limit, where the job failed by one
        self.restarts_counted = 0  # restartCount summed as PastBackoffLimit sums it, over the attempts so far
        self.failed_for_good = False  # job_condition said the operator marks the job Failed
        self.succeeded_at: float | None = None
        self.lingering: list[str] = []  # left running after success (cleanPodPolicy None), ending by themselves
        self.ended_when_done: list[str] = []  # still running once the job succeeded: the lab ended them

    def claimed(self) -> None:
        plan, run_dir = self.plan, self.run_dir
        settings = replay_settings(plan, self.settings, run_dir.name)
        runfolder.write_json(run_dir / runfolder.CONFIG, {
            "run": run_dir.name, "tfjob": str(plan.path), "settings": settings,
            "cluster": plan.spec, "tasks": [t.name for t in plan.tasks],
            "tf_config": {t.name: json.loads(t.tf_config or t.service["environment"]["TF_CONFIG"])
                          if t.tf_config or "TF_CONFIG" in t.service["environment"] else None for t in plan.tasks},
            "hosts": {t.name: t.host for t in plan.tasks}})
        write_volumes(plan, run_dir, self.settings)
        write_hooks(plan, run_dir, self.settings)
        self.watcher = Watcher(plan, run_dir)

    def prepare(self) -> None:
        pass  # claimed() wrote it all

    def announce(self) -> list[str]:
        plan, folder = self.plan, console.display_path(self.run_dir)
        if plan.active_deadline:
            deadline = f"activeDeadlineSeconds {plan.active_deadline} s"
        else:
            deadline = f"no activeDeadlineSeconds, so TIMEOUT ({plan.timeout:g} s) bounds the run"
        if plan.kind == "TrainJob":  # JobSet's rules, not the training operator's (jobset_condition)
            return [f"run {self.run_dir.name}: {describe(plan)} on {self.backend.description}",
                    f"outputs in {folder}/; failurePolicy.maxRestarts {plan.backoff_limit or 0}: a node's failure "
                    f"restarts the whole job that many times, then JobSet fails it; {deadline}",
                    "the job succeeds when every node does (JobSet's default successPolicy); the lab removes every "
                    "node at the end"]
        if plan.backoff_limit is None:
            limit = "no backoffLimit: restarts without limit, as the operator's"
        else:
            limit = (f"backoffLimit {plan.backoff_limit}: the operator's count is each OnFailure or Always "
                     "replica's own restarts")
        lines = [f"run {self.run_dir.name}: {describe(plan)} on {self.backend.description}",
                 f"outputs in {folder}/; {limit}; {deadline}",
                 f"the job succeeds when {self.success_words()}; {self.clean_words()}"]
        recreated = sorted(tfoperator.TYPE_NAMES[job] for job, policy in plan.policies.items() if policy == "ExitCode")
        if recreated and plan.backoff_limit:
            lines.append(f"restartPolicy ExitCode ({', '.join(recreated)}): a retried replica is recreated, not "
                         f"restarted, so backoffLimit {plan.backoff_limit} never counts it (PastBackoffLimit, "
                         "trainer#2045); only the deadline bounds its retries")
        always = sorted(tfoperator.TYPE_NAMES[job] for job, policy in plan.policies.items() if policy == "Always")
        if always:
            lines.append(f"restartPolicy Always ({', '.join(always)}): on a cluster the kubelet restarts a replica "
                         "that exits 0 too; the lab takes an exit 0 as done")
        return lines

    def success_words(self) -> str:
        chiefs = [t.name for t in self.plan.tasks if t.job in ("chief", "master")]
        if chiefs:
            return f"{chiefs[0]} does"
        if self.plan.success_policy == tfoperator.ALL_WORKERS:
            return "every worker does (successPolicy AllWorkers)"
        return "worker-0 does (no Chief, and no successPolicy AllWorkers)"

    def clean_words(self) -> str:
        policy = self.plan.clean_pod_policy
        if policy == "None":
            default = " (the operator's default)" if policy == tfoperator.DEFAULT_CLEAN_POD_POLICY else ""
            return (f"cleanPodPolicy None{default}: once the job ends the operator leaves whatever still runs "
                    "running; the lab ends and removes every replica")
        what = "the running replicas" if policy == "Running" else "every replica"
        return f"cleanPodPolicy {policy}: once the job ends the operator deletes {what}; the lab removes every replica"

    def left_words(self, running: list[str]) -> str:
        """What the operator's cleanPodPolicy does with `running` once the job is finished."""
        left = tfoperator.left_running(self.plan.clean_pod_policy, running)
        if left:
            return f"cleanPodPolicy None: the operator would leave {', '.join(left)} running"
        return f"cleanPodPolicy {self.plan.clean_pod_policy}: the operator deletes {', '.join(running)}"

    def warnings(self) -> list[str]:
        return []

    def progress(self):
        """The watcher's start and end lines (print_new), then each replica's folded output as it
        comes, as a SCRIPT run prints its tasks' (FoldedOutput writes <task>.out)."""
        return summary.Printers(self, summary.ScriptOutputPrinter(self.backend.cluster, self.run_dir))

    def print_new(self) -> None:
        self.watcher.tick(self.backend.state())

    def deadline(self, started: float) -> float:
        """activeDeadlineSeconds counts from the job's start (PastActiveDeadline: jobStatus.StartTime)."""
        return time.monotonic() + self.timeout - (time.time() - started)

    def deadline_line(self, running: list[str]) -> str:
        if not self.plan.active_deadline:
            return (f"TIMEOUT ({self.timeout:g} s) passed; the TFJob sets no activeDeadlineSeconds, so on a cluster "
                    f"it would run on; stopping {', '.join(running)}")
        self.reason = f"{tfoperator.FAILED}: activeDeadlineSeconds"
        return (f"activeDeadlineSeconds ({self.plan.active_deadline} s) passed: the operator marks the job Failed "
                f"({tfoperator.FAILED}: {tfoperator.deadline_message(self.plan.name)}); {self.left_words(running)}; "
                f"stopping {', '.join(running)}")

    def own_failures(self, codes: dict, stopped: list[str] = ()) -> dict[str, tuple[int, str, str]]:
        """task -> (exit code, its restartPolicy, what the operator makes of it: tfoperator.after_failure),
        for every replica that failed by itself (not one the lab stopped, nor one removed from outside)."""
        job_of = {task.name: task.job for task in self.plan.tasks}
        found = {}
        for task, code in codes.items():
            if code in (None, 0, VANISHED) or task in stopped:
                continue
            policy = self.plan.policies[job_of[task]]
            found[task] = (code, policy, tfoperator.after_failure(policy, code))
        return found

    def job_condition(self, codes: dict) -> str | None:
        """The operator's verdict on the exit codes so far, failure first (ReconcileJobs tests the
        backoffLimit before it reconciles the pods, UpdateJobStatus marks success): FAILED where a
        failure is not retried or the restarts reach backoffLimit; else WAITING / SUCCEEDED once the
        job succeeded; None while it runs or restarts."""
        plan = self.plan
        running = [task for task, code in codes.items() if code is None]
        if self.succeeded_at is not None:
            waiting = [task for task in self.lingering if codes.get(task) is None]
            if waiting and time.monotonic() - self.succeeded_at < runner.EVALUATOR_END_SECONDS:
                return runner.WAITING
            self.ended_when_done = running
            return runner.SUCCEEDED
        failures = self.own_failures(codes)
        if plan.kind == "TrainJob":
            return self.jobset_condition(codes, failures, running)
        in_place = self.restarts_counted + sum(1 for _, _, fate in failures.values() if fate == tfoperator.IN_PLACE)
        failed_pods = [task for task, (_, _, fate) in failures.items() if fate != tfoperator.IN_PLACE]
        if (tfoperator.exceeds_backoff_limit(plan.backoff_limit, len(failed_pods))
                or tfoperator.past_backoff_limit(plan.backoff_limit, in_place)):
            why = (f"{', '.join(failed_pods)} failed under backoffLimit 0" if failed_pods and plan.backoff_limit == 0
                   else f"the restarts the operator counts ({in_place}) reach backoffLimit {plan.backoff_limit}")
            return self.fail(why, tfoperator.backoff_message(plan.name), "backoffLimit", running)
        permanent = {task: found for task, found in failures.items() if found[2] == tfoperator.FAILS_THE_JOB}
        if permanent:
            task, (code, policy, _) = next(iter(permanent.items()))
            if policy == "ExitCode":  # ReconcilePods' own message, set before UpdateJobStatus runs
                why = f"{task} exited with code {code}, permanent under restartPolicy ExitCode (1-127)"
                message = (f"job \"{plan.name}\" is failing because "
                           f"\"{tfoperator.TYPE_NAMES[task.rsplit('-', 1)[0]]}\" replica(s) failed.")
            else:
                why = f"{task} exited with code {code} and its restartPolicy is Never"
                counts: dict[str, int] = {}
                for name in permanent:
                    counts[name.rsplit("-", 1)[0]] = counts.get(name.rsplit("-", 1)[0], 0) + 1
                message = tfoperator.replica_failed_message(plan.namespace, plan.name, counts)
            return self.fail(why, message, None, running)
        if tfoperator.succeeded(plan.replicas, codes, plan.success_policy):
            console.say(f"the operator marks the job Succeeded ({tfoperator.SUCCEEDED}: "
                       f"{tfoperator.succeeded_message(plan.namespace, plan.name)})"
                       + (f"; {self.left_words(running)}" if running else ""))
            left = tfoperator.left_running(plan.clean_pod_policy, running)
            self.lingering = [task for task in left if task not in plan.servers]  # servers never end by themselves
            if self.lingering:
                console.say(f"the lab gives {', '.join(self.lingering)} up to {runner.EVALUATOR_END_SECONDS} s to end "
                           "by themselves, then ends and removes what runs")
            self.succeeded_at = time.monotonic()
            return self.job_condition(codes)
        return None

    def jobset_condition(self, codes: dict, failures: dict, running: list[str]) -> str | None:
        """A TrainJob's JobSet (trainjob.py: one replicated job `node`, each Job's backoffLimit 0):
        any node's failure fails its Job, and failurePolicy.maxRestarts (plan.backoff_limit) restarts
        the whole JobSet that many times, then fails it as ReachedMaxRestarts (JobSet's
        failJobSet); it succeeds once every node's Job has (its default successPolicy, All)."""
        plan = self.plan
        if failures:
            if len(self.restarts_made) < (plan.backoff_limit or 0):
                return None
            task, (code, _, _) = next(iter(failures.items()))
            self.failed_for_good = True
            self.reason = "ReachedMaxRestarts"
            console.say(f"{task} exited with code {code}, after {len(self.restarts_made)} of failurePolicy.maxRestarts "
                        f"({plan.backoff_limit or 0}) restarts: JobSet marks the job Failed (ReachedMaxRestarts)")
            return runner.FAILED
        if codes and all(code == 0 for code in codes.values()):
            self.ended_when_done = []
            return runner.SUCCEEDED
        return None

    def fail(self, why: str, message: str, limit: str | None, running: list[str]) -> str:
        """The operator's Failed condition: said once, with what its cleanPodPolicy leaves running."""
        self.failed_for_good = True
        if limit:
            self.reason = f"{tfoperator.FAILED}: {limit}"
        console.say(f"{why}: the operator marks the job Failed ({tfoperator.FAILED}: {message})"
                   + (f"; {self.left_words(running)}" if running else ""))
        return runner.FAILED

    def restart_verdict(self, stopped: list[str]) -> tuple[bool, str]:
        """job_condition has failed the job already where the operator would; any other failure is
        one the operator retries (in place, or by recreating the pod), and the in-place ones add to
        the count PastBackoffLimit sums."""
        if self.failed_for_good:
            return False, ""
        failures = self.own_failures(self.backend.exit_codes(), stopped)
        self.restarts_counted += sum(1 for _, _, fate in failures.values() if fate == tfoperator.IN_PLACE)
        return True, ""

    def restart_line(self) -> str:
        limit = self.plan.backoff_limit
        counted = ("no backoffLimit" if limit is None else
                   f"{self.restarts_counted} restart{'s' if self.restarts_counted != 1 else ''} counted "
                   f"of backoffLimit {limit}")
        return f"restarting every replica (restart {len(self.restarts_made)}; {counted}), as the restart policy says"

    def finish(self) -> None:
        if self.watcher is not None:
            try:
                self.print_new()  # the last ends, before the containers go
            finally:
                self.watcher.close()

    def summarise(self, codes: dict, stopped: list[str], outcome: str, started: float, ended: float,
                  oom_killed: dict) -> Summary:
        plan = self.plan
        replayed = summary.Replayed(tfjob=str(plan.path), settings=replay_settings(plan, self.settings,
                                                                                   self.run_dir.name),
                                    not_applied=plan.not_applied, hosts={t.name: t.host for t in plan.tasks},
                                    images={t.name: t.image for t in plan.tasks},
                                    ended_when_done=self.ended_when_done,
                                    unaudited=unaudited(plan, self.run_dir, getattr(self.backend, "images", None)))
        result = summary.summarise(self.settings, self.backend.cluster, self.run_dir, codes, stopped, outcome,
                                   started, ended, oom_killed, self.restarts_made, replayed=replayed)
        if not result.ok and self.reason:
            result.reason = self.reason
        return result
