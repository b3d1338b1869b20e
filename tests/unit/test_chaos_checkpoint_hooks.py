"""AT=save[:N] and AT=restore with real TensorFlow: the lab's trainer and a SCRIPT log their
target's `saving` where TensorFlow's save has written its shards and not its index (eagerly, and at
every call of a save traced into a tf.function), and `restoring` where a checkpoint is read back;
no fault, no Docker. Each run holds 5 s at its moment (core/moment.py's HOLD_SECONDS)."""

import subprocess
import sys
import textwrap

import pytest
from labtest.cli import lab_env
from tflab.core import cluster, runfolder
from tflab.core.schema import problems, read_events
from tflab.core.settings import Settings

pytestmark = pytest.mark.tensorflow

TRAINER = """
import sys
from tflab.trainer import train
sys.exit(train.main(["--config", sys.argv[1], "--task", "single", "--output", sys.argv[2]]))
"""
# Saves 1 and 2 are one tf.function's two calls (traced once), 3 is eager, 4 a CheckpointManager's;
# then a new object restores the manager's checkpoint.
SCRIPT = """
    import os
    import tensorflow as tf
    out = os.environ["TFLAB_OUTPUT"]
    checkpoint = tf.train.Checkpoint(v=tf.Variable(1.0))

    @tf.function
    def write():
        return checkpoint.write(out + "/traced")

    write()
    write()
    checkpoint.write(out + "/eager")
    manager = tf.train.CheckpointManager(checkpoint, out + "/managed", max_to_keep=1)
    manager.save()
    restored = tf.train.Checkpoint(v=tf.Variable(0.0))
    restored.restore(manager.latest_checkpoint)
    assert float(restored.v.numpy()) == 1.0
    restored.restore(out + "/eager")  # a second checkpoint read (AT=eval:2 holds here)
"""


def config_of(folder, settings: Settings) -> str:
    run = folder / "r1"
    run.mkdir(parents=True)
    runfolder.write_config(run, settings, cluster.build(settings))
    return str(run / runfolder.CONFIG)


def moments_logged(path) -> list[dict]:
    events = list(read_events(path))
    assert all(problems(record) == [] for record in events), events
    return [{k: v for k, v in r.items() if k not in ("time", "task")} for r in events
            if r["event"] in ("saving", "restoring")]


def test_the_labs_trainer_logs_its_second_backup_torn_in_two(tmp_path):
    settings = Settings(strategy="single", epochs=3, examples=256, global_batch=32, at="save:2", audit="off")
    output = tmp_path / "out"
    result = subprocess.run([sys.executable, "-c", TRAINER, config_of(tmp_path, settings), str(output)],
                            env=lab_env(TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert moments_logged(output / "single.jsonl") == [
        {"event": "saving", "save": 2, "file": "backup/chief/ckpt-2.index", "index_exists": False,
         "written": ["backup/chief/ckpt-2_temp/part-00000-of-00001.data-00000-of-00001",
                     "backup/chief/ckpt-2_temp/part-00000-of-00001.index"]}]
    assert "[single] writing checkpoint 2, backup/chief/ckpt-2.index (2 shard files written): waiting" in result.stderr


@pytest.mark.parametrize("at, expected", [
    ("save:2", {"event": "saving", "save": 2, "file": "traced.index", "index_exists": True}),
    ("save:4", {"event": "saving", "save": 4, "file": "managed/ckpt-1.index", "index_exists": False}),
    ("restore", {"event": "restoring", "restore": 1, "file": "managed/ckpt-1",
                 "files": ["managed/ckpt-1.data-00000-of-00001", "managed/ckpt-1.index"]}),
    ("eval:2", {"event": "restoring", "restore": 2, "file": "eager",
                "files": ["eager.data-00000-of-00001", "eager.index"]}),
], ids=["traced-second-call", "manager", "restore", "second-checkpoint-read"])
def test_a_scripts_saves_and_restores_are_hooked_traced_or_not(tmp_path, at, expected):
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    # AUDIT=off: the audit's wrapper of Checkpoint.write cannot be traced (a symbolic path as a bool)
    settings = Settings(workers=1, script=str(tmp_path / "train.py"), at=at, audit="off", evaluator=int(at == "eval:2"))
    task = "evaluator-0" if settings.evaluator else "worker-0"  # AT=eval's target
    env = lab_env(TF_CPP_MIN_LOG_LEVEL="2", TFLAB_CONFIG=config_of(tmp_path, settings), TFLAB_TASK=task,
                  TFLAB_LOG=str(tmp_path / f"{task}.jsonl"), TFLAB_OUTPUT=str(tmp_path))
    result = subprocess.run([sys.executable, "-m", "tflab.trainer.inscript", str(tmp_path / "train.py")],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tflab:" not in result.stderr  # no hook complained
    [found] = moments_logged(tmp_path / f"{task}.jsonl")
    if found["event"] == "saving":  # the shards' names depend on the devices the save spans
        written = found.pop("written")
        stem = expected["file"].removesuffix(".index")
        assert written and all(name.startswith(f"{stem}_temp/part-") for name in written), written
    assert found == expected
