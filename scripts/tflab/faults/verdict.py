"""The verdict on a make chaos run's resume: did the run end where the same run undisturbed ends?

    equivalent  finished, and its final losses and weights are the undisturbed twin's, within RTOL
    lossy       finished, and they are not: k steps were repeated or skipped across the restart
    corrupt     a torn checkpoint was refused: by which task, and the file where TensorFlow names it
    hang        stopped by TIMEOUT or the stall watch: the stall's finding says where
    failed      ended with an error: the run's explanation of it
    no twin     finished, but no undisturbed twin to compare with: why not, and the steps anyway
    not injected  the fault never landed: there is no resume to judge
    interrupted the lab itself was stopped (Ctrl-C, SIGTERM, tflab down) before the run ended: the
                tasks' exits are the lab's stop, not the fault's doing, and there is no verdict on it

The twin is a run of the same settings without the fault (faults/twin.py finds, reuses or runs
it). Pure functions over summaries (core/runsummary.py) and the tasks' events (core/schema.py);
everything is read as hostile: a twin of another shape is "no twin: ...", never a guess.

Host side: imports neither TensorFlow nor Docker.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from tflab.core import explain
from tflab.core.foreign import shown
from tflab.core.schema import attempts, by_event

# a verdict's `kind`
KINDS = ("equivalent", "lossy", "corrupt", "hang", "failed", "no twin", "not injected", "interrupted")
# Relative tolerance on final losses and on each variable's sum and L2 norm. The same settings on
# the same image train identically (make chaos's kill test finds the very same sha256), and the
# largest rounding difference measured between reduction orders is 4e-5 relative (FACTS.md: MWMS
# of 3 against one process, batch 96); a resume that repeats a few batches mid-epoch ends 2e-3 off
# (tests/integration/test_chaos.py, MID_EPOCH_RTOL's measurement). 1e-4 lies between: 2.5 times the
# rounding, 20 times below the smallest real difference seen.
RTOL = 1e-4
ATOL = 1e-7  # where a value is near zero, float32's own step at 1 (1.2e-7) is what rounding can leave
TORN_CHECKPOINT = re.compile(explain.TORN_CHECKPOINT)  # core/explain.py's torn-checkpoint signature
# The checkpoint file TensorFlow names: after "file", "for" or "on", else the first path with a checkpoint's name.
TORN_FILE = re.compile(r"(?:table file|matching files for|files on|file) (/[^\s:'\",]+)|"
                       r"(/[^\s:'\",]*(?:ckpt|checkpoint|chief|backup)[^\s:'\",]*)(?<!\.py)(?=[\s:'\",]|$)")
HANG_OUTCOMES = ("timed out", "stalled")


def judge(summary: Any, events: Mapping[str, list], twin: Any = None, no_twin: str = "",
          ignored: tuple[str, ...] = ()) -> dict:
    """The verdict of one chaos run: `summary` its runsummary.Summary (its `chaos` section and
    `stall` set), `events` each task's records, `twin` the undisturbed run's Summary (or None,
    `no_twin` then saying why), `ignored` the settings a twin may differ in (twin.ignored()).
    Returns {"kind", "words", "twin", "steps_repeated", "steps_skipped", "difference" (in
    tolerances), "file", "by"}."""
    found = blank()
    if not isinstance(summary, Mapping) or not isinstance(summary.get("tasks"), list):
        return {**found, "kind": "no twin", "words": "no verdict: the run has no summary the lab wrote"}
    section = summary.get("chaos")
    chaos: Mapping = section if isinstance(section, Mapping) else {}
    if chaos.get("injected") is False and summary.get("outcome") != "interrupted":
        missed = chaos.get("not_injected") or "the fault never landed"
        return {**found, "kind": "not injected", "words": f"no resume to judge: {shown(str(missed), 300)}"}
    steps = resume_steps(events, chaos.get("target"), chaos.get("landed_step"))
    found.update(steps_repeated=steps["repeated"], steps_skipped=steps["skipped"])
    torn = torn_checkpoint(events) or torn_explained(summary)
    if torn is not None:
        return {**found, "kind": "corrupt", "file": torn["file"], "by": torn["by"],
                "words": f"{torn['by']} refused a torn checkpoint{' ' + torn['file'] if torn['file'] else ''}: "
                         f"{torn['line']}"}
    if summary.get("outcome") == "interrupted":
        return {**found, "kind": "interrupted", "words": interrupted_words(summary)}
    if summary.get("outcome") in HANG_OUTCOMES:
        if retried_to_the_end(summary):
            return {**found, "kind": "failed", "words": retried_words(summary)}
        return {**found, "kind": "hang", "words": hang_words(summary)}
    if summary.get("ok") is not True:
        return {**found, "kind": "failed", "words": failed_words(summary)}
    said = steps["words"]
    problem = twin_problem(summary, twin, ignored) if twin is not None else (no_twin or "none was given")
    if problem:
        return {**found, "kind": "no twin", "words": f"{problem}; {said}"}
    diverged = diverged_before(events, twin)
    if diverged:
        return {**found, "kind": "no twin", "words": f"{diverged}; {said}"}
    differences, unchecked = compare(summary, twin)
    if not differences:
        return {**found, "kind": "no twin", "words": f"nothing the lab reads to compare with the undisturbed run "
                f"{shown(str(twin['run']), 80)}: {'; '.join(unchecked) or 'no training task in both'}; {said}"}
    found["twin"] = twin["run"]  # compared: the only verdicts that name it
    worst = max(differences, key=lambda d: d[2])
    # in tolerances (1: at the edge); None where a value was no number (JSON has no infinity)
    found["difference"] = worst[2] if math.isfinite(worst[2]) else None
    said += "".join(f"; {note}" for note in unchecked)
    if worst[2] <= 1:
        return {**found, "kind": "equivalent",
                "words": f"ends where the undisturbed run {shown(str(twin['run']), 80)} ends (final losses"
                         f"{'' if unchecked else ' and weights'} within {RTOL:g} relative); {said}"}
    return {**found, "kind": "lossy",
            "words": f"ends off the undisturbed run {shown(str(twin['run']), 80)}: {worst[0]} {worst[1]}; {said}"}


def blank() -> dict:
    return {"kind": "", "words": "", "twin": None, "steps_repeated": None, "steps_skipped": None,
            "difference": None, "file": None, "by": None}


# -- the steps across a restart -------------------------------------------------------------------

def resume_steps(events: Mapping[str, list], target: Any = None, landed_step: Any = None) -> dict:
    """Steps repeated and skipped across every restart, from each task's attempts: the step the
    cluster had reached before it (the furthest task's whole epochs as its `epoch` events count
    them, or the fault's step where it landed at one: the workers step together, and a task killed
    between its backup and its epoch's event had trained what it did not log) against the step
    each task resumed from (its `restored`, or a script's `fit`; 0 where it started over)."""
    restarts: dict[int, dict[str, tuple[int, int]]] = {}  # restart -> task -> (reached, resumed)
    for task, records in (events.items() if isinstance(events, Mapping) else []):
        tries = attempts([r for r in records if isinstance(r, dict)]) if isinstance(records, list) else []
        if not tries:
            continue
        per_epoch = steps_per_epoch(tries)
        landed = count(landed_step) if task == target else None
        reached = max(done(tries[0]), landed or 0)  # the step the task had reached, across its attempts
        for number, attempt in enumerate(tries[1:], start=1):
            resumed = resumed_at(attempt, per_epoch)
            if resumed is None:  # it never trained (it ended at the rendezvous): it reached nothing new
                continue
            restarts.setdefault(number, {})[shown(str(task), 60)] = (reached, resumed)
            reached = resumed + done(attempt)
    if not restarts:
        restarted = any(isinstance(records, list) and len(attempts([r for r in records if isinstance(r, dict)])) > 1
                        for records in (events.values() if isinstance(events, Mapping) else []))
        return {"repeated": 0, "skipped": 0,
                "words": "restarted, and no task logged where it resumed (a custom loop logs no Keras epoch): the "
                         "steps repeated or skipped are unknown" if restarted else "no task restarted: nothing resumed"}
    repeated, skipped, lines = 0, 0, []
    for number, tasks in sorted(restarts.items()):
        furthest = max(tasks, key=lambda task: tasks[task][0])
        top = tasks[furthest][0]
        starts = {resumed for _, resumed in tasks.values()}
        repeated = max(repeated, top - min(starts))  # never below 0, where it started
        skipped = max(skipped, max(starts) - top)
        if starts != {top}:
            at = f"{starts.pop()} on every task" if len(starts) == 1 else \
                ", ".join(f"{resumed} on {task}" for task, (_, resumed) in sorted(tasks.items()))
            lines.append(f"restart {number}: step {top} reached ({furthest}), resumed at {at}")
    untold = "; the steps of an epoch under way at the fault are in no event"
    if not lines:
        return {"repeated": 0, "skipped": 0,
                "words": f"no step repeated or skipped: every task resumed where the last whole epoch ended{untold}"}
    said = [f"{repeated} step{'s' * (repeated != 1)} repeated"] + ([f"{skipped} skipped"] if skipped else [])
    return {"repeated": repeated, "skipped": skipped, "words": f"{', '.join(said)} ({'; '.join(lines[:4])}){untold}"}


def done(attempt: list[dict]) -> int:
    """The steps of an attempt's whole epochs, as its `epoch` events count them."""
    return sum(e["steps"] for e in whole(by_event(attempt, "epoch")))


def whole(epochs: list[dict]) -> list[dict]:
    """The epoch records whose `steps` is a count (a foreign one is not summed)."""
    return [e for e in epochs if isinstance(e.get("steps"), int) and not isinstance(e.get("steps"), bool)
            and 0 <= e["steps"] < 2**40]


def count(value: Any) -> int | None:
    """A count as an event should hold one, else None (a foreign value is not counted)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**40 else None


def steps_per_epoch(tries: list[list[dict]]) -> int | None:
    counted = [e["steps"] for attempt in tries for e in whole(by_event(attempt, "epoch")) if e["steps"] > 0]
    return max(counted) if counted else None


def resumed_at(attempt: list[dict], per_epoch: int | None) -> int | None:
    """The global step a restarted attempt resumed from: its `restored` (the lab's trainer) or
    first `fit` (a script's Keras fit), 0 where its epochs start at 1 again, None where it logged
    neither (it ended before it trained)."""
    for event in ("restored", "fit"):
        for record in by_event(attempt, event):
            epoch, step = count(record.get("epoch")), count(record.get("step"))
            if epoch is not None and step is not None:
                if epoch <= 1:
                    return step
                return None if per_epoch is None else (epoch - 1) * per_epoch + step
    epochs = whole(by_event(attempt, "epoch"))
    return 0 if epochs and epochs[0].get("epoch") == 1 else None


# -- what ended it ----------------------------------------------------------------------------------

def torn_checkpoint(events: Mapping[str, list]) -> dict | None:
    """The first error, of any attempt of any task, in which TensorFlow refused a checkpoint it
    could not read whole: {"by" (the task), "file" (or None), "line"}."""
    for task, records in (events.items() if isinstance(events, Mapping) else []):
        for record in records if isinstance(records, list) else []:
            message = record.get("message") if isinstance(record, dict) and record.get("event") == "error" else None
            if not isinstance(message, str) or not TORN_CHECKPOINT.search(message):
                continue
            path = TORN_FILE.search(message)
            line = next((part for part in message.splitlines() if TORN_CHECKPOINT.search(part)), message)
            named = next((g for g in path.groups() if g), None) if path else None
            return {"by": shown(str(task), 60), "file": shown(named, 300) if named else None,
                    "line": shown(line.strip(), 300)}
    return None


def torn_explained(summary: Mapping) -> dict | None:
    """A task the lab explained as torn-checkpoint from its output, where its events hold no error."""
    for row in summary["tasks"]:
        explanation = row.get("explanation") if isinstance(row, Mapping) else None
        if isinstance(explanation, Mapping) and explanation.get("signature") == "torn-checkpoint":
            return {"by": shown(str(row.get("task")), 60), "file": None,
                    "line": shown(str(explanation.get("what")), 300)}
    return None


def hang_words(summary: Mapping) -> str:
    stall = summary.get("stall")
    if isinstance(stall, Mapping) and isinstance(stall.get("what"), str):
        return f"{shown(str(summary.get('outcome')), 20)}: {shown(stall['what'], 500)}"
    return f"{shown(str(summary.get('outcome')), 20)}, and the stall watch found no place to name"


def interrupted_words(summary: Mapping) -> str:
    """A run the lab itself was stopped in: the tasks' exits (137 from the lab's own kill) say
    nothing of the fault."""
    stall = summary.get("stall")
    moment = stall.get("moment") if isinstance(stall, Mapping) else None
    by = f" ({shown(moment, 60)})" if isinstance(moment, str) and moment and moment != "stall" else ""
    return (f"the lab was stopped{by} before the run ended, and stopped its tasks itself: no verdict on the "
            "fault's resume; run it again to judge it")


def retried_to_the_end(summary: Mapping) -> bool:
    """Timed out with no stall named, restarted twice or more, and a task failing with an error:
    a job whose tasks kept failing until its deadline (a replay under OnFailure with no
    backoffLimit, the operator's simple.yaml), not one that stopped moving."""
    stall = summary.get("stall")
    restarts = summary.get("restarts")
    return (summary.get("outcome") == "timed out" and not (isinstance(stall, Mapping) and stall.get("what"))
            and isinstance(restarts, list) and len(restarts) >= 2
            and any(isinstance(row, Mapping) and (row.get("explanation") or row.get("error"))
                    for row in summary["tasks"]))


def retried_words(summary: Mapping) -> str:
    return (f"timed out while its tasks kept failing and were restarted ({len(summary['restarts'])} restarts), "
            f"not a hang: {failed_words(summary)}")


def failed_words(summary: Mapping) -> str:
    """The run's explained error: the first task's explanation, else its error, else its exit code."""
    rows = [row for row in summary["tasks"] if isinstance(row, Mapping)]
    for row in rows:
        explanation = row.get("explanation")
        if isinstance(explanation, Mapping) and isinstance(explanation.get("what"), str):
            return f"{shown(str(row.get('task')), 60)} {shown(explanation['what'], 400)}"
    for row in rows:
        if isinstance(row.get("error"), str) and row["error"]:
            return f"{shown(str(row.get('task')), 60)}: {shown(row['error'].splitlines()[0], 300)}"
    codes = [f"{shown(str(row.get('task')), 60)} exited {row.get('exit_code')}" for row in rows
             if row.get("exit_code") not in (None, 0)]
    return "; ".join(codes) or f"{shown(str(summary.get('outcome')), 20)}, with no error logged"


# -- the twin ---------------------------------------------------------------------------------------

def twin_problem(summary: Mapping, twin: Any, ignored: tuple[str, ...] = ()) -> str | None:
    """Why `twin` is no undisturbed twin of `summary`'s run, or None (the verdict's kind says "no
    twin": its words do not say it again).
    `ignored`: settings that do not change the training (faults/twin.py's list) beside the fault's."""
    if not isinstance(twin, Mapping) or not isinstance(twin.get("tasks"), list) or not isinstance(twin.get("run"), str):
        return "the run given as one has no summary the lab wrote"
    name = shown(twin["run"], 80)
    if twin.get("chaos") is not None:
        return f"{name} is a chaos run itself, not an undisturbed one"
    if twin.get("ok") is not True:
        return f"{name} did not finish ok ({shown(str(twin.get('outcome')), 20)})"
    differs = settings_problem(summary.get("settings"), twin.get("settings"), ignored)
    if differs:
        return f"{name} {differs}"
    if training(summary) != training(twin):
        return f"{name}'s training tasks are not this run's"
    return None


TRAINING = ("trainer", "script")  # the roles whose end is the training's


def settings_problem(ours: Any, theirs: Any, ignored: tuple[str, ...] = ()) -> str | None:
    """How a twin's settings differ from the run's where it matters ("was run with other settings:
    EPOCHS=3, not 5"), or None."""
    if not isinstance(ours, Mapping) or not isinstance(theirs, Mapping):
        return "has no settings to compare"
    for key in sorted((set(ours) | set(theirs)) - set(ignored), key=str):
        if ours.get(key, "(unset)") != theirs.get(key, "(unset)"):
            return (f"was run with other settings: {shown(str(key).upper(), 40)}="
                    f"{shown(str(theirs.get(key, '(unset)')), 60)}, not {shown(str(ours.get(key, '(unset)')), 60)}")
    return None


def training(summary: Mapping) -> set:
    return {row.get("task") for row in summary["tasks"] if isinstance(row, Mapping) and row.get("role") in TRAINING}


def compare(summary: Mapping, twin: Mapping) -> tuple[list[tuple[str, str, float]], list[str]]:
    """(what, how far, the difference in tolerances: at most 1 is within) for each training task's
    final loss and each weight fingerprint, or digest where no fingerprint was logged; and what
    could not be compared (a script logs no weights)."""
    rows = {row.get("task"): row for row in twin["tasks"] if isinstance(row, Mapping)}
    found: list[tuple[str, str, float]] = []
    unchecked: list[str] = []
    for row in summary["tasks"]:
        other = rows.get(row.get("task")) if isinstance(row, Mapping) and row.get("role") in TRAINING else None
        if other is None:
            continue
        task = shown(str(row.get("task")), 60)
        if row.get("final_loss") is None and other.get("final_loss") is None:
            unchecked.append(f"{task}'s final loss unchecked: neither run logged one (a custom loop logs no Keras "
                             "epoch; tflab's LabCallback does)")
        else:
            found.append(close(f"{task}'s final loss", row.get("final_loss"), other.get("final_loss"), 1.0))
        ours, theirs = fingerprints(row), fingerprints(other)
        if ours is not None and theirs is not None and set(ours) == set(theirs):
            for name in sorted(ours):
                size, total, norm = ours[name]
                _, other_total, other_norm = theirs[name]
                scale = max(norm, other_norm)
                found.append(close(f"{task}'s {name} L2 norm", norm, other_norm, scale))
                # |sum| <= sqrt(size) * L2 (Cauchy-Schwarz): the sum's tolerance is sized by what it could be
                found.append(close(f"{task}'s {name} sum", total, other_total, math.sqrt(size) * scale))
        elif row.get("weights_sha256") is None and other.get("weights_sha256") is None:
            unchecked.append(f"{task}'s weights unchecked: neither run logged them (a script's are its own)")
        elif row.get("weights_sha256") != other.get("weights_sha256"):
            said = "one run logged none" if None in (row.get("weights_sha256"), other.get("weights_sha256")) else \
                "differ (a digest, no fingerprint to say by how much)"
            found.append((f"{task}'s weights", said, math.inf))
    return found, unchecked


def diverged_before(events: Mapping[str, list], twin: Mapping) -> str | None:
    """Where a task's first epoch, as its first attempt logged it, ended at another loss than the
    twin's first epoch: the job does not train the same way twice (an unseeded initialiser or
    shuffle), and no twin can judge its resume. No fault of make chaos changes a first epoch it let
    finish (a pause, a hang or a slow link only delay it; a kill inside it leaves no epoch to read)."""
    rows = {row.get("task"): row for row in twin["tasks"] if isinstance(row, Mapping) and row.get("role") in TRAINING}
    for task, records in (events.items() if isinstance(events, Mapping) else []):
        theirs = rows[task].get("losses") if task in rows else None
        tries = attempts([r for r in records if isinstance(r, dict)]) if isinstance(records, list) else []
        if not isinstance(theirs, list) or not theirs or not tries:
            continue
        ours = next((e.get("loss") for e in whole(by_event(tries[0], "epoch")) if e.get("epoch") == 1), None)
        what, words, far = close(f"{shown(str(task), 60)}'s first epoch", ours, theirs[0], 1.0)
        if math.isfinite(far) and far > 1:
            return (f"the job does not train the same way twice: {what} ended at {words} in the undisturbed run "
                    f"{shown(str(twin.get('run')), 80)}, before any fault; seed it (tf.keras.utils."
                    "set_random_seed, a seeded shuffle) for a verdict")
    return None


def close(what: str, ours: Any, theirs: Any, scale: float) -> tuple[str, str, float]:
    """(what, in words, |ours - theirs| over its tolerance RTOL * scale + ATOL); inf where not numbers."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (ours, theirs)):
        return what, f"{shown(repr(ours), 30)} against {shown(repr(theirs), 30)}", math.inf
    tolerance = RTOL * max(abs(scale), abs(ours), abs(theirs)) + ATOL
    return what, f"{ours:.6g} against {theirs:.6g}", abs(ours - theirs) / tolerance


def fingerprints(row: Mapping) -> dict[str, tuple[int, float, float]] | None:
    """A row's weights_fingerprint as name -> (size, sum, L2); None where it has none or a foreign one."""
    found = row.get("weights_fingerprint")
    if not isinstance(found, list) or not found:
        return None
    result = {}
    for item in found:
        if not isinstance(item, Mapping):
            return None
        name, size, total, norm = item.get("name"), count(item.get("size")), item.get("sum"), item.get("l2")
        if not isinstance(name, str) or size is None or not isinstance(total, (int, float)) or \
                not isinstance(norm, (int, float)) or isinstance(total, bool) or isinstance(norm, bool):
            return None  # a word ("nan") or a foreign value: the digest decides
        result[shown(name, 80)] = (size, float(total), float(norm))
    return result

