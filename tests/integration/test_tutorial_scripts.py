"""A script as the tutorials write it (issue 29), on the real stack: Keras's guide shape, with
`MirroredStrategy()` and no arguments, checkpoints in `./ckpt`, a data set Keras finds beside the
script, settings from the environment, a data folder; and a tutorial's download, which the lab's
network cannot make. One run per backend, asserted on many ways (tests/integration/scripts/)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

SCRIPTS = Path(__file__).parent / "scripts"
MIRRORED = SCRIPTS / "mirrored/train.py"
WEIGHTS = np.arange(8, dtype="float32") / 8


def run_mirrored(tmp_path_factory, backend: str):
    from tflab.pytest_plugin import run_lab

    data = tmp_path_factory.mktemp("data")
    np.save(data / "weights.npy", WEIGHTS)
    data.chmod(0o755)  # pytest's folders are the host user's alone; as root the tasks run as uid 1000
    (data / "weights.npy").chmod(0o644)
    lab = run_lab(tmp_path_factory.mktemp("runs"), f"mirrored-{backend}", {
        "strategy": "mirrored", "replicas": 2, "script": MIRRORED, "args": "--epochs 2", "backend": backend,
        "script_env": {"GREETING": "hello there", "KERAS_HOME": "."}, "data": data, "restarts": 0})
    return lab, data


@pytest.fixture(scope="module")
def compose_run(tmp_path_factory):
    return run_mirrored(tmp_path_factory, "compose")


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    return run_mirrored(tmp_path_factory, "local")


def seen(lab) -> dict:
    return json.loads((lab.tasks_dir / "work/mirrored/seen.json").read_text())


def test_the_scripts_own_mirrored_strategy_has_the_replicas_asked_for(compose_run):
    lab, _ = compose_run
    assert lab.ok, lab.why()
    assert seen(lab)["replicas"] == 2
    assert "[mirrored] Number of devices: 2" in lab.output.splitlines()


def test_it_writes_in_its_working_directory_kept_with_the_run_and_finds_what_is_beside_it(compose_run):
    lab, _ = compose_run
    work = lab.tasks_dir / "work/mirrored"
    assert seen(lab)["cwd"] == "/lab/run/work/mirrored"
    assert sorted(path.name for path in (work / "ckpt").iterdir()) == ["ckpt-1.keras", "ckpt-2.keras"]
    assert (work / "logs/train").is_dir()
    assert seen(lab)["scale"] == 0.5  # datasets/scale.txt beside the script, found by keras.utils.get_file


def test_it_gets_its_environment_and_its_data_folder(compose_run):
    lab, _ = compose_run
    assert seen(lab)["greeting"] == "hello there"
    assert seen(lab)["weights"] == WEIGHTS.tolist()  # read from $TFLAB_DATA, mounted read-only


def test_its_output_is_streamed_whole_with_its_task_and_the_keras_it_imported(compose_run):
    lab, _ = compose_run
    lines = lab.output.splitlines()
    assert "[mirrored] started: tensorflow 2.21.0" in lines
    assert any(re.fullmatch(r"\[mirrored\] imported keras 3\.\d+\.\d+ \(Keras 3\)", line) for line in lines)
    # Live: the epochs are printed before the task's end, each Keras bar as its last drawing, uncoloured.
    epoch = lines.index("[mirrored] Epoch 2/2")
    done = next(i for i, line in enumerate(lines) if line.startswith("[mirrored] done in"))
    # (The lab's own line for the epoch, from observe.py's event, may come between: two streams.)
    assert epoch < done and any(re.fullmatch(r"\[mirrored\] 16/16 ━+ \S+ \S+/step - loss: \d\.\d+", line)
                                for line in lines[epoch + 1:done])
    log = (lab.run_dir / "output.log").read_text()
    assert "\r" not in log and "\x1b[" not in log
    assert all(line.startswith("mirrored | ") for line in log.splitlines())


def test_the_local_backend_runs_it_the_same_way(local_run):
    lab, data = local_run
    assert lab.ok, lab.why()
    found = seen(lab)
    assert found["cwd"] == str(lab.tasks_dir / "work/mirrored")
    assert (found["replicas"], found["greeting"], found["scale"]) == (2, "hello there", 0.5)
    assert found["weights"] == WEIGHTS.tolist()  # $TFLAB_DATA is the folder itself
    assert "[mirrored] Number of devices: 2" in lab.output.splitlines()


def test_a_download_is_explained_with_the_fix(tflab_cluster):
    lab = tflab_cluster(strategy="single", script=SCRIPTS / "download.py", restarts=0)
    assert not lab.ok
    row = lab.summary.tasks[0]
    assert row.explanation["signature"] == "no-route-out", row.explanation
    assert "network has no route out, by design" in lab.output and "NETWORK=bridge" in lab.output
    assert "the lab knows no fix for this one" not in lab.output
    assert "restarting" not in lab.output
