"""Any NAME=value on make's command line reaches the lab as text, never as shell source: `make
config` either prints the cluster or refuses in one line, and a command hidden in the name or the
value (quotes, `$(...)`, backticks, `;`, line breaks) never runs. The sentinel file is what such a
command would create.

Derandomized and without a database: the same inputs on every run, nothing written to the checkout.
Each example is a real `make` (about 0.3 s), so there are few of them; the hand-written forms
below are the ones that ran a command before the Makefile stopped splicing names into a recipe.
"""

import shutil
import subprocess
import sys
import unicodedata
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from labtest.cli import REPO, lab_env

EXAMPLES = 30


def payloads(sentinel: Path) -> list[str]:
    """What would create the sentinel if a shell (or make's own $(shell)) ever read it as code."""
    return [f"';touch {sentinel};'", f"'&&touch${{IFS}}{sentinel}&&'", f"'&&touch$${{IFS}}{sentinel}&&'",
            f"$(touch {sentinel})", f"`touch {sentinel}`", f"\"$(touch {sentinel})\"", f"\n touch {sentinel}\n",
            f"|touch {sentinel}|"]


def make_config(argument: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("make") or "make", "--no-print-directory", "-C", str(REPO), "config",
                           argument], cwd=cwd, env=lab_env(PYTHON=sys.executable), capture_output=True,
                          timeout=60)


def classify(result: subprocess.CompletedProcess) -> str:
    """The outcome, after asserting it is one the house allows."""
    stdout = result.stdout.decode(errors="replace")
    stderr = result.stderr.decode(errors="replace")
    assert "Traceback" not in stdout + stderr, stderr
    if result.returncode == 0:
        assert "TF_CONFIG=" in stdout
        return "printed the cluster"
    lab = [line for line in stderr.splitlines() if line.startswith("tflab: ") or ": *** tflab: " in line]
    if lab:
        assert len(lab) == 1, stderr
        assert not any(unicodedata.category(c) == "Cc" for c in lab[0]), lab[0]  # nothing raw on the terminal
        assert all(line.startswith("make") for line in stderr.splitlines() if line not in lab), stderr
        return "refused by the lab"
    # make itself took the argument for a target (a name with a blank, `:` or `#`, which cannot
    # be a variable's) and stopped before any recipe ran.
    assert "No rule to make target" in stderr or "*** " in stderr, stderr
    return "refused by make"


def assert_safe(name: str, value: str, tmp_path: Path) -> str:
    """The outcome (classify), after asserting make ran nothing the variable held."""
    sentinel = tmp_path / "sentinel"
    result = make_config(f"{name}={value}", tmp_path)
    outcome = classify(result)
    assert not sentinel.exists(), (name, value, result.stderr)
    return outcome


@pytest.mark.parametrize("where", ["name", "value"])
@pytest.mark.parametrize("form", range(8))
def test_the_forms_that_ran_a_command_run_none(where, form, tmp_path):
    payload = payloads(tmp_path / "sentinel")[form]
    name, value = ("X" + payload, "1") if where == "name" else ("ARGS", payload)
    assert_safe(name, value, tmp_path)


def test_make_does_not_expand_a_value_itself(tmp_path):
    """make once expanded $(shell ...) in any command-line value it exported to a recipe."""
    assert_safe("FROB", f"$(shell touch {tmp_path / 'sentinel'})", tmp_path)
    assert_safe("WORKERS", f"$(shell touch {tmp_path / 'sentinel'})", tmp_path)


# Names: what make passes on as a variable, and what it cannot (an option's leading `-` aside, which
# would be an option to make, and a NUL, which no argument can hold). $(...) of make's own functions
# in a NAME is expanded by make while it reads its arguments, before any Makefile: not generated.
NAME_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
NAMES = st.one_of(st.sampled_from(["WORKERS", "RUN", "ARGS", "STRATEGY", "FROB", "workers", "VENV"]),
                  st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,10}", fullmatch=True),
                  NAME_TEXT.filter(lambda name: name and name[0] not in "-=" and "=" not in name
                                   and "$(shell" not in name and "$(file" not in name and "$(eval" not in name))
VALUES = st.one_of(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=16),
                   st.sampled_from(["3", "2", "mirrored", "", " ", "a=b", "$$HOME", "$(HOME)", "x\ny"]))


def test_any_make_variable_is_printed_or_refused_and_runs_nothing(tmp_path):
    """Each generated variable is printed or refused and runs nothing; and the inputs reached the
    lab's refusal, not only make's (counted here, in the test itself, so that it stands alone: a
    separate test once read the count and skipped when run without this one)."""
    outcomes: Counter = Counter()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(name=NAMES, value=VALUES, payload=st.integers(0, 7), at=st.sampled_from(["name", "value", "neither"]))
    def each(name, value, payload, at):
        attack = payloads(tmp_path / "sentinel")[payload]
        if at == "name":
            name += attack
        elif at == "value":
            value += attack
        outcomes[assert_safe(name, value, tmp_path)] += 1

    each()
    print(f"\nmake variables tried: {sum(outcomes.values())}: {dict(outcomes)}")
    assert outcomes["refused by the lab"] > 0


@pytest.mark.parametrize("form", range(8))
def test_test_workers_is_checked_as_text(form, tmp_path):
    """TEST_WORKERS was spliced into its check's shell source between quotes; VENV into make clean's."""
    payload = payloads(tmp_path / "sentinel")[form]
    result = subprocess.run([shutil.which("make") or "make", "--no-print-directory", "-C", str(REPO), "test-workers",
                             f"TEST_WORKERS=2{payload}"], cwd=tmp_path, env=lab_env(PYTHON=sys.executable),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.startswith("tflab: TEST_WORKERS="), result.stderr
    assert "is not allowed: expected a whole number of pytest workers" in result.stderr.splitlines()[0]
    assert not (tmp_path / "sentinel").exists()
    refused = make_config(f"VENV=v{payload}", tmp_path)
    assert refused.returncode == 2 and b"tflab: VENV is not allowed" in refused.stderr, refused.stderr
    assert not (tmp_path / "sentinel").exists()
