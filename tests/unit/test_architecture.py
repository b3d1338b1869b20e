"""docs/architecture.md's claims, held against the code (issue 46: 4 of 12 checked were false):
the rooms it lists are the package's folders, the modules it says import TensorFlow are the ones
that do, the callers of `cluster.build` it names are the ones that call it, and config.json is
written where it says, once a run. Its file names are test_names_exist.py's."""

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "scripts" / "tflab"
PAGE = (REPO / "docs" / "architecture.md").read_text()
NAMED = re.compile(r"`((?:\w+/)+\w+\.py)`")


def modules() -> dict[str, ast.Module]:
    """Each module of the package by its path below scripts/tflab/ (`trainer/train.py`), parsed."""
    return {str(path.relative_to(PACKAGE)): ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}


def section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", PAGE, re.M | re.S)
    assert match, f"docs/architecture.md has no section {title!r}"
    return match.group(1)


def paragraph(starting: str) -> str:
    """The page's text from a phrase to the end of its paragraph (or bullet's sentence run)."""
    at = PAGE.index(starting)
    end = re.compile(r"\n\s*\n|\n- ").search(PAGE, at)
    return PAGE[at:end.start() if end else len(PAGE)]


def test_the_rooms_are_the_packages_folders():
    listed = set(re.findall(r"^- \*\*`(\w+)/`\*\*", section("The rooms"), re.M))
    folders = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert listed == folders, f"listed but no folder: {listed - folders}; a folder not listed: {folders - listed}"


def imports_tensorflow(tree: ast.Module) -> bool:
    """Any import of TensorFlow or Keras, at the top or inside a function."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return bool(found & {"tensorflow", "keras", "tf_keras"})


def test_the_modules_said_to_import_tensorflow_are_those_that_do():
    said = set(NAMED.findall(paragraph("The modules that import TensorFlow:").split(";")[0]))
    do = {name for name, tree in modules().items() if imports_tensorflow(tree)}
    assert said == do
    assert all(name.startswith("trainer/") for name in do)  # the host's wall, as the page says it


def calls_to(tree: ast.Module, module: str, function: str) -> list[str]:
    """The functions in which `module.function(...)` is called (`<module>` at the top level)."""
    found = []

    def visit(node, within):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else within
            if (isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute) and child.func.attr == function
                    and isinstance(child.func.value, ast.Name) and child.func.value.id == module):
                found.append(within)
            visit(child, inner)

    visit(tree, "<module>")
    return found


def test_the_callers_of_cluster_build_are_those_the_page_names():
    said = set(NAMED.findall(paragraph("`cluster.build` is called by")))
    calling = {name: calls_to(tree, "cluster", "build") for name, tree in modules().items()}
    assert said == {name for name, calls in calling.items() if calls}
    assert calling["supervisor/runner.py"] == ["up"]  # the run's own cluster: one call, in runner.up


def test_config_json_is_written_once_a_run_after_the_claim():
    """The flow's "written once, after the run's folder is claimed": the lab's run writes it in
    labrun.LabRun.prepare, a replay in ReplayRun.claimed (runner.run calls each once, after the claim)."""
    writers = {(name, within) for name, tree in modules().items()
               for within in calls_to(tree, "runfolder", "write_config")}
    assert writers == {("supervisor/labrun.py", "prepare"), ("replay/run.py", "claimed")}
    run = next(node for node in modules()["supervisor/runner.py"].body if isinstance(node, ast.FunctionDef)
               and node.name == "run")
    called = [ast.unparse(node.func) for node in ast.walk(run) if isinstance(node, ast.Call)]
    assert called.count("kind.claimed") == called.count("kind.prepare") == 1
    assert called.index("runfolder.make") < called.index("kind.claimed")


@pytest.mark.parametrize("source, expected", [
    ("import tensorflow as tf\n", True),
    ("def f():\n    from tensorflow.python.eager import context\n", True),
    ("import tf_keras\n", True),
    ("from . import tensorflow_words\nimport json\n", False),
])
def test_the_tensorflow_check_finds_what_it_should(source, expected):
    assert imports_tensorflow(ast.parse(source)) == expected


def test_the_call_check_finds_what_it_should():
    tree = ast.parse("def up():\n    cluster.build(s)\n\nclass C:\n    def m(self):\n        return cluster.build(s)\n"
                     "x = other.build(s)\n")
    assert calls_to(tree, "cluster", "build") == ["up", "m"]


def test_the_page_is_a_map_not_a_table():
    assert len(PAGE.splitlines()) <= 150  # issue 46: ten minutes' reading; each module's job is its docstring
    assert not re.search(r"^\| Module \|", PAGE, re.M)


def test_each_module_says_its_job_in_its_docstring():
    """The map leaves each module's job to the module: one without a docstring fails (the package's
    `python -m tflab` entry, three lines that call the CLI, excepted)."""
    assert [name for name, tree in modules().items() if not ast.get_docstring(tree) and name != "__main__.py"] == []
