"""Files and text the lab did not write itself, read as if someone hostile had: bounded, checked, escaped.

    data = read_json(run_dir / "summary.json")   # ForeignFile: one line naming the file and what is wrong
    record, why = json_line(line)                 # one JSONL line: a dict, or why it is not one
    print(shown(text))                            # control characters and escape sequences escaped

A run folder is written by tasks that run a user's code, and by anything else with access to it,
so every reader (summary, report, logs, the pytest fixture, the live printer) goes through here:
a file is read only if it is a regular file of bounded size, JSON only to a bounded depth, and
any text that reaches a terminal has its control characters escaped, never printed raw.

Shared by the host side and the trainer: imports neither TensorFlow nor any Docker code.
"""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path
from typing import Any

from tflab.core.beneath import Beneath
from tflab.core.errors import ForeignFile  # also foreign.ForeignFile, as its readers name it

MAX_JSON_BYTES = 16 * 1024 * 1024  # summary.json, config.json, compare.json: a few KB from the lab
MAX_LOG_BYTES = 64 * 1024 * 1024  # a task's <task>.jsonl: a line an epoch, a few KB from the lab
MAX_LINE_BYTES = 1024 * 1024  # one JSONL line (an error event's message is cut at 4000 characters)
MAX_DEPTH = 32  # the lab's own files nest 5 deep; json.loads itself gives up near 1000
# Bidirectional overrides reorder what a terminal shows (CVE-2021-42574); escaped like controls.
BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)}


def shown(text: Any, limit: int = 300, keep: str = "") -> str:
    """Text as it may reach a terminal: every control character (C0, DEL, C1) and bidi override
    escaped as Python writes it (`\\x1b`, `\\r`), cut to `limit` characters; `keep` names the
    controls left as they are (`tflab logs` keeps line breaks and tabs)."""
    text = str(text)
    out = []
    for char in text[:limit] if limit else text:
        if char in keep:
            out.append(char)
        elif unicodedata.category(char) == "Cc" or char in BIDI:
            out.append(repr(char)[1:-1])
        else:
            out.append(char)
    cut = "..." if limit and len(text) > limit else ""
    return "".join(out) + cut


def named(path: Path) -> str:
    """A file as a message names it: relative to the folder the lab was started from where it is
    under it, escaped."""
    try:
        path = Path(path).relative_to(Path.cwd())
    except (ValueError, OSError):
        pass
    return shown(path, limit=0)


def open_regular(path: Path):
    """A regular file opened for reading in binary. FileNotFoundError where there is none (a
    reader may take that as "not yet"); ForeignFile for a folder, a FIFO or device (which would
    block or never end) or an unreadable file."""
    path = Path(path)
    try:
        with Beneath(path.parent) as folder:  # the file itself opened with O_NOFOLLOW, O_NONBLOCK
            descriptor = folder.open_fd(path.name)
    except FileNotFoundError:
        raise
    except ForeignFile as error:
        raise ForeignFile(shown(error, limit=0).replace(str(path), named(path))) from None
    except OSError as error:
        raise ForeignFile(f"{named(path)} cannot be read ({shown(error.strerror or error)})") from None
    return os.fdopen(descriptor, "rb")


def read_bytes(path: Path, limit: int, offset: int = 0, whole: bool = True) -> bytes:
    """A regular file's bytes (open_regular), at most `limit` of them: ForeignFile if it is larger.
    `offset`, `whole=False`: the bytes from there on, at most `limit` of them, however many more
    there are (a log being followed)."""
    with open_regular(path) as file:
        try:
            file.seek(offset)
            data = file.read(limit + whole)
        except OSError as error:
            raise ForeignFile(f"{named(path)} cannot be read ({shown(error.strerror or error)})") from None
    if whole and len(data) > limit:
        raise ForeignFile(f"{named(path)} is larger than {limit // 1024 // 1024} MiB, which no file the lab "
                          "writes there is")
    return data


def too_deep(data: Any, depth: int = MAX_DEPTH) -> bool:
    """Whether JSON data nests more than `depth` arrays and objects; iterative, so any depth is safe."""
    stack = [(data, 1)]
    while stack:
        value, level = stack.pop()
        if isinstance(value, (dict, list)):
            if level > depth:
                return True
            stack.extend((item, level + 1) for item in (value.values() if isinstance(value, dict) else value))
    return False


def parse_json(data: bytes | str) -> Any:
    """JSON from UTF-8 text; ValueError (with the reason in words) for anything else, too deep a
    nesting or a number too long to read."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})") from None
    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError(f"nests deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"is not JSON ({error.msg} at line {error.lineno} column {error.colno})") from None
    except ValueError as error:  # an integer of more digits than Python converts (sys.int_info)
        raise ValueError(f"is not JSON the lab writes ({shown(error, limit=120)})") from None
    if too_deep(value):
        raise ValueError(f"nests deeper than {MAX_DEPTH} levels")
    return value


def read_json(path: Path, limit: int = MAX_JSON_BYTES) -> Any:
    """A JSON file of a run folder; FileNotFoundError where there is none, else ForeignFile."""
    data = read_bytes(path, limit)
    try:
        return parse_json(data)
    except ValueError as error:
        raise ForeignFile(f"{named(path)} {error}") from None


def json_line(line: bytes) -> tuple[dict | None, str]:
    """One line of a JSONL file: (the object, "") or (None, why it is no object the lab wrote)."""
    if len(line) > MAX_LINE_BYTES:
        return None, f"longer than {MAX_LINE_BYTES // 1024} KiB"
    if b"\0" in line:
        return None, "holds a NUL byte"
    try:
        value = parse_json(line)
    except ValueError as error:
        return None, str(error)
    if not isinstance(value, dict):
        return None, f"is a JSON {type(value).__name__}, not an object"
    return value, ""
