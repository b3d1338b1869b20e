"""Faults on purpose, on the host: `make chaos` (one fault in one run: faults/chaos.py) and `make soak`
(many runs, a random fault each: faults/soak.py).

Each scenario is one class in a file of its own here (kill.py, stop.py, pause.py, partition.py,
slowlink.py, slownode.py, preempt.py) with the interface of faults/base.py; faults/registry.py
finds them by the names settings.SCENARIOS gives SCENARIO=. docs/faults.md says what each does
and what the lab measured of it.
"""
