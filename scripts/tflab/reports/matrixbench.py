"""make matrix's figures, too slow for `make test` (which builds one older version, 2.15): each
version's image, cold (its wheels, its packages image, the code) and its size; a warm matrix's wall
time on the lab's model; and what every image of the lab takes on the engine after it.

    PYTHONPATH=scripts python3 -m tflab.reports.matrixbench [TF ...]   # default: 2.15 2.18 2.21 (3 x 2 x 1)
    PYTHONPATH=scripts python3 -m tflab.reports.matrixbench --keras [TF [KERAS ...]]
                                                     # default: 2.21 3.10 3.12 3.14 3.15 nightly

--keras: each Keras release's layer on the TF line's image, cold (its wheels, its layer, the code:
the TF line's packages image must be built already), and a warm 1 TF x 4 Keras matrix of a custom
loop with Adam under MirroredStrategy (tests/integration/scripts/custom_loop_adam_mirrored.py,
keras#23085's shape), whose verdict says from which release it breaks and where it is fixed. A
release pip cannot install with that TF is reported so, with pip's reason, and is no run.

Figures, not assertions: the machine is shared and noisy. A version whose image exists already is
reported as such, not rebuilt: its cold time is not measured then (`make clean` first, or remove that
version's tflab-trainer:cpu-tf<version>-* and tflab-trainer-packages:cpu-tf<version>-* images).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tflab import images
from tflab.core import versions
from tflab.core.errors import LabError
from tflab.core.settings import Settings
from tflab.engine import docker
from tflab.home import LAB_HOME
from tflab.reports.matrix import Matrix

DEFAULT = ("2.15", "2.18", "2.21")
KERAS_DEFAULT = ("2.21", "3.10", "3.12", "3.14", "3.15", "nightly")
LOOP_SCRIPT = LAB_HOME / "tests/integration/scripts/custom_loop_adam_mirrored.py"


def build_seconds(tf: str, variant: images.Variant | None = None) -> tuple[str, float | None, bool]:
    """The version's image tag; its build time where it had to be built; whether that build was cold
    (its packages image too, wheels included where they were not downloaded yet; for a Keras release,
    its layer) or the code layer only."""
    variant = variant or images.tf_variant(tf)
    base = images.ensure_base("", variant.platform, variant.platform)
    base_id = images.existing_id(base)
    tag = images.image_tag(variant, base_id)
    if images.image_id(tag):
        return tag, None, False
    cold = not images.image_id(images.packages_tag(variant, base_id))
    started = time.monotonic()
    tag = images.ensure_image("", variant)
    return tag, time.monotonic() - started, cold


def warm_matrix(tfs: list[str], runs_dir: Path) -> tuple[float, Matrix, int]:
    run = f"matrixbench-{int(time.time())}"
    env = {**os.environ, "PYTHONPATH": str(LAB_HOME / "scripts"), "TF": " ".join(tfs), "KERAS": "tf-keras keras3",
           "STRATEGIES": "multiworker", "RUN": run, "RUNS_DIR": str(runs_dir)}
    started = time.monotonic()
    code = subprocess.run([sys.executable, "-m", "tflab", "matrix"], env=env).returncode
    return time.monotonic() - started, Matrix.read(runs_dir / run), code


def keras_main(argv: list[str]) -> int:
    tf, kerases = (versions.canonical(argv[0]) or argv[0], argv[1:]) if argv else (KERAS_DEFAULT[0], [])
    kerases = [versions.keras_canonical(raw) or raw for raw in (kerases or KERAS_DEFAULT[1:])]
    lines, runnable = [], []
    for keras in kerases:
        try:
            variant = images.trainer_variant(Settings(tf=tf, keras=keras))
        except LabError as error:
            lines.append(f"KERAS={keras}: {error}")
            continue
        runnable.append(keras)
        tag, seconds, cold = build_seconds(tf, variant)
        built = "already built (cold time not measured)" if seconds is None else \
            f"{'cold build (wheels, Keras layer, code)' if cold else 'code layer only'} {seconds:.1f} s"
        kind = "its own Keras layer" if variant.parent else "the TF line's own image (it has this release)"
        lines.append(f"KERAS={versions.keras_label(keras)} on TF {versions.label(tf)}: {tag}, {kind}, {built}")
    run = f"matrixbench-keras-{int(time.time())}"
    runs_dir = Path(os.environ.get("RUNS_DIR", "runs")).resolve()
    env = {**os.environ, "PYTHONPATH": str(LAB_HOME / "scripts"), "TF": tf, "KERAS": " ".join(kerases),
           "STRATEGIES": "mirrored", "SCRIPT": str(LOOP_SCRIPT), "ARGS": "--epochs 2", "RUN": run,
           "RUNS_DIR": str(runs_dir)}
    started = time.monotonic()
    code = subprocess.run([sys.executable, "-m", "tflab", "matrix"], env=env).returncode
    seconds, result = time.monotonic() - started, Matrix.read(runs_dir / run)
    for cell in result.cells:
        lines.append(f"  {versions.keras_label(cell.keras)}: {cell.outcome}"
                     + (f" ({cell.signature})" if cell.signature else "")
                     + (f", imported {cell.keras_imported}" if cell.keras_imported else "")
                     + (f", {cell.wall_seconds:.1f} s" if cell.wall_seconds else "")
                     + (f": {cell.what}" if cell.outcome == "not installable" else ""))
    ran = [cell for cell in result.cells if cell.run]
    lines.insert(len(lines) - len(result.cells), f"warm matrix 1 x {len(kerases)} x 1 ({len(ran)} runs, exit {code}): "
                 f"{seconds:.1f} s in all, {sum(cell.wall_seconds or 0 for cell in ran):.1f} s of runs")
    lines.append(f"verdict: {result.verdict}")
    print("\n".join(lines))
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--keras"]:
        return keras_main(argv[1:])
    tfs = [versions.canonical(raw) or raw for raw in (argv or DEFAULT)]
    lines = []
    for tf in tfs:
        tag, seconds, cold = build_seconds(tf)
        size = docker.image_size(tag)
        built = "already built (cold time not measured)" if seconds is None else \
            f"{'cold build' if cold else 'code layer only'} {seconds:.1f} s"
        lines.append(f"TF {versions.label(tf)}: {tag}, {size / 1e9:.2f} GB, {built}")
    seconds, result, code = warm_matrix(tfs, Path(os.environ.get("RUNS_DIR", "runs")).resolve())
    cells = [cell for cell in result.cells if cell.run]  # n/a and not installable cells never ran
    lines.append(f"warm matrix {len(tfs)} x 2 x 1 ({len(cells)} runs, exit {code}): {seconds:.1f} s in all, "
                 f"{sum(cell.wall_seconds or 0 for cell in cells):.1f} s of runs")
    lines.append(f"verdict: {result.verdict}")
    df = docker.system_df().stdout.strip()
    lines.append("docker system df after it:\n  " + df.replace("\n", "\n  "))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
