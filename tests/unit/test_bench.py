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
