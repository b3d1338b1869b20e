"""A kind of run is one interface (supervisor/kind.py's RunKind) that the runner asks and nothing
else: the runner reads no member of a kind that RunKind does not declare, each kind has every
member, and neither kind is made of the other (no hooks overridden from another folder). mypy
holds the types (test_types.py); this holds the seam's shape."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "scripts" / "tflab"
KINDS = {"LabRun": "supervisor/labrun.py", "ReplayRun": "replay/run.py"}


def tree(path: str) -> ast.Module:
    return ast.parse((PACKAGE / path).read_text())


def class_of(module: ast.Module, name: str) -> ast.ClassDef:
    return next(node for node in module.body if isinstance(node, ast.ClassDef) and node.name == name)


def members(cls: ast.ClassDef) -> set[str]:
    """What a class has: its methods and properties, its class attributes, and what its __init__ sets."""
    found = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name != "__init__":
            found.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found.add(node.target.id)
        elif isinstance(node, ast.Assign):
            found |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.FunctionDef) and node.name == "__init__":
            for sub in ast.walk(node):
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] if isinstance(
                    sub, ast.AnnAssign) else []
                for part in (part for target in targets for part in ast.walk(target)):
                    if isinstance(part, ast.Attribute) and isinstance(part.value, ast.Name) and part.value.id == "self":
                        found.add(part.attr)
    return found


DECLARED = members(class_of(tree("supervisor/kind.py"), "RunKind"))


def asked_of_kind(module: ast.Module) -> set[str]:
    """Every member the runner reads of a kind: `kind.x`, `what.x`, `seen.kind.x`."""
    asked = set()
    for node in ast.walk(module):
        if not isinstance(node, ast.Attribute):
            continue
        value = node.value
        if isinstance(value, ast.Name) and value.id in ("kind", "what"):
            asked.add(node.attr)
        elif isinstance(value, ast.Attribute) and value.attr == "kind":
            asked.add(node.attr)
    return asked


def test_the_runner_asks_a_kind_only_what_runkind_declares():
    asked = asked_of_kind(tree("supervisor/runner.py"))
    assert {"job_condition", "restart_verdict", "deadline", "rows"} <= asked  # the checker sees the runner's asks
    assert asked - DECLARED == set()


@pytest.mark.parametrize("name, path", KINDS.items())
def test_each_kind_has_every_member_and_is_made_of_no_other(name, path):
    cls = class_of(tree(path), name)
    assert cls.bases == []  # no hooks inherited or overridden: each kind says all it does
    assert DECLARED - members(cls) == set()


def test_the_checker_sees_a_member_the_protocol_lacks():
    planted = ast.parse("def f(kind):\n    return kind.secret_hook()\n")
    assert asked_of_kind(planted) - DECLARED == {"secret_hook"}
