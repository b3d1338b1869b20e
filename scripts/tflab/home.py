"""Where the lab's own files are: the compose file, the Dockerfiles, the pinned requirements.

In a checkout of the repository they are its top-level files, and this is the repository root.
Installed with pip, the same files travel inside the package (pyproject.toml's force-include maps
the repository's own top-level files into tflab/_lab/: no second copy in the tree), and `docker
build` needs them laid out as in the repository, next to the code it bakes in. So an installed lab
lays them out once per version, in a cache folder of their own (TFLAB_HOME, else
$XDG_CACHE_HOME/tflab, else ~/.cache/tflab), named by a digest of what it holds: two versions of
the lab never share one, and a version's folder is never rewritten.

The wheelhouse and the image record live there too; a user's runs never do (RUNS_DIR is relative
to the folder the lab is started from).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CODE_ROOT = PACKAGE.parent  # what goes on PYTHONPATH for `python -m tflab...`
BUNDLED = PACKAGE / "_lab"  # an installed lab's copy of the repository's files
# What a checkout has and an installed lab carries; the build context needs every one.
LAB_FILES = ("docker-compose.yml", "images/trainer/Dockerfile", "images/trainer/install-packages.sh",
             "images/script/Dockerfile",
             "images/base/build.sh", "requirements/trainer.txt", "requirements/trainer-gpu.txt",
             "requirements/trainer-arm64.txt")


def is_checkout(root: Path) -> bool:
    return all((root / name).is_file() for name in LAB_FILES)


def cache_root() -> Path:
    if os.environ.get("TFLAB_HOME"):
        return Path(os.environ["TFLAB_HOME"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tflab"


def code_files() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if BUNDLED not in path.parents)


def installed_home() -> Path:
    """The laid-out copy for this installed version, made on first use."""
    digest = hashlib.sha256()
    sources = [(name, BUNDLED / name) for name in LAB_FILES]
    sources += [(f"scripts/tflab/{path.relative_to(PACKAGE)}", path) for path in code_files()]
    for name, path in sources:
        digest.update(name.encode() + b"\0" + path.read_bytes())
    home = cache_root() / f"lab-{digest.hexdigest()[:12]}"
    if (home / "docker-compose.yml").is_file():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    # Laid out beside, then renamed into place: a lab interrupted halfway leaves no half folder
    # that a later run would take for whole.
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=home.parent))
    for name, path in sources:
        (staging / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, staging / name)
    for wheelhouse in ("images/trainer/wheels", "images/trainer/wheels-gpu", "images/trainer/wheels-arm64"):
        (staging / wheelhouse).mkdir(parents=True, exist_ok=True)
    try:
        staging.rename(home)
    except OSError:  # another lab laid it out first
        shutil.rmtree(staging, ignore_errors=True)
    return home


def lab_home() -> Path:
    checkout = PACKAGE.parents[1]
    return checkout if is_checkout(checkout) else installed_home()


LAB_HOME = lab_home()
