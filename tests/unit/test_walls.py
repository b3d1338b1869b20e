"""The two walls of the house: the host side never imports TensorFlow (so `make up` starts in a
blink without it), and the trainer never imports the host side's Docker/Compose code."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "scripts" / "tflab"
TRAINER = {"train", "launch", "callback"}  # runs inside the containers
SHARED = {"settings", "cluster", "schema", "errors", "peerwait", "linkproxy", "explain", "runfolder",  # both sides
          "__init__"}
HOST = {p.stem for p in PACKAGE.glob("*.py")} - TRAINER - SHARED


def imports_of(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            if node.module == "tflab":
                found |= {f"tflab.{alias.name}" for alias in node.names}
    return found


def test_the_host_side_is_what_is_left():
    assert HOST >= {"cli", "compose", "images", "runner", "summary", "local", "report", "bench", "chaos"}


@pytest.mark.parametrize("module", sorted(HOST | SHARED))
def test_host_and_shared_modules_never_import_tensorflow_or_numpy(module):
    assert not {name.split(".")[0] for name in imports_of(module)} & {"tensorflow", "numpy", "tf_keras", "keras"}


@pytest.mark.parametrize("module", sorted(TRAINER | SHARED))
def test_trainer_and_shared_modules_never_import_the_host_side(module):
    host = {f"tflab.{name}" for name in HOST}
    assert not imports_of(module) & host, imports_of(module) & host
