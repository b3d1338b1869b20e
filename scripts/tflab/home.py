"""Where the lab's own files are: the compose file, the Dockerfiles, the pinned requirements.

In a checkout of the repository they are its top-level files, and this is the repository root.
Installed with pip, the same files travel inside the package (pyproject.toml's force-include maps
the repository's own top-level files into tflab/_lab/: no second copy in the tree), and `docker
build` needs them laid out as in the repository, next to the code it bakes in. So an installed lab
lays them out once per version, in a cache folder of their own (TFLAB_HOME, else
$XDG_CACHE_HOME/tflab, else ~/.cache/tflab), named by a digest of what it holds: two versions of
the lab never share one, and a version's folder is never rewritten.

The wheelhouse and the image record live there too; a user's runs never do (RUNS_DIR is relative
to the folder the lab is started from). The folder is named at import and made only when a
command needs the lab's files (`ensure`, which the CLI calls): `tflab --help`, `settings`,
`summary` and the other commands that read nothing of it work with a HOME the lab cannot write.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from tflab.core import versions
from tflab.core.errors import LabError

PACKAGE = Path(__file__).resolve().parent
CODE_ROOT = PACKAGE.parent  # what goes on PYTHONPATH for `python -m tflab...`
BUNDLED = PACKAGE / "_lab"  # an installed lab's copy of the repository's files
# What a checkout has and an installed lab carries; the build context needs every one.
LAB_FILES = ("docker-compose.yml", "images/trainer/Dockerfile", "images/trainer/install-packages.sh",
             "images/script/Dockerfile",
             "images/base/build.sh", "requirements/trainer.txt", "requirements/trainer-gpu.txt",
             "requirements/trainer-arm64.txt",
             *[f"requirements/tf/{tf}.txt" for tf in versions.RELEASES if tf != versions.DEFAULT])  # TF=


def is_checkout(root: Path) -> bool:
    return all((root / name).is_file() for name in LAB_FILES)


def cache_root() -> Path:
    """TFLAB_HOME, else $XDG_CACHE_HOME/tflab, else ~/.cache/tflab; with no home folder known
    (HOME unset, no passwd entry) the literal `~/.cache/tflab`, which `ensure` refuses."""
    try:
        if os.environ.get("TFLAB_HOME"):
            return Path(os.environ["TFLAB_HOME"]).expanduser()
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tflab"
    except RuntimeError:  # Path.home(): "Could not determine home directory"
        return Path("~/.cache/tflab")


def code_files() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if BUNDLED not in path.parents)


def _sources() -> list[tuple[str, Path]]:
    sources = [(name, BUNDLED / name) for name in LAB_FILES]
    return sources + [(f"scripts/tflab/{path.relative_to(PACKAGE)}", path) for path in code_files()]


def installed_path() -> Path:
    """Where this installed version's files are laid out: named by a digest of them; made by nothing here."""
    digest = hashlib.sha256()
    for name, path in _sources():
        digest.update(name.encode() + b"\0" + path.read_bytes())
    return cache_root() / f"lab-{digest.hexdigest()[:12]}"


def installed_home() -> Path:
    """The laid-out copy for this installed version, made on first use; OSError where it cannot be."""
    home = installed_path()
    if (home / "docker-compose.yml").is_file():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    # Laid out beside, then renamed into place: a lab interrupted halfway leaves no half folder
    # that a later run would take for whole.
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=home.parent))
    for name, path in _sources():
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
    """The checkout, or where an installed lab's files are (or will be) laid out."""
    checkout = PACKAGE.parents[1]
    return checkout if is_checkout(checkout) else installed_path()


def ensure() -> Path:
    """LAB_HOME with the lab's files in it, laid out now where it is an installed lab's; a
    LabError naming the folder and how to choose another where it cannot be made."""
    if is_checkout(LAB_HOME):
        return LAB_HOME
    fix = "set TFLAB_HOME to a folder you can write (else XDG_CACHE_HOME/tflab, else ~/.cache/tflab is used)"
    if not LAB_HOME.is_absolute():
        raise LabError(f"no home folder is known for the lab's cache (HOME is unset); {fix}")
    try:
        home = installed_home()
    except OSError as error:
        raise LabError(f"cannot make the lab's cache folder {LAB_HOME.parent} "
                       f"({error.strerror or error}); {fix}") from None
    if home != LAB_HOME:  # the environment changed since import; the modules hold LAB_HOME's paths
        raise LabError(f"the lab's cache folder moved from {LAB_HOME.parent} to {home.parent} while it ran; {fix}")
    return home


LAB_HOME = lab_home()
