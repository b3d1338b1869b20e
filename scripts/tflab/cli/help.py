"""The help the lab prints: `make help`'s table of every setting under the commands that take it
(`tflab settings`), each command's settings under its `--help`, and a setting's spelling as a flag."""

from __future__ import annotations

import textwrap

from tflab.cli.protocol import command_label, settings_of
from tflab.core.settings import RUNS, SETTINGS, SPECS, Settings, settings_table

HELP_WIDTH = 96  # `make help` and `--help` fit a terminal of 96 columns, or of 80 with a few long words


def settings_rows(names: list[str]) -> list[str]:
    """A table of these settings that fits HELP_WIDTH: the name, the default and what is allowed and
    meant, each wrapped in its column (COMPARE's default alone is 90 characters)."""
    shown = {name: (default or "(empty)", allowed, doc) for name, default, allowed, doc in settings_table()}
    name_width, default_width = max(len(name) for name in SPECS) + 2, 20
    text_width = HELP_WIDTH - 2 - name_width - default_width
    lines = []
    for name in names:
        default, allowed, doc = shown[name]
        defaults = textwrap.wrap(default, default_width - 2, break_on_hyphens=False, break_long_words=False)
        texts = [*textwrap.wrap(allowed, text_width, break_on_hyphens=False),
                 *textwrap.wrap(doc, text_width - 2, initial_indent="  ", subsequent_indent="  ",
                                break_on_hyphens=False)]
        for i in range(max(len(defaults), len(texts))):
            left, middle = name if i == 0 else "", defaults[i] if i < len(defaults) else ""
            right = texts[i] if i < len(texts) else ""
            lines.append(f"  {left:<{name_width}}{middle:<{default_width}}{right}".rstrip())
    return lines


def commands_heading(commands: tuple[str, ...]) -> str:
    """`every run and make images` for a group of settings: RUNS, named in full once, is `every run`."""
    runs = [c for c in RUNS if c in commands]
    extra = ", ".join(c for c in commands if c not in RUNS)
    if len(runs) < len(RUNS) / 2:
        return f"make {', '.join(commands)}"
    but = f" but make {', '.join(c for c in RUNS if c not in commands)}" if len(runs) < len(RUNS) else ""
    return f"every run{but}" + (f" and make {extra}" if extra else "")


def command_settings(settings: Settings) -> int:
    """`make help`: every setting once, under the commands that take it, in a table of HELP_WIDTH."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for spec in SETTINGS:
        groups.setdefault(spec.commands, []).append(spec.name)
    print(f"Every run is make {', '.join(RUNS)}.")
    print(f"  {'setting':<{max(len(name) for name in SPECS) + 2}}{'default':<20}allowed, then what it means")
    for commands, names in groups.items():
        print(f"For {commands_heading(commands)}:")
        print("\n".join(settings_rows(names)))
    return 0


def flag(name: str) -> str:
    return "--" + name.lower().replace("_", "-")


def settings_epilog(command: str) -> str:
    """The settings `command` takes, each with its flag, default and meaning; then the others by
    name, which it refuses (protocol.refuse_not_read)."""
    taken = settings_of(command if command != "check" else "up")
    lines = [f"settings of {command_label(command)}, as --flag VALUE, NAME=value, or NAME in the environment:"]
    for name, default, allowed, doc in settings_table():
        if name in taken:
            lines += textwrap.wrap(f"{flag(name)} ({name}): {allowed}; default {default or '(empty)'}",
                                   width=HELP_WIDTH, initial_indent="  ", subsequent_indent=" " * 6,
                                   break_on_hyphens=False)
            lines += textwrap.wrap(doc, width=HELP_WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 6)
    others = [f"{flag(name)} ({name})" for name in SPECS if name not in taken]
    if command == "check":
        lines = ["settings of the command TFLAB_CHECK names (up's shown), as --flag VALUE, NAME=value, or NAME",
                 "in the environment:"] + lines[1:]
    elif len(others) > len(SPECS) // 2:  # the commands that read only a few: the rest is most of the table
        lines.append(f"the other {len(others)} settings are other commands' (`tflab settings` lists them all), "
                     "refused here")
    elif others:  # a line breaks between entries only, so each reads whole
        lines.append("other commands' settings, not taken here:")
        for entry in others:
            if len(lines[-1]) + len(entry) + 2 > HELP_WIDTH:
                lines.append(" ")
            lines[-1] += f" {entry},"
        lines[-1] = lines[-1].rstrip(",")
    return "\n".join(lines)
