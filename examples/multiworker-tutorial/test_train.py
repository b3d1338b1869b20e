"""This project's own test of its distributed training, on a lab cluster: run it with `pytest`
once tflab is installed (`pip install tflab`, or this repository). The `tflab_cluster` fixture comes
from tflab's pytest plugin, which registers itself: no conftest.py, no PYTHONPATH."""

from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "train.py"


def test_two_workers_train_in_step_and_converge(tflab_cluster):
    lab = tflab_cluster(workers=2, script=SCRIPT, args="--epochs 3", restarts=0)
    assert lab.ok, lab.why()
    losses = {name: task.losses for name, task in lab.tasks.items()}
    assert sorted(losses) == ["worker-0", "worker-1"]
    # MultiWorkerMirroredStrategy: every worker sees the same global-batch loss each epoch.
    assert losses["worker-0"] == pytest.approx(losses["worker-1"], rel=1e-6)
    # The target's variance is 3.2; three epochs of Adam(0.01) bring the loss well under a tenth of it.
    assert losses["worker-0"][-1] < 0.32 < losses["worker-0"][0]


def test_a_crash_on_one_worker_fails_the_run_with_its_words(tflab_cluster):
    lab = tflab_cluster(workers=2, script=SCRIPT, args="--fail-with 3", restarts=0)
    assert not lab.ok
    assert all(task.exit_code == 3 for task in lab.tasks.values()), lab.why()
