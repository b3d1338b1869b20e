"""trainer/observe.py: Keras's own epochs and where a restarted fit resumed, logged from inside a
user's script that has no line of the lab, for tf-keras and Keras 3, without changing its losses."""

import json
import subprocess
import sys
import textwrap

import pytest
from labtest.cli import lab_env
from tflab.core.schema import problems, read_events

pytestmark = pytest.mark.tensorflow

# A tutorial-style script: a fit with BackupAndRestore that a failure interrupts after epoch 2, the
# same fit again (as a restarted task runs it: it resumes), a fit with tflab's LabCallback, and a
# custom loop's tf.train checkpoint, first not found, then restored.
SCRIPT = """
    import json, os, sys
    import numpy as np
    import tensorflow as tf
    from tflab.callback import LabCallback

    tf.keras.utils.set_random_seed(0)
    x = np.random.RandomState(0).normal(size=(256, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    def compiled():
        model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
        model.compile(tf.keras.optimizers.SGD(0.01), "mse")
        return model

    model = compiled()
    backup = os.path.join(sys.argv[1], "backup")

    class Failure(tf.keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch == 1:
                raise RuntimeError("a peer died")

    losses = []
    try:
        model.fit(x, y, batch_size=32, epochs=4, verbose=0,
                  callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir=backup), Failure()])
    except RuntimeError:
        pass
    history = model.fit(x, y, batch_size=32, epochs=4, verbose=0,
                        callbacks=[tf.keras.callbacks.BackupAndRestore(backup_dir=backup)])
    losses += history.history["loss"]
    model = compiled()  # tf-keras: a model once fit with BackupAndRestore fits again only with one
    history = model.fit(x, y, batch_size=64, epochs=2, verbose=0, callbacks=[LabCallback(global_batch_size=64)])
    losses += history.history["loss"]

    step = tf.Variable(0, dtype=tf.int64)
    checkpoint = tf.train.Checkpoint(model=model, epoch=tf.Variable(0, dtype=tf.int64), step=step)
    folder = os.path.join(sys.argv[1], "ckpt")
    assert tf.train.latest_checkpoint(folder) is None
    checkpoint.epoch.assign(2)
    tf.train.CheckpointManager(checkpoint, folder, max_to_keep=1).save()
    checkpoint.epoch.assign(0)
    checkpoint.restore(tf.train.latest_checkpoint(folder))
    print(json.dumps({"losses": losses, "restored_epoch": int(checkpoint.epoch.numpy())}))
"""


def run(tmp_path, legacy: bool, observed: bool = True) -> dict:
    folder = tmp_path / f"{'observed' if observed else 'bare'}-{'tf-keras' if legacy else 'keras-3'}"
    folder.mkdir()
    (folder / "train.py").write_text(textwrap.dedent(SCRIPT))
    env = {**lab_env(), "TF_USE_LEGACY_KERAS": "1" if legacy else "0", "TF_CPP_MIN_LOG_LEVEL": "2"}
    if observed:
        env.update(TFLAB_LOG=str(folder / "worker-0.jsonl"), TFLAB_TASK="worker-0", TFLAB_OUTPUT=str(folder))
    result = subprocess.run([sys.executable, "-m", "tflab.trainer.inscript", str(folder / "train.py"), str(folder)],
                            cwd=folder, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tflab:" not in result.stderr  # no hook complained
    return {"printed": json.loads(result.stdout.strip().splitlines()[-1]),
            "events": list(read_events(folder / "worker-0.jsonl")), "folder": folder}


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    """The script's observed run under each Keras, made once for this module's tests."""
    runs = {}

    def get(legacy: bool) -> dict:
        if legacy not in runs:
            runs[legacy] = run(tmp_path_factory.mktemp("observe"), legacy)
        return runs[legacy]
    return get


@pytest.mark.parametrize("legacy", [True, False], ids=["tf-keras", "keras-3"])
def test_every_fit_is_logged_as_keras_counts_it_and_a_resume_is_measured(observed, legacy):
    found = observed(legacy)
    events, backup = found["events"], str(found["folder"] / "backup")
    assert all(problems(record) == [] for record in events), events
    fits = [(r["epoch"], r["step"], r["epochs"], r.get("backup_dir"), r.get("backup_kept"))
            for r in events if r["event"] == "fit"]
    # The interrupted fit from epoch 1, the same fit resumed at epoch 3 from its backup, the third fit.
    assert fits == [(1, 0, 4, backup, True), (3, 0, 4, backup, True), (1, 0, 2, None, None)]
    # An epoch's steps, as fit knows them (the stall watch's bound on the first epoch's sampled steps).
    assert [r.get("steps") for r in events if r["event"] == "fit"] == [8, 8, 4]
    assert [(r["epoch"], r["step"]) for r in events if r["event"] == "restored"] == [(3, 0)]
    epochs = [r for r in events if r["event"] == "epoch"]
    # Epoch 2 ended in the failure; the third fit's epochs are LabCallback's, logged once, with its figures.
    assert [(r["epoch"], "examples_per_second" in r) for r in epochs] == [
        (1, False), (3, False), (4, False), (1, True), (2, True)]
    assert [r["steps"] for r in epochs] == [8, 8, 8, 4, 4]
    # Each epoch's resident memory, from the script's own process (the observer's and LabCallback's alike).
    assert all(isinstance(r.get("rss_bytes"), int) and 50e6 < r["rss_bytes"] < 64e9 for r in epochs), epochs
    assert [r["loss"] for r in epochs[1:]] == pytest.approx(found["printed"]["losses"], rel=1e-6)
    checkpoints = [(r["found"], r["path"], r.get("counters")) for r in events if r["event"] == "checkpoint"]
    ckpt = str(found["folder"] / "ckpt")
    assert checkpoints == [(False, ckpt, None), (True, f"{ckpt}/ckpt-1", {"epoch": 2, "step": 0})]
    assert found["printed"]["restored_epoch"] == 2


def test_the_observer_changes_nothing_the_script_computes(observed, tmp_path):
    assert observed(True)["printed"] == run(tmp_path, True, observed=False)["printed"]
    assert not list(tmp_path.glob("*/worker-0.jsonl"))  # outside the lab it installs nothing
