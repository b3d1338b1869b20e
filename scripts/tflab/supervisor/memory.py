"""AUDIT's memory-growth finding: a task whose resident memory grows epoch after epoch, read from
the `rss_bytes` each `epoch` event carries (the lab's trainer, a SCRIPT's observer and LabCallback
write it: core/processes.rss_field). Pure logic over records already read, each value checked for
its type here again (a task's log is foreign).

The test, per task, over the last attempt (a restart starts a new process, with its own memory):

1. Leave out the attempt's first epoch: it traces the step functions, fills the input pipeline's
   buffers and grows the allocator's arenas, hundreds of MB that are no leak (the lab's own runs
   allocate most of their peak there).
2. A trend, by the Mann-Kendall test over the epochs after it (Mann 1945, Kendall 1975): S counts
   the pairs of epochs whose later one holds more memory less those whose later one holds less;
   the chance of an S as high from a series with no trend (every order of the epochs as likely,
   Kendall's exact distribution: 1/n! for a series that rises every epoch) is at most ALPHA. It
   needs no straight line and no normal noise, and a single spike moves S by at most n - 1. Its
   fewest epochs: MIN_EPOCHS, where a series that rises every epoch can reach ALPHA at all; a
   run with fewer says "too short to judge", never nothing.
3. And a growth that matters: the Theil-Sen slope (the median of the slopes between every two
   epochs, robust to a spike as the mean's is not) is at least FLOOR_BYTES an epoch and at least
   SHARE of the task's median RSS (an allocator's noise grows with the process: 1% of 600 MB is
   6 MB, so the floor rules a CPU task; 1% of a 12 GB host process is 120 MB). A trend alone is
   no finding: a healthy allocator creeps (the lab's own trainer, under a MB an epoch, is a
   significant trend over 20 epochs).

The false-positive rate, measured on healthy runs (docs/audit.md): ALPHA bounds it where the
series has no trend at all; the floor is what keeps a healthy creep out.

tensorflow#42616 and tensorflow#50790 are memory that grows with every epoch of a Keras fit.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from functools import lru_cache

from tflab.core.schema import LARGEST_INT, attempts

WARMUP_EPOCHS = 1  # left out: the attempt's first epoch allocates what it keeps
ALPHA = 0.01  # one-sided: the chance that a series of no trend passes the trend test
MIN_EPOCHS = 5  # after the warm-up: 1/5! = 0.0083 <= ALPHA, where 4 rising epochs could reach 1/4! = 0.042 only
FLOOR_BYTES = 10_000_000  # 10 MB an epoch, at least
SHARE = 0.01  # and 1% of the task's median RSS an epoch
EXACT_EPOCHS = 60  # Kendall's exact distribution up to this many epochs; the normal one (tie-corrected) beyond
MOST_EPOCHS = 400  # the last epochs judged: their pairs (80,000) are counted in a blink; a log's count is foreign
MB = 1e6  # as the table's "peak RSS MB"

FIX = ("find what each epoch keeps: a tf.function or model.predict called with new Python values or shapes "
       "(each call traces and keeps a graph), a model or dataset built anew every epoch, tensors or histories "
       "appended to a Python list, a callback that holds each epoch's outputs; measure with tracemalloc for "
       "Python objects, or the same run with fewer steps an epoch for TensorFlow's own (tensorflow#42616, "
       "tensorflow#50790: memory that grows every epoch of a fit); MEMORY=<n>g makes the lab's tasks hit "
       "the wall the run will meet later")


def epoch_rss(records: list[dict]) -> list[tuple[int, int]]:
    """(epoch, rss_bytes) of the last attempt, by epoch number (an epoch logged twice: its last),
    each checked again: an int epoch, an int RSS above 0 and within what a count may be."""
    last = (attempts(records) or [[]])[-1]
    found: dict[int, int] = {}
    for record in last:
        if record.get("event") != "epoch":
            continue
        epoch, rss = record.get("epoch"), record.get("rss_bytes")
        if (isinstance(epoch, int) and not isinstance(epoch, bool) and isinstance(rss, int)
                and not isinstance(rss, bool) and 0 < rss <= LARGEST_INT and 0 < epoch <= LARGEST_INT):
            found[epoch] = rss
    return sorted(found.items())


@dataclass(frozen=True)
class Trend:
    """A task's judged epochs, Mann-Kendall's S and its one-sided p, and the Theil-Sen slope (bytes an epoch)."""

    judged: list[tuple[int, int]]
    s: int
    p: float
    slope: float

    @property
    def grows(self) -> bool:
        return self.p <= ALPHA and self.slope >= max(FLOOR_BYTES, SHARE * statistics.median(r for _, r in self.judged))


def trend(records: list[dict]) -> Trend | None:
    """The trend test's numbers over the task's epochs after the warm-up; None where they are fewer
    than MIN_EPOCHS (too short to judge)."""
    judged = epoch_rss(records)[WARMUP_EPOCHS:][-MOST_EPOCHS:]
    if len(judged) < MIN_EPOCHS:
        return None
    pairs = [(judged[i], judged[j]) for i in range(len(judged)) for j in range(i + 1, len(judged))]
    s = sum((b[1] > a[1]) - (b[1] < a[1]) for a, b in pairs)
    slope = statistics.median((b[1] - a[1]) / (b[0] - a[0]) for a, b in pairs)
    return Trend(judged, s, upper_tail(len(judged), s, [r for _, r in judged]), float(slope))


def growth(records: list[dict]) -> tuple[float, list[tuple[int, int]]] | None:
    """(bytes an epoch, the epochs judged) where the task's memory grows by the test above, else None."""
    found = trend(records)
    return (found.slope, found.judged) if found and found.grows else None


def upper_tail(n: int, s: int, values: list[int]) -> float:
    """P(S >= s) for n values of no trend: Kendall's exact distribution of S without ties (ties only
    lower S's spread, so this is the larger, the cautious p), the normal one beyond EXACT_EPOCHS,
    its variance corrected for ties and a continuity correction."""
    if n <= EXACT_EPOCHS:
        counts = inversions(n)  # permutations of n by their inversions k; S = n(n-1)/2 - 2k
        most = n * (n - 1) // 2
        return sum(counts[k] for k in range(len(counts)) if most - 2 * k >= s) / math.factorial(n)
    ties = [values.count(v) for v in set(values)]
    variance = (n * (n - 1) * (2 * n + 5) - sum(t * (t - 1) * (2 * t + 5) for t in ties)) / 18
    if variance <= 0:
        return 1.0
    z = (s - 1) / math.sqrt(variance) if s > 0 else 0.0
    return 0.5 * math.erfc(z / math.sqrt(2))


@lru_cache(maxsize=EXACT_EPOCHS)
def inversions(n: int) -> tuple[int, ...]:
    """The Mahonian numbers: how many permutations of n items have k inversions, for each k."""
    counts = [1]
    for m in range(2, n + 1):
        grown = [0] * (len(counts) + m - 1)
        for k, count in enumerate(counts):
            for extra in range(m):
                grown[k + extra] += count
        counts = grown
    return tuple(counts)


def too_short(audited: dict[str, list[dict]]) -> str | None:
    """The note for tasks that logged their memory for fewer epochs than the test needs (after a
    restart: in their last attempt), or None."""
    short = {task: len(epochs) for task, records in audited.items()
             if 0 < len(epochs := epoch_rss(records)) < WARMUP_EPOCHS + MIN_EPOCHS}
    if not short:
        return None
    counts = sorted(set(short.values()))
    logged = " or ".join(str(count) for count in counts)
    return (f"memory growth: too short to judge ({logged} epoch{'s' * (counts != [1])}; needs "
            f"{WARMUP_EPOCHS + MIN_EPOCHS}: the first and {MIN_EPOCHS} more for the trend test) for "
            + ", ".join(short))


def growth_finding(audited: dict[str, list[dict]]) -> tuple[list[str], str] | None:
    """The tasks whose memory grows and the finding's message, each task with its numbers; None
    where none grows (audit.py makes it a Finding, with FIX)."""
    grown = {task: found for task, records in audited.items() if (found := trend(records)) and found.grows}
    if not grown:
        return None
    parts = [f"{task} grew {found.slope / MB:.0f} MB an epoch over {len(found.judged)} epochs "
             f"({found.judged[0][1] / MB:.0f} -> {found.judged[-1][1] / MB:.0f} MB, epochs {found.judged[0][0]}-"
             f"{found.judged[-1][0]}; Mann-Kendall p = {found.p:.1g})" for task, found in grown.items()]
    return list(grown), ("; ".join(parts) + ": what an epoch keeps is never given back, so a longer run ends "
                         "killed for memory (exit 137) or swapping")
