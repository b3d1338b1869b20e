"""Fixtures the unit tests share (pytest finds them here by name)."""

import pytest
from tflab.supervisor import runner


class Guard:
    def release(self) -> None:
        pass


@pytest.fixture
def offline(monkeypatch):
    """The runner's own pipeline on a stand-in backend: polls at once, and no reaper process."""
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(runner.reaper, "watch", lambda run_dir: Guard())


@pytest.fixture
def quick(monkeypatch):
    """As `offline`, and a failed task's peers are given 0.05 s to end (FAILURE_GRACE_SECONDS)."""
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(runner, "FAILURE_GRACE_SECONDS", 0.05)
    monkeypatch.setattr(runner.reaper, "watch", lambda run_dir: Guard())  # no process for a stand-in's run
