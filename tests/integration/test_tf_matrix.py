"""TF= and make matrix on the real stack, with exactly one older TensorFlow built (2.15, Keras 2
bundled; the rest is `python -m tflab.reports.matrixbench`): a tf.keras script under
MultiWorkerMirroredStrategy passes on 2.15 and under tf-keras but fails under Keras 3 on 2.21, explained;
a script using tf.estimator, which 2.16 removed, passes on 2.15 and fails on 2.21, explained. Each
matrix leaves its cells' run folders and nothing on the engine."""

import contextlib
import json
import subprocess
import time

import pytest
from labtest import parallel
from labtest.cli import REPO, lab_env, run_lab
from tflab import images
from tflab.images import platforms, record
from tflab.reports.matrix import Matrix

SCRIPTS = REPO / "tests/integration/scripts"
pytestmark = pytest.mark.xdist_group("tf-matrix")  # one worker builds TF=2.15 and runs the matrices


@pytest.fixture(scope="module")
def old_image(trainer_image, request) -> str:
    """tflab-trainer:cpu-tf2.15-<digest>: built here if it is not there yet (about a minute cold),
    under the lock the lab's own image is built under (one build at a time on the engine)."""
    started = time.monotonic()
    shared = parallel.shared_folder(request.config)
    with parallel.once(shared / "locks" / "image.lock") if shared else contextlib.nullcontext():
        result = run_lab("images", "--tag", env=lab_env(TF="2.15"), timeout=3600)
    assert result.returncode == 0, result.output[-4000:]
    tag = result.stdout.strip().splitlines()[-1]
    print(f"TF=2.15 image ready in {time.monotonic() - started:.1f} s: {tag}")
    return tag


def lab_objects(prefix: str) -> list[str]:
    """Containers and networks the engine still has of the matrix's runs (their projects start so)."""
    found = []
    for kind in ("container", "network"):
        listed = subprocess.run(["docker", kind, "ls", "-a" if kind == "container" else "-q", "--format",
                                 "{{.Names}}" if kind == "container" else "{{.Name}}"],
                                capture_output=True, text=True, check=True).stdout.split()
        found += [name for name in listed if name.startswith(prefix)]
    return found


def matrix(tmp_path, **settings: str):
    runs = tmp_path / "runs"
    result = run_lab("matrix", env=lab_env(RUNS_DIR=str(runs), RUN="m", **settings), timeout=1800)
    return result, runs / "m"


def test_the_older_version_is_its_own_image_and_the_labs_own_to_clean(old_image):
    assert old_image.startswith("tflab-trainer:cpu-tf2.15-")
    listed = record.removal_order()  # what `make clean` removes: this checkout's own images
    assert old_image in listed
    # Its packages image is this checkout's to remove only where this checkout built it: on an
    # engine that kept it from another checkout (CI's engine outlives its clones) it stays theirs.
    packages = [images.packages_tag(images.tf_variant("2.15"), images.image_id(base))
                for base in (platforms.LOCAL_BASE, images.PUBLIC_BASE) if images.image_id(base)]
    assert [tag for tag in packages if images.image_id(tag)], packages  # the old image is built on it
    for tag in set(packages) & set(listed):
        assert listed.index(old_image) < listed.index(tag)  # removed after what is built on it
    version = subprocess.run(["docker", "run", "--rm", "--network", "none", old_image, "python", "-c",
                              "import tensorflow as tf, keras; print(tf.__version__, keras.__version__)"],
                             capture_output=True, text=True, check=True)
    assert version.stdout.split() == ["2.15.1", "2.15.0"]


def test_a_tf_keras_script_breaks_under_keras3_on_2_21_and_passes_on_2_15_and_under_tf_keras(old_image, tmp_path):
    result, folder = matrix(tmp_path, TF="2.15 2.21", KERAS="tf-keras keras3", STRATEGIES="multiworker",
                            SCRIPT=str(SCRIPTS / "train_tf_keras_mwms.py"), ARGS="--epochs 1", TIMEOUT="300")
    assert result.returncode == 1, result.output[-4000:]
    cells = {(c.tf, c.keras): c for c in Matrix.read(folder).cells}
    assert {key: c.outcome for key, c in cells.items()} == {
        ("2.15", "tf-keras"): "ok", ("2.15", "keras3"): "n/a", ("2.21", "tf-keras"): "ok",
        ("2.21", "keras3"): "failed"}, result.output[-4000:]
    assert cells[("2.21", "keras3")].signature == "keras3-multiworker"
    assert "keras-team/keras#20585" in cells[("2.21", "keras3")].what
    assert cells[("2.15", "keras3")].what.startswith("its tf.keras is the bundled Keras 2")
    assert "2.15 → 2.21: multiworker breaks under keras3 on 2.21: keras3-multiworker (keras#20585); with tf-keras " \
           "every cell passes" in result.stdout
    summary = json.loads((folder / "tf2-15-tf-keras-multiworker/summary.json").read_text())
    assert summary["ok"] and summary["settings"]["tf"] == "2.15"
    assert (folder / "matrix.md").is_file() and (folder / "matrix.png").is_file()
    # The Keras the script imported, as its own process saw it (trainer/kerasversion.py), on 2.15 too.
    assert "[worker-0] started: tensorflow 2.15.1" in result.stdout
    assert "[worker-0] imported tf-keras 2.15.1" in result.stdout, result.stdout[-4000:]
    assert lab_objects("tflab-tf2-") == []


def test_a_script_using_an_api_a_version_removed_is_explained(old_image, tmp_path):
    result, folder = matrix(tmp_path, TF="2.15 2.21", KERAS="tf-keras", STRATEGIES="single",
                            SCRIPT=str(SCRIPTS / "train_estimator.py"), ARGS="--epochs 1", TIMEOUT="300")
    assert result.returncode == 1, result.output[-4000:]
    old, new = Matrix.read(folder).cells
    assert (old.tf, old.outcome, new.tf, new.outcome) == ("2.15", "ok", "2.21", "failed"), result.output[-4000:]
    assert new.signature == "removed-api" and "tf.estimator" in new.what
    assert "single breaks under tf-keras on 2.21: removed-api" in result.stdout
