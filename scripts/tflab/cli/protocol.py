"""The command protocol as only the CLI needs it: which settings a command reads (settings_of, from
each declaration's `commands`), the settings a user gave and gave by name (given_values,
named_values), and refusing one given by name to a command that never reads it (refuse_not_read).

In cli/, because only the CLI reads it; what core/ needs of the
protocol (RUNS, the Makefile's variables, lab_command) is core/commands.py's.
"""

from __future__ import annotations

from typing import Mapping

from tflab.core.commands import MAKE_VARIABLES_ENV
from tflab.core.rules import empty_refusal
from tflab.core.settings import SETTINGS, SPECS, SettingsError


def given_values(env: Mapping[str, str], overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings a user gave, as given, in the table's order: by name (an argument, a flag, on
    make's command line, which make hands on as environment) or as an environment variable that is
    not blank (from_env takes an empty one as unset)."""
    overrides = dict(overrides or {})
    return {name: overrides.get(name, env.get(name, "")) for name in SPECS
            if name in overrides or env.get(name, "").strip()}


def named_values(env: Mapping[str, str], overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings a user gave by name for this command: an argument, a flag, or on make's command
    line (TFLAB_MAKE_VARIABLES). An exported variable is not among them: one environment serves
    every command, so each takes from it only what it reads."""
    named = set(overrides or {}) | set(env.get(MAKE_VARIABLES_ENV, "").split())
    return {name: value for name, value in given_values(env, overrides).items() if name in named}


def refuse_empty_inputs(command: str, env: Mapping[str, str], overrides: Mapping[str, str] | None = None) -> None:
    """`make up TRAINJOB=$JOB`, `TFJOB=$JOB make up`, `tflab up SCRIPT=` with the variable unset:
    an empty file or version setting (Setting.left_out) would run the lab's own job, and pass in
    CI. Refused given by name (to any command, as from_env does) and set empty in the environment
    for a command that reads it, as `make down RUN=` is; an exported empty variable of a setting the
    command never reads is none of its business (one environment serves every command)."""
    overrides = dict(overrides or {})
    named = set(overrides) | set(env.get(MAKE_VARIABLES_ENV, "").split())
    for spec in SETTINGS:
        raw = overrides.get(spec.name, env.get(spec.name))
        if spec.left_out and raw is not None and not raw.strip() and (spec.name in named or command in spec.commands):
            raise empty_refusal(spec, raw)


def command_label(command: str) -> str:
    return "make help" if command == "settings" else f"make {command}"


def refuse_not_read(command: str, named: Mapping[str, str]) -> None:
    """A setting given by name to a command that never reads it, refused in one line naming the
    commands that do: `make summary WORKERS=3` would otherwise say nothing and count nothing.
    Where the setting says why the command cannot honour it (Setting.refused), that check says so."""
    for name, value in named.items():
        spec = SPECS.get(name)
        if spec is None or command in spec.commands or command in spec.refused:
            continue
        shown = value if value.isprintable() and len(value) <= 100 else repr(value[:100])
        readers = "make " + ", ".join(spec.commands)
        raise SettingsError(f"{name}={shown} is not a setting of {command_label(command)} (read by {readers} "
                            f"only); leave it out: `tflab {command} --help` lists the settings it takes")


def settings_of(command: str) -> list[str]:
    """The settings `command` reads, in the table's order."""
    return [spec.name for spec in SETTINGS if command in spec.commands]
