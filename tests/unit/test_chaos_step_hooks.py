"""AT=step:N with real TensorFlow: the lab's trainer (fit and the custom loop) and a SCRIPT's Keras
fit (tf-keras and Keras 3) log their target's `step` where trainer/chaosstep.py says, from the batch
numbers Keras and the custom loop really hand their hooks; no fault, no Docker. Each run holds 5 s
at its step (core/moment.py's HOLD_SECONDS), as a target waits for the host's fault."""

import subprocess
import sys
import textwrap

import pytest
from labtest.cli import lab_env
from tflab.core import cluster, moment, runfolder
from tflab.core.schema import problems, read_events
from tflab.core.settings import Settings

pytestmark = pytest.mark.tensorflow

# The lab's trainer, in one process: 2 epochs of 256 / 32 = 8 steps each, its step 10 in epoch 2;
# with STEPS_PER_EXECUTION=3 the custom loop's calls end at steps 1, 4, 7, 8 (its first call is one
# step, its tracing), then 11: the first at or past 10 that its hooks see.
TRAINER = """
import sys
from tflab.trainer import train
sys.exit(max(train.main(["--config", config, "--task", "single", "--output", output])
             for config, output in zip(sys.argv[1::2], sys.argv[2::2])))
"""
SCRIPT = """
    import sys
    import numpy as np
    import tensorflow as tf
    x, y = np.zeros((64, 4), "float32"), np.zeros((64, 1), "float32")
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
    model.compile(tf.keras.optimizers.SGD(0.01), "mse", steps_per_execution=int(sys.argv[1]))
    model.fit(x, y, batch_size=8, epochs=3, verbose=0)  # 8 steps an epoch
"""


def config_of(folder, settings: Settings) -> str:
    run = folder / "r1"
    run.mkdir(parents=True)
    runfolder.write_config(run, settings, cluster.build(settings))
    return str(run / runfolder.CONFIG)


def steps_logged(path) -> list[tuple[int, int]]:
    events = list(read_events(path))
    assert all(problems(record) == [] for record in events), events
    return [(r["step"], r["epoch"]) for r in events if r["event"] == "step"]


def test_the_labs_trainer_logs_its_step_in_fit_and_in_the_custom_loop(tmp_path):
    size = dict(strategy="single", epochs=2, examples=256, global_batch=32, at="step:10", audit="off")
    runs = [(config_of(tmp_path / loop, Settings(loop=loop, steps_per_execution=spe, **size)), tmp_path / loop / "out")
            for loop, spe in (("fit", 1), ("custom", 3))]
    result = subprocess.run([sys.executable, "-c", TRAINER, *(str(part) for run in runs for part in run)],
                            env=lab_env(TF_CPP_MIN_LOG_LEVEL="2"), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert steps_logged(runs[0][1] / "single.jsonl") == [(10, 2)]
    assert steps_logged(runs[1][1] / "single.jsonl") == [(11, 2)]
    assert result.stderr.count(f"[single] at step 10: waiting up to {moment.HOLD_SECONDS:g} s here") == 1


@pytest.mark.parametrize("legacy, steps_per_execution, expected", [(True, 1, (10, 2)), (False, 3, (11, 2))],
                         ids=["tf-keras", "keras-3-by-3"])
def test_a_scripts_keras_fit_logs_its_step_through_the_hooks(tmp_path, legacy, steps_per_execution, expected):
    (tmp_path / "train.py").write_text(textwrap.dedent(SCRIPT))
    settings = Settings(workers=1, script=str(tmp_path / "train.py"), at="step:10")
    env = lab_env(TF_USE_LEGACY_KERAS="1" if legacy else "0", TF_CPP_MIN_LOG_LEVEL="2",
                  TFLAB_CONFIG=config_of(tmp_path, settings), TFLAB_TASK="worker-0",
                  TFLAB_LOG=str(tmp_path / "worker-0.jsonl"), TFLAB_OUTPUT=str(tmp_path))
    result = subprocess.run([sys.executable, "-m", "tflab.trainer.inscript", str(tmp_path / "train.py"),
                             str(steps_per_execution)], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tflab:" not in result.stderr  # no hook complained
    assert steps_logged(tmp_path / "worker-0.jsonl") == [expected]
