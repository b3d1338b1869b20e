"""The task contract (tflab/core/task.py) is the one place the trainer's command, mount and env are
written: docker-compose.yml repeats them as literals because Compose reads the file itself, and
these tests hold the file and every backend's rendering to the module."""

import ast
from pathlib import Path

import pytest
import yaml
from tflab import images
from tflab.backends import compose
from tflab.backends.swarm import render as swarm_render
from tflab.core import task
from tflab.core.settings import Settings
from tflab.k8s import writer as k8s

PACKAGE = Path(__file__).resolve().parents[2] / "scripts" / "tflab"
TRAINER_SIDE = {"train", "launch", "callback"}  # they read the env the contract sets; they do not set it


def x_trainer() -> dict:
    return yaml.safe_load(compose.COMPOSE_FILE.read_text())["x-trainer"]


def target(volume: str) -> str:
    """A short-syntax volume's target: `${VAR:-default}/tasks:/lab/run` or `...:/lab/config.json:ro`."""
    return volume.removesuffix(":ro").rsplit(":", 1)[1]


def test_the_compose_file_says_what_the_contract_says():
    trainer = x_trainer()
    assert trainer["command"] == list(task.COMMAND)
    assert trainer["environment"] == task.ENV
    assert [target(volume) for volume in trainer["volumes"]] == [task.RUN_MOUNT, task.CONFIG]
    # only the tasks' space is writable
    assert [volume.endswith(":ro") for volume in trainer["volumes"]] == [False, True]
    assert trainer["tmpfs"] == [task.TMPFS_MOUNT]


def test_the_swarm_trainer_is_the_compose_trainer():
    trainer = x_trainer()
    assert {key: trainer[key] for key in swarm_render.TRAINER} == swarm_render.TRAINER


def test_the_image_and_k8s_run_the_contracts_command_and_env():
    assert 'CMD ["python", "-m", "tflab.train"]' in images.PACKAGES_CONFIG
    assert "ENV TF_USE_LEGACY_KERAS=1" in images.PACKAGES_CONFIG
    container = k8s.pod_template(Settings(), {}, None, None)["spec"]["containers"][0]
    assert container["command"] == list(task.COMMAND)
    assert {"name": "TF_USE_LEGACY_KERAS", "value": "1"} in container["env"]


def spelled(source: str) -> list[str]:
    """The contract's values a module spells itself: a string that is the trainer's module, the
    run mount (or a path under it), or the legacy-Keras variable's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            value = node.value
            if value == "tflab.train" or value == task.RUN_MOUNT or value.startswith(task.RUN_MOUNT + "/") \
                    or value == "TF_USE_LEGACY_KERAS":
                found.append(value)
    return found


def host_modules() -> list[str]:
    """Every module of the package, at any depth (backends/, tools/), but the task contract itself
    and the trainer's side, which reads the env the contract sets."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "trainer" or str(relative) == "core/task.py" or \
                path.stem in TRAINER_SIDE and len(relative.parts) == 1:
            continue
        found.append(str(relative))
    return sorted(found)


@pytest.mark.parametrize("module", host_modules())
def test_no_host_module_spells_the_contract_itself(module):
    assert spelled((PACKAGE / module).read_text()) == []


@pytest.mark.parametrize("source, expected", [
    ('command = ["python", "-m", "tflab.train"]', ["tflab.train"]),
    ('env = {"TF_USE_LEGACY_KERAS": "1"}', ["TF_USE_LEGACY_KERAS"]),
    ('path = "/lab/run/links/w.json"', ["/lab/run/links/w.json"]),
    ('"""Runs python -m tflab.train in /lab/run."""', []),  # prose about it is no copy
])
def test_the_spelling_check_finds_what_it_should(source, expected):
    assert spelled(source) == expected
