"""SCRIPT=...: a user's own script, its settings, its Compose services and the launcher that
watches it (run here on a tiny stand-in script, no TensorFlow needed)."""

import json
import os
import subprocess
import sys
import time

import pytest
from labtest.cli import REPO, lab_env
from tflab import cluster, compose
from tflab.schema import completeness, read_events
from tflab.settings import Settings, SettingsError

TUTORIAL = REPO / "examples/multiworker-tutorial/train.py"


def test_the_script_path_is_resolved_and_its_args_kept():
    settings = Settings.from_env({}, {"SCRIPT": os.path.relpath(TUTORIAL), "ARGS": "--epochs 2 --fail-with 'a b'"})
    assert settings.script == str(TUTORIAL) and settings.args == "--epochs 2 --fail-with 'a b'"


@pytest.mark.parametrize("overrides, expected", [
    ({"SCRIPT": "nowhere/train.py"}, "SCRIPT=nowhere/train.py is not allowed: expected the path of an existing"),
    ({"SCRIPT": str(REPO / "README.md")}, f"SCRIPT={REPO / 'README.md'} is not allowed"),
    ({"SCRIPT": str(TUTORIAL), "ARGS": "--name 'unclosed"}, "ARGS=\"--name 'unclosed\" is not allowed (No closing"),
    ({"SCRIPT": str(TUTORIAL), "STRATEGY": "parameter_server"},
     "SCRIPT is not allowed with STRATEGY=parameter_server: expected one of single, mirrored, multiworker"),
])
def test_bad_script_settings_are_refused(overrides, expected):
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({}, overrides)
    assert str(refused.value).startswith(expected)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("strategy, tasks", [("multiworker", ["worker-0", "worker-1"]), ("mirrored", ["mirrored"])])
def test_every_task_runs_the_launcher_on_the_mounted_script(strategy, tasks):
    settings = Settings(strategy=strategy, script=str(TUTORIAL), args="--epochs 2 --fail-with 'a b'")
    override = compose.render_run(settings, cluster.build(settings))
    assert sorted(override["services"]) == tasks
    for task in tasks:
        service = override["services"][task]
        assert service["volumes"] == [f"{TUTORIAL.parent}:/lab/script:ro"]
        assert service["working_dir"] == "/lab/script"
        assert service["command"] == ["python", "-m", "tflab.launch", "--", "python", "/lab/script/train.py",
                                      "--epochs", "2", "--fail-with", "a b"]
    if strategy == "multiworker":  # TF_CONFIG comes from cluster.py as for the lab's own trainer
        assert override["services"]["worker-1"]["environment"]["TF_CONFIG"] == json.dumps(
            cluster.tf_config_for(cluster.cluster_spec(settings), "worker-1"), separators=(",", ":"))


def launch(tmp_path, source: str, *args: str, strategy="multiworker"):
    """Runs tflab.launch on a stand-in script as a container would, in a run folder of its own."""
    settings = Settings(strategy=strategy, script=str(tmp_path / "script.py"))
    (tmp_path / "script.py").write_text(source)
    spec = cluster.cluster_spec(settings)
    (tmp_path / "config.json").write_text(json.dumps({"settings": settings.to_dict(), "cluster": spec}))
    env = lab_env(TFLAB_CONFIG=str(tmp_path / "config.json"), **cluster.tf_config_env(spec, "worker-1"))
    result = subprocess.run([sys.executable, "-m", "tflab.launch", "--", sys.executable, "script.py", *args],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    return result, read_events(tmp_path / "worker-1.jsonl")


def test_the_launcher_logs_start_and_end_and_passes_the_environment_on(tmp_path):
    source = ("import json, os, sys\n"
              "print(json.dumps([os.environ['TF_CONFIG'], os.environ['TFLAB_LOG'], os.environ['TFLAB_OUTPUT'], "
              "sys.argv[1:]]))\n")
    result, events = launch(tmp_path, source, "--epochs", "2")
    assert result.returncode == 0, result.stderr
    tf_config, log, output, argv = json.loads(result.stdout)
    assert json.loads(tf_config)["task"] == {"type": "worker", "index": 1}
    assert (log, output, argv) == (str(tmp_path / "worker-1.jsonl"), str(tmp_path), ["--epochs", "2"])
    assert completeness(events, epochs=0, role="script") == []
    start, end = events
    assert start["command"][-3:] == ["script.py", "--epochs", "2"]
    assert end["exit_code"] == 0 and end["total_seconds"] > 0 and end["peak_rss_bytes"] > 1_000_000


def test_a_failing_script_is_an_error_naming_its_code_and_last_words(tmp_path):
    source = "import sys\nprint('loading', file=sys.stderr)\nsys.exit('no data in /data/train')\n"
    result, events = launch(tmp_path, source)
    assert result.returncode == 1
    assert "no data in /data/train" in result.stderr  # the script's stderr still reaches the output
    assert [e["event"] for e in events] == ["start", "error"]
    assert events[1]["message"] == "script.py exited with code 1: no data in /data/train"


def test_a_script_killed_by_a_signal_exits_as_a_shell_would_say(tmp_path):
    result, events = launch(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    assert result.returncode == 128 + 9
    assert events[-1]["message"].startswith("script.py exited with code 137")


def test_the_script_packages_are_constrained_by_either_trainers_pins_without_extras():
    from tflab import images

    for variant in (images.variant(gpu=False), images.variant(gpu=True)):
        constraints = images.script_constraints(variant.requirements.read_text())
        assert "[" not in constraints  # pip: "Constraints cannot have extras"
        assert "tf-keras==2.21.0" in constraints.splitlines()
    gpu = images.script_constraints(images.variant(gpu=True).requirements.read_text()).splitlines()
    assert "tensorflow==2.21.0" in gpu


def test_args_need_a_script_and_chaos_refuses_one():
    with pytest.raises(SettingsError, match=r"^ARGS='--epochs 3' is not allowed without SCRIPT"):
        Settings.from_env({}, {"ARGS": "--epochs 3"})
    from tflab import chaos
    from tflab.errors import LabError

    with pytest.raises(LabError, match="is not allowed with make chaos and make soak"):
        chaos.check_backend(Settings(script=str(TUTORIAL)))


def test_stopping_a_local_script_task_stops_the_script_too(tmp_path):
    """BACKEND=local: the lab signals each task's whole process group, so the launcher's child,
    the user's script, never outlives a stopped task (and keeps its port from a restart)."""
    from tflab.local import LocalProcesses

    script = tmp_path / "script.py"
    script.write_text("import os, time\nopen(os.environ['TFLAB_OUTPUT'] + '/pid', 'w').write(str(os.getpid()))\n"
                      "time.sleep(120)\n")
    settings = Settings(strategy="single", backend="local", script=str(script))
    (tmp_path / "config.json").write_text(json.dumps({"settings": settings.to_dict(), "cluster": {}}))
    tasks = LocalProcesses(settings, tmp_path, cluster.build(settings), sys.executable)
    tasks.start()
    try:
        for _ in range(100):
            if (tmp_path / "pid").exists() and (tmp_path / "pid").read_text():
                break
            time.sleep(0.1)
        pid = int((tmp_path / "pid").read_text())
        tasks.stop(tasks.tasks)
        for _ in range(50):  # reaped by nobody (its parent is gone): poll for it to vanish
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the script (pid {pid}) outlived its stopped task")
    finally:
        tasks.close()
