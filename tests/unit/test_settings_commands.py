"""Each setting declared once (settings.SETTINGS), and each command taking its own settings from
that declaration: one given by name to a command that never reads it is refused in one line; one
in the environment is not (one environment serves every command); `make help` and every
`tflab <command> --help` show the command's own settings in a table that fits a terminal."""

import dataclasses
import re
import shutil
import subprocess
import sys

import pytest
from labtest.cli import REPO, assert_refused, lab_env, run_lab
from tflab import cli
from tflab.cli.protocol import command_label, named_values, refuse_not_read, settings_of
from tflab.core.commands import MAKE_VARIABLES_ENV
from tflab.core.settings import RUNS, SETTINGS, SPECS, Settings, SettingsError, refuse_unhonoured
from tflab.faults import registry
from tflab.k8s import writer as k8s

HELP_WIDTH = 96
COMMANDS = [command for command in cli.COMMANDS if command != "check"]  # check takes TFLAB_CHECK's command's


def test_the_settings_dataclass_is_made_from_the_one_declaration():
    fields = dataclasses.fields(Settings)
    assert [f.name for f in fields] == [spec.field for spec in SETTINGS]
    assert [f.default for f in fields] == [spec.default for spec in SETTINGS]
    assert all(f.type is type(spec.default) for f, spec in zip(fields, SETTINGS))
    assert list(SPECS) == [spec.name for spec in SETTINGS] and len(SPECS) == len(SETTINGS) == 77
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings().workers = 3
    assert Settings.__module__ == "tflab.core.settings"  # what pickle and a reader's repr look it up by


def test_every_setting_names_commands_that_exist():
    for spec in SETTINGS:
        assert spec.commands, spec.name
        assert set(spec.commands) <= set(cli.COMMANDS), spec.name
        assert set(spec.refused) <= set(cli.COMMANDS) and not set(spec.refused) & set(spec.commands), spec.name


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_refuses_by_name_exactly_what_it_does_not_read(command):
    taken, refused = [], []
    for spec in SETTINGS:
        try:
            refuse_not_read(command, {spec.name: "3"})
            taken.append(spec.name)
        except SettingsError as error:
            message = str(error)
            assert message.startswith(f"{spec.name}=3 is not a setting of {command_label(command)} (read by make "
                                      f"{', '.join(spec.commands)} only); leave it out"), message
            refused.append(spec.name)
    assert taken == [spec.name for spec in SETTINGS if command in spec.commands or command in spec.refused]
    assert len(taken) + len(refused) == len(SETTINGS)


def test_the_few_commands_read_what_their_code_reads():
    """Spot checks against the code: summary, logs and report read a run folder; chaos's own
    settings are not soak's, which draws them at random; stack-up is BACKEND=swarm whatever."""
    assert settings_of("summary") == settings_of("logs") == settings_of("report") == ["RUN", "RUNS_DIR"]
    assert settings_of("down") == ["RUN", "RUNS_DIR", "FORCE"]
    assert settings_of("wheels") == ["GPUS", "PLATFORM", "TF", "KERAS"]  # KERAS=3.12: a Keras layer's wheels
    assert settings_of("swarm-sim") == ["NODES"] and settings_of("swarm-sim-down") == settings_of("settings") == []
    assert {"SCENARIO", "TARGET", "AT", "HEAL"} <= set(settings_of("chaos")) - set(settings_of("soak"))
    assert "BACKEND" in settings_of("up") and "BACKEND" not in settings_of("stack-up")
    assert "TFJOB" in settings_of("up") and not {"TFJOB", "COMPARE", "SOAK"} & set(settings_of("config"))


def test_only_names_given_count_not_the_environment():
    env = {"WORKERS": "3", "SCENARIO": "kill", "RUN": "r1"}
    assert named_values(env) == {}
    assert named_values(env, {"RUN": "r2"}) == {"RUN": "r2"}
    assert named_values({**env, MAKE_VARIABLES_ENV: "WORKERS NOT_A_SETTING"}) == {"WORKERS": "3"}
    refuse_not_read("summary", named_values(env))  # exported for another command: not summary's business


@pytest.mark.parametrize("command", ["k8s"])
def test_a_script_is_refused_where_the_command_cannot_run_it_from_the_declaration(command, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    settings = Settings(script=str(script))
    with pytest.raises(SettingsError) as refused:
        refuse_unhonoured(command, settings)
    assert str(refused.value) == f"SCRIPT={script} is not allowed with {SPECS['SCRIPT'].refused[command]}"
    refuse_unhonoured("up", settings)
    refuse_unhonoured(command, Settings())
    # its call site raises it; make chaos and soak time a script by its own epochs (issue 29)
    registry.check_backend(settings, ("kill",))
    with pytest.raises(SettingsError, match="^SCRIPT=.* is not allowed with make k8s: the manifests run"):
        k8s.write(settings)


@pytest.mark.parametrize("how", ["argument", "flag", "make"])
def test_the_cli_refuses_a_setting_its_command_never_reads(how, tmp_path):
    runs = tmp_path / "runs"
    if how == "argument":
        result = run_lab("summary", "WORKERS=3", f"RUNS_DIR={runs}")
    elif how == "flag":
        result = run_lab("summary", "--workers", "3", "--runs-dir", str(runs))
    else:  # make hands its command-line variables on as environment, and names them
        result = run_lab("summary", env=lab_env(WORKERS="3", RUNS_DIR=str(runs),
                                                TFLAB_MAKE_VARIABLES="WORKERS RUNS_DIR"))
    assert_refused(result, "WORKERS=3 is not a setting of make summary (read by make up, stack-up, compare, matrix, "
                           "bench, chaos, soak, chaos-grid, config, k8s only); leave it out: `tflab summary --help` "
                           "lists", runs)


def test_an_exported_setting_is_left_to_the_commands_that_read_it(tmp_path):
    runs = tmp_path / "runs"
    result = run_lab("summary", env=lab_env(WORKERS="3", GLOBAL_BATCH="96", RUNS_DIR=str(runs)))
    assert result.returncode == 2, result.stderr
    # summary's own answer, naming the command as the user ran it (python3 -m tflab here; make below)
    assert result.stderr == f"tflab: no runs yet in {runs}; start one with `python3 -m tflab up`\n"
    under_make = run_lab("summary", env=lab_env(RUNS_DIR=str(runs), TFLAB_MAKE_VARIABLES="RUNS_DIR"))
    assert under_make.stderr == f"tflab: no runs yet in {runs}; start one with `make up`\n"


def test_make_refuses_it_and_the_check_before_venv_takes_its_commands(tmp_path):
    """`make summary WORKERS=3` is refused; `make compare MODEL=cnn`'s check (TFLAB_CHECK=compare)
    takes MODEL, and refuses SCENARIO, which compare never reads."""
    if shutil.which("make") is None:
        pytest.fail("make is required")
    runs = tmp_path / "runs"
    env = lab_env(PYTHON=sys.executable)
    made = subprocess.run([shutil.which("make"), "--no-print-directory", "summary", "WORKERS=3", f"RUNS_DIR={runs}"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert made.returncode == 2 and made.stderr.startswith("tflab: WORKERS=3 is not a setting of make summary"), \
        made.stderr
    checked = run_lab("check", env=lab_env(TFLAB_CHECK="compare", MODEL="cnn", RUNS_DIR=str(runs),
                                           TFLAB_MAKE_VARIABLES="MODEL RUNS_DIR"))
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr
    checked = run_lab("check", env=lab_env(TFLAB_CHECK="compare", SCENARIO="kill", RUNS_DIR=str(runs),
                                           TFLAB_MAKE_VARIABLES="SCENARIO RUNS_DIR"))
    assert_refused(checked, "SCENARIO=kill is not a setting of make compare (read by make chaos, migrate only)", runs)


def test_make_help_lists_every_setting_once_in_96_columns():
    if shutil.which("make") is None:
        pytest.fail("make is required")
    shown = subprocess.run([shutil.which("make"), "--no-print-directory", "help"], cwd=REPO,
                           env=lab_env(PYTHON=sys.executable), capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    targets, settings = shown.stdout.split("\nSettings, as make variables", 1)
    assert re.findall(r"^  make (\S+)", targets, re.M)[:3] == ["help", "up", "stack-up"]  # the targets, as before
    rows = re.findall(r"^  ([A-Z0-9_]+) ", settings, re.M)
    assert rows == sorted(SPECS, key=rows.index) and sorted(rows) == sorted(SPECS)  # each once
    assert max(len(line) for line in settings.splitlines()) <= HELP_WIDTH
    compare = settings[settings.index("\n  COMPARE "):].splitlines()[1:8]
    assert "parameter-server-2" in " ".join(compare)  # its 90-character default wrapped, whole words


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_each_commands_help_shows_its_own_settings_in_96_columns(command):
    shown = cli.make_parser()._subparsers._group_actions[0].choices[command].format_help()
    assert max(len(line) for line in shown.splitlines()) <= HELP_WIDTH, shown
    listed = re.findall(r"^  --[a-z0-9-]+ \(([A-Z0-9_]+)\): ", shown, re.M)
    assert listed == settings_of("up" if command == "check" else command)


def test_up_help_still_names_every_setting_and_its_flag():
    shown = cli.make_parser()._subparsers._group_actions[0].choices["up"].format_help()
    for name in SPECS:
        assert f"--{name.lower().replace('_', '-')} ({name})" in shown
    assert set(RUNS) <= set(cli.COMMANDS)


def test_the_docs_table_of_targets_and_settings_is_the_declaration():
    text = (REPO / "docs/settings.md").read_text()
    section = text[text.index("## Which target takes which setting"):text.index("## Targets")]
    base = re.search(r"`k8s`\): ([A-Z0-9_, \n]+)\.", section).group(1).replace("\n", " ").split(", ")
    assert base == [spec.name for spec in SETTINGS if set(RUNS) <= set(spec.commands)]
    found = {}
    for target, cell in re.findall(r"^\| `make ([a-z0-9-]+)` \| (.*) \|$", section, re.M):
        names = [] if cell == "none" else [name for part in cell.split(", and ") for name in part.split(", ")]
        found["settings" if target == "help" else target] = \
            sorted(base + names[1:] if names[:1] == ["a run's"] else names)
    assert found == {command: sorted(settings_of(command)) for command in COMMANDS}
