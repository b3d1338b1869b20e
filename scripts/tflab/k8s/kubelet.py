"""The kubelet's restart of a failed container in place (a pod's restartPolicy OnFailure or Always,
which the training operator gives an OnFailure or Always replica's pod), mirrored from its code,
not its docs: only the failed container is restarted, in the same pod, after its own back-off;
the other pods are not touched.

    pkg/kubelet/kubelet.go                        backOffPeriod (10 s), MaxContainerBackOff (300 s;
                                                  since 1.27 in pkg/kubelet/apis/config/v1beta1)
    pkg/kubelet/kuberuntime/kuberuntime_manager.go  doBackOff: the container's last FinishedAt is
                                                  the start of its back-off; no entry, no back-off
    client-go util/flowcontrol/backoff.go         Backoff.Next (initial, then doubling, capped at
                                                  the maximum), IsInBackOffSince, hasExpired (an
                                                  entry is fresh again once the container finished
                                                  more than 2 x the maximum after the last restart)

So a container's first failure restarts it at once, and each later one after 10 s, 20 s, 40 s,
80 s, 160 s, then 300 s each time; one that ran 600 s (2 x 300 s) since its last restart starts
over (at once, then 10 s). The kubelet's sync loop adds its own latency on a cluster (a pod in
back-off is looked at again about every 10 s); the lab restarts on the dot.

Pure logic: no engine, no clock of its own. replay.run.ReplayRun applies it to each replica.
"""

from __future__ import annotations

from dataclasses import dataclass

INITIAL_SECONDS = 10.0  # kubelet.go backOffPeriod: the back-off after the second failure
MAX_SECONDS = 300.0  # MaxContainerBackOff
CAP_FACTOR = MAX_SECONDS / INITIAL_SECONDS  # the cap, as a multiple of the first back-off (BACKOFF scales both)


@dataclass
class Entry:
    backoff: float  # the back-off the next failure waits
    last_update: float  # when the container was last restarted (Next: the kubelet's clock then)


class Backoff:
    """flowcontrol.Backoff as the kubelet uses it for container restarts, one entry a container
    (doBackOff's key: the pod and the container); times are the caller's clock, in seconds."""

    def __init__(self, initial: float = INITIAL_SECONDS, maximum: float | None = None):
        self.initial = initial
        self.maximum = initial * CAP_FACTOR if maximum is None else maximum
        self.entries: dict[str, Entry] = {}

    def expired(self, entry: Entry, finished_at: float) -> bool:
        """hasExpired: the container finished more than 2 x the maximum after its last restart."""
        return finished_at - entry.last_update > 2 * self.maximum

    def wait(self, key: str, finished_at: float, now: float) -> float:
        """Seconds from `now` until the kubelet restarts a container that finished at `finished_at`
        (doBackOff with IsInBackOffSince: none without an entry or past an expired one)."""
        entry = self.entries.get(key)
        if entry is None or self.expired(entry, finished_at):
            return 0.0
        return max(0.0, entry.backoff - (now - finished_at))

    def backoff(self, key: str, finished_at: float) -> float:
        """The back-off the failure that finished at `finished_at` waits in all (0: none)."""
        entry = self.entries.get(key)
        return 0.0 if entry is None or self.expired(entry, finished_at) else entry.backoff

    def restarted(self, key: str, finished_at: float, now: float) -> None:
        """Backoff.Next, which doBackOff calls as it restarts the container: a fresh entry at the
        initial back-off, else the back-off doubled up to the maximum; last_update is now."""
        entry = self.entries.get(key)
        if entry is None or self.expired(entry, finished_at):
            entry = self.entries[key] = Entry(self.initial, now)
        else:
            entry.backoff = min(entry.backoff * 2, self.maximum)
        entry.last_update = now

    def words(self) -> str:
        """The schedule, as the lab says it: "back-off 10 s, doubling to 300 s"."""
        return f"back-off {self.initial:g} s, doubling to {self.maximum:g} s"


def restarts_within(seconds: float, run_seconds: float, initial: float = INITIAL_SECONDS) -> int:
    """How many times the kubelet restarts a container that fails `run_seconds` after each start,
    within `seconds` of its first start: the planning figure docs and tests state."""
    backoff, clock, count = Backoff(initial), 0.0, 0
    while True:
        finished = clock + run_seconds
        start = finished + backoff.wait("c", finished, finished)
        if start > seconds:
            return count
        backoff.restarted("c", finished, start)
        clock, count = start, count + 1
