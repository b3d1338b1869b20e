"""supervisor/memory.py (issue 45): a task's resident memory per epoch (`rss_bytes` on each `epoch`
event) and the memory-growth finding, on synthetic logs and hostile ones."""

from pathlib import Path

import pytest
from tflab.core.schema import complete, problems, read_events
from tflab.supervisor import audit, memory

pytestmark = pytest.mark.unit
ROLES = {"worker-0": "trainer", "worker-1": "trainer"}
MB = 1_000_000
RECORDED = Path(__file__).parent / "data" / "memory" / "lab_multiworker_20"


def epochs(task: str, sizes: list, start: bool = True) -> list[dict]:
    found = [{"event": "start", "task": task, "time": 0.0, "role": "trainer"}] if start else []
    return found + [{"event": "epoch", "task": task, "time": 1.0 + n, "epoch": n + 1, "loss": 0.5, "seconds": 1.0,
                     "steps": 64, "rss_bytes": size} for n, size in enumerate(sizes)]


def kinds(records: dict) -> list:
    found, _ = audit.audit(records, ROLES, "worker-0")
    return [f for f in found if f.kind == "memory-growth"]


def test_memory_that_grows_every_epoch_is_a_finding_with_its_numbers():
    flat = [580 * MB] * 13
    leaking = [300 * MB] + [410 * MB + 38 * MB * n for n in range(13)]  # epoch 1 allocates, then 38 MB an epoch
    (found,) = kinds({"worker-0": epochs("worker-0", flat), "worker-1": epochs("worker-1", leaking)})
    assert found.tasks == ["worker-1"]
    assert found.message == ("worker-1 grew 38 MB an epoch over 13 epochs (410 -> 866 MB, epochs 2-14): what an "
                             "epoch keeps is never given back, so a longer run ends killed for memory (exit 137) "
                             "or swapping")
    assert "tensorflow#42616" in found.fix and "tensorflow#50790" in found.fix
    for record in epochs("worker-1", leaking, start=False):
        assert problems(record) == []


def test_the_first_epochs_allocation_a_short_run_and_a_slow_creep_are_no_finding():
    warm = [200 * MB, 560 * MB] + [580 * MB + (n % 3) * 2 * MB for n in range(10)]  # epoch 1 and 2 allocate
    assert memory.growth(epochs("worker-0", warm)) is None
    short = [400 * MB + 50 * MB * n for n in range(memory.MIN_EPOCHS)]  # 7 epochs after the first: not judged
    assert memory.growth(epochs("worker-0", short)) is None
    assert memory.growth(epochs("worker-0", short + [short[-1] + 50 * MB])) is not None  # one more: judged
    creep = [580 * MB + 5 * MB * n for n in range(20)]  # 5 MB an epoch: under the 10 MB floor
    assert memory.growth(epochs("worker-0", creep)) is None


def test_a_big_process_is_held_to_its_share_and_a_spike_is_no_growth():
    big = [12_000 * MB + 80 * MB * n for n in range(12)]  # 80 MB an epoch: under 1% of 12 GB
    assert memory.growth(epochs("worker-0", big)) is None
    bigger = [12_000 * MB + 200 * MB * n for n in range(12)]
    slope, judged = memory.growth(epochs("worker-0", bigger))
    assert slope == pytest.approx(200 * MB) and len(judged) == 11
    spike = [580 * MB] * 11 + [2_000 * MB]  # the last epoch's buffers: the slope moves, the medians do not
    assert memory.growth(epochs("worker-0", spike)) is None


def test_only_the_last_attempt_counts_after_a_restart():
    leaking = [410 * MB + 38 * MB * n for n in range(12)]
    flat = [580 * MB] * 12
    assert memory.growth(epochs("worker-1", leaking) + epochs("worker-1", flat)) is None
    assert memory.growth(epochs("worker-1", flat) + epochs("worker-1", leaking)) is not None


def test_hostile_values_are_left_out_never_a_traceback():
    records = epochs("worker-1", [410 * MB + 38 * MB * n for n in range(12)])
    for record, bad in zip(records[1:], ["12", True, -5, 10**30, 1.5e9, None, [1], 2**63, 0, {"a": 1}, 7, 8]):
        record["rss_bytes"] = bad
    assert memory.growth(records) is None  # two epochs of twelve have a usable value
    # The schema lets through an int in range (the summary reads these); the audit's own check then
    # leaves out what no resident set can be.
    assert [r["rss_bytes"] for r in complete(records[1:])] == [-5, 0, 7, 8]
    records[3]["epoch"] = "3"
    records[4]["epoch"] = 10**40
    assert memory.epoch_rss(records) == [(11, 7), (12, 8)]
    huge = [3 * 10**18 + 10**17 * n for n in range(12)]  # exabytes, yet within a count's range (2**63 - 1)
    slope, _ = memory.growth(epochs("worker-1", huge))  # a float slope of huge numbers, no overflow
    assert slope == pytest.approx(1e17)
    creep = [3 * 10**18 + 10**14 * n for n in range(12)]  # 1e14 an epoch: under 1% of 3e18
    assert memory.growth(epochs("worker-1", creep)) is None


def test_the_labs_own_recorded_run_creeps_under_a_mb_an_epoch_and_is_no_finding():
    """data/memory/lab_multiworker_20: the lab's trainer, 2 workers, 20 epochs, each epoch's real RSS."""
    records = {task: complete(read_events(RECORDED / f"{task}.jsonl")) for task in ("worker-0", "worker-1")}
    for task, mine in records.items():
        sizes = memory.epoch_rss(mine)
        assert [epoch for epoch, _ in sizes] == list(range(1, 21))
        assert all(590 * MB < rss < 630 * MB for _, rss in sizes), sizes
        assert memory.growth(mine) is None
        # Its slope: about 0.8 MB an epoch, a twelfth of the floor; the same run leaking 10 MB more an
        # epoch from epoch 2 on is a finding.
        leaking = [dict(r, rss_bytes=r["rss_bytes"] + 10 * MB * (r["epoch"] - 1)) if r["event"] == "epoch" else r
                   for r in mine]
        slope, judged = memory.growth(leaking)
        assert 10.5 * MB < slope < 11 * MB and len(judged) == 19
    assert kinds(records) == []
