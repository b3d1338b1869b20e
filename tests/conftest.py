"""Marks each test by its folder, so no test goes unmarked and `-m unit` / `-m integration` split them
(a test of tests/unit marked `tensorflow` is that, not unit: pyproject.toml);
and runs the integration tests side by side under pytest-xdist (`make test`), see labtest/parallel.py."""

from pathlib import Path

import pytest
from labtest import parallel

TESTS = Path(__file__).parent
MACHINE = pytest.StashKey[parallel.Machine | None]()


def pytest_configure(config):
    folder = parallel.shared_folder(config)
    config.stash[MACHINE] = parallel.Machine(folder / "locks") if folder else None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the test ids
def pytest_collection_modifyitems(items):
    for item in items:
        mark(item, Path(item.fspath).relative_to(TESTS).parts[0])


def mark(item: pytest.Item, kind: str) -> None:
    if kind == "unit" and item.get_closest_marker("tensorflow") is not None:
        return  # TensorFlow's import alone takes seconds: `-m unit` stays the loop without it
    item.add_marker(getattr(pytest.mark, kind))
    # xdist's loadgroup sends a group to one worker: a module's tests share its fixtures' runs,
    # so a module is one group unless its tests say otherwise (xdist_group marks).
    if kind == "integration" and item.get_closest_marker("xdist_group") is None:
        item.add_marker(pytest.mark.xdist_group(item.module.__name__))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    machine = item.config.stash[MACHINE]
    if machine is None or item.get_closest_marker("integration") is None:
        return (yield)
    with machine.held(alone=item.get_closest_marker("alone") is not None):
        return (yield)
