"""The lab's trainer ends by os._exit once its work is written (trainer/signals.py's exit_now), not
through TensorFlow's teardown: a worker that ended after task 0 had gone spun in that teardown for
ten minutes (make chaos SCENARIO=slow-node SLOW_CPUS=0.1, 2026-12-06)."""

import ast
import io
from pathlib import Path

import pytest
from tflab.trainer import signals

COMMAND = Path(__file__).resolve().parents[2] / "scripts" / "tflab" / "train.py"


def test_exit_now_flushes_what_was_printed_then_ends_with_the_code(monkeypatch):
    out = io.StringIO()
    ended = []

    class Ended(Exception):
        pass

    def _exit(code):
        ended.append((code, out.getvalue()))
        raise Ended

    monkeypatch.setattr(signals.sys, "stdout", type("Flushing", (), {
        "flush": lambda self: out.write("flushed"), "write": out.write})())
    monkeypatch.setattr(signals.os, "_exit", _exit)
    with pytest.raises(Ended):
        signals.exit_now(42)
    assert ended == [(42, "flushed")]


def test_the_trainers_command_ends_through_exit_now():
    """`python -m tflab.train` (task.COMMAND) hands main's code to exit_now, never to sys.exit."""
    tree = ast.parse(COMMAND.read_text())
    calls = {ast.unparse(node) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    assert "exit_now(main())" in calls and not any(call.startswith("sys.exit") for call in calls)
