"""What `make test`'s side-by-side integration tests rely on (labtest/parallel.py, tests/conftest.py):
xdist's groups keep a group on one worker, an `alone` test has the machine to itself, and the
shared folder is one folder for every worker. Each is checked on a real pytest -n run of a small
generated suite, so a pytest or xdist upgrade that quietly breaks one fails here (pytest 9.2 with
xdist 3.8 stopped honouring the groups without a word: pytest-xdist#1386)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from labtest.cli import REPO

CONFTEST = f"""
import importlib.util, sys
import pytest
sys.path.insert(0, {str(REPO / "tests")!r})
spec = importlib.util.spec_from_file_location("lab_conftest", {str(REPO / "tests" / "conftest.py")!r})
lab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lab)
pytest_configure, pytest_runtest_protocol = lab.pytest_configure, lab.pytest_runtest_protocol  # the suite's own

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        lab.mark(item, "integration")
"""

SUITE = '''
import json, os, time
import pytest

def note(tmp_path_factory, name, **fields):
    folder = tmp_path_factory.getbasetemp().parent
    with open(folder / "notes.jsonl", "a") as notes:
        notes.write(json.dumps({"test": name, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                                "time": time.time(), **fields}) + "\\n")

@pytest.mark.parametrize("i", range(4))
def test_grouped_by_module(tmp_path_factory, i):
    note(tmp_path_factory, "grouped", start=True)
    time.sleep(0.3)
    note(tmp_path_factory, "grouped", start=False)

@pytest.mark.parametrize("group", [pytest.param(g, marks=pytest.mark.xdist_group(g)) for g in "abcde"])
@pytest.mark.parametrize("i", range(3))
def test_own_group(tmp_path_factory, group, i):
    note(tmp_path_factory, group, start=True)
    time.sleep(0.3)
    note(tmp_path_factory, group, start=False)

@pytest.mark.alone
def test_alone(tmp_path_factory):
    note(tmp_path_factory, "alone", start=True)
    time.sleep(1)
    note(tmp_path_factory, "alone", start=False)
'''


def test_groups_stay_on_one_worker_and_an_alone_test_runs_with_nothing_beside_it(tmp_path):
    suite = tmp_path / "integration"
    suite.mkdir()
    (suite / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (suite / "test_side_by_side.py").write_text(textwrap.dedent(SUITE))
    base = tmp_path / "base"
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist", "loadgroup", "-p",
                             "no:cacheprovider", f"--basetemp={base}", "--rootdir", str(tmp_path), str(suite)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    notes = [json.loads(line) for line in (base / "notes.jsonl").read_text().splitlines()]
    assert len({n["worker"] for n in notes}) > 1, notes  # side by side at all
    for group in ["grouped", *"abcde"]:
        assert len({n["worker"] for n in notes if n["test"] == group}) == 1, (group, notes)
    alone = sorted(n["time"] for n in notes if n["test"] == "alone")
    during = [n for n in notes if n["test"] != "alone" and alone[0] < n["time"] < alone[1]]
    assert during == [], during  # nothing started or ended while it ran
