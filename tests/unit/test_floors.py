"""The rooms of the package stand on floors (issue 46): each folder of scripts/tflab/, and each
module at its top, imports only rooms on its own floor or below, and no two rooms import each
other. An import inside a function counts as one at the top: it is the same dependency, put off.
docs/architecture.md states the floors; this test holds the page to FLOORS and the code to both."""

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "scripts" / "tflab"

# Lowest first. The supervisor runs either kind of run on a backend; the replay, the second kind,
# drives the supervisor's runner; faults and reports start runs of either kind; cli starts all.
# The shims (train.py and the rest) are the trainer's names for users' manifests and scripts.
FLOORS = (
    ("core/",),
    ("trainer/", "engine/", "console.py", "home.py"),
    ("images/", "train.py", "launch.py", "linkproxy.py", "metadata.py", "callback.py"),
    ("k8s/", "backends/"),
    ("supervisor/", "tools/"),
    ("replay/",),
    ("faults/", "reports/"),
    ("cli/", "pytest_plugin.py", "__main__.py"),
)
FLOOR = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}


def room_of(dotted: str, package: Path = PACKAGE) -> str | None:
    """The room an imported name lands in: `tflab.supervisor.runner` -> `supervisor/`,
    `tflab.console.say` -> `console.py`; None for a name outside the lab, or the package itself."""
    parts = dotted.split(".")
    if parts[0] != "tflab" or len(parts) < 2:
        return None
    if (package / parts[1] / "__init__.py").is_file():
        return f"{parts[1]}/"
    if (package / f"{parts[1]}.py").is_file():
        return f"{parts[1]}.py"
    return None  # a name the package's __init__ defines, were there one


def rooms_imported(source: str, module: str, package: Path = PACKAGE) -> set[str]:
    """The rooms that `source`, the module `module` (`tflab.faults.chaos`), imports, at the top or
    inside a function, relative imports resolved."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[:-node.level]
                base = ".".join(anchor + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {room for name in names if (room := room_of(name, package)) is not None}
    return found


def room_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Each room and the other rooms its modules import."""
    graph: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if relative == Path("__init__.py"):
            continue  # the package's own docstring
        room = f"{relative.parts[0]}/" if len(relative.parts) > 1 else relative.name
        module = ".".join(("tflab", *relative.with_suffix("").parts))
        if path.name == "__init__.py":
            module += ".__init__"  # so that `from . import x` resolves to the package itself
        graph.setdefault(room, set()).update(rooms_imported(path.read_text(), module, package) - {room})
    return graph


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Each import that climbs: a room importing one on a floor above its own."""
    return [f"{room} (floor {FLOOR[room]}) imports {other} (floor {FLOOR[other]})"
            for room, others in sorted(graph.items()) for other in sorted(others) if FLOOR[other] > FLOOR[room]]


def mutual(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted((room, other) for room, others in graph.items() for other in others
                  if room < other and room in graph.get(other, set()))


def test_every_room_stands_on_one_floor():
    rooms = [room for floor in FLOORS for room in floor]
    assert len(rooms) == len(set(rooms))
    assert set(room_graph()) == set(rooms), "a room without a floor, or a floor's room that is gone"


def test_no_import_climbs_a_floor():
    assert upward(room_graph()) == []


def test_no_two_rooms_import_each_other():
    assert mutual(room_graph()) == []


def test_the_page_states_these_floors():
    page = (REPO / "docs" / "architecture.md").read_text()
    stated = re.search(r"The floors, lowest first[^:]*:(.*?)\n\n", page, re.S)
    assert stated, "docs/architecture.md has no paragraph 'The floors, lowest first ...:'"
    floors = tuple(tuple(re.findall(r"`([\w.]+/?)`", floor)) for floor in stated.group(1).split(";"))
    assert floors == FLOORS


def test_the_checks_see_a_planted_climb_and_a_planted_pair():
    graph = room_graph()
    climb = "def follow():\n    from tflab.replay import run\n"  # the supervisor reaching up, in a function
    graph["supervisor/"] |= rooms_imported(climb, "tflab.supervisor.runner")
    graph["backends/"] |= rooms_imported("from ..supervisor import progress\n", "tflab.backends.compose")
    assert upward(graph) == ["backends/ (floor 3) imports supervisor/ (floor 4)",
                             "supervisor/ (floor 4) imports replay/ (floor 5)"]
    graph["faults/"].add("reports/")  # two rooms of one floor, each importing the other
    graph["reports/"].add("faults/")
    # The two climbs close loops too: issue 46's backends <-> supervisor, and the replay's.
    assert mutual(graph) == [("backends/", "supervisor/"), ("faults/", "reports/"), ("replay/", "supervisor/")]


def test_a_name_lands_in_its_room():
    assert rooms_imported("from tflab import console, replay\nimport tflab.core.cluster\nimport json\n",
                          "tflab.cli.training") == {"console.py", "replay/", "core/"}
    assert rooms_imported("from . import stack\n", "tflab.replay.__init__") == {"replay/"}
