"""SCRIPT=...: a user's own script, its settings, its Compose services and the launcher that
watches it (run here on a tiny stand-in script, no TensorFlow needed)."""

import json
import os
import stat
import subprocess
import sys
import time

import pytest
from labtest.cli import REPO, lab_env
from tflab.backends import compose, userscript
from tflab.backends.swarm import render as swarm_render
from tflab.core import cluster, processes
from tflab.core.errors import LabError
from tflab.core.schema import completeness, read_events
from tflab.core.settings import Settings, SettingsError

TUTORIAL = REPO / "examples/multiworker-tutorial/train.py"


def test_the_script_path_is_resolved_and_its_args_kept():
    settings = Settings.from_env({}, {"SCRIPT": os.path.relpath(TUTORIAL), "ARGS": "--epochs 2 --fail-with 'a b'"})
    assert settings.script == str(TUTORIAL) and settings.args == "--epochs 2 --fail-with 'a b'"


@pytest.mark.parametrize("overrides, expected", [
    ({"SCRIPT": "nowhere/train.py"}, "SCRIPT=nowhere/train.py is not allowed: expected the path of an existing"),
    ({"SCRIPT": str(REPO / "README.md")}, f"SCRIPT={REPO / 'README.md'} is not allowed"),
    ({"SCRIPT": str(TUTORIAL), "ARGS": "--name 'unclosed"}, "ARGS=\"--name 'unclosed\" is not allowed (No closing"),
])
def test_bad_script_settings_are_refused(overrides, expected):
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({}, overrides)
    assert str(refused.value).startswith(expected)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("strategy, tasks", [
    ("multiworker", ["worker-0", "worker-1"]), ("mirrored", ["mirrored"]),
    # As the training operator runs a TFJob: every replica, servers and the evaluator too, the same command.
    ("parameter_server", ["chief-0", "evaluator-0", "ps-0", "worker-0", "worker-1"])])
def test_every_task_runs_the_launcher_on_the_mounted_script(strategy, tasks):
    settings = Settings(strategy=strategy, script=str(TUTORIAL), args="--epochs 2 --fail-with 'a b'",
                        evaluator=int(strategy == "parameter_server"))
    override = compose.render_run(settings, cluster.build(settings))
    assert sorted(override["services"]) == tasks
    for task in tasks:
        service = override["services"][task]
        assert service["volumes"] == [f"{TUTORIAL.parent}:/lab/script:ro"]
        assert service["working_dir"] == "/lab/script"
        assert service["command"] == ["python", "-m", "tflab.launch", "--", "python", "-m", "tflab.trainer.inscript",
                                      "/lab/script/train.py",
                                      "--epochs", "2", "--fail-with", "a b"]
    if strategy == "multiworker":  # TF_CONFIG comes from cluster.py as for the lab's own trainer
        assert override["services"]["worker-1"]["environment"]["TF_CONFIG"] == json.dumps(
            cluster.tf_config_for(cluster.cluster_spec(settings), "worker-1"), separators=(",", ":"))
    if strategy == "parameter_server":  # each task its own type and index, the evaluator outside the cluster
        for task in tasks:
            tf_config = json.loads(override["services"][task]["environment"]["TF_CONFIG"])
            assert f"{tf_config['task']['type']}-{tf_config['task']['index']}" == task
            assert sorted(tf_config["cluster"]) == ["chief", "ps", "worker"]


def launch(tmp_path, source: str, *args: str, strategy="multiworker"):
    """Runs tflab.launch on a stand-in script as a container would, in a run folder of its own."""
    settings = Settings(strategy=strategy, script=str(tmp_path / "script.py"))
    (tmp_path / "script.py").write_text(source)
    spec = cluster.cluster_spec(settings)
    (tmp_path / "config.json").write_text(json.dumps({"settings": settings.to_dict(), "cluster": spec}))
    env = lab_env(TFLAB_CONFIG=str(tmp_path / "config.json"), **cluster.tf_config_env(spec, "worker-1"))
    result = subprocess.run([sys.executable, "-m", "tflab.launch", "--", sys.executable, "-m",
                             "tflab.trainer.inscript", "script.py", *args],
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


def test_args_need_a_script_and_chaos_takes_one():
    with pytest.raises(SettingsError, match=r"^ARGS='--epochs 3' is not allowed without SCRIPT"):
        Settings.from_env({}, {"ARGS": "--epochs 3"})
    from tflab.faults import registry

    registry.check_backend(Settings(script=str(TUTORIAL)))


def test_stopping_a_local_script_task_stops_the_script_too(tmp_path):
    """BACKEND=local: the lab signals each task's whole process group, so the launcher's child,
    the user's script, never outlives a stopped task (and keeps its port from a restart)."""
    from tflab.backends.local import LocalProcesses

    script = tmp_path / "script.py"
    script.write_text("import os, time\nopen(os.environ['TFLAB_OUTPUT'] + '/pid', 'w').write(str(os.getpid()))\n"
                      "time.sleep(120)\n")
    settings = Settings(strategy="single", backend="local", script=str(script))
    (tmp_path / "config.json").write_text(json.dumps({"settings": settings.to_dict(), "cluster": {}}))
    (tmp_path / "tasks").mkdir()  # the tasks' space, $TFLAB_OUTPUT
    tasks = LocalProcesses(settings, tmp_path, cluster.build(settings), sys.executable)
    tasks.start()
    written = tmp_path / "tasks" / "pid"
    try:
        for _ in range(100):
            if written.exists() and written.read_text():
                break
            time.sleep(0.1)
        pid = int(written.read_text())
        tasks.stop(tasks.tasks)
        for _ in range(50):  # ended: gone, or a zombie of this process, the lab's subreaper, until close() reaps it
            if processes.process_start(pid) in (None, "ended"):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the script (pid {pid}) outlived its stopped task")
    finally:
        tasks.close()


# SCRIPT in a folder the trainers cannot read: under root they run as uid 1000, and a folder of mode
# 0700 (pytest's tmp_path, a home folder) once failed inside every task with "Permission denied".
# A stranger's uid stands in for the trainers' here, so these hold whoever runs the tests.

def stranger():
    return (os.getuid() + 4242, os.getgid() + 4242)


@pytest.mark.parametrize("mode, owner, bits, expected", [
    (0o700, "them", 5, True), (0o700, "group", 5, False), (0o700, "other", 5, False),
    (0o750, "group", 5, True), (0o740, "group", 5, False), (0o705, "other", 5, True),
    (0o604, "other", 4, True), (0o640, "other", 4, False), (0o000, "them", 4, False), (0o000, "root", 4, True),
])
def test_a_folder_or_file_is_readable_by_its_mode_for_the_trainers_class(mode, owner, bits, expected):
    uid, gid = 1000, 1000
    status = os.stat_result((0o40000 | mode, 0, 0, 1, *{"them": (1000, 1000), "group": (7, 1000), "other": (7, 7),
                                                         "root": (0, 0)}[owner], 0, 0, 0, 0))
    assert userscript.readable(status, 0 if owner == "root" else uid, gid, bits) is expected


def script_folder(tmp_path, mode=0o700):
    folder = tmp_path / "mine"
    (folder / "data").mkdir(parents=True)
    (folder / "train.py").write_text("print('hi')\n")
    (folder / "data" / "x.csv").write_text("1,2\n")
    (folder / "secret").write_text("no one\n")
    (folder / "secret").chmod(0o000)
    (folder / "link").symlink_to("data/x.csv")
    os.mkfifo(folder / "pipe")  # a copy that opened it would wait forever
    folder.chmod(mode)
    return folder


def test_a_folder_the_trainers_cannot_read_is_copied_into_the_run_folder_and_mounted(tmp_path, monkeypatch,
                                                                                       capsys):
    monkeypatch.setattr(userscript, "container_user", stranger)
    folder, run_dir = script_folder(tmp_path), tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    settings = Settings(script=str(folder / "train.py"), runs_dir=str(tmp_path / "runs"))
    userscript.check(settings)
    copy = userscript.stage(settings, run_dir)
    assert copy == run_dir / "script"
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*")) == ["data", "data/x.csv", "link", "train.py"]
    assert (copy / "train.py").read_text() == "print('hi')\n" and os.readlink(copy / "link") == "data/x.csv"
    assert capsys.readouterr().out.splitlines() == [
        f"tflab: SCRIPT's folder {folder} is not readable by uid {stranger()[0]}, as whom the tasks run: mounting "
        f"its copy, {copy}/; left out: what uid {stranger()[0]} could not read in place either (secret (mode 0000))"]
    assert stat.S_IMODE(copy.stat().st_mode) == 0o700
    if os.getuid() == 0:  # only root can give files away
        assert {(p.lstat().st_uid, p.lstat().st_gid) for p in [copy, *copy.rglob("*")]} == {stranger()}
    service = userscript.script_service(settings, copy)
    assert service["volumes"] == [f"{copy}:/lab/script:ro"] and service["working_dir"] == "/lab/script"
    override = compose.render_run(settings, cluster.build(settings), script_folder=copy)
    assert [service["volumes"] for service in override["services"].values()] == [[f"{copy}:/lab/script:ro"]] * 2
    node = swarm_render.SwarmNode(node_id="n0de", engine="20.10.24", api=(1, 41))
    stack = swarm_render.render_stack(settings, cluster.build(settings), "i", run_dir, node, script_folder=copy)
    assert {service["volumes"][-1] for service in stack["services"].values()} == {f"{copy}:/lab/script:ro"}


def test_a_folder_the_trainers_can_read_is_mounted_where_it_is(tmp_path, monkeypatch):
    monkeypatch.setattr(userscript, "container_user", stranger)
    folder, run_dir = script_folder(tmp_path, mode=0o755), tmp_path / "r1"
    run_dir.mkdir()
    settings = Settings(script=str(folder / "train.py"))
    assert userscript.stage(settings, run_dir) is None and list(run_dir.iterdir()) == []
    assert userscript.script_service(settings)["volumes"] == [f"{folder}:/lab/script:ro"]


def test_the_runs_folder_inside_the_script_folder_is_not_copied(tmp_path, monkeypatch):
    monkeypatch.setattr(userscript, "container_user", stranger)
    folder = script_folder(tmp_path)
    run_dir = folder / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (folder / "runs" / "older").mkdir()
    copy = userscript.stage(Settings(script=str(folder / "train.py"), runs_dir=str(folder / "runs")), run_dir)
    assert not (copy / "runs").exists() and (copy / "train.py").exists()


@pytest.mark.parametrize("limit", ["COPY_LIMIT_FILES", "COPY_LIMIT_BYTES"])
def test_a_folder_too_big_to_copy_is_refused_in_one_line_before_anything_starts(limit, tmp_path, monkeypatch):
    monkeypatch.setattr(userscript, "container_user", stranger)
    monkeypatch.setattr(userscript, limit, 4 if limit == "COPY_LIMIT_FILES" else 2**20)
    folder = script_folder(tmp_path)
    for i in range(5):
        (folder / f"part-{i}.bin").write_bytes(b"\0" * 300_000)
    settings = Settings(script=str(folder / "train.py"), runs_dir=str(tmp_path / "runs"))
    with pytest.raises(LabError) as refused:
        userscript.check(settings)
    message = str(refused.value)
    assert message.startswith(f"SCRIPT={folder / 'train.py'} is not allowed: its folder {folder} (mode 0700) is not "
                              f"readable by uid {stranger()[0]}, as whom the tasks run, and it is too big to copy")
    assert message.endswith(f"expected a folder uid {stranger()[0]} can read: chmod -R o+rX {folder}, or the script "
                            "in a folder of its own") and "\n" not in message
    assert not (tmp_path / "runs").exists()


def test_an_unreadable_script_is_refused_in_one_line(tmp_path):
    """Root reads a mode-000 file; the tasks it runs as uid 1000 could not, not even in a copy."""
    script = tmp_path / "train.py"
    script.write_text("print('hi')\n")
    script.chmod(0o000)
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({}, {"SCRIPT": str(script)})
    reader = "no one but root" if os.getuid() == 0 else f"not you (uid {os.getuid()}), as whom the tasks run"
    assert str(refused.value) == (f"SCRIPT={script} is not allowed: {script} has mode 0000, readable by {reader}; "
                                  f"expected a script the tasks can read: chmod a+r {script}")
    script.chmod(0o400)  # its owner's alone: under root, its copy is the trainers'
    assert Settings.from_env({}, {"SCRIPT": str(script)}).script == str(script)


def test_a_copy_leaves_out_secrets_and_what_the_trainers_could_not_read_and_says_so(tmp_path, monkeypatch, capsys):
    """A root's script folder copied for uid 1000 once carried its root-only files along, made
    uid 1000's in the copy: a repository's history, .env, keys, a 0600 file."""
    monkeypatch.setattr(userscript, "container_user", stranger)
    folder, run_dir = script_folder(tmp_path), tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    (folder / "train.py").chmod(0o600)  # the script itself: named by the user, always taken
    (folder / ".git" / "objects").mkdir(parents=True)
    (folder / ".git" / "config").write_text("[credential]\n")
    (folder / "keys").mkdir()
    for name in (".env", ".env.local", "keys/id_ed25519", "keys/tls.pem", "keys/id_ed25519.pub", "model.py"):
        (folder / name).write_text("x\n")
    (folder / "mine.txt").write_text("root's alone\n")
    (folder / "mine.txt").chmod(0o600)
    (folder / "private").mkdir(mode=0o700)
    (folder / "private" / "notes.txt").write_text("x\n")
    settings = Settings(script=str(folder / "train.py"), runs_dir=str(tmp_path / "runs"))
    copy = userscript.stage(settings, run_dir)
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*")) == [
        "data", "data/x.csv", "keys", "keys/id_ed25519.pub", "link", "model.py", "train.py"]
    assert stat.S_IMODE((copy / "train.py").stat().st_mode) == 0o600
    uid = stranger()[0]
    assert capsys.readouterr().out.splitlines()[-1].endswith(
        f"; left out: secrets by their names (.git/, .env, .env.local, keys/id_ed25519, keys/tls.pem); what uid "
        f"{uid} could not read in place either (private/ (mode 0700), mine.txt (mode 0600), secret (mode 0000))")


def test_what_is_left_out_is_not_counted_against_the_copys_limits(tmp_path, monkeypatch):
    """A big .git once made a small script's folder too big to copy."""
    monkeypatch.setattr(userscript, "container_user", stranger)
    monkeypatch.setattr(userscript, "COPY_LIMIT_BYTES", 2**20)
    folder = script_folder(tmp_path)
    (folder / ".git").mkdir()
    (folder / ".git" / "pack").write_bytes(b"\0" * 2 * 2**20)
    found = userscript.copied(folder, script=folder / "train.py", user=stranger())
    assert found.secrets == [".git/"] and folder / ".git" / "pack" not in found.taken


def test_the_script_itself_is_copied_whatever_its_name_or_mode(tmp_path):
    folder = script_folder(tmp_path)
    (folder / "run.key").write_text("print('named like a key')\n")
    (folder / "run.key").chmod(0o600)
    (folder / "other.key").write_text("")
    found = userscript.copied(folder, script=folder / "run.key", user=stranger())
    assert folder / "run.key" in found.taken and found.secrets == ["other.key"]
