"""The package passes mypy over every function's body ([tool.mypy] in pyproject.toml): the settings
the rules read, the cluster a run's readers take (Cluster) and the fixture's API users call are
held to what they declare. mypy is pinned in requirements/test.txt: missing, this fails, never skips."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_mypy_finds_nothing(tmp_path):
    # Its cache in the test's own folder: nothing written into the checkout, nothing read from an old run.
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
                            cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0 and "Success: no issues found" in result.stdout, result.stdout + result.stderr
