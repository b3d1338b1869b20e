"""The README and docs/ stay true: the settings table, log schema and layout tree are checked
against the code, every link between them lands on a page and a heading, and the README stays a
five-minute read."""

import re
import subprocess
from pathlib import Path

from tflab.core.schema import COMMON, EVENTS
from tflab.core.settings import settings_markdown

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
DOCS = REPO / "docs"
README_MAX_LINES = 260  # about five minutes of reading; the depth lives in docs/


def page(name: str) -> str:
    return (DOCS / name).read_text()


def section(text: str, title: str, level: int = 2) -> str:
    marks = "#" * level
    match = re.search(rf"^{marks} {re.escape(title)}\n(.*?)(?=^#{{1,{level}}} |\Z)", text, re.M | re.S)
    assert match, f"no section {title!r}"
    return match.group(1)


def test_the_settings_table_is_the_code():
    text = section(page("settings.md"), "Settings")
    rows = [line for line in text.splitlines() if line.startswith("|")]
    assert rows == settings_markdown().splitlines(), (
        "docs/settings.md's table is not the settings' declaration: print it again with "
        "`PYTHONPATH=scripts python3 -m tflab.core.settings --markdown` and put it in place of the old one")


def test_the_log_schema_names_every_event_and_field():
    text = page("run-folder.md")
    for field in COMMON:
        assert f"`{field}`" in text
    for event, fields in EVENTS.items():
        row = next((line for line in text.splitlines() if line.startswith(f"| `{event}` |")), None)
        assert row, f"event {event} missing from docs/run-folder.md"
        for field in fields:
            assert f"`{field}`" in row, f"{event}.{field} missing from docs/run-folder.md"


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
    # The package's folders, not its modules: each module's job is its docstring
    # (docs/architecture.md maps the folders).
    folders = {str(Path(name).parent) for name in tracked if name.startswith("scripts/tflab/") and name.count("/") == 3}
    assert folders <= set(paths), folders - set(paths)
    pages = {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert pages <= set(paths), pages - set(paths)


def anchors(text: str) -> set[str]:
    """GitHub's anchors for a page's headings."""
    found = set()
    for heading in re.findall(r"^#{1,6} (.*)", text, re.M):
        found.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return found


def test_every_link_between_the_readme_and_docs_lands():
    documents = {REPO / "README.md": README, **{path: path.read_text() for path in DOCS.glob("*.md")}}
    for path, text in documents.items():
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"\w+://", target):
                continue
            file, _, anchor = target.partition("#")
            landing = (path.parent / file).resolve() if file else path
            assert landing.exists(), f"{path.name} links to {target}, which does not exist"
            if anchor and landing.suffix == ".md":
                assert anchor in anchors(landing.read_text()), f"{path.name} links to {target}: no such heading"


def test_every_docs_page_is_linked_from_the_readme():
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)", README))
    assert {p.name for p in DOCS.glob("*.md")} <= linked


def test_the_readme_is_a_five_minute_read():
    assert len(README.splitlines()) <= README_MAX_LINES

