"""What differs between a TFJob's replay and the replay of the TrainJob that stands for it, and the
field of either manifest that makes it differ: `differences`, a pure function of the two runs'
records (each a `Side`: its summary.json, its manifest's objects, its config.json's TF_CONFIGs and
the files its replicas wrote), and the table it makes (`markdown`, `table`). reports/migrate.py
runs the replays and hands their records here; the unit tests hand it made-up ones.

Every record is read as hostile: the summaries through the lab's typed reader
(runsummary.Summary.from_dict), the manifests and the TF_CONFIGs field by field; anything else is
MigrateError, one line naming the side and the field, never a traceback.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any

from tflab.core import foreign
from tflab.core.errors import LabError
from tflab.core.runsummary import Summary, SummaryError
from tflab.k8s import jobcontroller, tfoperator

SIDES = ("TFJob", "TrainJob")
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
# The same program on the same data and seed, on a cluster of the same shape: only the hosts'
# names differ, so the losses should be equal but for float printing (the replay tests' 1e-6).
LOSS_RTOL = 1e-6
SAME = "same"
MOST_FILES = 10_000  # the files a side may list: more is not a run the lab made
SHOWN_FILES = 5  # the files named in a row where the two sides' differ; the rest counted
# tf.summary names an event file events.out.tfevents.<time>.<host>.<pid>.<n>.v2: no two runs share one,
# so it is compared by its folder alone (the lab's trainer writes one in tensorboard/, the chief's).
EVENT_FILE = re.compile(r"(^|/)events\.out\.tfevents\.[^/]*$")
EVENT_FILE_AS = r"\1events.out.tfevents.*"
# Where each side's TF_CONFIG comes from: the operator writes it into the container's env
# (training-operator tensorflow.go genTFConfigJSONStr); a TrainJob's node builds its own.
TFJOB_TF_CONFIG = ("TF_CONFIG built by the operator (genClusterSpec: <tfjob>-<type>-<i>.<namespace>.svc:<port>, "
                   "\"environment\": \"cloud\")")
TRAINJOB_TF_CONFIG = ("TF_CONFIG built in the node by the runtime's command python -m tflab.trainer.tfconfig from the "
                      "env the converter wrote (spec.trainer.env {env} and the pod's JOB_COMPLETION_INDEX give "
                      "<trainjob>-node-0-<i>.<trainjob>:2222)")


class MigrateError(LabError):
    """One line: a record of either side that the lab did not write, or cannot compare."""


@dataclasses.dataclass(frozen=True)
class Side:
    """One replay's records, as read (hostile until `differences` has checked them)."""

    summary: Any  # summary.json: a runsummary.Summary, or the JSON object as read
    documents: Any  # the manifest's objects: the TFJob and its ConfigMaps, or the TrainJob and its runtime
    tf_configs: Any = None  # config.json's tf_config: task -> the TF_CONFIG it got (None: not recorded)
    files: Any = None  # what its replicas wrote: paths relative to the run folder


@dataclasses.dataclass(frozen=True)
class Row:
    """One line of the table: what, each side's value, and, where they differ, why."""

    what: str
    tfjob: str
    trainjob: str
    same: bool
    cause: str  # the fields of either manifest that make it differ; SAME where nothing does

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def differences(tfjob: Side, trainjob: Side) -> list[Row]:
    """The table: the job's end and condition, its restarts and who restarts it, each task's
    TF_CONFIG, the files written, each task's losses, and the weights; MigrateError (one line) for a
    record that is not what the lab writes."""
    summaries = [checked_summary(side.summary, kind) for side, kind in ((tfjob, "TFJob"), (trainjob, "TrainJob"))]
    old, new = tfjob_fields(tfjob.documents), trainjob_fields(trainjob.documents)
    configs = [checked_tf_configs(side.tf_configs, kind) for side, kind in ((tfjob, "TFJob"), (trainjob, "TrainJob"))]
    files = [checked_files(side.files, kind) for side, kind in ((tfjob, "TFJob"), (trainjob, "TrainJob"))]
    restart_cause = (f"TFJob {old['backoff']}, {old['policies']} vs {new['runtime']} {new['max_restarts']}, the "
                     f"node Job's {new['job_backoff']} and its pod's restartPolicy {new['restart_policy']} (the Job "
                     "retries a node alone up to its backoffLimit, then JobSet restarts the whole job)")
    rows = [row("end", end(summaries[0]), end(summaries[1]), restart_cause + deadline_cause(old, new)),
            row("condition", condition(summaries[0], "TFJob"), condition(summaries[1], "TrainJob"),
                "the operator's conditions (Succeeded, Failed: TFJobFailed) vs Trainer v2's TrainJob conditions "
                "(Complete, Failed)"),
            row("restarts", restarts(summaries[0]), restarts(summaries[1]), restart_cause),
            row("restarted by", f"the training operator: {old['backoff']}, {old['policies']}",
                f"the node Job: {new['job_backoff']}, restartPolicy {new['restart_policy']}; then JobSet: "
                f"{new['max_restarts']}", restart_cause)]
    tasks = list(dict.fromkeys([*[r.task for r in summaries[0].tasks], *[r.task for r in summaries[1].tasks],
                                *configs[0], *configs[1]]))
    tf_config_cause = f"{TFJOB_TF_CONFIG} vs {TRAINJOB_TF_CONFIG.format(env=new['num_nodes'])}"
    for task in tasks:
        rows.append(row(f"TF_CONFIG {foreign.shown(task, 80)}", compact(configs[0].get(task)),
                        compact(configs[1].get(task)), tf_config_cause))
    rows.append(files_row(*files))
    by_task = [{r.task: r for r in summary.tasks} for summary in summaries]
    for task in tasks:
        losses = [by.get(task) for by in by_task]
        shown = [" ".join(f"{loss:.6g}" for loss in r.losses) if r and r.losses else "-" for r in losses]
        equal = losses_equal(*[r.losses if r else [] for r in losses])
        rows.append(Row(f"losses {foreign.shown(task, 80)}", shown[0], shown[1], equal, SAME if equal else (
            restart_cause if restarts(summaries[0]) != restarts(summaries[1]) else
            losses_cause(losses, old["command"]))))
    rows.append(row("weights", weights(summaries[0]), weights(summaries[1]),
                    "the losses above: the weights are where they ended"))
    return rows


def row(what: str, tfjob: str, trainjob: str, cause: str) -> Row:
    same = tfjob == trainjob
    return Row(what, tfjob, trainjob, same, SAME if same else cause)


# -- each side's records, checked ------------------------------------------------------------

def checked_summary(data: Any, kind: str) -> Summary:
    if isinstance(data, Summary):
        return data
    try:
        return Summary.from_dict(data)
    except (SummaryError, ValueError, TypeError, RecursionError) as error:
        raise MigrateError(f"the {kind} replay's summary is not one the lab wrote: "
                           f"{foreign.shown(str(error), 200)}") from None


def checked_tf_configs(data: Any, kind: str) -> dict[str, Any]:
    """task -> TF_CONFIG (an object, or null for a task that got none)."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise MigrateError(f"the {kind} replay's tf_config is a JSON {type(data).__name__}, not an object of tasks")
    for task, config in data.items():
        if not isinstance(config, (dict, type(None))):
            raise MigrateError(f"the {kind} replay's tf_config of {foreign.shown(task, 60)} is a JSON "
                               f"{type(config).__name__}, not an object")
    return data


def checked_files(data: Any, kind: str) -> list[str]:
    if data is None:
        return []
    if not isinstance(data, (list, tuple)) or len(data) > MOST_FILES or not all(isinstance(f, str) for f in data):
        raise MigrateError(f"the {kind} replay's files are not a list of at most {MOST_FILES} paths")
    return sorted({EVENT_FILE.sub(EVENT_FILE_AS, path) for path in data})


def dig(value: Any, *keys: Any) -> Any:
    """value[k1][k2]...: None wherever a step is not there (a list index out of range included)."""
    for key in keys:
        if isinstance(key, int) and isinstance(value, list) and -len(value) <= key < len(value):
            value = value[key]
        elif isinstance(key, str) and isinstance(value, dict):
            value = value.get(key)
        else:
            return None
    return value


def objects(documents: Any, kinds: tuple[str, ...], side: str) -> list[dict]:
    if not isinstance(documents, list):
        raise MigrateError(f"the {side} manifest is a {type(documents).__name__}, not a list of objects")
    return [d for d in documents if isinstance(d, dict) and d.get("kind") in kinds]


def listed(value: Any) -> list:
    return value if isinstance(value, list) else []


def shown_value(value: Any) -> str:
    return foreign.shown(json.dumps(value) if not isinstance(value, str) else value, 80)


def tfjob_fields(documents: Any) -> dict[str, str]:
    """The TFJob's fields that decide its end, restarts, deadline and training, in words."""
    found = objects(documents, (tfoperator.KIND,), "TFJob")
    if len(found) != 1:
        raise MigrateError(f"the TFJob manifest holds {len(found)} TFJobs, expected exactly one")
    spec = dig(found[0], "spec")
    backoff = dig(spec, "runPolicy", "backoffLimit")
    replicas = dig(spec, "tfReplicaSpecs")
    if not isinstance(replicas, dict) or not replicas:
        raise MigrateError("the TFJob has no spec.tfReplicaSpecs")
    policies = ", ".join(f"spec.tfReplicaSpecs.{foreign.shown(kind, 40)}.restartPolicy "
                         f"{shown_value(dig(replica, 'restartPolicy') or tfoperator.DEFAULT_RESTART_POLICY)}"
                         for kind, replica in replicas.items())
    container = next((c for c in dig(replicas, "Worker", "template", "spec", "containers") or []
                      if isinstance(c, dict) and c.get("name") == tfoperator.CONTAINER), {})
    deadline = dig(spec, "runPolicy", "activeDeadlineSeconds")
    return {"backoff": "spec.runPolicy.backoffLimit " + (shown_value(backoff) if backoff is not None else
                                                         "unset (no limit)"),
            "policies": policies,
            "deadline": f"spec.runPolicy.activeDeadlineSeconds {shown_value(deadline)}" if deadline else "",
            "command": f"spec.tfReplicaSpecs.Worker's container {tfoperator.CONTAINER} command and args "
                       f"{shown_value([*listed(container.get('command')), *listed(container.get('args'))])}"}


def trainjob_fields(documents: Any) -> dict[str, str]:
    """The TrainJob's and its runtime's fields that decide the same, in words."""
    jobs = objects(documents, ("TrainJob",), "TrainJob")
    runtimes = objects(documents, RUNTIME_KINDS, "TrainJob")
    if len(jobs) != 1 or len(runtimes) != 1:
        raise MigrateError(f"the TrainJob manifest holds {len(jobs)} TrainJobs and {len(runtimes)} runtimes, "
                           "expected one of each")
    runtime = runtimes[0]
    jobset = dig(runtime, "spec", "template", "spec")
    max_restarts = dig(jobset, "failurePolicy", "maxRestarts")
    job_spec = dig(jobset, "replicatedJobs", 0, "template", "spec")
    pod = dig(job_spec, "template", "spec")
    job_backoff = dig(job_spec, "backoffLimit")
    env = [e for e in dig(jobs[0], "spec", "trainer", "env") or [] if isinstance(e, dict)]
    deadline = dig(jobs[0], "spec", "activeDeadlineSeconds")
    return {"runtime": f"{runtime['kind']} {foreign.shown(dig(runtime, 'metadata', 'name'), 80)}",
            "max_restarts": "spec.template.spec.failurePolicy.maxRestarts "
                            + (shown_value(max_restarts) if max_restarts is not None else "unset (0)"),
            "job_backoff": "backoffLimit " + (shown_value(job_backoff) if job_backoff is not None else
                                              f"unset ({jobcontroller.DEFAULT_BACKOFF_LIMIT})"),
            # unset: JobSet's webhook (jobset_webhook.go Default) makes a Job's pod OnFailure
            "restart_policy": shown_value(dig(pod, "restartPolicy") or "OnFailure"),
            "deadline": f"TrainJob spec.activeDeadlineSeconds {shown_value(deadline)}" if deadline else "",
            "num_nodes": ", ".join(f"{foreign.shown(e.get('name'), 60)}={shown_value(e.get('value'))}"
                                   for e in env) or "(none)"}


def deadline_cause(old: dict[str, str], new: dict[str, str]) -> str:
    said = [field for field in (old["deadline"], new["deadline"]) if field]
    return f"; {' vs '.join(said)}" if said else ""


# -- what each row shows ---------------------------------------------------------------------

def end(summary: Summary) -> str:
    failed = [foreign.shown(r.task, 80) for r in summary.tasks if r.status == "failed"]
    return summary.outcome + (f" ({', '.join(failed)} failed)" if failed else "")


def losses_cause(rows: list, command: str) -> str:
    """Why one task's losses differ where the restarts do not. Apart from the first epoch with no
    restart on either side, they may be the program's alone: an unseeded one (random data or
    initial weights) does not train the same way twice, under one manifest as under two; said
    first, as chaos's twin says it (faults/verdict.py diverged_before), beside what does differ."""
    manifests = f"TFJob {command} vs TrainJob spec.trainer.args, and the TF_CONFIG above"
    first = [r.losses[0] if r and r.losses else None for r in rows]
    if None not in first and not losses_equal([first[0]], [first[1]]) and not any(r.attempts > 1 for r in rows):
        return (f"the first epoch already differs with no restart on either side: a program that is not seeded "
                f"trains otherwise each run, one manifest or two; else the training itself: {manifests}")
    return f"the training itself: {manifests}"


def condition(summary: Summary, kind: str) -> str:
    """The job's last condition, as its controller would set it (a reason the replay recorded)."""
    if summary.ok:
        return f"Succeeded ({tfoperator.SUCCEEDED})" if kind == "TFJob" else "Complete"
    if summary.reason:
        return f"Failed ({foreign.shown(summary.reason, 120)})"
    if summary.outcome == "failed" and kind == "TFJob":
        # a replica's failure the operator does not retry (restartPolicy Never, ExitCode 1-127): the
        # replay records a reason only where a limit failed the job (backoffLimit, the deadline)
        return f"Failed ({tfoperator.FAILED})"
    return f"none: the lab stopped it ({summary.outcome})"


def restarts(summary: Summary) -> str:
    attempts = {r.task: r.attempts for r in summary.tasks if r.attempts > 1}
    return str(len(summary.restarts)) + (
        f" ({', '.join(f'{foreign.shown(task, 80)} ran {n} times' for task, n in attempts.items())})"
        if attempts else "")


def compact(config: Any) -> str:
    """A TF_CONFIG on one line, its keys sorted (so that the same object reads the same on both sides)."""
    if config is None:
        return "-"
    try:
        text = json.dumps(config, separators=(",", ":"), sort_keys=True)
    except (TypeError, ValueError, RecursionError):  # not JSON's: keys of mixed types, a cycle, too deep
        text = f"(not JSON: {type(config).__name__})"
    return foreign.shown(text, 400)


def files_row(old: list[str], new: list[str]) -> Row:
    if old == new:
        return Row("files written", f"{len(old)} files", f"{len(new)} files", True, SAME)

    def only(mine: list[str], theirs: list[str]) -> str:
        alone = sorted(set(mine) - set(theirs))
        named = ", ".join(foreign.shown(path, 100) for path in alone[:SHOWN_FILES])
        more = f" and {len(alone) - SHOWN_FILES} more" if len(alone) > SHOWN_FILES else ""
        return f"{len(mine)} files" + (f"; only here: {named}{more}" if alone else "")

    return Row("files written", only(old, new), only(new, old), False,
               "what each side's replicas write where: their volumes and claims (the Worker template, carried over "
               "as the runtime's node template) and the TF_CONFIG task names above")


def losses_equal(old: list, new: list) -> bool:
    return len(old) == len(new) and all(
        (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=LOSS_RTOL) for a, b in zip(old, new))


def weights(summary: Summary) -> str:
    digests = [r.weights_sha256 for r in summary.tasks]
    if not digests or None in digests:
        return "not logged"
    short = sorted({foreign.shown(digest, 64)[:12] for digest in digests if digest})
    return f"every task {short[0]}" if len(short) == 1 else "apart: " + ", ".join(short)


# -- the table -------------------------------------------------------------------------------

def counted(rows: list[Row]) -> str:
    apart = [r for r in rows if not r.same]
    return f"{len(apart)} of {len(rows)} rows differ" + (f": {', '.join(r.what for r in apart)}" if apart else "")


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(rows: list[Row], title: str) -> str:
    lines = [f"# {title}", "", counted(rows), "", "| what | TFJob | TrainJob | why (the field of either manifest) |",
             "|---|---|---|---|"]
    lines += [f"| {cell(r.what)} | {cell(r.tfjob)} | {cell(SAME if r.same else r.trainjob)} | {cell(r.cause)} |"
              for r in rows]
    return "\n".join(lines) + "\n"


def table(rows: list[Row]) -> str:
    """The terminal's table: equal rows as `same`, each cause on a line of its own under its row."""
    width = max(len(r.what) for r in rows) if rows else 4
    lines = [f"{'what':<{width}}  TFJob  |  TrainJob"]
    for r in rows:
        lines.append(f"{r.what:<{width}}  {r.tfjob}  |  {SAME if r.same else r.trainjob}")
        if not r.same:
            lines.append(f"{'':<{width}}    why: {r.cause}")
    return "\n".join(lines)
