"""A replay's plan as the Compose project the runner supervises: the Compose file rendered from
the plan (each replica's service, its binds and hooks, the run's network), the stack
(ReplayStack) and each replica's output folded as a SCRIPT launcher folds it (FoldedOutput)."""

from __future__ import annotations

import codecs
import json
import os
import re
import threading
from datetime import datetime, timezone
from pathlib import Path

from tflab.backends import compose
from tflab.core import beneath, runfolder
from tflab.core.errors import LabError
from tflab.core.settings import DATA_DIR, Settings
from tflab.core.terminal import TerminalLines
from tflab.engine import docker, labels
from tflab.k8s.pod import MAX_ID
from tflab.k8s.tfjob import Plan
from tflab.replay.images import image_env
from tflab.replay.volumes import binds, hooks_mark, hooks_service
from tflab.trainer import replayhooks

COMPOSE_FILE = "compose.tfjob.json"


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
        if service.get("tmpfs"):
            owner = service.get("user") or str((images or {}).get(task.image, {}).get("User") or "")
            service["tmpfs"] = owned_tmpfs(service["tmpfs"], owner)
        service["labels"] = marks
        services[task.name] = service
    internal = settings is None or settings.network == "internal"
    network = {"internal": True, "driver_opts": {"com.docker.network.bridge.inhibit_ipv4": "true"}} if internal else {}
    return compose.literal({"services": services, "networks": {"cluster": {**network, "labels": marks}}})


def owned_tmpfs(entries: list[str], owner: str) -> list[str]:
    """Each emptyDir's tmpfs (`path[:options]`) owned by the replica's numeric user (`uid[:gid]`,
    its runAsUser or its image's USER): a pod's emptyDir is writable by its user for the pod's
    life, restarts included, but Docker 20.10 remounts a restarted container's tmpfs 0755 root
    whatever its mode, so a non-root replica restarted in place could not write it; a tmpfs owned
    by uid and gid survives the restart so. A named user, or none (root), is left as it is."""
    uid, _, gid = owner.partition(":")
    if not uid.isdigit() or not 0 < int(uid) <= MAX_ID or (gid and not (gid.isdigit() and int(gid) <= MAX_ID)):
        return entries  # an image's USER is anyone's text: only ids the API server would take
    options = f"uid={int(uid)},gid={int(gid or uid)}"
    return [f"{entry},{options}" if ":" in entry else f"{entry}:{options}" for entry in entries]


class ReplayStack(compose.ComposeStack):
    """compose.ComposeStack with the manifest's services instead of the lab's template."""

    def __init__(self, cli: compose.ComposeCli, run_dir: Path, plan: Plan, settings: Settings | None = None,
                 images: dict[str, dict] | None = None):
        self.plan, self.replay_settings = plan, settings
        self.images = images  # image -> its Config (image_configs): with it, the lab's hooks go in
        self.init_project(cli, run_dir, plan.as_cluster(), frozenset(), [run_dir / COMPOSE_FILE])
        self.output = FoldedOutput(run_dir, runfolder.OUTPUT)  # folded, as a SCRIPT's launcher folds

    def start(self, spec: dict | None = None) -> None:
        runfolder.write_json(self.run_dir / COMPOSE_FILE, render(self.plan, self.run_dir, self.replay_settings,
                                                                 self.images))
        self.watch()
        self._start_attached(self.tasks)

    def dump_stacks(self, tasks: list[str]) -> None:
        """As Compose's, to the replicas whose program answers it: the lab's own, or one the hooks
        are in as the child of the replica's init (replayhooks.ANSWERS). A replica's stacks land in
        its hooks folder (pod.hooks_file(task, stacks_file(task))); any other is not signalled,
        since the signal would end a shell or a program without the hooks."""
        marks = {task: hooks_mark(self.run_dir, task) for task in tasks}
        super().dump_stacks([task for task, mark in marks.items()
                             if mark.startswith("lab") or replayhooks.ANSWERS in mark])

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
    prints as it comes (progress.ScriptOutputPrinter)."""

    def __init__(self, run_dir: Path, name: str):
        super().__init__(run_dir, name)

    def _launch(self, task: str, stamp: bool, container: str, attach: bool, since: float | None = None) -> None:
        try:
            process = docker.open_output(container, attach, since, apart=True)
        except OSError as error:
            raise LabError(f"cannot run docker for {task}'s output: {error}") from None
        shown = self._task_output(task)
        readers = [threading.Thread(target=self._fold, args=(task, stream, not stamp, shown), daemon=True)
                   for stream in (process.stdout, process.stderr)]
        for reader in readers:
            reader.start()
        closer = threading.Thread(target=self._close_after, args=(readers, shown), daemon=True)
        closer.start()
        self.followers.append(compose.Follower(task, process, closer, container))

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
