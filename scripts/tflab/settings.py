"""Every setting of the lab: its name, default, what is allowed and what it means, in one place.

Settings arrive as environment variables (the Makefile's command-line variables become the
environment of its recipes) or as NAME=value arguments to `python3 -m tflab`. They are parsed
once, here, into a frozen `Settings`; anything not allowed raises `SettingsError` whose message is
one line naming the bad value and what is allowed. The host side writes the resolved settings to
`runs/<RUN>/config.json`; the trainer reads them back from there with `Settings.from_dict`.

This module is shared by the host side and the trainer, so it imports neither TensorFlow nor any
Docker code.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Callable, Mapping

from tflab.errors import LabError

STRATEGIES = ("single", "mirrored", "multiworker")
BACKENDS = ("compose", "local")
COMPOSE_CLIS = ("auto", "v2", "v1")
MAX_TASKS = 16
RUN_ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")


class SettingsError(LabError, ValueError):
    """A setting the lab refuses; str() is the one line a user sees."""


@dataclass(frozen=True)
class Settings:
    strategy: str = "multiworker"  # single | mirrored | multiworker
    workers: int = 2  # worker containers (processes) for multiworker
    replicas: int = 2  # mirrored: every GPU if any are visible, else this many logical CPUs
    epochs: int = 10  # passes over the data set
    global_batch: int = 64  # examples per step summed over all replicas, whatever the strategy
    examples: int = 4096  # synthetic examples, y = xW + 0.1 noise, generated from SEED
    seed: int = 0  # seeds the data, the initial weights and TensorFlow's ops
    run: str = ""  # run id, outputs in RUNS_DIR/<RUN>/; empty means a fresh timestamped id
    backend: str = "compose"  # compose: one container per task; local: one process per task
    peer_timeout: float = 60.0  # seconds a trainer waits for its peers before it gives up
    timeout: float = 900.0  # seconds the whole run may take before the lab stops it
    runs_dir: str = "runs"  # where run folders go (relative to the repository root)
    compose: str = "auto"  # auto (v2 plugin, else docker-compose), v2 or v1
    base_image: str = ""  # trainer base image; empty: python:3.11-slim, else a local build

    @property
    def replicas_in_sync(self) -> int:
        """Replicas a step's global batch is split over, as the host can know it."""
        if self.strategy == "multiworker":
            return self.workers
        if self.strategy == "mirrored":
            return self.replicas
        return 1

    @property
    def steps_per_epoch(self) -> int:
        return self.examples // self.global_batch

    @classmethod
    def from_env(cls, env: Mapping[str, str], overrides: Mapping[str, str] = ()) -> "Settings":
        """Settings from NAME=value pairs: `overrides` win over `env`; unknown overrides are refused."""
        overrides = dict(overrides)
        unknown = sorted(set(overrides) - set(SPECS))
        if unknown:
            raise SettingsError(
                f"unknown setting {unknown[0]}; allowed settings: {', '.join(SPECS)}"
            )
        values = {}
        for name, spec in SPECS.items():
            raw = overrides.get(name, env.get(name, ""))
            if raw.strip() == "":
                continue
            values[spec.field] = spec.parse(name, raw.strip())
        return cls(**values).validated()

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> "Settings":
        """Settings saved by `to_dict` (config.json), checked again."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known}).validated()

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "Settings":
        return dataclasses.replace(self, **changes).validated()

    def validated(self) -> "Settings":
        """Checks that involve more than one setting; raises SettingsError."""
        replicas = self.replicas_in_sync
        if self.global_batch % replicas:
            below = self.global_batch - self.global_batch % replicas
            nearest = " or ".join(str(n) for n in (below, below + replicas) if n > 0)
            raise SettingsError(
                f"GLOBAL_BATCH={self.global_batch} is not divisible by the {replicas} replicas of "
                f"STRATEGY={self.strategy}; allowed: a multiple of {replicas}, such as {nearest}"
            )
        if self.examples < self.global_batch:
            raise SettingsError(
                f"EXAMPLES={self.examples} is smaller than GLOBAL_BATCH={self.global_batch}; "
                "allowed: at least one global batch of examples"
            )
        return self


@dataclass(frozen=True)
class Spec:
    field: str
    parse: Callable[[str, str], object]
    allowed: str  # what a user may give, for errors and the settings table
    doc: str


def _integer(low: int, high: int) -> Callable[[str, str], int]:
    def parse(name: str, raw: str) -> int:
        if not re.fullmatch(r"[+-]?\d+", raw) or not low <= int(raw) <= high:
            raise SettingsError(f"{name}={raw} is not allowed: expected an integer from {low} to {high}")
        return int(raw)

    return parse


def _seconds(low: float, high: float) -> Callable[[str, str], float]:
    def parse(name: str, raw: str) -> float:
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if not low <= value <= high:  # also false for nan
            raise SettingsError(f"{name}={raw} is not allowed: expected seconds from {low:g} to {high:g}")
        return value

    return parse


def _choice(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        if raw not in choices:
            raise SettingsError(f"{name}={raw} is not allowed: expected one of {', '.join(choices)}")
        return raw

    return parse


def _run_id(name: str, raw: str) -> str:
    if not RUN_ID_PATTERN.fullmatch(raw):
        raise SettingsError(
            f"{name}={raw} is not allowed: expected lowercase letters, digits and '-', "
            "starting with a letter or digit, at most 63 characters"
        )
    return raw


def _text(name: str, raw: str) -> str:
    if any(c.isspace() for c in raw):
        raise SettingsError(f"{name}={raw!r} is not allowed: expected a value without spaces")
    return raw


_DEFAULTS = Settings()

SPECS: dict[str, Spec] = {
    "STRATEGY": Spec("strategy", _choice(STRATEGIES), " | ".join(STRATEGIES),
                     "single: one process, one replica; mirrored: one process, REPLICAS replicas; "
                     "multiworker: WORKERS processes, one replica each"),
    "WORKERS": Spec("workers", _integer(1, MAX_TASKS), f"1..{MAX_TASKS}",
                    "worker containers (or local processes) for multiworker"),
    "REPLICAS": Spec("replicas", _integer(1, MAX_TASKS), f"1..{MAX_TASKS}",
                     "mirrored replicas: every GPU if any are visible, else this many logical CPUs"),
    "EPOCHS": Spec("epochs", _integer(1, 10_000), "1..10000", "passes over the data set"),
    "GLOBAL_BATCH": Spec("global_batch", _integer(1, 1 << 20), "1..1048576, a multiple of the replicas",
                         "examples per step summed over every replica, the same for every strategy"),
    "EXAMPLES": Spec("examples", _integer(1, 100_000_000), "GLOBAL_BATCH..100000000",
                     "synthetic examples y = xW + 0.1 noise, generated from SEED"),
    "SEED": Spec("seed", _integer(0, 2**31 - 1), f"0..{2**31 - 1}",
                 "seeds the data, the initial weights and TensorFlow's ops"),
    "RUN": Spec("run", _run_id, "[a-z0-9][a-z0-9-]*, not an existing run",
                "run id; outputs go to RUNS_DIR/<RUN>/ and RUNS_DIR/latest points at the newest"),
    "BACKEND": Spec("backend", _choice(BACKENDS), " | ".join(BACKENDS),
                    "compose: a container per task; local: a process per task on loopback, same script"),
    "PEER_TIMEOUT": Spec("peer_timeout", _seconds(1, 3600), "1..3600 seconds",
                         "how long a trainer waits for its peers before it exits naming the missing ones"),
    "TIMEOUT": Spec("timeout", _seconds(10, 86_400), "10..86400 seconds",
                    "how long a whole run may take before the lab stops it and reports it failed"),
    "RUNS_DIR": Spec("runs_dir", _text, "a folder", "where run folders are written"),
    "COMPOSE": Spec("compose", _choice(COMPOSE_CLIS), " | ".join(COMPOSE_CLIS),
                    "Compose CLI: v2 is `docker compose`, v1 is `docker-compose`; auto prefers v2"),
    "BASE_IMAGE": Spec("base_image", _text, "an image reference",
                       "base of the trainer image; empty: python:3.11-slim if it can be had, "
                       "else a Debian base built locally with debootstrap"),
}


def default_of(name: str) -> object:
    return getattr(_DEFAULTS, SPECS[name].field)


def settings_table() -> list[tuple[str, str, str, str]]:
    """(NAME, default, allowed, meaning) for every setting, for `make help` and the README."""
    rows = []
    for name, spec in SPECS.items():
        default = default_of(name)
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        shown = {"run": "timestamped id", "base_image": "(auto)"}.get(spec.field, shown)
        rows.append((name, shown, spec.allowed, spec.doc))
    return rows
