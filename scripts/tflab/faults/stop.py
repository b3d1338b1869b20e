"""SCENARIO=stop: SIGTERM to the target's container (`docker kill -s SIGTERM`), a preemption
without its grace; nothing to undo."""

from __future__ import annotations

from tflab.faults.kill import Kill


class Stop(Kill):
    """A task asked to end, as a platform does before it takes the machine back."""

    name = "stop"
    signal = "SIGTERM"
