"""AUDIT's memory-growth finding: a task whose resident memory grows epoch after epoch, read from
the `rss_bytes` each `epoch` event carries (the lab's trainer, a SCRIPT's observer and LabCallback
write it: core/processes.rss_field). Pure logic over records already read, each value checked for
its type here again (a task's log is foreign).

The test, per task, over the last attempt (a restart starts a new process, with its own memory):

1. Leave out the attempt's first epoch: it traces the step functions, fills the input pipeline's
   buffers and grows the allocator's arenas, hundreds of MB that are no leak (the lab's own runs
   allocate most of their peak there).
2. Fit a least-squares line to the RSS of the epochs after it, by epoch number; at least
   MIN_EPOCHS of them, so a short run (the lab's tests' EPOCHS=2, a tutorial's 3) is never judged:
   a few points carry no slope worth a finding.
3. A finding where that slope is at least FLOOR_BYTES an epoch and at least SHARE of the task's
   median RSS an epoch (an allocator's noise grows with the process: 1% of 600 MB is 6 MB, so the
   floor rules a CPU task; 1% of a 12 GB host process is 120 MB), and the growth is sustained:
   the later half's median exceeds the earlier half's by at least half what the slope predicts
   (one spike, a checkpoint's buffers at the last epoch, moves the slope, not the medians).

tensorflow#42616 and tensorflow#50790 are memory that grows with every epoch of a Keras fit.
"""

from __future__ import annotations

import statistics

from tflab.core.schema import LARGEST_INT, attempts

WARMUP_EPOCHS = 1  # left out: the attempt's first epoch allocates what it keeps
MIN_EPOCHS = 8  # epochs after the warm-up, at least, to fit a slope to
FLOOR_BYTES = 10_000_000  # 10 MB an epoch, at least
SHARE = 0.01  # and 1% of the task's median RSS an epoch
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


def growth(records: list[dict]) -> tuple[float, list[tuple[int, int]]] | None:
    """(bytes an epoch, the epochs judged) where the task's memory grows by the test above, else None."""
    judged = epoch_rss(records)[WARMUP_EPOCHS:]
    if len(judged) < MIN_EPOCHS:
        return None
    epochs = [float(epoch) for epoch, _ in judged]
    sizes = [float(rss) for _, rss in judged]
    slope = statistics.linear_regression(epochs, sizes).slope
    if slope < max(FLOOR_BYTES, SHARE * statistics.median(sizes)):
        return None
    half = len(judged) // 2
    earlier, later = judged[:half], judged[len(judged) - half:]
    apart = statistics.median(e for e, _ in later) - statistics.median(e for e, _ in earlier)
    rise = statistics.median(r for _, r in later) - statistics.median(r for _, r in earlier)
    if rise < slope * apart / 2:
        return None
    return slope, judged


def growth_finding(audited: dict[str, list[dict]]) -> tuple[list[str], str] | None:
    """The tasks whose memory grows and the finding's message, each task with its numbers; None
    where none grows (audit.py makes it a Finding, with FIX)."""
    grown = {task: found for task, records in audited.items() if (found := growth(records))}
    if not grown:
        return None
    parts = [f"{task} grew {slope / MB:.0f} MB an epoch over {len(judged)} epochs "
             f"({judged[0][1] / MB:.0f} -> {judged[-1][1] / MB:.0f} MB, epochs {judged[0][0]}-{judged[-1][0]})"
             for task, (slope, judged) in grown.items()]
    return list(grown), ("; ".join(parts) + ": what an epoch keeps is never given back, so a longer run ends "
                         "killed for memory (exit 137) or swapping")
