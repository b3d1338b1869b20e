"""trainer/audit.py as inscript's hook, in a real TensorFlow process (AUDIT, issue 25): what it logs
of a Keras fit under MirroredStrategy, and that it changes nothing the script computes."""

import json
import subprocess
import sys
import textwrap

import pytest
from labtest.cli import lab_env
from tflab.core.schema import problems, read_events
from tflab.core.settings import Settings


def run_script(tmp_path, audit: str, script: str):
    folder = tmp_path / audit
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"settings": Settings(audit=audit).to_dict(), "cluster": {}}))
    (folder / "train.py").write_text("import json\n" + textwrap.dedent(script))
    log = folder / "worker-0.jsonl"
    env = lab_env(TFLAB_CONFIG=str(folder / "config.json"), TFLAB_LOG=str(log), TFLAB_TASK="worker-0",
                  TFLAB_OUTPUT=str(folder), TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run([sys.executable, "-m", "tflab.trainer.inscript", str(folder / "train.py")], env=env,
                            cwd=folder, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tflab:" not in result.stderr, result.stderr[-3000:]  # no hook complained
    losses = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("LOSSES"))[7:])
    return losses, list(read_events(log))


@pytest.mark.tensorflow
def test_the_audit_logs_batches_weights_and_writes_and_changes_no_loss(tmp_path):
    script = """
        import os
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import numpy as np
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        strategy = tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])
        tf.keras.utils.set_random_seed(0)
        x = np.random.default_rng(0).normal(size=(640, 8)).astype("float32")
        dataset = tf.data.Dataset.from_tensor_slices((x, x.sum(axis=1, keepdims=True))).shuffle(640, seed=1).batch(32)
        with strategy.scope():
            model = tf.keras.Sequential([tf.keras.layers.Dense(4, input_shape=(8,)), tf.keras.layers.Dense(1)])
            model.compile("adam", "mse", steps_per_execution=3)
        history = model.fit(dataset, epochs=2, verbose=0)
        print("LOSSES", json.dumps(history.history["loss"]))
        model.save(os.path.join(os.environ["TFLAB_OUTPUT"], "model.keras"))
    """
    losses_on, events = run_script(tmp_path, "on", script)
    losses_off, nothing = run_script(tmp_path, "off", script)
    assert losses_on == losses_off  # exactly: the audit reads the batches, it computes nothing of training
    assert [r for r in nothing if r["event"].startswith("audit_")] == []
    assert [p for record in events for p in problems(record)] == []
    of = {kind: [r for r in events if r["event"] == kind] for kind in
          ("audit_batch", "audit_pass", "audit_weights", "audit_write")}
    # 640 examples in batches of 32: 20 steps an epoch, the first 16 sampled, each batch over 2 replicas
    trained = [r for r in of["audit_pass"] if r["steps"]]
    assert [(r["steps"], r["examples"], r["policy"]) for r in trained] == [(20, 640, "AUTO")] * 2
    assert len(of["audit_batch"]) == 2 * 16 and {r["step"] for r in of["audit_batch"]} == set(range(1, 17))
    assert all(r["examples"] == 32 and len(r["example_digests"]) == 32 for r in of["audit_batch"])
    first, second = ([r for r in of["audit_batch"] if r["pass"] == p["pass"]] for p in trained)
    assert first[0]["digest"] != second[0]["digest"]  # a seeded shuffle reshuffles each epoch
    assert len({d for r in first for d in r["example_digests"]}) == 16 * 32  # no example twice in an epoch
    assert [(r["at"], r["epoch"], r["parameters"]) for r in of["audit_weights"]] == [
        ("epoch", 1, 41), ("epoch", 2, 41), ("end", 2, 41)]
    assert of["audit_weights"][1]["digest"] == of["audit_weights"][2]["digest"]
    (save,) = of["audit_write"]
    assert (save["writer"], save["storage"], save["during"], save["caller"]) == (
        "Model.save", "shared", "script", "train.py:19")
    assert save["path"] == str((tmp_path / "on" / "model.keras").resolve()) and save["bytes"] > 1000


@pytest.mark.tensorflow
def test_a_checkpoint_written_inside_a_tf_function_is_logged_at_each_call(tmp_path):
    """Checkpoint.write in a tf.function returns a graph tensor, not a path: the audit logs the
    path when the function runs (each call), and the script runs as it does without the audit."""
    script = """
        import os
        import tensorflow as tf

        step = tf.Variable(0)
        checkpoint = tf.train.Checkpoint(step=step)
        prefix = os.path.join(os.environ["TFLAB_OUTPUT"], "ckpt", "state")

        @tf.function
        def train_and_save():
            step.assign_add(1)
            return checkpoint.write(prefix)

        paths = [train_and_save().numpy().decode() for _ in range(2)]
        print("LOSSES", json.dumps([int(step.numpy())]))
    """
    steps_on, events = run_script(tmp_path, "on", script)
    steps_off, _ = run_script(tmp_path, "off", script)
    assert steps_on == steps_off == [2]
    writes = [r for r in events if r["event"] == "audit_write" and r["writer"] == "Checkpoint.write"]
    assert [w["path"] for w in writes] == [str((tmp_path / "on/ckpt/state").resolve())] * 2
    assert all(w["bytes"] > 0 for w in writes)
