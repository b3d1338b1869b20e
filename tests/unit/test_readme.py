"""The README stays true: its settings table, log schema and layout tree are checked against the code."""

import re
import subprocess
from pathlib import Path

from tflab.schema import COMMON, EVENTS
from tflab.settings import settings_table

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.M | re.S)
    assert match, f"README has no section {title!r}"
    return match.group(1)


def test_the_settings_table_is_the_code():
    rows = [line for line in section("Settings").splitlines() if line.startswith("| ") and "---" not in line]
    expected = ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in settings_table()]
    assert rows[1:] == expected


def test_the_log_schema_names_every_event_and_field():
    text = section("The run folder and its logs")
    for field in COMMON:
        assert f"`{field}`" in text
    for event, fields in EVENTS.items():
        row = next((line for line in text.splitlines() if line.startswith(f"| `{event}` |")), None)
        assert row, f"event {event} missing from the README"
        for field in fields:
            assert f"`{field}`" in row, f"{event}.{field} missing from the README"


def tree_paths() -> list[str]:
    block = re.search(r"## Layout\n\n```text\n\.\n(.*?)```", README, re.S).group(1)
    paths, stack = [], []
    for line in block.splitlines():
        match = re.match(r"^((?:│   |    )*)[├└]── ([^\s,]+(?:, [^\s,]+)*)", line)
        depth = len(match.group(1)) // 4
        stack[depth:] = [match.group(2)]
        parent = "/".join(name.rstrip("/") for name in stack[:-1])
        for name in match.group(2).split(", "):
            paths.append(f"{parent}/{name}".lstrip("/").rstrip("/"))
    return paths


def test_every_path_in_the_layout_exists_and_every_module_is_listed():
    paths = tree_paths()
    for path in paths:
        assert (REPO / path).exists(), f"README's layout shows {path}, which does not exist"
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    tracked = tracked.split()
    top = {name.split("/")[0] for name in tracked} - {".gitignore", ".dockerignore"}
    assert top <= {p.split("/")[0] for p in paths}, top - {p.split("/")[0] for p in paths}
    modules = {name for name in tracked if name.startswith("scripts/tflab/")}
    assert modules <= set(paths), modules - set(paths)
