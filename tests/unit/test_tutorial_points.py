"""A script as the tutorials write it (issue 29): its own MirroredStrategy() gets REPLICAS devices,
it runs in a writable working directory of the run folder, a download is explained, it gets
SCRIPT_ENV and DATA, its output is streamed as whole lines with its task, and the lab names the
command the user ran. Stand-in scripts and fake modules here; TensorFlow only where marked."""

import json
import subprocess
import sys
import textwrap

import pytest
from labtest.cli import REPO, lab_env
from tflab.backends import compose
from tflab.backends.swarm import render as swarm_render
from tflab.backends.userscript import script_environment
from tflab.core import cluster, explain, grammars
from tflab.core.commands import lab_command
from tflab.core.explain import Evidence
from tflab.core.schema import read_events
from tflab.core.settings import Settings, SettingsError
from tflab.supervisor import progress
from tflab.trainer.launch import TerminalLines

pytestmark = pytest.mark.unit
TUTORIAL = REPO / "examples/multiworker-tutorial/train.py"


# -- the launcher: whole lines, a working directory --------------------------------------------


def lines_of(*chunks: str, clock=None) -> list[str]:
    said = []
    lines = TerminalLines(said.append, **({"clock": clock} if clock else {}))
    for chunk in chunks:
        lines.feed(chunk)
    lines.close()
    return said


def test_a_redrawn_progress_bar_is_one_line_as_a_terminal_keeps_it():
    # tf-keras: backspaces over the last drawing, then \r; Keras 3: \r and colours.
    tf_keras = ["Epoch 1/2\n", " 1/16 [>....] - ETA: 3s - loss: 2.0", "\b" * 34 + "\r",
                "16/16 [=====] - 1s 3ms/step - loss: 0.5\n"]
    assert lines_of(*tf_keras) == ["Epoch 1/2", "16/16 [=====] - 1s 3ms/step - loss: 0.5"]
    keras_3 = ["\r\x1b[1m 1/16\x1b[0m \x1b[32m━\x1b[0m - loss: 2.0", "\r\x1b[1m16/16\x1b[0m \x1b[32m━━━━\x1b[0m "
               "- loss: 0.5\r\n", "done"]
    assert lines_of(*keras_3) == ["16/16 ━━━━ - loss: 0.5", "done"]
    assert lines_of("abcdef\b\b\bXY\n") == ["abcXYf"]  # a backspace moves back; what follows overwrites


def test_a_long_redrawn_line_is_said_as_it_stands_every_few_seconds():
    now = [0.0]
    said = []
    lines = TerminalLines(said.append, clock=lambda: now[0])
    lines.feed("\r 1/900 [...]")
    now[0] = TerminalLines.PROGRESS_SECONDS + 1
    lines.feed("\r 500/900 [===...]")
    lines.feed("\r 501/900 [===...]")  # said a moment ago: not again yet
    lines.feed("\r 900/900 [======]\n")
    assert said == [" 500/900 [===...]", " 900/900 [======]"]


def test_a_print_after_a_quiet_spell_is_said_once_whole():
    # TensorFlow's custom-loop tutorial: `Epoch: 1, accuracy: ...` after a 12 s epoch, written as its
    # text and then its line break; once it was said twice, 0.3 ms apart (issue 35).
    now = [0.0]
    said = []
    lines = TerminalLines(said.append, clock=lambda: now[0])
    now[0] = 12.0
    lines.feed("Epoch: 1, accuracy: 0.81, train_loss: 0.52")
    lines.feed("\n")
    now[0] = 30.0
    lines.feed("Epoch: 2, acc")  # a print cut anywhere, long after the last line
    now[0] = 45.0
    lines.feed("uracy: 0.90\n")
    lines.close()
    assert said == ["Epoch: 1, accuracy: 0.81, train_loss: 0.52", "Epoch: 2, accuracy: 0.90"]


def test_a_redrawn_line_said_as_it_stands_is_not_said_again_at_its_break():
    now = [0.0]
    said = []
    lines = TerminalLines(said.append, clock=lambda: now[0])
    lines.feed("\r 16/16 [======] - loss: 0.5")
    now[0] = TerminalLines.PROGRESS_SECONDS + 1
    lines.feed("\r 16/16 [======] - loss: 0.5")  # said as it stands
    lines.feed("\n")  # unchanged since: not again
    assert said == [" 16/16 [======] - loss: 0.5"]


def launch(tmp_path, source: str, folder_files: dict | None = None, strategy: str = "single", replicas: int = 2):
    """The launcher on a stand-in script in its own folder, as a container runs it: the run folder
    elsewhere, the script's folder read-only."""
    folder, run_dir = tmp_path / "script", tmp_path / "run"
    folder.mkdir()
    run_dir.mkdir()
    (folder / "train.py").write_text(textwrap.dedent(source))
    for name, text in (folder_files or {}).items():
        (folder / name).write_text(text)
    folder.chmod(0o555)
    settings = Settings(strategy=strategy, replicas=replicas, script=str(folder / "train.py"))
    (run_dir / "config.json").write_text(json.dumps({"settings": settings.to_dict(), "cluster": {}}))
    task = "single" if strategy == "single" else "mirrored"
    env = lab_env(TFLAB_CONFIG=str(run_dir / "config.json"), TFLAB_TASK=task)
    result = subprocess.run([sys.executable, "-m", "tflab.launch", "--", sys.executable, "-m", "tflab.trainer.inscript",
                             str(folder / "train.py")], cwd=folder, env=env, capture_output=True, text=True,
                            timeout=120)
    folder.chmod(0o755)
    return result, run_dir, task


def test_the_script_runs_in_a_writable_folder_of_the_run_that_sees_its_own_files(tmp_path):
    result, run_dir, task = launch(tmp_path, """
        import os
        with open("beside.txt") as beside:  # read by its relative path, as beside the script
            text = beside.read()
        os.makedirs("./ckpt")
        with open("./ckpt/weights.txt", "w") as out:
            out.write(text.upper())
        print(os.getcwd())
        """, {"beside.txt": "kept with the run"})
    assert result.returncode == 0, result.stderr
    work = run_dir / "work" / task
    assert result.stdout.strip() == str(work)
    assert (work / "ckpt/weights.txt").read_text() == "KEPT WITH THE RUN"
    assert sorted(path.name for path in work.iterdir()) == ["beside.txt", "ckpt", "train.py"]
    assert (work / "beside.txt").is_symlink() and (work / "beside.txt").resolve() == tmp_path / "script/beside.txt"


def test_a_runs_folder_inside_the_scripts_folder_is_not_linked_into_its_own_run(tmp_path):
    """BACKEND=local with runs/ beside the script, as `tflab up SCRIPT=train.py` in a project makes it."""
    from tflab.trainer.launch import working_folder

    (tmp_path / "train.py").write_text("")
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    work = working_folder(run_dir, "worker-0", tmp_path)
    assert work == run_dir / "work/worker-0"
    assert sorted(path.name for path in work.iterdir()) == ["train.py"]
    assert working_folder(run_dir, "worker-0", tmp_path) == work  # a restart finds it as it was


def test_the_output_file_has_every_line_whole_and_the_keras_that_was_imported(tmp_path):
    fake_keras = "__version__ = '3.99.0'\n"  # found first: the script's folder leads sys.path
    result, run_dir, task = launch(tmp_path, r"""
        import sys
        import keras
        print("Epoch 1/1")
        sys.stdout.write("\r 1/2 [>..]\r 2/2 [===] - loss: 0.25\n")
        print("careful", file=sys.stderr)
        """, {"keras.py": fake_keras})
    assert result.returncode == 0, result.stderr
    out = (run_dir / f"{task}.out").read_text().splitlines()
    # stdout's lines in their order; stderr's come through a reader of their own, in theirs
    assert [line for line in out if not line.startswith("tflab:") and line != "careful"] == [
        "Epoch 1/1", " 2/2 [===] - loss: 0.25"]
    assert out.count("careful") == 1
    assert " 2/2 [===] - loss: 0.25\n" in result.stdout and "\r" not in result.stdout
    imported = [record for record in read_events(run_dir / f"{task}.jsonl") if record["event"] == "imported"]
    assert [(record["module"], record["version"]) for record in imported] == [("keras", "3.99.0")]


@pytest.mark.tensorflow
def test_a_scripts_own_mirrored_strategy_gets_the_replicas_asked_for(tmp_path):
    source = """
        import tensorflow as tf
        strategy = tf.distribute.MirroredStrategy()
        print("replicas", strategy.num_replicas_in_sync)
        """
    result, _, _ = launch(tmp_path, source, strategy="mirrored", replicas=4)
    assert result.returncode == 0, result.stderr
    assert "replicas 4" in result.stdout.splitlines()
    assert "tflab: REPLICAS=4: this task's CPU is 4 logical devices" in result.stderr
    (tmp_path / "single").mkdir()
    single, _, _ = launch(tmp_path / "single", source, strategy="single")
    assert "replicas 1" in single.stdout.splitlines()  # REPLICAS is mirrored's alone


# -- SCRIPT_ENV and DATA -----------------------------------------------------------------------


def test_script_env_and_data_reach_every_task_on_every_backend(tmp_path):
    tmp_path.chmod(0o755)  # pytest's are the host user's alone; as root the tasks run as uid 1000
    settings = Settings.from_env({}, {"SCRIPT": str(TUTORIAL), "WORKERS": "2", "DATA": str(tmp_path),
                                      "SCRIPT_ENV": "KERAS_HOME=/lab/data GREETING='hello there' X_Y.z=$HOME"})
    assert script_environment(settings) == {"KERAS_HOME": "/lab/data", "GREETING": "hello there", "X_Y.z": "$HOME",
                                            "TFLAB_DATA": "/lab/data"}
    override = compose.render_run(settings, cluster.build(settings))
    for task, service in override["services"].items():
        assert service["environment"]["GREETING"] == "hello there" and "TF_CONFIG" in service["environment"]
        assert service["environment"]["X_Y.z"] == "$$HOME"  # Compose reads it as written
        assert service["volumes"][-1] == f"{tmp_path}:/lab/data:ro"
    node = swarm_render.SwarmNode(node_id="n0de", engine="20.10.24", api=(1, 41))
    stack = swarm_render.render_stack(settings, cluster.build(settings), "i", tmp_path, node)
    for service in stack["services"].values():
        assert service["environment"]["TFLAB_DATA"] == "/lab/data" and "TF_CONFIG" in service["environment"]
        assert f"{tmp_path}:/lab/data:ro" in service["volumes"]
    assert script_environment(settings, str(tmp_path))["TFLAB_DATA"] == str(tmp_path)  # BACKEND=local


@pytest.mark.parametrize("given, expected", [
    ({"SCRIPT_ENV": "TF_CONFIG={}"}, "SCRIPT_ENV=TF_CONFIG={} is not allowed: TF_CONFIG is the lab's own"),
    ({"SCRIPT_ENV": "TFLAB_LOG=/x"}, "SCRIPT_ENV=TFLAB_LOG=/x is not allowed: TFLAB_LOG is the lab's own"),
    ({"SCRIPT_ENV": "PYTHONPATH=/x"}, "SCRIPT_ENV=PYTHONPATH=/x is not allowed: PYTHONPATH is the lab's own"),
    # Each once taken, then the launcher failed in every task with a line naming neither.
    ({"SCRIPT_ENV": "PATH=/x"}, "SCRIPT_ENV=PATH=/x is not allowed: PATH is the image's, how each task finds the "
                                "image's python, which starts the lab's launcher; expected other names than PATH, "
                                "PYTHONHOME, PYTHONPLATLIBDIR"),
    ({"SCRIPT_ENV": "A=1 PYTHONHOME=/usr"}, "SCRIPT_ENV=A=1 PYTHONHOME=/usr is not allowed: PYTHONHOME is the "
                                           "image's, where the image's python finds its own standard library"),
    # Once taken, and it won over KERAS without a word.
    ({"SCRIPT_ENV": "TF_USE_LEGACY_KERAS=0", "KERAS": "tf-keras"},
     "SCRIPT_ENV=TF_USE_LEGACY_KERAS=0 is not allowed: TF_USE_LEGACY_KERAS is KERAS's to set (1 for "
     "KERAS=tf-keras, 0 for keras3 and bundled); expected KERAS=tf-keras or KERAS=keras3 instead"),
    ({"SCRIPT_ENV": "TF_USE_LEGACY_KERAS=1"}, "SCRIPT_ENV=TF_USE_LEGACY_KERAS=1 is not allowed: TF_USE_LEGACY_KERAS "
                                             "is KERAS's to set"),
    ({"SCRIPT_ENV": "1ST=x"}, "SCRIPT_ENV=1ST=x is not allowed: '1ST=x' is not NAME=value with an environment"),
    ({"SCRIPT_ENV": "KERAS_HOME"}, "SCRIPT_ENV=KERAS_HOME is not allowed: 'KERAS_HOME' is not NAME=value"),
    ({"SCRIPT_ENV": "A=1 A=2"}, "SCRIPT_ENV=A=1 A=2 is not allowed: A is given twice"),
    ({"SCRIPT_ENV": "A='1"}, "SCRIPT_ENV=\"A='1\" is not allowed (No closing quotation)"),
    ({"DATA": "/no/such/folder"}, "DATA=/no/such/folder is not allowed: expected an existing folder"),
    ({"DATA": str(TUTORIAL)}, f"DATA={TUTORIAL} is not allowed: expected an existing folder"),
    ({"DATA": "a:b"}, "DATA=a:b is not allowed: expected a path without ':'"),
])
def test_a_bad_script_env_or_data_is_one_line(given, expected):
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({}, {"SCRIPT": str(TUTORIAL), **given})
    assert str(refused.value).startswith(expected) and "\n" not in str(refused.value)


def test_script_env_and_data_need_a_script():
    with pytest.raises(SettingsError, match=r"^SCRIPT_ENV=A=1 is not allowed without SCRIPT"):
        Settings.from_env({}, {"SCRIPT_ENV": "A=1"})
    with pytest.raises(SettingsError, match=r"^DATA=.* is not allowed without SCRIPT"):
        Settings.from_env({}, {"DATA": str(REPO)})


def test_a_variable_meant_for_the_script_is_pointed_to_script_env():
    with pytest.raises(SettingsError, match=r'^unknown setting KERAS_HOME; did you mean KERAS\?; for the script\'s '
                                            r'environment: SCRIPT_ENV="KERAS_HOME=\.\.\."$'):
        Settings.from_env({}, {"SCRIPT": str(TUTORIAL), "KERAS_HOME": "/x"})
    make = {"SCRIPT": str(TUTORIAL), "KERAS_HOME": "/x", "TFLAB_MAKE_VARIABLES": "SCRIPT KERAS_HOME"}
    with pytest.raises(SettingsError, match=r'^KERAS_HOME=/x is not a setting; did you mean KERAS\?; for '
                                            r'the script\'s environment: SCRIPT_ENV="KERAS_HOME=\.\.\."$'):
        Settings.from_env(make)


def test_a_replays_env_names_are_checked_by_the_same_pattern():
    from tflab.k8s import manifest

    assert manifest.ENV_VAR_NAME is grammars.ENV_VAR_NAME


# -- a download, explained --------------------------------------------------------------------


def test_an_outside_name_failing_is_a_download_never_a_peer():
    for said in ("urllib.error.URLError: <urlopen error [Errno -2] Name or service not known>",
                 "Exception: URL fetch failure on https://example.com/d.npz: None -- [Errno -2] Name or service "
                 "not known",
                 "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max "
                 "retries exceeded (Caused by NameResolutionError(\"Failed to resolve 'huggingface.co'\"))"):
        found = explain.explain(Evidence("worker-0", 1, error=said))
        assert found.signature == "no-route-out", said
        assert "NETWORK=bridge" in found.fix and "DATA=" in found.fix and found.retry is False
    bridged = explain.explain(Evidence("worker-0", 1, error="<urlopen error [Errno 101] Network is unreachable>",
                                       network="bridge"))
    assert "NETWORK=bridge lets the tasks out: this host's own network failed it" in bridged.what
    assert "NETWORK=bridge" not in bridged.fix
    for said in ("DNS resolution failed for worker-1:2222: C-ares status is not ARES_SUCCESS",
                 "socket.gaierror: [Errno -2] Name or service not known"):
        assert explain.explain(Evidence("worker-0", 1, error=said)).signature == "peer-name-unresolved", said


# -- the command the user ran ------------------------------------------------------------------


@pytest.mark.parametrize("make, program, expected", [
    (True, "/usr/bin/python3", "make logs RUN=x"),
    (False, "/home/me/.venv/bin/tflab", "tflab logs RUN=x"),
    (False, "/work/scripts/tflab/__main__.py", "python3 -m tflab logs RUN=x"),
])
def test_a_fix_names_the_command_the_user_ran(monkeypatch, make, program, expected):
    monkeypatch.delenv("TFLAB_MAKE_VARIABLES", raising=False)
    if make:
        monkeypatch.setenv("TFLAB_MAKE_VARIABLES", "")  # the Makefile exports it, empty or not
    monkeypatch.setattr(sys, "argv", [program, "up"])
    assert lab_command("logs RUN=x") == expected
    found = explain.explain(Evidence("worker-0", 1, error="KeyError: 'labels'"))
    assert f"`{expected.removesuffix(' RUN=x')}`" in found.fix


# -- the live output ---------------------------------------------------------------------------


def test_each_tasks_new_whole_lines_are_printed_with_its_name_escaped(tmp_path, capsys):
    settings = Settings(strategy="multiworker", workers=2, script=str(TUTORIAL))
    printer = progress.ScriptOutputPrinter(cluster.build(settings), tmp_path)
    printer.print_new()  # no output yet: nothing
    (tmp_path / "worker-0.out").write_text("Epoch 1/2\n16/16 - loss: 0.5\x1b[2J\nhalf a li")
    (tmp_path / "worker-1.out").write_text("Epoch 1/2\n")
    printer.print_new()
    with open(tmp_path / "worker-0.out", "a") as more:
        more.write("ne\n")
    printer.print_new()
    assert capsys.readouterr().out.splitlines() == [
        "[worker-0] Epoch 1/2", "[worker-0] 16/16 - loss: 0.5\\x1b[2J", "[worker-1] Epoch 1/2",
        "[worker-0] half a line"]
    # a line that names its task itself (the lab's own trainer in a TFJob replay) is not named twice
    with open(tmp_path / "worker-1.out", "a") as more:
        more.write("[worker-1] epoch 1/3 loss 22.6431\n[worker-0] not mine\n")
    printer.print_new()
    assert capsys.readouterr().out.splitlines() == ["[worker-1] epoch 1/3 loss 22.6431",
                                                    "[worker-1] [worker-0] not mine"]
