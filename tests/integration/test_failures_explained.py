"""Failures explained on real runs: a Keras 3 script under MultiWorkerMirroredStrategy (warned of
before it runs, explained after, not restarted under the default RESTART_POLICY), and a trainer
killed by the kernel for memory (the engine's OOMKilled named with the task and its limit)."""

import pytest
from labtest.cli import REPO
from tflab import explain

KERAS_3 = REPO / "tests/integration/scripts/train_keras3.py"
# Measured in the trainer image: `import tensorflow` alone peaks at about 200 MB. A limit below that
# is no sure kill: at 40m and 100m the import crawled, the kernel evicting and rereading TF's mapped
# libraries, and a run once outlasted its 300 s TIMEOUT unkilled. So the limit leaves the import room
# (400m), and the data set does not fit: 4,000,000 examples of 32 float64s is a 1 GB allocation at
# once, killed within seconds of the import (31 s for the whole run here).
TOO_LITTLE_MEMORY = "400m"
TOO_MANY_EXAMPLES = 4_000_000


@pytest.fixture(scope="module")
def keras_3(trainer_image, tmp_path_factory):
    from tflab.pytest_plugin import run_lab

    return run_lab(tmp_path_factory.mktemp("explain"), "keras3",
                   {"workers": 2, "script": KERAS_3, "args": "--epochs 1", "timeout": 300})


def test_a_keras_3_script_is_warned_of_before_it_runs(keras_3):
    lines = keras_3.output.splitlines()
    warning = next(i for i, line in enumerate(lines) if line.startswith("tflab: warning: train_keras3.py:10 "
                                                                        "imports keras (Keras 3)"))
    started = next(i for i, line in enumerate(lines) if "started: tensorflow" in line)
    assert warning < started, keras_3.why()


def test_a_keras_3_script_fails_once_explained_and_is_not_restarted(keras_3):
    assert keras_3.returncode == 1 and keras_3.summary["restarts"] == [], keras_3.why()
    for task in keras_3.tasks.values():
        assert task.status == "failed" and task.exit_code == 1
        assert task.explanation["signature"] == "keras3-multiworker", task.explanation
        assert task.attempts == 1
        # The launcher kept the traceback's exception, not the last line of stderr.
        assert task.error.startswith("train_keras3.py exited with code 1: ValueError: Attempt to convert a value "
                                     "(PerReplica:{"), task.error
        assert task.error.endswith("with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>)"
                                   " to a Tensor."), task.error
    assert ("tflab: not restarting: worker-0 failed in a way a restart repeats (keras3-multiworker)" in keras_3.output
            or "tflab: not restarting: worker-1 failed in a way a restart repeats (keras3-multiworker)"
            in keras_3.output), keras_3.why()
    last = keras_3.output.strip().splitlines()[-5:]
    assert last[0].startswith("worker-0, worker-1: Keras 3's model.fit does not work under "
                              "MultiWorkerMirroredStrategy"), last
    assert last[-2] == "  see: " + explain.KERAS_ISSUE and last[-1].startswith("run keras3: failed in ")


def test_why_shows_the_explanation_first(keras_3):
    assert keras_3.why().startswith("worker-0, worker-1: Keras 3's model.fit does not work")


def test_a_memory_kill_is_named_with_the_task_and_its_limit(tflab_cluster):
    lab = tflab_cluster(strategy="single", memory=TOO_LITTLE_MEMORY, examples=TOO_MANY_EXAMPLES, epochs=1,
                        timeout=300)
    assert lab.returncode == 1 and lab.summary["restarts"] == [], lab.why()
    task = lab.tasks["single"]
    assert task.exit_code == 137 and task.explanation["signature"] == "oom-killed", task
    what = ("killed by the kernel for memory (the engine says OOMKilled): it reached its limit "
            f"MEMORY={TOO_LITTLE_MEMORY}")
    assert task.explanation["what"].startswith(what)
    assert f"single: {what}" in lab.output
    assert "tflab: not restarting: single failed in a way a restart repeats (oom-killed)" in lab.output
