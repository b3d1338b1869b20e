"""The lab as an installed tool: its package carries exactly the files the image build needs, the
command takes settings as flags too, runs are scoped by labels, and signals become interrupts."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import tomllib
from labtest.cli import REPO
from tflab import cli, home
from tflab.core.settings import SPECS
from tflab.engine import labels

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_the_wheel_carries_every_file_the_lab_lays_out_and_no_other():
    included = PYPROJECT["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert included == {name: f"tflab/_lab/{name}" for name in home.LAB_FILES}
    assert PYPROJECT["project"]["scripts"] == {"tflab": "tflab.cli:main"}
    assert PYPROJECT["project"]["entry-points"]["pytest11"] == {"tflab": "tflab.pytest_plugin"}
    # The host side is the standard library, plus PyYAML for TFJOB's manifests (tflab/k8s/tfjob.py alone).
    assert PYPROJECT["project"]["dependencies"] == ["PyYAML>=5.4"]


def test_a_checkout_is_its_own_home():
    assert home.LAB_HOME == REPO and home.is_checkout(REPO)


def test_an_installed_lab_lays_its_files_out_once_per_version(tmp_path, monkeypatch):
    bundled = tmp_path / "site/tflab/_lab"
    for name in home.LAB_FILES:
        (bundled / name).parent.mkdir(parents=True, exist_ok=True)
        (bundled / name).write_text(f"{name}\n")
    monkeypatch.setattr(home, "BUNDLED", bundled)
    monkeypatch.setenv("TFLAB_HOME", str(tmp_path / "cache"))
    first = home.installed_home()
    assert first.parent == tmp_path / "cache" and first.name.startswith("lab-")
    assert (first / "images/trainer/Dockerfile").read_text() == "images/trainer/Dockerfile\n"
    assert (first / "scripts/tflab/cli/__init__.py").read_bytes() == Path(cli.__file__).read_bytes()
    assert (first / "images/trainer/wheels").is_dir()
    assert home.installed_home() == first
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.name]  # no staging folder left
    (bundled / "requirements/trainer.txt").write_text("another version\n")
    assert home.installed_home() != first


def test_settings_as_flags_and_as_assignments_are_one_table():
    parser = cli.make_parser()
    args = parser.parse_args(["up", "--workers", "3", "--global-batch", "96", "EPOCHS=2"])
    assert cli.given_settings(args) == {"EPOCHS": "2", "WORKERS": "3", "GLOBAL_BATCH": "96"}
    help_text = parser._subparsers._group_actions[0].choices["up"].format_help()
    for name in SPECS:
        assert f"--{name.lower().replace('_', '-')} ({name})" in help_text


def test_a_setting_given_twice_differently_is_refused():
    args = cli.make_parser().parse_args(["up", "--workers", "3", "WORKERS=2"])
    with pytest.raises(cli.LabError, match="WORKERS is given twice, as --workers 3 and WORKERS=2"):
        cli.given_settings(args)


@pytest.mark.parametrize("argv, expected", [
    (["up", "--worker", "3"], "unrecognized arguments: --worker; did you mean --workers?"),
    (["up", "--wrokers=3"], "did you mean --workers?"),
    (["bogus"], "invalid choice: 'bogus'"),
])
def test_a_mistyped_flag_or_command_is_one_line(argv, expected, capsys):
    with pytest.raises(SystemExit) as exited:
        cli.make_parser().parse_args(argv)
    assert exited.value.code == cli.USAGE_ERROR
    error = capsys.readouterr().err
    assert expected in error and len(error.strip().splitlines()) == 1, error


def test_every_makefile_verb_is_a_command():
    makefile = (REPO / "Makefile").read_text()
    lab_verbs = {line.split("$(LAB) ")[1].split()[0] for line in makefile.splitlines() if "$(LAB) " in line}
    lab_verbs |= {line.split("-m tflab ")[1].split()[0] for line in makefile.splitlines() if "-m tflab " in line}
    assert lab_verbs <= set(cli.COMMANDS), lab_verbs - set(cli.COMMANDS)
    assert {"up", "down", "compare", "chaos", "soak", "bench", "config", "k8s", "summary", "logs", "report",
            "tensorboard", "images", "stack-up", "clean"} <= lab_verbs


def test_sigterm_and_sighup_become_an_interrupt_that_names_them():
    saved = {number: signal.getsignal(number) for number in cli.INTERRUPTING}
    try:
        with pytest.raises(KeyboardInterrupt) as raised:
            cli.interrupt(signal.SIGTERM, None)
        assert raised.value.signal == signal.SIGTERM
        # A second signal must not cut the cleanup short.
        assert all(signal.getsignal(number) == signal.SIG_IGN for number in cli.INTERRUPTING)
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def test_project_names_differ_by_folder_and_scopes_nest(tmp_path):
    a, b = tmp_path / "a/cmp/single", tmp_path / "b/cmp/single"
    assert labels.project_name(a) != labels.project_name(b)
    assert labels.project_name(a).startswith("tflab-single-")
    assert labels.project_name(a) == labels.project_name(Path(str(a)))
    assert labels.within(str(a), tmp_path / "a") and labels.within(str(a), a)
    assert not labels.within(str(a), tmp_path / "a/cm")  # a prefix of the name is not the folder
    assert not labels.within(str(b), tmp_path / "a")
    assert len(f"{labels.project_name(tmp_path / ('x' * 63))}_worker-15") <= 63
