"""A run folder's files as someone hostile could leave them, fed to every reader: `tflab summary`,
`tflab logs`, `tflab report`, the fixture's LabRun and the live printer. Each ends in its normal
output or one line naming the file (exit 2), never a traceback, never a control character or
escape sequence printed raw.

The files start as the lab writes them and are then mutated: a value replaced by one of the wrong
type, a hostile string, a number too large for a float, deep nesting; a task's log gains stray
lines; a file becomes binary junk, is cut short, or is a folder. Most inputs go through the
readers in-process (fast); a few through `python -m tflab` itself. Derandomized and without a
database: the same inputs on every run, nothing written to the checkout.
"""

import contextlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import unicodedata
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from labtest.cli import lab_env
from tflab import cli, pytest_plugin
from tflab.core import cluster
from tflab.core.errors import LabError
from tflab.core.foreign import BIDI
from tflab.core.settings import Settings
from tflab.reports import report
from tflab.supervisor.progress import ProgressPrinter

EXAMPLES = 150
SUBPROCESS_EXAMPLES = 5
TASKS = ["worker-0", "worker-1"]
FILES = ["summary.json", "config.json", "worker-0.jsonl", "worker-1.jsonl", "output.log"]


def lab_files() -> dict:
    """A finished two-worker run's files, as the lab writes them (JSON-able, before mutation)."""
    settings = Settings().to_dict()
    row = {"task": "worker-0", "status": "ok", "role": "trainer", "exit_code": 0, "epochs_done": 2,
           "losses": [2.0, 1.0], "attempts": 1, "restored": [], "earlier_errors": [], "final_loss": 1.0,
           "cluster_ready_seconds": 3.0, "first_step_seconds": 0.8, "steady_step_seconds": 0.004,
           "examples_per_second": 16000.0, "total_seconds": 9.0, "peak_rss_bytes": 500_000_000,
           "weights_sha256": "ab" * 32, "parameters": 341, "first_step_at": 1005.0, "error": None,
           "explanation": None}
    failed = {**row, "task": "worker-1", "status": "failed", "exit_code": 1, "error": "UnavailableError: gone",
              "explanation": {"task": "worker-1", "signature": "lost-peer", "what": "a peer went away",
                              "fix": "see its log", "link": "docs/failures.md", "retry": True}}
    summary = {"run": "r", "strategy": "multiworker", "backend": "compose", "outcome": "failed", "ok": False,
               "launched_at": 1000.0, "wall_seconds": 12.5, "settings": settings, "weights_agree": False,
               "tasks": [row, failed], "restarts": [1003.0],
               "chaos": {"scenario": "kill", "target": "worker-1", "at": "epoch:2", "outcome": "recovered",
                         "detection_seconds": 1.5, "recovery_seconds": None}, "version": 1}
    config = {"run": "r", "settings": settings, "tasks": TASKS, "cluster": {"worker": ["worker-0:2222"]}}
    log = [{"event": "start", "task": "worker-0", "time": 1001.0, "role": "trainer", "strategy": "multiworker",
            "cluster": {}, "versions": {"tensorflow": "2.21.0", "keras": "tf-keras 2.21.0"}, "settings": {},
            "baseline_loss": 21.0},
           {"event": "cluster_ready", "task": "worker-0", "time": 1003.0, "seconds": 3.0, "replicas": 2,
            "devices": []},
           {"event": "epoch", "task": "worker-0", "time": 1004.0, "epoch": 1, "loss": 2.0, "seconds": 0.5,
            "steps": 16, "examples_per_second": 2048.0},
           {"event": "end", "task": "worker-0", "time": 1009.0, "role": "trainer", "final_loss": 1.0,
            "total_seconds": 9.0, "first_step_seconds": 0.8, "first_step_at": 1005.0,
            "steady_step_seconds": 0.004, "peak_rss_bytes": 500_000_000, "weights_sha256": "ab" * 32,
            "parameters": 341},
           {"event": "error", "task": "worker-1", "time": 1006.0, "message": "UnavailableError: gone\nmore"}]
    return {"summary.json": summary, "config.json": config, "worker-0.jsonl": log, "worker-1.jsonl": log[-1:],
            "output.log": "worker-0 | 2026-12-04T10:00:00Z started\nworker-1 | 2026-12-04T10:00:01Z gone\n"}


ESCAPES = ["\x1b[31mred\x1b[0m", "a\rb", "\x9b2J", "\u202eevil", "x\x00y", "\x1b]0;title\x07", "\x08\x08", "tab\there"]
HOSTILE_VALUES = st.one_of(
    st.sampled_from(ESCAPES), st.text(max_size=8), st.none(), st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30), st.sampled_from([2**63, -(2**64), 10**300]),
    st.floats(allow_nan=True, allow_infinity=True), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.sampled_from(["what", "fix", "link", "event", "task", "x"]), st.sampled_from(ESCAPES + [1]),
                    max_size=3),
    st.just("@@RAW@@"))  # replaced by raw JSON text below: what json.dumps cannot write
RAW_TEXT = st.one_of(st.integers(35, 3000).map(lambda n: "[" * n + "]" * n),
                     st.integers(35, 3000).map(lambda n: '{"a":' * n + "1" + "}" * n),
                     st.sampled_from(["1e999", "-1e999", "NaN", "1" * 5000, "9" * 400, '"\\ud800"', "1.5e308"]))
JUNK = st.binary(max_size=64).map(lambda junk: junk + b"\x1b[2J\xff\xfe\r\n")
STRAY_LINES = st.lists(st.one_of(
    st.sampled_from([b"hello from the task", b"[1, 2]", b"\"text\"", b"{}", b'{"event": "epoch"}',
                     b'{"task": "worker-0"}', b'{"event": ["x"], "task": "worker-0", "time": 1}',
                     b'{"event": "epoch", "task": "worker-0", "time": 1, "epoch": "1", "loss": 1}',
                     b'{"event": "end", "task": "worker-0", "time": 1, "role": {"a": 1}}',
                     b"\x00\x1b[31m", b"\xff\xfe", "[" * 5000 + "]" * 5000,
                     b'{"event": "error", "task": "worker-0", "time": 1, "message": "\\u001b[2Jboom"}',
                     b'{"event": "epoch", "task": "worker-0", "time": 1, "epoch": 99999999999999999999999, '
                     b'"loss": 1e999, "seconds": 1, "steps": 1, "examples_per_second": 1}']),
    JUNK), max_size=4).map(lambda lines: [line.encode() if isinstance(line, str) else line for line in lines])


def paths_in(value, prefix=()):
    """Every place in a JSON document a value can be replaced at."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths_in(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from paths_in(item, (*prefix, index))


def replaced(document, path, value):
    if not path:
        return value
    document = json.loads(json.dumps(document))
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return document


@st.composite
def run_folders(draw) -> dict:
    """{file name: bytes, or None for a folder in its place, absent where the file is missing}."""
    files = lab_files()
    out = {}
    mutated = draw(st.lists(st.sampled_from(FILES), min_size=1, max_size=3, unique=True))
    for name, content in files.items():
        if name.endswith(".log"):
            data = content.encode()
        elif name.endswith(".jsonl"):
            data = b"".join(json.dumps(record).encode() + b"\n" for record in content)
        else:
            data = json.dumps(content).encode()
        if name in mutated:
            how = draw(st.sampled_from(["value", "value", "value", "stray lines", "junk", "cut", "folder", "missing"]))
            if how == "value" and not name.endswith(".log"):
                records = content if name.endswith(".jsonl") else [content]
                index = draw(st.integers(0, len(records) - 1))
                path = draw(st.sampled_from(list(paths_in(records[index]))))
                records = list(records)
                records[index] = replaced(records[index], path, draw(HOSTILE_VALUES))
                texts = [json.dumps(record) for record in records]
                raw = draw(RAW_TEXT)
                texts = [text.replace('"@@RAW@@"', raw) for text in texts]
                data = ("".join(text + "\n" for text in texts) if name.endswith(".jsonl") else texts[0]).encode()
            elif how == "stray lines" or (how == "value" and name.endswith(".log")):
                lines = data.split(b"\n")
                for line in draw(STRAY_LINES):
                    lines.insert(draw(st.integers(0, len(lines))), line)
                data = b"\n".join(lines)
            elif how == "junk":
                data = draw(JUNK)
            elif how == "cut":
                data = data[: draw(st.integers(0, max(0, len(data) - 1)))]
            elif how == "folder":
                data = None
            else:
                continue
        out[name] = data
    return out


def write(folder: Path, files: dict) -> Path:
    run_dir = folder / "runs" / "r"
    run_dir.mkdir(parents=True)
    for name, data in files.items():
        if data is None:
            (run_dir / name).mkdir()
        else:
            (run_dir / name).write_bytes(data)
    if "config.json" not in files:  # a run folder is one with a config.json; keep the run findable
        (run_dir / "compare.json").write_text("{}")
    return run_dir


def raw_controls(text: str, keep: str = "\n") -> list[str]:
    return [char for char in text if (unicodedata.category(char) == "Cc" and char not in keep) or char in BIDI]


def run_cli(command: str, runs: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([command, f"RUNS_DIR={runs}", "RUN=r"])
    return code, out.getvalue(), err.getvalue()


def check_cli(command: str, code: int, stdout: str, stderr: str) -> str:
    """The house's rule for a command's answer; returns its outcome's name."""
    assert "Traceback" not in stdout + stderr
    assert not raw_controls(stdout, keep="\n\t" if command == "logs" else "\n"), (command, stdout[:500])
    assert not raw_controls(stderr), (command, stderr)
    if code == 0:
        return f"{command}: printed"
    assert code == 2, (command, code, stderr)
    assert len(stderr.splitlines()) == 1 and stderr.startswith("tflab: "), (command, stderr)
    return f"{command}: refused in one line"


def check_lab_run(run_dir: Path) -> str:
    """The fixture's LabRun: its reading path raises nothing but the lab's one-line LabError."""
    lab = pytest_plugin.LabRun(0, "output", run_dir)
    try:
        lab.summary
        lab.tasks and [task.of("epoch") for task in lab.tasks.values()]
        lab.losses("worker-0")
        outcome = "LabRun: read"
    except LabError as error:
        assert "\n" not in str(error) and not raw_controls(str(error)), str(error)
        outcome = "LabRun: one LabError line"
    assert lab.ok in (True, False)
    lab.why()
    return outcome


def check_printer(run_dir: Path) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        printer = ProgressPrinter(Settings(), cluster.build(Settings()), run_dir)
        printer.print_new()
        printer.print_new()
    assert not raw_controls(out.getvalue()), out.getvalue()
    return "printer: skipped a line" if "skipped a line" in out.getvalue() else "printer: printed"


@pytest.fixture(scope="module")
def no_png():
    """report.png is matplotlib's drawing of the rows' numbers: left to the subprocess runs, for speed."""
    plot, report.plot = report.plot, lambda found, path: False
    yield
    report.plot = plot


def test_every_reader_prints_or_refuses_in_one_line(no_png):
    """Each generated run folder is printed or refused in one line by every reader; and the inputs
    reached every outcome (counted here, in the test itself, so that it stands alone: a separate
    test once read the count and skipped when run without this one)."""
    outcomes: Counter = Counter()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.large_base_example])
    @given(files=run_folders())
    def each(files):
        with tempfile.TemporaryDirectory() as folder:
            run_dir = write(Path(folder), files)
            runs = run_dir.parent
            for command in ("summary", "logs", "report"):
                outcomes[check_cli(command, *run_cli(command, runs))] += 1
            outcomes[check_lab_run(run_dir)] += 1
            outcomes[check_printer(run_dir)] += 1
            outcomes["inputs"] += 1

    each()
    print(f"\nrun folders tried: {dict(sorted(outcomes.items()))}")
    for outcome in ("summary: refused in one line", "summary: printed", "logs: printed", "report: printed",
                    "report: refused in one line", "printer: skipped a line", "LabRun: one LabError line"):
        assert outcomes[outcome] > 0, outcome


def test_the_installed_command_prints_or_refuses_in_one_line():
    outcomes: Counter = Counter()

    @settings(max_examples=SUBPROCESS_EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.large_base_example])
    @given(files=run_folders())
    def each(files):
        with tempfile.TemporaryDirectory() as folder:
            run_dir = write(Path(folder), files)
            for command in ("summary", "logs", "report"):
                result = subprocess.run([sys.executable, "-m", "tflab", command, f"RUNS_DIR={run_dir.parent}",
                                         "RUN=r"], cwd=folder, env=lab_env(), capture_output=True, timeout=120)
                stdout = result.stdout.decode("utf-8", errors="replace")
                stderr = result.stderr.decode("utf-8", errors="replace")
                outcomes[check_cli(command, result.returncode, stdout, stderr)] += 1

    each()
    print(f"\nrun folders tried through python -m tflab: {dict(sorted(outcomes.items()))}")


def test_a_directory_where_each_file_is_is_named():
    with tempfile.TemporaryDirectory() as folder:
        run_dir = write(Path(folder), {**{name: b"{}" for name in FILES}, "summary.json": None, "output.log": None})
        for command, expected in (("summary", "summary.json is a folder"), ("logs", "output.log is a folder")):
            code, _, stderr = run_cli(command, run_dir.parent)
            assert code == 2 and stderr.startswith("tflab: ") and expected in stderr, stderr
        shutil.rmtree(run_dir)
