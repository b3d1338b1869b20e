"""Writes requirements/tf/<minor>.txt, the lock file of one TensorFlow line (TF=<minor>), once, by
asking the host's pip to resolve it for the image (CPython 3.11, manylinux x86_64) without
installing anything (`pip install --dry-run --report`): every package pinned to one version with
the sha256 of the wheel pip chose, so the image installs exactly that (--require-hashes).

    PYTHONPATH=scripts python3 -m tflab.tools.lock 2.15 2.18 next     # or: all
    PYTHONPATH=scripts python3 -m tflab.tools.lock --keras 3.12 2.21  # or: --keras all all

--keras: requirements/keras/<tf>-<keras>.txt, the thin layer of a Keras release on a TF line's
image (keraslock.py): pip resolves tensorflow-cpu==<TF's release> with keras==<release>
(keras-nightly==<pin> for nightly) and the TF line's lock as constraints (the Keras package it
brought left out), and the lock keeps what differs from the TF line's; where pip cannot, the lock
says so with pip's reason, and the matrix marks that cell not installable.

tf-keras is added with --no-deps (it depends on the full `tensorflow` package; tensorflow-cpu is
installed instead), for the lines PyPI has it for (versions.TF_KERAS). Needs PyPI; the lab never
runs it: the files are kept in the repository.
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tflab.core import versions
from tflab.home import LAB_HOME
from tflab.images import keraslock

LOCK_DIR = LAB_HOME / "requirements/tf"
TARGET = ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
          *[arg for tag in ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_27_x86_64",
                            "manylinux_2_28_x86_64") for arg in ("--platform", tag)]]


def lock_path(minor: str) -> Path:
    return LOCK_DIR / f"{minor}.txt"


class NotInstallable(Exception):
    """pip cannot install these requirements together; the message is pip's reason, one line."""


def pip_reason(output: str) -> str:
    """pip's reason on one line: the lines under "The conflict is caused by:", else its first ERROR."""
    lines = output.splitlines()
    if "The conflict is caused by:" in [line.strip() for line in lines]:
        start = [line.strip() for line in lines].index("The conflict is caused by:") + 1
        caused = []
        for line in lines[start:]:
            if not line.strip():
                break
            caused.append(line.strip())
        reason = "; ".join(caused)
    else:
        reason = next((line.removeprefix("ERROR: ").strip() for line in lines if line.startswith("ERROR:")),
                      "pip gave no reason")
    return re.sub(r"[^ -~]", "?", reason)[:400]


def resolve(requirement: str | list[str], no_deps: bool = False, constraints: str = "",
            pre: bool = False) -> list[tuple[str, str, str]]:
    """(name, version, sha256) of every wheel pip would install for `requirement` on the image;
    NotInstallable with pip's reason where it cannot."""
    requirements = [requirement] if isinstance(requirement, str) else requirement
    with tempfile.TemporaryDirectory(prefix="tflab-lock-") as scratch:
        report = Path(scratch) / "report.json"
        constraint_args = []
        if constraints:
            (Path(scratch) / "constraints.txt").write_text(constraints)
            constraint_args = ["-c", str(Path(scratch) / "constraints.txt")]
        # Not --quiet: pip says why it cannot ("The conflict is caused by: ...") at its info level.
        command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--progress-bar", "off",
                   "--disable-pip-version-check", "--only-binary=:all:", *TARGET,
                   "--target", str(Path(scratch) / "target"), "--report", str(report),
                   *(["--no-deps"] if no_deps else []), *(["--pre"] if pre else []), *constraint_args, *requirements]
        result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0:
            print(result.stdout[-4000:], end="", file=sys.stderr)
            raise NotInstallable(pip_reason(result.stdout))
        installed = json.loads(report.read_text())["install"]
    return [(entry["metadata"]["name"].lower().replace("_", "-"), entry["metadata"]["version"],
             entry["download_info"]["archive_info"]["hashes"]["sha256"]) for entry in installed]


def lock(minor: str) -> Path:
    release = versions.RELEASES[minor]
    pins = sorted(resolve(f"tensorflow-cpu=={release}"))  # NotInstallable: the line itself cannot be had
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


def parent_pins(parent: Path) -> dict[str, str]:
    """name -> version of a TF line's lock (requirements/trainer.txt has no hashes: only names and versions)."""
    found = {}
    for line in parent.read_text().splitlines():
        match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^]]*\])?==(\S+)", line)
        if match:
            found[match.group(1).lower().replace("_", "-")] = match.group(2)
    return found


def keras_lines(tf: str, keras: str, resolved: list[tuple[str, str, str]] | None, reason: str | None,
                parent: Path) -> list[str]:
    """The lines of a Keras release's lock: what differs from the TF line's (and what it replaces)."""
    distribution = "keras-nightly" if keras == "nightly" else "keras"
    release = versions.KERAS_RELEASES[keras]
    header = [f"# Keras {release} (KERAS={keras}) on TensorFlow {versions.release(tf)} (TF={tf}): what the TF "
              "line's image changes to have it,",
              f"# as pip resolved tensorflow-cpu=={versions.release(tf)} {distribution}=={release} on "
              f"{datetime.date.today()} for CPython 3.11 on manylinux x86_64,",
              f"# with {keraslock.relative(parent)} as constraints (python3 -m tflab.tools.lock --keras {keras} {tf}); "
              "each wheel with its sha256.",
              "# The layer uninstalls what `removes` names, then installs these with --no-deps "
              "(images/trainer/install-keras.sh).",
              f"{keraslock.LAYERS_ON}{keraslock.relative(parent)} sha256:{keraslock.sha256(parent)}"]
    if reason is not None:
        return [*header, f"{keraslock.NOT_INSTALLABLE}{reason}"]
    assert resolved is not None  # pip resolved it, where no reason says it could not
    own = parent_pins(parent)
    changed = sorted(pin for pin in resolved if own.get(pin[0]) != pin[1])
    installed = {name: version for name, version, _ in resolved}
    # keras and keras-nightly both install keras/: the one the TF line brought goes first, unless it is this very one.
    removes = [name for name in versions.KERAS_DISTRIBUTIONS
               if name in own and (name != distribution or installed.get(name) != own[name])]
    return [*header, *([f"{keraslock.REMOVES}{' '.join(removes)}"] if removes else []),
            *[f"{name}=={version} --hash=sha256:{sha}" for name, version, sha in changed]]


def lock_keras(tf: str, keras: str) -> Path:
    parent = keraslock.parent_lock(tf)
    distribution = "keras-nightly" if keras == "nightly" else "keras"
    constraints = "\n".join(re.sub(r" --hash=\S+", "", line) for line in parent.read_text().splitlines()
                            if not re.match(r"(keras|keras-nightly|keras_nightly)==", line)) + "\n"
    try:
        resolved, reason = resolve([f"tensorflow-cpu=={versions.release(tf)}",
                                    f"{distribution}=={versions.KERAS_RELEASES[keras]}"],
                                   constraints=constraints, pre=keras == "nightly"), None
    except NotInstallable as error:
        resolved, reason = None, str(error)
    path = keraslock.lock_path(tf, keras)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(keras_lines(tf, keras, resolved, reason, parent)) + "\n")
    return path


def main_keras(argv: list[str]) -> int:
    """--keras KERAS[,KERAS] TF ...: the lock of each Keras release on each TF line (all: every one)."""
    if len(argv) < 2:
        print("tflab: expected --keras <release|all> <TF ...|all>", file=sys.stderr)
        return 2
    kerases = list(versions.KERAS_RELEASES) if argv[0] == "all" else \
        [versions.keras_canonical(word) or word for word in argv[0].split(",")]
    tfs = [tf for tf in versions.RELEASES if "keras3" in versions.kerases(tf)] if argv[1:] == ["all"] else \
        [versions.canonical(raw) or raw for raw in argv[1:]]
    for keras in kerases:
        if keras not in versions.KERAS_RELEASES:
            print(f"tflab: --keras {keras}: expected one of {' '.join(versions.KERAS_RELEASES)} or all",
                  file=sys.stderr)
            return 2
    for tf in tfs:
        if tf not in versions.RELEASES or "keras3" not in versions.kerases(tf):
            print(f"tflab: {tf} takes no Keras release: expected a TF line from {versions.KERAS_3_FROM} on",
                  file=sys.stderr)
            return 2
    for tf in tfs:
        for keras in kerases:
            path = lock_keras(tf, keras)
            said = keraslock.read(tf, keras)
            print(f"locked {path.relative_to(LAB_HOME)}"
                  + (f": not installable ({said.not_installable})" if said.not_installable else
                     " (the TF line has it already)" if said.empty else f": {len(said.pins)} wheel(s)"), flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--keras"]:
        return main_keras(argv[1:])
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
