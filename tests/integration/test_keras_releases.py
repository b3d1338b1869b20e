"""KERAS=<release> on the real stack, cheap enough for CI: one Keras layer built (nightly, on the lab's
own 2.21 image, which itself has 3.15.1), and a 1 TF x 3 Keras matrix of a custom loop with Adam
under MirroredStrategy (keras#23085's shape): 3.10 is not installable with TF 2.21 (pip's reason),
3.15 fails, nightly passes, and the verdict says it is fixed in nightly. Each cell says the Keras its
process imported. The 4-release matrix and the cold build of each layer are `python -m
tflab.reports.matrixbench --keras`."""

import contextlib
import subprocess
import time

import pytest
from labtest import parallel
from labtest.cli import REPO, lab_env, run_lab
from tflab.core import versions
from tflab.reports.matrix import Matrix

SCRIPT = REPO / "tests/integration/scripts/custom_loop_adam_mirrored.py"
NIGHTLY = versions.KERAS_RELEASES["nightly"]
pytestmark = pytest.mark.xdist_group("tf-matrix")  # with the other matrices: one build at a time


@pytest.fixture(scope="module")
def nightly_image(trainer_image, request) -> str:
    """tflab-trainer:cpu-kerasnightly-<digest>: the lab's own packages plus a keras-nightly layer,
    built here if it is not there yet, under the lock the lab's own image is built under."""
    started = time.monotonic()
    shared = parallel.shared_folder(request.config)
    with parallel.once(shared / "locks" / "image.lock") if shared else contextlib.nullcontext():
        result = run_lab("images", "--tag", env=lab_env(KERAS="nightly"), timeout=1800)
    assert result.returncode == 0, result.output[-4000:]
    tag = result.stdout.strip().splitlines()[-1]
    print(f"KERAS=nightly image ready in {time.monotonic() - started:.1f} s: {tag}")
    return tag


def test_the_nightly_layer_has_keras_nightly_only(nightly_image):
    assert nightly_image.startswith("tflab-trainer:cpu-kerasnightly-")
    probe = subprocess.run(["docker", "run", "--rm", "--network", "none", nightly_image, "python", "-c",
                            "import importlib.metadata as m, keras\n"
                            "print(keras.__version__, [d.metadata['Name'] for d in m.distributions() "
                            "if d.metadata['Name'] in ('keras', 'keras-nightly')])"],
                           capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == f"{NIGHTLY} ['keras-nightly']", probe.stdout + probe.stderr


def test_the_matrix_says_from_which_keras_a_loop_breaks_and_where_it_is_fixed(nightly_image, tmp_path):
    runs = tmp_path / "runs"
    result = run_lab("matrix", env=lab_env(RUNS_DIR=str(runs), RUN="m", TF="2.21", KERAS="3.10 3.15 nightly",
                                           STRATEGIES="mirrored", SCRIPT=str(SCRIPT), ARGS="--epochs 1",
                                           TIMEOUT="300"), timeout=1800)
    assert result.returncode == 1, result.output[-4000:]  # 3.15 failed
    cells = {c.keras: c for c in Matrix.read(runs / "m").cells}
    assert {keras: c.outcome for keras, c in cells.items()} == {
        "3.10": "not installable", "3.15": "failed", "nightly": "ok"}, result.output[-4000:]
    assert "tensorflow-cpu 2.21.0 depends on keras>=3.12.0" in cells["3.10"].what and cells["3.10"].run is None
    assert "placeholder tensor" in (cells["3.15"].what or "") + result.output, result.output[-4000:]
    assert (cells["3.15"].keras_imported, cells["nightly"].keras_imported) == ("keras 3.15.1", f"keras {NIGHTLY}")
    assert ("mirrored: fails on Keras 3.15, the oldest Keras run" in result.stdout
            and f"fixed in nightly ({NIGHTLY}, {versions.NIGHTLY_DATE}); " in result.stdout
            and "not installable (pip): Keras 3.10" in result.stdout), result.stdout[-3000:]
