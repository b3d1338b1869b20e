"""The integration tests side by side: `make test` runs them on pytest-xdist workers, and these
locks keep what must be done once done once, and what reads timings alone on the machine.

- `shared_folder(config)`: a folder every worker of one pytest run sees (xdist gives each worker
  `<basetemp>/gwN` as its basetemp); None without xdist, where nothing needs sharing.
- `once(path)`: an exclusive lock on a file, for work only one worker may do at a time (building
  the image, one lab run that several tests read).
- `Machine`: every integration test holds it shared; one marked `alone` (its assertion reads
  timings that another run beside it would disturb) holds it exclusively, so it runs with no other
  integration test running. A turnstile keeps a waiting `alone` test from being starved by a
  stream of shared ones.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def shared_folder(config: pytest.Config) -> Path | None:
    if not hasattr(config, "workerinput"):
        return None
    return Path(config.option.basetemp).parent


@contextmanager
def once(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


class Machine:
    def __init__(self, folder: Path):
        folder.mkdir(parents=True, exist_ok=True)
        self.turnstile = folder / "turnstile.lock"
        self.machine = folder / "machine.lock"

    @contextmanager
    def held(self, alone: bool) -> Iterator[None]:
        with open(self.machine, "a") as machine:
            with once(self.turnstile):  # an `alone` test waiting here holds the turnstile: no new test starts
                fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(machine, fcntl.LOCK_UN)
