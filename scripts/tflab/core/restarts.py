"""RESTART_POLICY's decision after a failure, as a TFJob's restartPolicy makes it (the lab's own
runs; a replay asks the operator's and JobSet's rules, k8s/), refined by what the lab knows of
each failure (core/explain.py's signatures)."""

from __future__ import annotations

from tflab.core.exitcodes import FIRST_SIGNAL_CODE
from tflab.core.explain import PEER_DONE_SIGNATURES, PREEMPTED, Evidence, match

# What the lab's look at every live task (supervisor/stall.py's findings, at a stall or at the end
# of a failure's grace) names as the program's own doing: a task stopped in its callback, its input
# pipeline, a save or a restore, or one of the deadlocks after a peer exited 0. The same program
# meets it again after a restart. "stuck-task" (stopped in its own code, in no phase the lab knows: a
# read of something outside that may come back), "hang" (make chaos's, on purpose), "no-stacks" and
# "all-waiting" say nothing of the kind: at a failure's grace, a task waiting in its collective
# waits for the peer that failed (a kill, a partition), which a restart brings back.
PROGRAM_STALLS = frozenset({"stuck-callback", "stuck-input-pipeline", "stuck-in-save", "deadlock-at-restore",
                            "stuck-in-teardown"} | {s.name for s in PEER_DONE_SIGNATURES})


def restart_verdict(policy: str, failed: list[Evidence]) -> tuple[bool, str]:
    """Whether RESTART_POLICY restarts after these failures (the tasks that ended non-zero by
    themselves, not those the lab stopped), and why not (or, restarting, what it foresees).
    ExitCode does as Kubeflow's: 128 and up (ended by a signal) and the preemption code are
    retryable, 1-127 permanent. The lab's evidence refines it: a memory kill or a known bug is
    never retried (it would come back), and a task that only lost a peer is retried unless
    another task failed for good (then that one is the cause). A peer that exited 0 was never
    lost (PEER_DONE_SIGNATURES): its survivor deadlocked, for good."""
    if policy == "Never":
        return False, "RESTART_POLICY=Never"
    if policy == "OnFailure":
        # The operator restarts every failure; the lab does too, and says so where it knows a
        # deadlock the program will meet again (PEER_DONE_SIGNATURES: a chief-only save, ...).
        repeats = [(e, s) for e in failed if (s := match(e)) and s in PEER_DONE_SIGNATURES]
        if repeats:
            repeating, deadlock = repeats[0]
            return True, (f"{repeating.task} deadlocked in a way a restart repeats ({deadlock.name}); restarting "
                          "all the same, as RESTART_POLICY=OnFailure does: it will stall again")
        return True, ""
    if not failed:
        return True, ""
    killed: list[Evidence] = []
    lost_peer: list[Evidence] = []
    permanent: list[Evidence] = []
    for evidence in failed:
        signature = match(evidence)
        if signature and signature.retry is False:
            return False, (f"{evidence.task} failed in a way a restart repeats ({signature.name}), "
                           "RESTART_POLICY=ExitCode")
        if (evidence.exit_code or 0) >= FIRST_SIGNAL_CODE or evidence.exit_code == PREEMPTED:
            killed.append(evidence)
        elif signature and signature.retry:
            lost_peer.append(evidence)
        else:
            permanent.append(evidence)
    if killed or (lost_peer and not permanent):
        return True, ""
    codes = ", ".join(f"{e.task} exited with code {e.exit_code}" for e in permanent)
    return False, f"{codes}: 1-127 is permanent under RESTART_POLICY=ExitCode"


def diagnosed_verdict(policy: str, diagnosis: dict | None) -> tuple[bool, str] | None:
    """Where the lab's last look at the live tasks before this decision (a finding's dict:
    kind, moment) named a stall of the program's own (PROGRAM_STALLS): not restarted under ExitCode,
    whichever task's exit came first (a peer's collective that gave up on the stalled task reads as
    a lost peer, which alone would be retried); restarted under OnFailure, saying it will stall
    again; None where it named none, or under Never (which says so itself)."""
    if not isinstance(diagnosis, dict) or diagnosis.get("kind") not in PROGRAM_STALLS or policy == "Never":
        return None
    kind, moment = diagnosis["kind"], diagnosis.get("moment")
    moment = moment if isinstance(moment, str) else "stall"
    found = f"the lab found at {moment} ({kind}, above)" if moment != "stall" else f"the stall the lab found ({kind})"
    if policy == "OnFailure":
        return True, (f"{found} is the program's own; restarting all the same, as RESTART_POLICY=OnFailure does: "
                      "it will stall again")
    return False, (f"{found} is the program's own, and a restart runs the same program into it again, whichever "
                   f"task exited first; RESTART_POLICY={policy}")
