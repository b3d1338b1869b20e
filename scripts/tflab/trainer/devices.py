"""The devices REPLICAS asks for, in a user's script's own process: `STRATEGY=mirrored REPLICAS=2
SCRIPT=train.py` gives the script's `tf.distribute.MirroredStrategy()` two replicas, as the lab's
own trainer has them (train.py's build_strategy).

A CPU-only host has one CPU device, so a script's MirroredStrategy() would mirror over one replica,
silently. Once the script imports tensorflow, and before its next line runs, the one CPU is split
into REPLICAS logical devices; MirroredStrategy() then takes them all. Where GPUs are visible they
are left alone: MirroredStrategy takes every GPU, as it does on a cluster. Any other strategy, and
REPLICAS=1, changes nothing.

Stdlib only until the script imports tensorflow (inscript.py)."""

from __future__ import annotations

import sys

from tflab.trainer import inscript


def wanted_replicas() -> int:
    """REPLICAS, where the run is mirrored with more than one; else 0. Read from the run's
    config.json, as the launcher reads it."""
    settings = inscript.run_settings()
    if settings is None:
        return 0
    return settings.replicas if settings.strategy == "mirrored" and settings.replicas > 1 else 0


def split_cpu(tf, replicas: int) -> None:
    if tf.config.list_physical_devices("GPU"):
        return  # MirroredStrategy() takes every GPU
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    print(f"tflab: REPLICAS={replicas}: this task's CPU is {replicas} logical devices, for the script's "
          "MirroredStrategy", file=sys.stderr, flush=True)


def install() -> None:
    replicas = wanted_replicas()
    if replicas:
        inscript.when_imported("tensorflow", lambda tf: split_cpu(tf, replicas))
