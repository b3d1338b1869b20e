"""The two walls of the house: the host side never imports TensorFlow (so `make up` starts in a
blink without it), and the trainer never imports the host side's Docker/Compose code."""

import ast
import re
from pathlib import Path

import pytest
import yaml

PACKAGE = Path(__file__).resolve().parents[2] / "scripts" / "tflab"


def module_names(folder: Path) -> set[str]:
    """The package's modules as dotted names below tflab: `runner`, `trainer.train`, `trainer.__init__`."""
    return {".".join(path.relative_to(PACKAGE).with_suffix("").parts) for path in folder.rglob("*.py")}


def source_of(module: str) -> Path:
    return PACKAGE.joinpath(*module.split(".")).with_suffix(".py")


# The trainer/ folder runs inside the containers; the top-level names a user's manifest, image or
# script uses (`python -m tflab.train`, `from tflab.callback import`) are shims that reach into it.
SHIMS = {"train", "launch", "callback", "linkproxy", "metadata"}
TRAINER = module_names(PACKAGE / "trainer") | SHIMS
# No TensorFlow in these: the host may read them (compose renders the metadata stand-in's service
# and each task's port from trainer.metadata; the replay writes the hooks' sitecustomize).
STDLIB_TRAINER = {"trainer.__init__", "trainer.peerwait", "trainer.linkproxy", "linkproxy", "trainer.metadata",
                  "metadata", "trainer.inscript", "trainer.observe", "trainer.chaosstep", "trainer.replayhooks"}
# What both sides share is what core/ holds, by where it lies: no list to keep by hand.
SHARED = module_names(PACKAGE / "core") | {"__init__"}
HOST = module_names(PACKAGE) - module_names(PACKAGE / "tools") - TRAINER - SHARED


def module_of(name: str) -> str | None:
    """The lab's module an imported name lands in (`tflab.trainer.train` -> `trainer.train`;
    `tflab.core.settings.Settings` -> `settings`), or None for a name outside the package."""
    parts = name.split(".")
    if parts[0] != "tflab":
        return None
    for end in range(len(parts), 1, -1):
        dotted = ".".join(parts[1:end])
        if source_of(dotted).is_file():
            return dotted
        if source_of(f"{dotted}.__init__").is_file():
            return f"{dotted}.__init__"
    return "__init__"


def imports_of(module: str) -> set[str]:
    tree = ast.parse(source_of(module).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            if node.module == "tflab" or node.module.startswith("tflab."):
                found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def lab_imports_of(module: str) -> set[str]:
    """The lab's own modules a module imports, by their dotted names below tflab, with the
    `__init__` of each folder on the way (Python runs it first)."""
    reached = {found for name in imports_of(module) if (found := module_of(name)) is not None}
    return reached | {f"{found.rsplit('.', 1)[0]}.__init__" for found in reached if found.count(".") == 1
                      and not found.endswith(".__init__")}


SPAWNED = re.compile(r'"-m",\s*"tflab\.([\w.]+)"')  # a module that starts another as `python -m tflab.X`


def container_entry_points() -> set[str]:
    """The modules the lab starts inside containers, read from what starts them: the trainer's
    command in docker-compose.yml, the delay proxy's and the metadata stand-in's services the run's
    override renders, the launcher every SCRIPT task runs, the TrainJob runtime's TF_CONFIG builder; and
    callback, which a user's script imports there."""
    from tflab.backends import compose, userscript
    from tflab.core import cluster
    from tflab.core.settings import Settings

    commands = [yaml.safe_load((PACKAGE.parents[1] / "docker-compose.yml").read_text())["x-trainer"]["command"]]
    proxied = frozenset({"worker-1"})
    linked = cluster.build(Settings(), cluster.linked_address(proxied))
    commands.append(compose.render_run(Settings(), linked, proxied)["services"]["worker-1-link"]["command"])
    gce = Settings(scenario="preempt", notice="gce")  # make chaos's GCE metadata stand-in
    commands.append(compose.render_run(gce, cluster.build(gce))["services"]["metadata"]["command"])
    commands.append(userscript.script_command(Settings(), "/lab/script/train.py"))
    from tflab.k8s import writer  # the TrainJob's runtime: its node container builds TF_CONFIG, then runs the args

    (node_job,) = writer.training_runtime(Settings(k8s_image="t:1"))["spec"]["template"]["spec"]["replicatedJobs"]
    commands.append(node_job["template"]["spec"]["template"]["spec"]["containers"][0]["command"])
    from tflab.trainer import inscript

    hooks = {name.removeprefix("tflab.") for name in inscript.HOOKS}  # imported by name, before the script
    from tflab.replay import volumes

    # a TFJob replica's own Python imports the hooks through the sitecustomize the replay writes
    site = {f"trainer.{name}" for name in re.findall(r"from tflab\.trainer import (\w+)", volumes.SITE_FILE)}
    return {command[at + 1].removeprefix("tflab.") for command in commands
            for at, word in enumerate(command) if word == "-m"} | {"callback"} | hooks | site


def what_runs_in_the_containers() -> set[str]:
    """The entry points and all they import or start (`-m tflab.X`), module by module."""
    found, todo = {"__init__"}, container_entry_points()
    while todo:
        module = todo.pop()
        found.add(module)
        reached = lab_imports_of(module)
        reached |= {module_of(f"tflab.{name}") for name in SPAWNED.findall(source_of(module).read_text())}
        if module == "trainer.inscript":  # its hooks, imported by name (inscript.HOOKS)
            from tflab.trainer import inscript
            reached |= {module_of(name) for name in inscript.HOOKS}
        todo |= reached - found
    return found


def test_the_host_side_is_what_is_left():
    assert HOST >= {"cli.__init__", "backends.compose", "images.__init__", "supervisor.runner", "supervisor.summary",
                    "backends.local", "reports.report", "reports.bench", "faults.__init__", "engine.docker"}
    # The lists above are written by hand; the walls hold only if they are what the containers
    # really run: every module the containers reach is declared trainer or shared (else the wall
    # against the host's code is not checked for it), and every trainer module is one they run.
    # (A shared module need not be reached: it is one either side may import.)
    assert container_entry_points() == {"train", "launch", "linkproxy", "metadata", "callback", "trainer.inscript",
                                        "trainer.signals", "trainer.observe", "trainer.devices", "trainer.kerasversion",
                                        "trainer.audit", "trainer.tfconfig", "trainer.replayhooks"}
    reached = what_runs_in_the_containers()
    assert reached <= TRAINER | SHARED, reached - TRAINER - SHARED
    assert TRAINER <= reached
    # The folder says it: every module the containers run is in trainer/ or shared at the top,
    # or one of the top-level names users' manifests, images and scripts keep (the shims).
    assert {module for module in reached if "." not in module} <= SHIMS | {"__init__"}


def test_the_trainer_folder_is_what_the_containers_run():
    assert module_names(PACKAGE / "trainer") == {
        "trainer.__init__", "trainer.train", "trainer.launch", "trainer.callback", "trainer.linkproxy",
        "trainer.peerwait", "trainer.metadata", "trainer.inscript", "trainer.observe", "trainer.devices",
        "trainer.kerasversion", "trainer.audit", "trainer.tfconfig", "trainer.replayhooks", "trainer.backups",
        "trainer.customloop", "trainer.signals", "trainer.chaosstep", "trainer.precision", "trainer.chaossave",
        "trainer.weights"}
    assert not {"train", "launch", "callback", "linkproxy", "peerwait"} & {
        path.stem for path in PACKAGE.glob("*.py") if len(path.read_text().splitlines()) > 12}  # shims only


LOADS_TENSORFLOW = re.compile(
    r"^\s*(import tensorflow|from tensorflow[ .]|from tflab(?:\.trainer)? import [\w, ]*\btrain\b)", re.M)


def unit_tests_and_tensorflow() -> dict[str, tuple[bool, bool]]:
    """Each test function of tests/unit: (does its body load TensorFlow, is it marked `tensorflow`).
    A trainer started as a subprocess counts: its program text imports tflab.train the same way."""
    found = {}
    for path in sorted((PACKAGE.parents[1] / "tests" / "unit").glob("test_*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                marked = any(ast.unparse(decorator) == "pytest.mark.tensorflow" for decorator in node.decorator_list)
                body = "\n".join(ast.get_source_segment(source, statement) for statement in node.body)
                loads = bool(LOADS_TENSORFLOW.search(body)) or any(
                    isinstance(constant, ast.Constant) and isinstance(constant.value, str)
                    and LOADS_TENSORFLOW.search(constant.value) for statement in node.body
                    for constant in ast.walk(statement))
                found[f"{path.name}::{node.name}"] = (loads, marked)
    return found


def test_a_unit_test_that_loads_tensorflow_is_marked_so():
    """`-m unit` is the loop without TensorFlow (tests/conftest.py): a test that imports it, or
    starts a trainer that does, carries `tensorflow`, and no other test does."""
    found = unit_tests_and_tensorflow()
    assert [name for name, (loads, marked) in found.items() if loads != marked] == []
    assert sum(marked for _, marked in found.values()) >= 7  # the scan sees the marks at all


@pytest.mark.parametrize("module", sorted(HOST | SHARED | STDLIB_TRAINER))
def test_host_and_shared_modules_never_import_tensorflow_or_numpy(module):
    assert not {name.split(".")[0] for name in imports_of(module)} & {"tensorflow", "numpy", "tf_keras", "keras"}


@pytest.mark.parametrize("module", sorted(TRAINER))
def test_the_trainer_imports_only_core_and_itself(module):
    assert lab_imports_of(module) <= TRAINER | SHARED, lab_imports_of(module) - TRAINER - SHARED


@pytest.mark.parametrize("module", sorted(SHARED))
def test_core_imports_only_core(module):
    assert lab_imports_of(module) <= SHARED, lab_imports_of(module) - SHARED


@pytest.mark.parametrize("module", sorted(HOST | SHARED))
def test_the_host_reads_of_the_trainer_folder_only_what_needs_no_tensorflow(module):
    assert lab_imports_of(module) & TRAINER <= STDLIB_TRAINER, lab_imports_of(module) & TRAINER - STDLIB_TRAINER


def test_the_wall_checks_see_an_import_through_the_folders():
    assert lab_imports_of("core.runfolder") >= {"core.task", "core.schema"}  # `from tflab.core import task as ...`
    assert "core.__init__" in lab_imports_of("trainer.linkproxy")  # `from tflab.core.task import`, through core/
    assert "trainer.train" in lab_imports_of("train") and "trainer.peerwait" in lab_imports_of("trainer.train")


def docker_commands(module: str) -> list[int]:
    """Lines where a module spells out a docker CLI command itself: a list or tuple whose first
    item is the string "docker" (Compose v2's `("docker", "compose")` is the Compose CLI, not
    the engine's, and compose.py alone names it)."""
    tree = ast.parse(source_of(module).read_text())
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            first = node.elts[0]
            second = node.elts[1] if len(node.elts) > 1 else None
            if isinstance(first, ast.Constant) and first.value == "docker":
                if isinstance(second, ast.Constant) and second.value in ("compose", "the Docker CLI"):
                    continue  # the Compose plugin; swarm-sim's list of the tools it needs
                found.append(node.lineno)
    return found


# The engine's docker modules: docker.py (every verb but a swarm's) and dockerswarm.py (a swarm's,
# on docker.py's run and command). Found by name, so a new one is a door only if named for it.
DOORS = {module for module in HOST if module.startswith("engine.docker")}


def test_the_doors_are_the_engine_docker_modules():
    assert DOORS == {"engine.docker", "engine.dockerswarm"}


@pytest.mark.parametrize("module", sorted(HOST - DOORS))
def test_docker_py_is_the_one_door_to_the_docker_cli(module):
    assert docker_commands(module) == [], f"{module}.py runs docker itself; go through tflab.engine.docker"


def test_the_door_check_can_fail():
    assert docker_commands("engine.docker")  # docker.py itself spells the command out
    assert raw_docker_calls(source_of("engine.dockerswarm").read_text())  # dockerswarm.py hands docker.py its argv


RAW = {"run", "command"}  # docker.py's argv builders that take the verbs as given


def raw_docker_calls(source: str) -> list[int]:
    """Lines where a module hands docker.py a command line of its own (`docker.run("image", "rm",
    ...)`, `docker.command(...)`, or those imported by name) instead of calling a named verb."""
    tree = ast.parse(source)
    found = []
    imported = {alias.asname or alias.name for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and node.module == "tflab.engine.docker"
                for alias in node.names if alias.name in RAW}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if (isinstance(function, ast.Attribute) and function.attr in RAW and isinstance(function.value, ast.Name)
                and function.value.id == "docker") or (isinstance(function, ast.Name) and function.id in imported):
            found.append(node.lineno)
    return found


@pytest.mark.parametrize("module", sorted(HOST - DOORS))
def test_every_docker_verb_is_spelled_in_docker_py(module):
    assert raw_docker_calls(source_of(module).read_text()) == [], \
        f"{module}.py builds a docker command line itself; add a named verb to tflab/engine/docker.py"


@pytest.mark.parametrize("source, lines", [
    ('from tflab import docker\ndocker.run("image", "rm", name)\n', [2]),
    ('from tflab import docker\nx = docker.command("logs", c)\n', [2]),
    ('from tflab.engine.docker import run as r\nr("ps")\n', [2]),
    ('from tflab import docker\ndocker.image_remove(name)\ndocker.run_quiet(["docker-compose", "ps"])\n', []),
])
def test_the_verb_check_finds_what_it_should(source, lines):
    assert raw_docker_calls(source) == lines


TOOLS = PACKAGE / "tools"  # what only provisions (make swarm-sim): it may import the lab, never the reverse


def tool_imports(module: str) -> set[str]:
    return {".".join(name.split(".")[:2]) for name in imports_of(module)
            if name == "tflab.tools" or name.startswith("tflab.tools.")}


@pytest.mark.parametrize("module", sorted((HOST | SHARED | TRAINER) - {"cli.training"}))
def test_the_runtime_never_imports_the_provisioning_tools(module):
    assert not tool_imports(module), f"{module}.py imports {tool_imports(module)}; only the cli calls the tools"


def test_the_cli_reaches_the_tools_and_the_check_sees_it():
    assert tool_imports("cli.training") == {"tflab.tools"}  # `tflab swarm-sim`'s thin call


def test_the_tools_are_outside_the_runtime_folder():
    assert (TOOLS / "swarmsim.py").is_file() and not (PACKAGE / "swarmsim.py").exists()


def test_each_backend_is_a_module_or_folder_under_backends():
    """The backends BACKEND= names live under backends/ beside the base they share; nothing of them
    at the top. A replay's stack (replay/stack.py) is a Compose stack of a manifest's replicas that
    only the replay starts, so it lives with the replay, above the supervisor."""
    assert {"backends.__init__", "backends.base", "backends.leftovers", "backends.compose", "backends.local",
            "backends.userscript", "backends.swarm.__init__", "backends.swarm.render", "backends.swarm.nodes",
            "backends.swarm.teardown", "backends.swarm.link"} == module_names(PACKAGE / "backends")
    assert not {path.stem for path in PACKAGE.glob("*.py")} & {"backend", "compose", "local", "replay", "swarm"}
