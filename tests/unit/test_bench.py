"""make bench's breakdown of the time to the first step, from a chief's recorded log."""

import json

import pytest
from tflab.reports import bench


def test_the_time_to_the_first_step_is_split_into_its_phases(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"tasks": ["worker-0", "worker-1"]}))
    launched = 1000.0
    events = [  # the trainer's first line ran at 1002.5 (cluster_ready: 4.0 s after it)
        {"event": "start", "task": "worker-0", "time": 1004.0},
        {"event": "cluster_ready", "task": "worker-0", "time": 1006.5, "seconds": 4.0},
        {"event": "end", "task": "worker-0", "time": 1020.0, "first_step_at": 1008.0},
    ]
    (tmp_path / "worker-0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    found = bench.phases(tmp_path, launched)
    assert list(found) == list(bench.PHASES)
    assert found == pytest.approx({"start": 2.5, "imports": 1.5, "rendezvous": 2.5, "first step": 1.5})
    assert sum(found.values()) == pytest.approx(1008.0 - launched)  # the phases add up to the whole


def test_the_memory_line_counts_each_tasks_own_memory_and_the_shared_pages_once():
    mb = 10**6
    eight = {"memory": {"rss_bytes": [592 * mb] * 8, "pss_bytes": [332 * mb] * 8, "uss_bytes": [295 * mb] * 8}}
    line = bench.memory_line(eight, 24 * 2**30)
    assert line == ("memory per task, WORKERS=8, last epoch (median): resident 592 MB, proportional 332 MB, unique "
                    "295 MB (shared 297 MB); the most WORKERS this engine's 25.8 GB holds at that cost: 86")
    assert (24 * 2**30 - 297 * mb) // (295 * mb) == 86
    assert bench.memory_line({"memory": {"rss_bytes": [592 * mb]}}, 24 * 2**30).endswith("not read (no "
                                                                                         "/proc/self/smaps_rollup "
                                                                                         "in the tasks)")


def test_a_task_reads_its_own_proportional_and_unique_sizes():
    from tflab.core import processes

    sizes = processes.rss_field()
    assert 0 < sizes["uss_bytes"] <= sizes["rss_bytes"] and 0 < sizes["pss_bytes"] <= sizes["rss_bytes"]
