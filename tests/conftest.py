"""Marks each test by its folder, so no test goes unmarked and `-m unit` / `-m integration` split them."""

from pathlib import Path

import pytest

TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items):
    for item in items:
        kind = Path(item.fspath).relative_to(TESTS).parts[0]
        item.add_marker(getattr(pytest.mark, kind))
