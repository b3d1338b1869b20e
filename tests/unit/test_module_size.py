"""No module of the package over 500 lines (issue 46): one past it holds more than one concept, and
the cure is a cut along one of them into a module named for it (core/tracebacks.py out of
explain.py, core/setidbits.py out of beneath.py, core/runowner.py out of runfolder.py), not lines
squeezed or comments dropped. The package only: tests/ are not held to it."""

from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "scripts" / "tflab"
MOST_LINES = 500


@pytest.mark.parametrize("module", sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")))
def test_no_module_is_over_the_cap(module):
    lines = len((PACKAGE / module).read_text().splitlines())
    assert lines <= MOST_LINES, f"{module} has {lines} lines, over {MOST_LINES}: cut it along a concept"
