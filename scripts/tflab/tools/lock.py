"""Writes requirements/tf/<minor>.txt, the lock file of one TensorFlow line (TF=<minor>), once, by
asking the host's pip to resolve it for the image (CPython 3.11, manylinux x86_64) without
installing anything (`pip install --dry-run --report`): every package pinned to one version with
the sha256 of the wheel pip chose, so the image installs exactly that (--require-hashes).

    PYTHONPATH=scripts python3 -m tflab.tools.lock 2.15 2.18 next     # or: all

tf-keras is added with --no-deps (it depends on the full `tensorflow` package; tensorflow-cpu is
installed instead), for the lines PyPI has it for (versions.TF_KERAS). Needs PyPI; the lab never
runs it: the files are kept in the repository.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tflab import versions
from tflab.home import LAB_HOME

LOCK_DIR = LAB_HOME / "requirements/tf"
TARGET = ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
          *[arg for tag in ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_27_x86_64",
                            "manylinux_2_28_x86_64") for arg in ("--platform", tag)]]


def lock_path(minor: str) -> Path:
    return LOCK_DIR / f"{minor}.txt"


def resolve(requirement: str, no_deps: bool = False) -> list[tuple[str, str, str]]:
    """(name, version, sha256) of every wheel pip would install for `requirement` on the image."""
    with tempfile.TemporaryDirectory(prefix="tflab-lock-") as scratch:
        report = Path(scratch) / "report.json"
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
                   "--disable-pip-version-check", "--only-binary=:all:", *TARGET,
                   "--target", str(Path(scratch) / "target"), "--report", str(report),
                   *(["--no-deps"] if no_deps else []), requirement]
        subprocess.run(command, check=True)
        installed = json.loads(report.read_text())["install"]
    return [(entry["metadata"]["name"].lower().replace("_", "-"), entry["metadata"]["version"],
             entry["download_info"]["archive_info"]["hashes"]["sha256"]) for entry in installed]


def lock(minor: str) -> Path:
    release = versions.RELEASES[minor]
    pins = sorted(resolve(f"tensorflow-cpu=={release}"))
    lines = [f"# TensorFlow {release} (TF={minor}{', TF=next' if minor == versions.NEXT else ''}): tensorflow-cpu "
             "and every package it depends on, as pip resolved them",
             f"# on {datetime.date.today()} for CPython 3.11 on manylinux x86_64 (python3 -m tflab.tools.lock "
             f"{minor}), each with the sha256",
             "# of the wheel pip chose. The image installs them with --no-deps from its wheelhouse "
             "(images/trainer/install-packages.sh).",
             *[f"{name}=={version} --hash=sha256:{sha}" for name, version, sha in pins]]
    if minor in versions.TF_KERAS:
        (name, version, sha), = resolve(f"tf-keras=={versions.TF_KERAS[minor]}", no_deps=True)
        lines += ["# KERAS=tf-keras: tf_keras beside tensorflow-cpu, with --no-deps (it depends on the full "
                  "`tensorflow` package)", f"{name}=={version} --hash=sha256:{sha}"]
    path = lock_path(minor)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str]) -> int:
    wanted = [m for m in versions.RELEASES if m != versions.DEFAULT] if argv == ["all"] else \
        [versions.canonical(raw) or raw for raw in argv]
    for minor in wanted:
        if minor not in versions.RELEASES or minor == versions.DEFAULT:
            print(f"tflab: {minor} has no lock file of its own: expected one of {versions.ALLOWED} "
                  f"({versions.DEFAULT} is requirements/trainer.txt)", file=sys.stderr)
            return 2
        print(f"locked {lock(minor).relative_to(LAB_HOME)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
