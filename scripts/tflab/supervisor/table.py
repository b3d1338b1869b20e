"""The finished run in words, from its summary.json (runsummary.Summary, summary.py's one writer):
the table the run ends with, and the lines `tflab why` and the fixture's why() say beyond its rows
(a chaos fault that never landed, a stall's finding, what broke and what to do, where a script
resumed, a replay's restarts, the audit's findings).
"""

from __future__ import annotations

from tflab.console import cell, columns
from tflab.core.foreign import shown
from tflab.core.runsummary import Summary, TaskRow
from tflab.supervisor import preemption
from tflab.supervisor.summary import NOT_AUDITED

COLUMNS: list[tuple[str, str, str] | tuple[str, str, str, float]] = [  # header, row key, format[, scale]
    ("task", "task", "{}"),
    ("status", "status", "{}"),
    ("exit", "exit_code", "{}"),
    ("ready s", "cluster_ready_seconds", "{:.1f}"),
    ("first step s", "first_step_seconds", "{:.2f}"),
    ("steady ms", "steady_step_seconds", "{:.2f}", 1000),
    ("examples/s", "examples_per_second", "{:.0f}"),
    ("final loss", "final_loss", "{:.4f}"),
    ("peak RSS MB", "peak_rss_bytes", "{:.0f}", 1e-6),
    ("weights", "weights_sha256", "{:.12}"),
]


def table(result: Summary) -> str:
    lines = columns([column[0] for column in COLUMNS],
                    [[cell(getattr(row, key), fmt, *scale) for _, key, fmt, *scale in COLUMNS] for row in result.tasks])
    for row in result.tasks:
        if row.error and not row.explanation:
            lines.append(f"{shown(row.task)}: {row.error.splitlines()[0][:300]}")
    lines += explanation_lines(result.tasks)  # what broke first, then where the rest were (why_lines)
    lines += stall_lines(result)
    lines += resume_lines(result.tasks)
    trainers = [row for row in result.tasks if row.role == "trainer"]
    agree = "" if len(trainers) < 2 or any(row.weights_sha256 is None for row in trainers) else (
        "; every task ended with the same weights" if result.weights_agree else "; weights differ")
    restarts = len(result.restarts)
    if restarts:
        agree += f"; {restarts} restart{'s' * (restarts > 1)}"
    chaos = result.chaos
    if chaos:
        missed = chaos_lines(result)
        scenario, target, at, outcome = (shown(chaos.get(key), 60)
                                         for key in ("scenario", "target", "at", "outcome"))
        landed = f"landed {shown(chaos['landed'], 200)}; " if isinstance(chaos.get("landed"), str) else ""
        lines += missed or [f"chaos: {scenario} on {target} at {at}: {outcome}; {landed}"
                            f"detected after {_seconds(chaos.get('detection_seconds'))}, "
                            f"training again after {_seconds(chaos.get('recovery_seconds'))}"]
        found = chaos.get("preemptions")
        lines += [preemption.result_line(p) for p in (found if isinstance(found, list) else []) if isinstance(p, dict)]
        unchecked = chaos.get("unchecked")
        given = result.settings if isinstance(result.settings, dict) else {}
        job = "a script" if given.get("script") else "a replayed job" if given.get("tfjob") else "its job"
        lines += [f"chaos: unchecked for {job}: {shown(note, 300)}"
                  for note in (unchecked if isinstance(unchecked, list) else [])]
        lines += verdict_lines(result)
    lines += audit_lines(result)
    if result.findings:
        count = len(result.findings)
        strict = (result.settings or {}).get("audit") == "strict"
        agree += f"; {count} audit finding{'s' * (count > 1)}" + (" (AUDIT=strict fails the run)" if strict else "")
    reason = f" ({shown(result.reason, 40)})" if result.get("reason") else ""
    precision = (result.settings or {}).get("precision")  # PRECISION, where a mixed one trained
    at = f" at {shown(precision, 20)}" if isinstance(precision, str) and precision not in ("", "float32") else ""
    lines.append(f"run {shown(result.run)}{at}: {shown(result.outcome)}{reason} in {result.wall_seconds:.1f} s{agree}")
    # Every string here may come from a foreign summary.json: nothing reaches the terminal raw,
    # and only an explanation's own line breaks (escaped in any one-line field above) start a line.
    return "\n".join(shown(line, limit=0) for line in "\n".join(lines).split("\n"))


def why_lines(result: Summary) -> list[str]:
    """Everything the lab can say of a finished run beyond its table's rows: what broke and what to
    do, where a restarted script resumed, what a replay's restarts followed, the audit's findings
    (tflab why, and the fixture's why()). A chaos fault that never landed leads: the run is not the
    one that was asked for. Then what broke: where a task failed, its
    explanation leads, and where every task was when the lab stopped the rest follows it (a peer
    unreachable before the cluster formed leaves the others waiting in the strategy's first
    collective, which alone reads as a program's mismatched collectives). The resume's verdict
    follows what broke (a hang's or a failure's verdict is its words again, which lead)."""
    return (chaos_lines(result) + explanation_lines(result.tasks) + stall_lines(result) + verdict_lines(result)
            + resume_lines(result.tasks) + restart_lines(result) + audit_lines(result))


def chaos_lines(result: Summary) -> list[str]:
    """A make chaos run whose fault never landed (faults/chaos.py's `not_injected`): first of all,
    for a run that may otherwise read as ok, never "survived"."""
    chaos = result.chaos
    if not isinstance(chaos, dict) or not isinstance(chaos.get("not_injected"), str):
        return []
    missed = chaos["not_injected"]
    scenario, target, at = (shown(chaos.get(key), 60) for key in ("scenario", "target", "at"))
    return [f"chaos: {scenario} on {target} at {at}: not injected: {shown(missed, 500)}"]


def verdict_lines(result: Summary) -> list[str]:
    """make chaos's verdict on the resume (faults/verdict.py): equivalent, lossy, corrupt, hang,
    failed, no twin. The summary may be foreign: shown escaped, and nothing for a foreign verdict."""
    chaos = result.chaos
    found = chaos.get("verdict") if isinstance(chaos, dict) else None
    if not isinstance(found, dict) or not isinstance(found.get("kind"), str) or not isinstance(found.get("words"), str):
        return []
    if found["kind"] == "not injected":
        return []  # chaos_lines said it first
    return [f"chaos: verdict: {shown(found['kind'], 20)}: {shown(found['words'], 1500)}"]


def stall_lines(result: Summary) -> list[str]:
    """Where every task was at a stall, or before the lab stopped them (supervisor/stall.py): who
    stopped where, who waited on whom, the fix. The summary may be foreign: every field is checked
    and shown escaped."""
    found = result.get("stall")
    if not isinstance(found, dict) or not all(isinstance(found.get(key), str) for key in ("kind", "what", "fix")):
        return []
    moment = found.get("moment") if isinstance(found.get("moment"), str) else "stall"
    head = f"stall ({shown(found['kind'], 40)})" if moment == "stall" else \
        f"where every task was at {shown(moment, 60)} ({shown(found['kind'], 40)})"
    lines = [f"{head}: {shown(found['what'], 2000)}", f"  fix: {shown(found['fix'], 1000)}"]
    if isinstance(found.get("link"), str) and found["link"]:
        lines.append(f"  see: {shown(found['link'], 300)}")
    return lines


def audit_state(result: Summary) -> str:
    """What the audit covered, for `make why`'s quiet line: never "audited" where it was not."""
    if (result.settings or {}).get("audit") == "off":
        return "AUDIT=off: nothing was audited"
    unaudited = [note for note in result.notes if note.startswith(NOT_AUDITED)]
    return "; ".join(unaudited) if unaudited else "audited"


def restart_lines(result: Summary) -> list[str]:
    """A replay's restarts and the failures before them (a replica's earlier attempts), which its
    last attempt's rows do not show; tasks that failed alike share a line."""
    if not result.tfjob or not result.restarts:
        return []
    groups: dict[str, list[str]] = {}
    for row in result.tasks:
        for error in row.earlier_errors or []:
            groups.setdefault(error, [])
            if row.task not in groups[error]:
                groups[error].append(row.task)
    count = len(result.restarts)
    alone = [f"{shown(row.task)} {row.restart_count} time{'s' * (row.restart_count > 1)}"
             for row in result.tasks if row.restart_count]  # the kubelet's restarts in place (restartCount)
    who = f"; in place, alone: {', '.join(alone)}" if alone else ""
    return [f"the job restarted {count} time{'s' * (count > 1)}, as its restart policy says{who}"] + [
        f"  before a restart: {', '.join(shown(task) for task in tasks)} {shown(error, 300)}"
        for error, tasks in groups.items()]


def audit_lines(result: Summary) -> list[str]:
    """The audit's findings (what is wrong, then the fix) and notes, for the table and lab.why()."""
    lines = []
    for finding in result.findings:
        lines.append(f"finding ({shown(finding['kind'], 40)}): {shown(finding['message'], 1000)}")
        lines.append(f"  fix: {shown(finding['fix'], 1000)}")
    lines += [f"note: {shown(note, 1000)}" for note in result.notes]
    return lines


def explanation_lines(rows: list[TaskRow]) -> list[str]:
    """Per failed task, what happened and what to do; tasks that failed alike share the lines."""
    groups: dict[tuple, list[TaskRow]] = {}
    for row in rows:
        found = row.get("explanation")
        if found:
            groups.setdefault((found["what"], found["fix"], found["link"]), []).append(row)
    lines = []
    for (what, fix, link), members in groups.items():
        lines.append(f"{', '.join(shown(row['task']) for row in members)}: {what}".replace("\n", "\n    "))
        error = members[0]["error"]
        if error and members[0]["explanation"]["signature"] != "exception" and error.splitlines()[0] != what:
            # ("exception" says it already, as does a bare exit code)
            lines.append(f"  error: {error.splitlines()[0][:300]}")
        lines.append(f"  fix: {shown(fix, limit=0)}")
        if link:
            lines.append(f"  see: {shown(link)}")
    return lines


def resume_lines(rows: list[TaskRow]) -> list[str]:
    """Per restart, where each script task resumed (resume.py); tasks that did alike share a line."""
    groups: dict[tuple, list[str]] = {}
    for row in rows:
        for found in row.get("resumes") or []:
            groups.setdefault((found.get("attempt"), found.get("words")), []).append(shown(row["task"]))
    # The same tasks saying the same after several restarts share one line: a replay restarted
    # 41 times without a fit to see printed 41 lines alike.
    alike: dict[tuple, list[str]] = {}
    for (attempt, words), tasks in groups.items():
        alike.setdefault((", ".join(tasks), words), []).append(
            shown(attempt - 1 if isinstance(attempt, int) else attempt))
    return [f"{tasks}: after restart{'s' * (len(restarts) > 1)} {spans(restarts)}, {shown(words, limit=0)}"
            for (tasks, words), restarts in alike.items()]


def spans(numbers: list[str]) -> str:
    """1, 2, 3, 5 -> "1 to 3, 5": restarts said as runs of consecutive numbers."""
    parts: list[list[str]] = []
    for number in numbers:
        if parts and number.isdigit() and parts[-1][-1].isdigit() and int(number) == int(parts[-1][-1]) + 1:
            parts[-1].append(number)
        else:
            parts.append([number])
    return ", ".join(part[0] if len(part) == 1 else f"{part[0]} to {part[-1]}" for part in parts)


def _seconds(value) -> str:
    return "-" if not isinstance(value, (int, float)) or isinstance(value, bool) else f"{value:.1f} s"
