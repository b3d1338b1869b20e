"""Every setting, any value: taken (and then the same after a round trip through config.json) or
refused with one line naming the setting, never another exception, never a traceback, never a
run folder. Values come from each setting's declared type and range and from arbitrary text.

Derandomized and without a database: the same inputs on every run, nothing written to the checkout.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from labtest.cli import REPO, lab_env
from tflab.core import grammars
from tflab.core.settings import SPECS, Settings, SettingsError, default_of

EXAMPLES_PER_SETTING = 100
# Digits of other scripts, blanks and the characters that have meant trouble: Docker's volume
# separator, Compose's `$`, an option's `-`, quotes, control characters.
TRICKY = st.text(alphabet=st.sampled_from("0123456789.-+:,$ \t\n'\"\\/~_eEkmgx\u00b2\u0663\u0661\u00a0\u2028\x00\x1b"),
                 max_size=12)
# Image references from a simpler grammar than IMAGE_PATTERN's (whose own generation is slow).
IMAGE = r"-?(?:[a-z0-9.-]{1,8}(?::[0-9]{1,5})?/)?[a-zA-Z0-9]{1,8}(?:[._-]{1,2}[a-z0-9]{1,8}){0,2}(?::[\w.-]{0,8})?"
PATTERNS = {"RUN": grammars.RUN_ID_PATTERN, "LINK": grammars.LINK_PATTERN, "SLOW_LINK": grammars.LINK_PATTERN,
            "K8S_NAME": grammars.K8S_NAME_PATTERN, "K8S_NAMESPACE": grammars.DNS1123_LABEL,
            "K8S_PVC": grammars.DNS1123_SUBDOMAIN, "BASE_IMAGE": IMAGE, "K8S_IMAGE": IMAGE,
            "COMPARE": grammars.COMPARE_ENTRY}


def declared(name: str) -> st.SearchStrategy[str]:
    """Text a user might give for this setting, from its declared type and range, just inside and
    outside it."""
    parse, default = SPECS[name].parse, default_of(name)
    if hasattr(parse, "choices"):
        return st.sampled_from(parse.choices) | st.sampled_from(parse.choices).map(str.upper)
    if hasattr(parse, "range") and isinstance(default, int):
        low, high = parse.range
        return st.integers(low - 3, high + 3).map(str) | st.integers().map(str)
    if hasattr(parse, "range"):
        low, high = parse.range
        return (st.floats(low - 1, high + 1).map(repr) | st.floats().map(repr)
                | st.decimals(str(low - 1), str(high + 1), places=2).map(str))
    if name in PATTERNS:
        return st.from_regex(PATTERNS[name], fullmatch=True).filter(lambda text: len(text) < 300)
    if name == "MEMORY":
        return st.builds("{}{}".format, st.integers(0, 10**7), st.sampled_from(["", "k", "m", "g", "b", "M"]))
    if name in ("AT", "HEAL", "BACKUP"):
        return st.builds("{}{}".format, st.sampled_from(["", "epoch:", "seconds:", "never", "off"]),
                         st.integers(-2, 10**6).map(str) | st.floats(0, 100).map(repr) | st.just(""))
    if name == "GPUS":
        return st.lists(st.integers(0, 20).map(str), min_size=1, max_size=4).map(",".join) | st.just("all")
    return st.text(max_size=40)


def values(name: str) -> st.SearchStrategy[str]:
    return declared(name) | TRICKY | st.text(max_size=60)


def check(name: str, value: str) -> str:
    """'taken' or 'refused'; fails on anything else."""
    try:
        taken = Settings.from_env({}, {name: value})
    except SettingsError as error:
        message = str(error)
        assert "\n" not in message and "\r" not in message, message
        assert name in message, f"{name}={value!r}: {message}"
        return "refused"
    # What the trainer reads back from config.json is what the host checked and wrote.
    assert Settings.from_dict(json.loads(json.dumps(taken.to_dict()))) == taken
    return "taken"


@pytest.mark.parametrize("name", list(SPECS))
def test_every_value_of_every_setting_is_taken_or_refused_in_one_line(name):
    outcomes = []

    @settings(max_examples=EXAMPLES_PER_SETTING, derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(values(name))
    def each(value):
        outcomes.append(check(name, value))

    each()
    assert len(outcomes) >= EXAMPLES_PER_SETTING // 2
    record(name, outcomes)


def record(name: str, outcomes: list[str]) -> None:
    """TFLAB_PROPERTY_COUNTS=path: how many values each setting tried, for the record."""
    path = os.environ.get("TFLAB_PROPERTY_COUNTS")
    if path:
        with open(path, "a") as counts:
            counts.write(json.dumps({"setting": name, "tried": len(outcomes),
                                     "refused": outcomes.count("refused")}) + "\n")


def refused_values() -> st.SearchStrategy[tuple[str, str]]:
    """(setting, value) pairs the settings refuse, as argv can carry them (no NUL)."""
    def refused(pair):
        name, value = pair
        try:
            Settings.from_env({}, {name: value})
        except SettingsError:
            return True
        return False

    pairs = st.sampled_from(list(SPECS)).flatmap(lambda name: st.tuples(st.just(name), values(name)))
    return pairs.filter(lambda pair: "\x00" not in pair[1] and refused(pair))


@settings(max_examples=25, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(refused_values())
def test_the_real_cli_refuses_them_the_same_way(pair):
    """Through `python -m tflab up` itself, with no docker on PATH: exit 2, one line naming the
    setting, no traceback, no run folder."""
    name, value = pair
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp) / "runs"
        argv = [f"{name}={value}"] + ([] if name == "RUNS_DIR" else [f"RUNS_DIR={runs}"])
        result = subprocess.run([sys.executable, "-m", "tflab", "up", *argv], cwd=REPO,
                                env=lab_env(PATH=tmp), capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, (argv, result.stderr)
        assert "Traceback" not in result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("tflab: ") and name in lines[0], (argv, result.stderr)
        assert not runs.exists()
