"""Docs, docstrings and comments name only what exists (issue 37): every `tflab.*` dotted name
resolves to a module of the package or a name defined in one, and every `*.py` a page or a
module's text names is a file of this repository, so a renamed or removed module cannot live on
in the words that explain the code (about 21 comments named `backend.py`, `swarm.py` and the like,
gone a round before). Upstream files and a user's own names, which the text names on purpose, are
listed with where they come from."""

import ast
import fnmatch
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest
from tflab import images
from tflab.engine import labels

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "scripts" / "tflab"
# Named on purpose, and not ours: upstream files (TensorFlow's, read for PreemptionCheckpointHandler)
# and the names a user's own project has (their script, their conftest.py); a name after `=`
# (`SCRIPT=loop.py`) is a value a user gives, not a file of ours.
NOT_OURS = {"failure_handling_util.py", "SCRIPT.py", "conftest.py", "path/to/train.py",
            "tensorflow/python/distribute/failure_handling/failure_handling_util.py",
            # TensorFlow's two-phase checkpoint write, read for make chaos AT=save (trainer/chaossave.py)
            "tensorflow/python/checkpoint/functional_saver.py", "functional_saver.py",
            # CPython's start-up modules, and the one a TFJob replay writes for a replica (replay/volumes.py)
            "site.py", "sitecustomize.py", "site/sitecustomize.py"}
# Dotted, and no module: Docker label keys (labels.py's `tflab.run`, images.py's `tflab.image`) and
# the GCE-like hostname the metadata stand-in answers (`<task>.c.tflab.internal`).
LABEL_KEYS = {value for name, value in vars(labels).items() if isinstance(value, str) and value.startswith("tflab.")}
LABEL_KEYS |= {images.IMAGE_LABEL.split("=")[0], "tflab.internal"}
FILE_NAME = re.compile(r"(?<![\w/.=-])((?:[\w-]+/)*[\w-]+\.py)\b")
DOTTED = re.compile(r"(?<![\w.])tflab\.([A-Za-z_][\w.]*\w)")


@cache
def tracked() -> tuple[str, ...]:
    return tuple(subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True,
                                check=True).stdout.split())


def texts() -> list[str]:
    top = ("README.md", "Makefile", "docker-compose.yml")
    return sorted(f for f in tracked() if (f.startswith("scripts/tflab/") and f.endswith(".py"))
                  or (f.startswith("docs/") and f.endswith(".md")) or f in top)


def file_exists(name: str) -> bool:
    if name in NOT_OURS:
        return True
    if "/" in name:
        return any(path == name or path.endswith(f"/{name}") for path in tracked())
    return any(Path(path).name == name for path in tracked())


@cache
def defined(module: Path) -> frozenset[str]:
    tree = ast.parse(module.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return frozenset(names)


def dotted_exists(dotted: str) -> bool:
    if f"tflab.{dotted}" in LABEL_KEYS:
        return True
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        base = PACKAGE.joinpath(*parts[:end])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if module.is_file():
            rest = parts[end:]
            return not rest or rest[0] in defined(module)
    return False


@pytest.mark.parametrize("path", texts())
def test_every_name_in_the_text_exists(path):
    text = (REPO / path).read_text()
    missing = sorted({match for match in FILE_NAME.findall(text) if not file_exists(match)}
                     | {f"tflab.{match}" for match in DOTTED.findall(text) if not dotted_exists(match)})
    assert missing == [], f"{path} names what does not exist"


@pytest.mark.parametrize("text, missing", [
    ("see backend.py's interface", ["backend.py"]),
    ("runfolder.py and tflab.core.runsummary.Summary", []),
    ("tflab.core.runfolder.NoSuchThing", ["tflab.core.runfolder.NoSuchThing"]),
    ("tflab.run, the label", []),
])
def test_the_check_finds_what_it_should(text, missing):
    found = sorted({m for m in FILE_NAME.findall(text) if not file_exists(m)}
                   | {f"tflab.{m}" for m in DOTTED.findall(text) if not dotted_exists(m)})
    assert found == missing


# Every path the pages name, not only `*.py`: a backticked `images/trainer/Dockerfile`,
# `requirements/tf/<minor>.txt`, `tests/unit/logs/`, `scripts/gpu-check.sh`, or `core/cluster.py`
# (the package's folders are named from scripts/tflab/). Until issue 46 the check above saw `.py`
# alone, and a bare name passed if any folder held a file of that name. A `<placeholder>` or `*`
# stands for any name and must match at least one path.
PAGES = ("README.md", *sorted(f"docs/{page.name}" for page in (REPO / "docs").glob("*.md")))
BACKTICKED = re.compile(r"`([^`\s]+)`")
# What the lab makes and git ignores: named as where it will be, so held to .gitignore instead.
MADE = {"images/trainer/.built.json", "images/trainer/.libraries/", "images/trainer/wheels-tf<minor>/",
        "images/trainer/wheels-<variant>-keras<release>/"}
# The training operator's Go files (kubeflow/training-operator's pkg/), named for where its rules are.
UPSTREAM = {"core/pod.go", "core/job.go"}


@cache
def folders() -> tuple[str, ...]:
    return tuple(sorted({"/".join(path.split("/")[:end]) for path in tracked()
                         for end in range(1, path.count("/") + 1)}))


def roots() -> tuple[set[str], set[str]]:
    """The repository's top folders, and the package's (`core`, `trainer`: named from scripts/tflab/)."""
    top = {path.split("/")[0] for path in folders()}
    package = {path.split("/")[2] for path in folders() if path.startswith("scripts/tflab/") and path.count("/") == 2}
    return top, package


def a_repository_path(name: str) -> bool:
    """Whether a backticked word names a file or folder of this repository, as opposed to one in a
    run folder (`runs/<RUN>/`), a container (`/lab/run`) or a URL-like name (`kubeflow.org/v1`)."""
    top, package = roots()
    first = name.split("/")[0]
    return ("/" in name and first in top | package) or bool(re.fullmatch(r"[\w.-]+\.(py|sh)", name))


def path_exists(name: str) -> bool:
    top, package = roots()
    bare = name.rstrip("/")
    if "/" not in bare:
        return any(Path(path).name == bare for path in tracked() + folders())
    pattern = re.sub(r"<[^>]*>", "*", bare)
    patterns = [pattern] + ([f"scripts/tflab/{pattern}"] if bare.split("/")[0] in package else [])
    return any(fnmatch.fnmatchcase(path, each) for each in patterns for path in tracked() + folders())


def ignored(name: str) -> bool:
    example = re.sub(r"<[^>]*>", "x", name)
    return subprocess.run(["git", "check-ignore", "-q", "--no-index", example], cwd=REPO).returncode == 0


def missing_paths(text: str) -> list[str]:
    return sorted({name for name in BACKTICKED.findall(text) if a_repository_path(name)
                   and name not in MADE | UPSTREAM | NOT_OURS and not path_exists(name)})


@pytest.mark.parametrize("page", PAGES)
def test_every_path_a_page_names_exists(page):
    assert missing_paths((REPO / page).read_text()) == [], f"{page} names a path that does not exist"


def test_what_the_lab_makes_is_ignored_and_not_kept():
    assert all(ignored(name) and not path_exists(name) for name in MADE)


@pytest.mark.parametrize("text, missing", [
    ("`images/trainer/Dockerfile` and `requirements/tf/<minor>.txt`", []),
    ("`requirements/trainer-tpu.txt`, `scripts/gpu_check.sh`",
     ["requirements/trainer-tpu.txt", "scripts/gpu_check.sh"]),
    ("`core/cluster.py` and `trainer/`", []),
    ("`core/clusters.py` and `trainers/`, `faults/*.go`", ["core/clusters.py", "faults/*.go"]),
    ("`tests/unit/logs/<name>.log`, `tests/unit/data/nothing/`", ["tests/unit/data/nothing/"]),
    ("`runs/<RUN>/config.json`, `/lab/run`, `kubeflow.org/v1`, `summary.json`", []),
    ("`gpu-check.sh`, `check-gpu.sh`", ["check-gpu.sh"]),
])
def test_the_path_check_finds_what_it_should(text, missing):
    assert missing_paths(text) == missing
