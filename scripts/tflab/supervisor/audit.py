"""AUDIT: what the tasks' `audit_*` events (trainer/audit.py) say about a run that may have ended
"ok" and still be wrong: workers that trained on the same data, wrote the same file, ended
with different weights, or a loss or weights gone NaN. Pure logic over logs already read
(schema-complete records: every file is foreign, so nothing here trusts a value beyond its
type); summary.py keeps the findings.

A finding is a bug the run has (typed: `kind`, the `tasks` it names, `message`, `fix`); a note is
a cost worth knowing that is no bug (TF's AUTO sharding falling back to DATA).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tflab.core.schema import attempts, finite
from tflab.supervisor import memory, strays

KINDS = ("unsharded", "overlapping-shards", "shared-write", "overwrote-chief", "no-final-model", "replicas-differ",
         "non-finite", strays.KIND, "memory-growth")
AUDITED_ROLES = ("trainer", "script")
# Two workers' sampled batches identical in at least this share of the steps both sampled: the
# same data, not chance (a sharded dataset's workers share none).
SAME_BATCH_SHARE = 0.5
# Examples two workers both sampled in one epoch, as a share of the fewer they sampled: disjoint
# shards share none; a data set with repeats shares about as many as one worker sees twice itself.
OVERLAP_SHARE = 0.01
FINAL_SAVES = ("Model.save", "Model.save_weights")
AUTO_FALLBACK = "will apply DATA sharding policy"  # TF's auto_shard warning, C++ side


@dataclass
class Finding:
    kind: str
    tasks: list
    message: str
    fix: str

    def to_dict(self) -> dict:
        return asdict(self)


def named(tasks: list[str]) -> str:
    return tasks[0] if len(tasks) == 1 else f"{', '.join(tasks[:-1])} and {tasks[-1]}"


def of(records: list[dict], event: str) -> list[dict]:
    return [r for r in records if r.get("event") == event]


def audit(records: dict[str, list[dict]], roles: dict[str, str], chief: str,
          outputs: dict[str, str] | None = None, run_dir: Path | None = None,
          spaces: dict[str, list[strays.Space]] | None = None) -> tuple[list[Finding], list[str]]:
    """The run's findings and notes, from each task's complete records (task -> records, in the
    run's task order), its role and the chief's name; outputs: each task's own output lines;
    run_dir and spaces (task -> the shared folders it wrote that the run folder holds): where the
    chief's folders are looked in at the run's end for what other tasks left there (strays.py)."""
    trainers = [task for task in records if roles.get(task) in AUDITED_ROLES]
    audited = {task: records[task] for task in trainers}
    # After a restart, batches and weights are compared within the last attempt (every task's
    # passes start again from 1); a write of any attempt is still a write.
    last = {task: (attempts(records[task]) or [[]])[-1] for task in trainers}
    findings = (nonfinite_findings(last) + data_findings(last) + write_findings(audited, chief)
                + weight_findings(last) + memory_findings(audited))
    if run_dir is not None and spaces:
        findings += leftover_findings(run_dir, audited, chief, spaces)
    short = memory.too_short(audited)
    return findings, notes(outputs or {}, trainers) + ([short] if short else [])


def leftover_findings(run_dir: Path, audited: dict[str, list[dict]], chief: str,
                      spaces: dict[str, list[strays.Space]]) -> list[Finding]:
    """What a non-chief left in the chief's model or checkpoint folder (strays.py)."""
    found = strays.leftover_finding(run_dir, audited, chief, spaces)
    return [Finding(strays.KIND, found[0], found[1], strays.FIX)] if found else []


def memory_findings(audited: dict[str, list[dict]]) -> list[Finding]:
    """Tasks whose resident memory grew epoch after epoch (memory.py's test)."""
    found = memory.growth_finding(audited)
    return [Finding("memory-growth", found[0], found[1], memory.FIX)] if found else []


# --- a loss or weights gone NaN
def nonfinite_findings(audited: dict[str, list[dict]]) -> list[Finding]:
    """Tasks whose loss (an epoch's, Keras's own or the lab's) or weights (audit_weights' count of
    values that are not finite) went NaN or infinite: a run that exits 0 and learned nothing after
    that epoch. One finding per moment, naming every task that shares it."""
    moments: dict[tuple, list[str]] = {}
    for task, records in audited.items():
        epochs = sorted(of(records, "epoch"), key=lambda r: r["epoch"])
        bad = [r for r in epochs if not finite(r["loss"])]
        if bad:
            first = bad[0]["epoch"]
            since = sum(r["epoch"] >= first for r in epochs)
            moments.setdefault(("loss", first, str(bad[0]["loss"]), len(bad), since), []).append(task)
            continue
        weights = [r for r in of(records, "audit_weights") if isinstance(r.get("nonfinite"), int) and r["nonfinite"]]
        if weights:
            w = weights[0]
            when = "at the end of training" if w["at"] == "end" else f"from epoch {w['epoch']} on"
            moments.setdefault(("weights", when, w["nonfinite"], w["parameters"], 0), []).append(task)
    found = []
    for (what, when, value, count, since), tasks in moments.items():
        if what == "loss":
            how = ("every epoch" if when == 1 else f"each of the {since} epochs since") if count == since \
                else f"{count} of the {since} epochs since"
            message = (f"{named(tasks)}: the loss was {value} from epoch {when} on ({how}); the run ran on as if "
                       "it trained, and learned nothing from then on")
        else:
            message = (f"{named(tasks)}: {value} of the {count} trainable weights were NaN or infinite {when}: "
                       "the model the run keeps is broken")
        found.append(Finding("non-finite", tasks, message, NONFINITE_FIX))
    return found


NONFINITE_FIX = ("compare with STRATEGY=single (same data, seed and global batch): NaN there too is the model's "
                 "or the data's (a learning rate too high, a log or division of zero in the loss, NaN or inf in "
                 "the inputs: tf.debugging.enable_check_numerics() names the first op); NaN under the strategy "
                 "alone is the strategy's (MirroredStrategy since TF 2.16 and Keras 3.7: tensorflow#90686, "
                 "keras#21061 and keras#21467; try tf-keras, TF_USE_LEGACY_KERAS=1)")


# --- data
def epochs_sampled(records: list[dict]) -> dict[int, dict[int, tuple[str, list[str]]]]:
    """epoch (a pass that had steps, counted from 1) -> step -> (batch digest, example digests)."""
    passes = sorted({r["pass"] for r in of(records, "audit_batch")})
    ordinal = {number: index + 1 for index, number in enumerate(passes)}
    found: dict[int, dict[int, tuple[str, list[str]]]] = {}
    for r in of(records, "audit_batch"):
        examples = [d for d in r["example_digests"] if isinstance(d, str)]
        found.setdefault(ordinal[r["pass"]], {})[r["step"]] = (r["digest"], examples)
    return found


def consumed(records: list[dict]) -> list[int]:
    """Examples consumed per epoch (passes that had steps), in order."""
    return [r["examples"] for r in sorted(of(records, "audit_pass"), key=lambda r: r["pass"]) if r["steps"] > 0]


def policy(records: list[dict]) -> str:
    return next((r["policy"] for r in of(records, "audit_pass") if r["steps"] > 0), "unknown")


def data_findings(audited: dict[str, list[dict]]) -> list[Finding]:
    sampled = {task: epochs_sampled(records) for task, records in audited.items()}
    tasks = [task for task in audited if sampled[task]]
    if len(tasks) < 2:
        return []
    first, others = tasks[0], tasks[1:]
    same, steps, matched = [], 0, 0
    for other in others:
        common = [(e, s) for e in sampled[first] for s in sampled[first][e] if s in sampled[other].get(e, {})]
        equal = sum(sampled[first][e][s][0] == sampled[other][e][s][0] for e, s in common)
        if common and equal >= max(1, SAME_BATCH_SHARE * len(common)):
            same.append(other)
            steps = len(common) if not steps else min(steps, len(common))
            matched = equal if len(same) == 1 else min(matched, equal)
    if same:
        group = [first, *same]
        counts = consumed(audited[first])
        seen = f", and each consumed {counts[0]} examples in epoch 1" if counts else ""
        return [Finding("unsharded", group,
                        f"{named(group)} trained on the same examples in {matched} of {steps} sampled steps: "
                        f"the dataset is not sharded{seen}, so {len(group)} workers did one worker's work "
                        f"{len(group)} times over", unsharded_fix(policy(audited[first])))]
    return overlap_findings(tasks, sampled)


def unsharded_fix(seen: str) -> str:
    data = "tf.data.experimental.AutoShardPolicy.DATA"
    if seen == "OFF":
        return (f"its AutoShardPolicy is OFF: set options.experimental_distribute.auto_shard_policy = {data} for "
                "data in memory (from_tensor_slices, a generator), or FILE for a dataset read from files, and "
                "apply it with dataset.with_options(options)")
    if seen == "function":
        return ("distribute_datasets_from_function gives each worker what its dataset_fn builds: shard it there, "
                "dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id), before "
                "shuffling and batching")
    return (f"shard it: AutoShardPolicy ({data} for data in memory, FILE for files) in the dataset's "
            "options, a file-based dataset with one file or more per worker, or "
            "strategy.distribute_datasets_from_function with input_context.shard")


def overlap_findings(tasks: list[str], sampled: dict) -> list[Finding]:
    found = []
    for index, first in enumerate(tasks):
        for other in tasks[index + 1:]:
            for epoch in sorted(set(sampled[first]) & set(sampled[other])):
                mine = [d for _, examples in sampled[first][epoch].values() for d in examples]
                theirs = [d for _, examples in sampled[other][epoch].values() for d in examples]
                fewer = min(len(set(mine)), len(set(theirs)))
                if not fewer:
                    continue
                shared = len(set(mine) & set(theirs))
                # the repeats each sees of itself: what a data set with duplicates gives by chance
                chance = max(len(mine) - len(set(mine)), len(theirs) - len(set(theirs))) / fewer
                if shared > max(1, OVERLAP_SHARE * fewer) and shared / fewer > 2 * chance:
                    found.append(Finding(
                        "overlapping-shards", [first, other],
                        f"{first} and {other} trained on {shared} of the same examples among the {fewer} each "
                        f"sampled in epoch {epoch} (disjoint shards share none): their shards overlap, as they do "
                        "when a shuffle with no seed comes before DATA sharding (each worker shuffles in its own "
                        "order, then keeps every Nth example of it)",
                        "give the shuffle a seed every worker shares (dataset.shuffle(buffer, seed=42)), or shard "
                        "before shuffling (dataset.shard(num_workers, index), or input_context.shard in "
                        "distribute_datasets_from_function, then shuffle)"))
                    break
    return found


# --- writes
def write_findings(audited: dict[str, list[dict]], chief: str) -> list[Finding]:
    by_path: dict[str, list[dict]] = {}
    for task, records in audited.items():
        for r in of(records, "audit_write"):
            if r["storage"] == "shared":
                by_path.setdefault(r["path"], []).append(r)
    groups: dict[tuple, list[str]] = {}  # (kind, tasks) -> paths, so 10 checkpoints are one finding
    last: dict[tuple, dict] = {}
    for path, writes in sorted(by_path.items()):
        tasks = sorted({w["task"] for w in writes}, key=list(audited).index)
        if len(tasks) < 2:
            continue
        chief_times = [w["time"] for w in writes if w["task"] == chief]
        after = [w for w in writes if w["task"] != chief and chief_times and w["time"] > max(chief_times)]
        kind = "overwrote-chief" if after else "shared-write"
        key = (kind, tuple(tasks))
        groups.setdefault(key, []).append(path)
        newest = max(after or writes, key=lambda w: w["time"])
        last.setdefault(key, newest)
    found = []
    for (kind, tasks), paths in groups.items():
        w = last[(kind, tasks)]
        where = paths[0] + (f" (and {len(paths) - 1} more paths)" if len(paths) > 1 else "")
        how = f"{w['writer']}" + (f" at {w['caller']}" if w["caller"] else "")
        when = time.strftime("%H:%M:%S", time.gmtime(w["time"])) + " UTC"
        head = (f"{w['task']} overwrote the chief's ({chief}) {where}" if kind == "overwrote-chief"
                else f"{named(list(tasks))} all wrote {where}")
        found.append(Finding(kind, list(tasks),
                             f"{head}, on storage every task shares: the last to write wins, and saves that "
                             f"interleave corrupt the file (last: {w['task']} at {when}, {w['bytes']} bytes, by "
                             f"{how})", WRITE_FIX))
    found += final_model_findings(audited, chief)
    return found


WRITE_FIX = ("let the chief alone write the real path and every other task a temporary path of its own, as "
             "TensorFlow's multi-worker tutorial does (write_filepath: <dir>/workertemp_<task index>/<file>, "
             "deleted after the save; every worker must still call save under MultiWorkerMirroredStrategy)")


def final_model_findings(audited: dict[str, list[dict]], chief: str) -> list[Finding]:
    if chief not in audited or not of(audited[chief], "end"):
        return []
    saves = {task: [r for r in of(records, "audit_write") if r["writer"] in FINAL_SAVES and r["during"] == "script"]
             for task, records in audited.items()}
    others = [task for task in audited if task != chief and saves[task]]
    if saves[chief] or not others:
        return []
    w = saves[others[0]][-1]
    return [Finding("no-final-model", [chief, *others],
                    f"{named(others)} saved the final model ({w['writer']} to {w['path']}) and the chief, "
                    f"{chief}, saved none: the model the run keeps is not the chief's, or is lost with "
                    f"{others[0]}'s files",
                    "save on the chief (worker 0 where there is no chief task) to the real path, and on the other "
                    "workers to temporary paths of their own")]


# --- weights
def weight_findings(audited: dict[str, list[dict]]) -> list[Finding]:
    digests: dict[str, dict[tuple, str]] = {}
    for task, records in audited.items():
        for r in of(records, "audit_weights"):
            digests.setdefault(task, {})[(r["at"] == "end", r["epoch"], r["at"])] = r["digest"]
    tasks = [task for task in audited if task in digests]
    if len(tasks) < 2:
        return []
    common = sorted(set.intersection(*(set(digests[task]) for task in tasks)))
    for key in common:
        values = {task: digests[task][key] for task in tasks}
        if len(set(values.values())) > 1:
            _, epoch, at = key
            when = "at the end of training" if at == "end" else f"from epoch {epoch} on"
            shown = ", ".join(f"{task} {digest[:12]}" for task, digest in values.items())
            return [Finding("replicas-differ", tasks,
                            f"{named(tasks)} hold different weights {when} ({shown}): the replicas drifted "
                            "apart, so what each worker saves or evaluates is its own model, not the one trained "
                            "together",
                            "change variables only inside strategy.run, through the optimizer (or with a value every "
                            "worker computes alike): an assign outside it from a worker's own data or an unseeded "
                            "random op differs per worker; seed every worker alike (tf.keras.utils.set_random_seed)")]
    return []


# --- notes
def notes(outputs: dict[str, str], trainers: list[str]) -> list[str]:
    fell_back = [task for task in trainers if AUTO_FALLBACK in outputs.get(task, "")]
    if not fell_back:
        return []
    return [f"{named(fell_back)}: TensorFlow's AUTO sharding found no files to shard and used DATA: every worker "
            "reads and preprocesses the whole data set and keeps its share, the input work done once per worker "
            "(a dataset read from files, sharded by FILE, or distribute_datasets_from_function with "
            "input_context.shard avoids it); a note on cost, not a finding"]
