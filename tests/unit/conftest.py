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
