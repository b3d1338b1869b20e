"""make matrix's figures, too slow for `make test` (which builds one older version, 2.15): each
version's image, cold (its wheels, its packages image, the code) and its size; a warm matrix's wall
time on the lab's model; and what every image of the lab takes on the engine after it.

    PYTHONPATH=scripts python3 -m tflab.matrixbench [TF ...]   # default: 2.15 2.18 2.21 (3 x 2 x 1)

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

from tflab import docker, images, versions
from tflab.home import LAB_HOME
from tflab.matrix import Matrix

DEFAULT = ("2.15", "2.18", "2.21")


def build_seconds(tf: str) -> tuple[str, float | None, bool]:
    """The version's image tag; its build time where it had to be built; whether that build was cold
    (its packages image too, wheels included where they were not downloaded yet) or the code layer only."""
    variant = images.tf_variant(tf)
    base = images.ensure_base("", variant.platform, variant.platform)
    base_id = images.image_id(base)
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


def main(argv: list[str]) -> int:
    tfs = [versions.canonical(raw) or raw for raw in (argv or DEFAULT)]
    lines = []
    for tf in tfs:
        tag, seconds, cold = build_seconds(tf)
        size = docker.image_size(tag)
        built = "already built (cold time not measured)" if seconds is None else \
            f"{'cold build' if cold else 'code layer only'} {seconds:.1f} s"
        lines.append(f"TF {versions.label(tf)}: {tag}, {size / 1e9:.2f} GB, {built}")
    seconds, result, code = warm_matrix(tfs, Path(os.environ.get("RUNS_DIR", "runs")).resolve())
    cells = [cell for cell in result.cells if cell.outcome != "n/a"]
    lines.append(f"warm matrix {len(tfs)} x 2 x 1 ({len(cells)} runs, exit {code}): {seconds:.1f} s in all, "
                 f"{sum(cell.wall_seconds or 0 for cell in cells):.1f} s of runs")
    lines.append(f"verdict: {result.verdict}")
    df = docker.system_df().stdout.strip()
    lines.append("docker system df after it:\n  " + df.replace("\n", "\n  "))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
