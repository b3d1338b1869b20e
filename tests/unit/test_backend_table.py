"""The backends' one table (core/backends.py): every BACKEND name is chosen through it and the
registry, and no module compares BACKEND with a name instead of asking the table."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from tflab import backends
from tflab.core import backends as table
from tflab.core.settings import BACKENDS, Settings, SettingsError

PACKAGE = Path(__file__).resolve().parents[2] / "scripts" / "tflab"


def names_compared(source: str) -> list[str]:
    """Each comparison of something that names a backend (settings.backend, given["BACKEND"], ...)
    with a backend's name, or a tuple of names: ==, !=, in and not in, either way round."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        named = [operand for operand in operands if _backend_names(operand)]
        if named and any("backend" in ast.unparse(operand).lower() for operand in operands if operand not in named):
            found.append(ast.unparse(node))
    return found


def _backend_names(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in BACKENDS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_backend_names(element) for element in node.elts)
    return False


@pytest.mark.parametrize("branch", [
    'settings.backend == "local"',
    'self.backend != "compose"',
    'backend in ("compose", "swarm")',
    'settings.backend not in ["local"]',
    '"swarm" == settings.backend',
    'given.get("BACKEND", "compose").strip() != "compose"',
])
def test_the_guard_catches_each_form_of_a_branch_on_a_backends_name(branch):
    assert names_compared(f"if {branch}:\n    pass\n") == [ast.unparse(ast.parse(branch, mode="eval").body)]


def test_the_guard_leaves_other_settings_that_share_a_word_alone():
    assert names_compared('if settings.placement == "local" or backend.name == other:\n    pass\n') == []


def test_no_module_branches_on_a_backends_name():
    """What a backend can do is asked of its entry in core/backends.py's table, never of its name."""
    branches = {str(path.relative_to(PACKAGE)): names_compared(path.read_text())
                for path in sorted(PACKAGE.rglob("*.py"))}
    assert {path: found for path, found in branches.items() if found} == {}
    assert len(branches) > 60  # every module was read, not a folder of them


def test_every_backend_name_is_chosen_through_the_one_table_and_the_registry():
    """BACKEND's names are the table's, and the registry has a Kind for each, named by its entry."""
    assert BACKENDS == tuple(entry.name for entry in table.TABLE)
    assert list(backends.REGISTRY) == list(BACKENDS)
    assert all(kind.capabilities is table.capabilities(name) for name, kind in backends.REGISTRY.items())


def test_a_refusal_names_the_backends_that_have_what_is_asked():
    with pytest.raises(SettingsError) as refused:
        Settings(backend="local", platform="linux/arm64").validated()
    assert str(refused.value) == ("PLATFORM=linux/arm64 is not allowed with BACKEND=local: local processes run on "
                                  "this machine's own Python; expected BACKEND=compose or swarm, or PLATFORM empty")
    assert not table.replays_on("kubernetes") and table.replays_on("compose")
