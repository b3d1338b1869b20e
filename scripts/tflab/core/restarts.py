"""RESTART_POLICY's decision after a failure, as a TFJob's restartPolicy makes it (the lab's own
runs; a replay asks the operator's and JobSet's rules, k8s/), refined by what the lab knows of
each failure (core/explain.py's signatures)."""

from __future__ import annotations

from tflab.core.explain import FIRST_SIGNAL_CODE, PEER_DONE_SIGNATURES, PREEMPTED, Evidence, match


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
