"""A run's summary.json (runsummary.Summary: one row per task, the audit's findings and notes),
built from the tasks' JSONL logs, their output and their exit codes; progress.py prints the run
as it goes, table.py says the summary in words.

Everything here is computed from the logs and the exit codes; a task that wrote nothing, or
failed, is shown as such, never left out.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from tflab.console import say
from tflab.core import beneath, explain, foreign, tracebacks
from tflab.core.cluster import Cluster
from tflab.core.foreign import ForeignFile
from tflab.core.runfolder import OUTPUT, events, log_name
from tflab.core.runsummary import INSIDE, Summary, TaskRow
from tflab.core.schema import attempts, by_event, complete, loss_value, parse_events
from tflab.core.settings import Settings
from tflab.k8s.pod import hooks_file
from tflab.supervisor import audit, resume, strays
from tflab.trainer import replayhooks


def task_row(task: str, role: str, records: list[dict], exit_code: int | None, stopped: bool,
             settings: Settings, output: str = "", oom_killed: bool | None = None,
             ended_when_done: bool = False, done_peers: tuple[str, ...] = ()) -> TaskRow:
    """ended_when_done: see status_of; such a task's exit (a signal's code, the launcher's word on
    it) is then no error of its own. done_peers: its peers that exited 0 (peers_done)."""
    tries = attempts(records)
    last = tries[-1] if tries else []  # after restarts, the task's last attempt is its result
    end = (by_event(last, "end") or [{}])[-1]
    ready = (by_event(last, "cluster_ready") or [{}])[-1]
    errors = [] if ended_when_done else by_event(last, "error")
    epochs = {e["epoch"]: e for e in by_event(records, "epoch")}  # an epoch redone after a restore: its last
    status = status_of(exit_code, stopped, bool(end) and not errors, ended_when_done)
    steady = end.get("steady_step_seconds")
    losses = [loss_value(epochs[n]["loss"]) for n in sorted(epochs)]  # nan where it was not finite
    return TaskRow(
        task=task,
        role=role,
        status=status,
        exit_code=exit_code,
        epochs_done=len(epochs),
        losses=losses,
        attempts=len(tries),
        restored=[{"epoch": r["epoch"], "step": r["step"]} for r in by_event(records, "restored")],
        resumes=resume.resumes(records) if role == "script" else [],
        earlier_errors=[r["message"].splitlines()[0][:300] for attempt in tries[:-1]
                        for r in by_event(attempt, "error")],
        # A user's script (SCRIPT): its last epoch's, as Keras or tflab's callback logged it.
        final_loss=loss_value(end["final_loss"]) if "final_loss" in end
        else loss_value(by_event(records, "epoch")[-1]["loss"]) if end and losses else None,
        cluster_ready_seconds=ready.get("seconds"),
        first_step_seconds=end.get("first_step_seconds"),
        steady_step_seconds=steady,
        examples_per_second=settings.global_batch / steady if steady else None,
        total_seconds=end.get("total_seconds"),
        peak_rss_bytes=end.get("peak_rss_bytes"),
        weights_sha256=end.get("weights_sha256"),
        weights_fingerprint=fingerprint_of(end),
        parameters=end.get("parameters"),
        first_step_at=end.get("first_step_at"),
        error=errors[0]["message"] if errors else None,
        # What happened and what to do (explain.py), for a task that failed by itself.
        explanation=explanation.to_dict() if status == "failed" and (explanation := explain.explain(
            evidence_of(task, last, records, exit_code, settings, output, oom_killed, done_peers))) else None,
        # The evaluator's: each checkpoint it evaluated (its epoch, step and loss).
        evals=[{"epoch": r["epoch"], "step": r["step"], "loss": loss_value(r["loss"])} for r in by_event(last, "eval")]
        if role == "evaluator" else None,
    )


def fingerprint_of(end: dict) -> list | None:
    """An `end` event's weights_fingerprint as the summary may hold it (runsummary.INSIDE's fields,
    each of its type), else None: a task's log may hold anything, and one bad item would make the
    whole summary.json unreadable to every reader."""
    found = end.get("weights_fingerprint")
    fields = INSIDE["weights_fingerprint"]
    if not isinstance(found, list) or not found or len(found) > 10_000:
        return None
    for item in found:
        if not isinstance(item, dict) or any(isinstance(item.get(key), bool) or not isinstance(item.get(key), kinds)
                                             for key, kinds in fields.items()):
            return None
        if isinstance(item["size"], int) and not 0 <= item["size"] < 2**63:
            return None
    return [{key: item[key] for key in fields} for item in found]


def status_of(exit_code: int | None, stopped: bool, ended_cleanly: bool, ended_when_done: bool = False) -> str:
    """The one rule for a task's status. ended_cleanly: its last attempt logged its end and no
    error. ended_when_done: a replica still running when its TFJob succeeded, which the lab then
    ended (a TFJob's replicas owe the lab no clean exit on SIGTERM): ok whatever its code, as the
    job's success is the operator's to decide (replay.run.ReplayRun.job_condition)."""
    if stopped:
        return "stopped"  # still running when the lab ended the run
    if exit_code is None:
        return "missing"  # never started, or vanished
    if exit_code == 0 and ended_cleanly or ended_when_done:
        return "ok"
    return "failed"


def evidence_of(task: str, last: list[dict], records: list[dict], exit_code: int | None, settings: Settings,
                output: str, oom_killed: bool | None, done_peers: tuple[str, ...] = (),
                stacks: str = "") -> explain.Evidence:
    errors = by_event(last, "error")
    measured = [r[key] for r in records for key in ("peak_rss_bytes", "rss_bytes") if isinstance(r.get(key), int)]
    return explain.Evidence(task=task, exit_code=exit_code, error=errors[0]["message"] if errors else "",
                            output=output, oom_killed=oom_killed, memory=settings.memory,
                            last_memory_bytes=max(measured) if measured else None, network=settings.network,
                            peers_done=done_peers, stacks=stacks, strategy=settings.strategy)


def peers_done(the_cluster: Cluster, exit_codes: dict, task: str) -> tuple[str, ...]:
    """The trainers other than `task` that exited 0: a peer that finished was not lost, whatever
    a collective still waiting on it says (explain.PEER_DONE_SIGNATURES)."""
    if task not in the_cluster.trainers:
        return ()
    return tuple(peer for peer in the_cluster.trainers if peer != task and exit_codes.get(peer) == 0)


def task_prefix(task: str) -> re.Pattern:
    """How output.log names a task's lines: `<task> | <time> line` (local, swarm) or Compose's
    `<task>_1 | <time> line` (v1) and `<project>-<task>-1 | <time> line` (v2)."""
    return re.compile(rf"(?:\S*[_-])?{re.escape(task)}(?:[_-]\d+)?")


def task_output(log: str, task: str) -> str:
    """A task's own lines of an output.log's text (task_prefix)."""
    prefix = task_prefix(task)
    lines = []
    for line in log.splitlines():
        name, bar, rest = line.partition(" | ")
        if bar and prefix.fullmatch(name.strip()):
            stamp, _, text = rest.partition(" ")
            lines.append(text if re.match(r"\d{4}-\d\d-\d\dT", stamp) else rest)
    return "\n".join(lines)


@dataclass
class Replayed:
    """What a TFJob replay's summary records beyond its logs (replay.run.ReplayRun fills it)."""

    tfjob: str  # the manifest's path
    settings: dict  # tfjob.replay_settings: what the TFJob says, never a lab default that did not apply
    not_applied: list[str]
    hosts: dict[str, str]  # task -> the replica's hostname
    images: dict[str, str]  # task -> the replica's image
    ended_when_done: list[str] = field(default_factory=list)  # running once the job succeeded
    # "not audited: <why>" per replica the lab's hooks did not reach (an image without Python, an
    # entrypoint that is not Python): the summary's notes, and `make why` says it, never "audited".
    unaudited: list[str] = field(default_factory=list)


NOT_AUDITED = "not audited: "  # a note's start, where the lab's hooks did not reach a task


@dataclass
class Rows:
    """A kind of run's part of its summary (kind.RunKind.rows): its tasks' rows, whether they make
    the run ok by the kind's rule, its audit's findings and notes, and the fields it fills."""

    tasks: list[TaskRow]
    ok: bool  # by the kind's rule; summarise's outcome is "ok" only where it is
    strategy: str  # or "tfjob" for a replay
    backend: str
    settings: dict
    findings: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    weights_agree: bool = False
    tfjob: str | None = None  # a replay's manifest
    not_applied: list[str] | None = None  # a replay's fields the lab does not apply
    reason: str | None = None  # a failed replay's, as its operator words it


def summarise(run_dir: Path, rows: Rows, outcome: str, launched_at: float, ended_at: float,
              restarts: list[float] | None = None) -> Summary:
    """The one summary of every kind of run, from its rows (lab_rows, replay.run.ReplayRun.rows):
    "ok" only where the runner's outcome was and the kind's rows say so; a run whose tasks all
    ended but whose rows are not ok (a strict audit's finding, a failed replica of a succeeded job
    aside) has failed."""
    return Summary(run=run_dir.name, strategy=rows.strategy, backend=rows.backend, tfjob=rows.tfjob,
                   outcome="ok" if rows.ok else ("failed" if outcome == "ok" else outcome), ok=rows.ok,
                   launched_at=launched_at, wall_seconds=ended_at - launched_at, settings=rows.settings,
                   weights_agree=rows.weights_agree, tasks=rows.tasks, restarts=list(restarts or []),
                   not_applied=rows.not_applied, findings=rows.findings, notes=rows.notes,
                   reason=None if rows.ok else rows.reason)


def lab_rows(settings: Settings, the_cluster: Cluster, run_dir: Path, exit_codes: dict, stopped: list[str],
             outcome: str, oom_killed: dict | None = None, servers_owe_no_exit: bool = False) -> Rows:
    """The lab's own run's rows (labrun.LabRun): one per task, from its log, its exit code, its
    output and the engine's word on it (oom_killed: task -> State.OOMKilled, where the backend
    reads it); the audit as AUDIT says. servers_owe_no_exit: a SCRIPT's servers and evaluator,
    ended by the lab once the chief succeeded (labrun.LabRun.clean_exits)."""
    oom_killed = oom_killed or {}
    outputs = output_tails(run_dir, list(the_cluster.tasks))
    records = {task: task_records(run_dir, task) for task in the_cluster.tasks}
    # outcome "ok" there: the chief succeeded and nothing failed before the lab ended the rest (runner.follow).
    ended = set(the_cluster.servers + the_cluster.evaluators) if servers_owe_no_exit and outcome == "ok" else set()
    rows = [task_row(task, the_cluster.role(task), records[task], exit_codes.get(task),
                     task in stopped, settings, outputs[task], oom_killed.get(task), task in ended,
                     peers_done(the_cluster, exit_codes, task))
            for task in the_cluster.tasks]
    digests = {row.weights_sha256 for row in rows if row.role == "trainer"}
    # A lab run that ended "ok" has no stopped task (runner.follow).
    ok = outcome == "ok" and all(row.status in ("ok", "stopped") for row in rows)
    findings, notes = ([], []) if settings.audit == "off" else audit.audit(
        records, {task: the_cluster.role(task) for task in the_cluster.tasks}, the_cluster.chief, outputs,
        run_dir, strays.run_spaces(run_dir, list(the_cluster.tasks)))
    if findings and settings.audit == "strict":
        ok = False  # the tasks' exit codes and statuses stay as they were: the run fails, not they
    return Rows(tasks=rows, ok=ok, strategy=settings.strategy, backend=settings.backend, settings=settings.to_dict(),
                findings=[finding.to_dict() for finding in findings], notes=notes,
                weights_agree=len(digests) == 1 and None not in digests)


def note_names(note: str, task: str) -> bool:
    """Whether a "not audited: a, b (image): why" note names `task`."""
    return task in note[len(NOT_AUDITED):].split(" (", 1)[0].split(", ")


def replay_row(run_dir: Path, task: str, code: int | None, stopped: bool, replayed: Replayed,
               ended_when_done: bool, output: str = "", oom_killed: bool | None = None) -> TaskRow:
    """A replica's row: its attempts from the watcher's start and end, and a failure explained as a
    SCRIPT task's is (explain.py) from its own output, with the replay's ways in and out."""
    records = events(run_dir, task)
    end = (by_event(records, "end") or [{}])[-1]
    status = status_of(code, stopped, True, ended_when_done)  # the watcher logs every end, and no error
    # the lab's own program's last attempt, where the replica ran it: never one from before the
    # replica's last start (a restart that died before the program's start leaves that one's ends)
    tries = attempts(complete(records))
    mine = own_attempt(run_dir, task, after=max((e["time"] for e in by_event(tries[-2], "end")), default=0.0)
                       if len(tries) > 1 else 0.0)
    own = (by_event(mine, "end") or [{}])[-1]
    # Its epochs as the watcher copied them from the hooks' folder (a script's hooks', or the lab's
    # own program's), else its own log's; an epoch redone after a restore: its last.
    epochs = {e["epoch"]: e for e in by_event(complete(records), "epoch") or by_event(mine, "epoch")}
    losses = [loss_value(epochs[n]["loss"]) for n in sorted(epochs)]
    steady = own.get("steady_step_seconds")
    batch = (mine[0]["settings"].get("global_batch") if mine else None)
    batch = batch if isinstance(batch, int) and not isinstance(batch, bool) and batch > 0 else None
    head = tracebacks.exception_head(output)
    failed = status == "failed"
    evidence = explain.Evidence(task=task, exit_code=code, error=head, output=output, oom_killed=oom_killed,
                                network=str(replayed.settings.get("network", "internal")), replay=True,
                                strategy=str(replayed.settings.get("strategy", "")))
    explanation = explain.explain(evidence) if failed else None
    failures = [e["exit_code"] for e in by_event(records, "end")[:-1] if e.get("exit_code")]
    earlier = [f"exited with code {code}" for code in failures]
    if status == "stopped" and failures and head:
        # Restarted after each failure until TIMEOUT or the job's end stopped it: its output holds
        # those failures' tracebacks, and they, not the stop, are what to explain (a download with
        # no route out, 41 times over, read "exited with code 1" before).
        found = explain.explain(replace(evidence, exit_code=failures[-1]))
        explanation = found if found and found.signature not in ("exception", "exit code") else None
    return TaskRow(task=task, role="script", host=replayed.hosts[task], image=replayed.images[task],
                   status=status, exit_code=code, attempts=len(by_event(records, "start")),
                   total_seconds=end.get("total_seconds"), peak_rss_bytes=end.get("peak_rss_bytes") or None,
                   epochs_done=len(epochs), losses=losses,
                   # as a lab run's (task_row): the program's own final loss, else its last epoch's once it ended ok
                   final_loss=loss_value(own["final_loss"]) if "final_loss" in own
                   else losses[-1] if losses and status == "ok" else None,
                   cluster_ready_seconds=(by_event(mine, "cluster_ready") or [{}])[-1].get("seconds"),
                   first_step_seconds=own.get("first_step_seconds"), steady_step_seconds=steady,
                   examples_per_second=batch / steady if batch and steady and steady > 0 else None,
                   weights_sha256=own.get("weights_sha256"), parameters=own.get("parameters"),
                   weights_fingerprint=fingerprint_of(own),
                   first_step_at=own.get("first_step_at"),
                   earlier_errors=earlier,
                   # where a restarted replica resumed, as a script's, where the lab's hooks saw its fit
                   resumes=[] if any(note_names(note, task) for note in replayed.unaudited)
                   else resume.resumes(complete(records)),
                   error=None if status in ("ok", "stopped") else
                   f"exited with code {code}" + (f": {head.splitlines()[0]}" if head else ""),
                   explanation=explanation.to_dict() if explanation else None)


def own_attempt(run_dir: Path, task: str, after: float = 0.0) -> list[dict]:
    """The last attempt (its `start` on, if at `after` or later) of the lab's own program in `task`'s
    replica, its complete events: copied to the replica's hooks folder (volumes/tflab-hooks/<task>/events.jsonl: the
    program logs to its pod's emptyDir, which the host cannot see, and copies each event there,
    replayhooks.LAB_MARK), else as it logged into a claim (volumes/<claim>/.../<task>.jsonl, as
    `make k8s K8S_PVC=...` has it, or from an image older than the copy). [] where neither holds a
    start. A replica writes both: read from the run folder's handle, no link followed, bounded,
    each field of its type (complete)."""
    try:
        with beneath.Beneath(run_dir) as folder:
            # walk matches a file's name by its end: a name only ends in "/" never, so the name itself
            claims = [path for path in folder.walk("volumes", log_name(task))
                      if path.rsplit("/", 1)[-1] == log_name(task)]  # xworker-0.jsonl is no log of worker-0
            for path in [hooks_file(task, replayhooks.EVENTS), *claims]:
                try:
                    records = complete(parse_events(folder.read(path, foreign.MAX_LOG_BYTES)))
                except (OSError, ForeignFile):
                    continue
                started = [attempt for attempt in attempts(records) if by_event(attempt[:1], "start")]
                if started:
                    return started[-1] if started[-1][0]["time"] >= after else []
    except (OSError, ForeignFile):
        pass
    return []


# What the summary keeps of each task's output to explain its failure: its last lines. A task may
# print gigabytes (100 MB of output took the host to 471 MB when output.log was read whole); the
# explanations need the end of each task's output, its traceback, so output.log is streamed and
# only each task's last TASK_TAIL_BYTES are kept: the lab's memory stays flat whatever a task prints.
TASK_TAIL_BYTES = 4 * 1024 * 1024
READ_CHUNK = 1024 * 1024


def output_tails(run_dir: Path, tasks: list[str]) -> dict[str, str]:
    """Each task's own lines of output.log (task_output), its last TASK_TAIL_BYTES, read in chunks
    from the run folder's handle; "" for all where there is none, said in one line where it is not
    a file the lab wrote."""
    prefixes = {task: task_prefix(task) for task in tasks}
    kept: dict[str, collections.deque] = {task: collections.deque() for task in tasks}
    sizes = dict.fromkeys(tasks, 0)

    def take(line: bytes) -> None:
        name, bar, rest = line.decode(errors="replace").partition(" | ")
        if not bar:
            return
        for task, prefix in prefixes.items():
            if prefix.fullmatch(name.strip()):
                stamp, _, text = rest.partition(" ")
                text = text if re.match(r"\d{4}-\d\d-\d\dT", stamp) else rest
                kept[task].append(text)
                sizes[task] += len(text) + 1
                while sizes[task] > TASK_TAIL_BYTES and kept[task]:
                    sizes[task] -= len(kept[task].popleft()) + 1
                return

    try:
        rest = b""
        for chunk in beneath.chunks(run_dir, OUTPUT, READ_CHUNK):
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            if len(rest) > foreign.MAX_LINE_BYTES:  # a line with no end in sight is cut where it stands
                lines.append(rest)
                rest = b""
            for line in lines:
                take(line)
        if rest:
            take(rest)
    except FileNotFoundError:
        pass
    except (OSError, ForeignFile) as error:
        say(f"{error}; the summary explains failures without it")
    return {task: "\n".join(lines) for task, lines in kept.items()}


def task_records(run_dir: Path, task: str) -> list[dict]:
    """A task's complete events; a log the summary cannot read at all (a folder where it should
    be, say) is said in one line and read as no events: the run's summary is still written."""
    try:
        return complete(events(run_dir, task))
    except ForeignFile as error:
        say(f"{error}; the summary reads it as no events")
        return []
