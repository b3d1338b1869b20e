"""The tflab_cluster fixture's arguments: a value of the wrong type is one line naming it (before
any lab starts), and run= and runs_dir= are honoured, never silently replaced. The lab itself is
replaced by a stand-in that records what it was started with."""

import json

import pytest
from tflab import pytest_plugin
from tflab.core.errors import LabError


class StandIn:
    """subprocess.Popen for `python -m tflab up`: records its environment, exits 0 at once."""

    started: list = []

    def __init__(self, command, env, **kwargs):
        StandIn.started.append(env)
        self.returncode = 0

    def communicate(self, timeout=None):
        return "", ""


@pytest.fixture
def tflab_cluster(tmp_path):
    """What the plugin's fixture hands a test (pytest_plugin.starter)."""
    return pytest_plugin.starter(tmp_path)


@pytest.fixture
def lab(monkeypatch):
    StandIn.started = []
    monkeypatch.setattr(pytest_plugin.subprocess, "Popen", StandIn)
    return StandIn


@pytest.mark.parametrize("arguments, expected", [
    ({"epochs": None}, "tflab_cluster: epochs=None is not allowed: a NoneType; a lab setting takes a str, int, "
                       "float, bool (1/0) or path, and script_env a dict too (leave epochs out for its default)"),
    ({"workers": [2]}, "tflab_cluster: workers=[2] is not allowed: a list;"),
    ({"args": b"--x"}, "tflab_cluster: args=b'--x' is not allowed: a bytes;"),
    ({"args": "a\0b"}, "tflab_cluster: args='a\\x00b' is not allowed: a NUL character;"),
    ({"settings": {"a": 1}}, "tflab_cluster: unknown lab setting 'settings'; allowed: "),
    ({"WORKERS": 2}, "tflab_cluster: unknown lab setting 'WORKERS' (settings are lower case here); allowed: "),
    ({"run": 3}, "tflab_cluster: run=3 is not allowed: a run id is a str"),
    ({"run": ""}, "tflab_cluster: run='' is not allowed: a run id is a str"),
    ({"runs_dir": 7}, "tflab_cluster: runs_dir=7 is not allowed: a int; expected a folder as a str or path"),
    # Each once a traceback (ValueError: embedded null byte) or a value the lab took as the text "None".
    ({"runs_dir": "/tmp/a\0b"}, "tflab_cluster: runs_dir='/tmp/a\\x00b' is not allowed: a NUL character, which no "
                                "path holds; expected a folder as a str or path"),
    ({"run": "r\0"}, "tflab_cluster: run='r\\x00' is not allowed: a NUL character; a run id is "),
    ({"script_env": {"KERAS_HOME": None}}, "tflab_cluster: script_env={'KERAS_HOME': None} is not allowed: the value "
                                           "of 'KERAS_HOME' is a NoneType; script_env takes a dict of str names to "
                                           "str, int, float or path values"),
    ({"script_env": {"A": ["x"]}}, "tflab_cluster: script_env={'A': ['x']} is not allowed: the value of 'A' is a list"),
    ({"script_env": {"A": "x\0y"}}, "tflab_cluster: script_env={'A': 'x\\x00y'} is not allowed: 'A' holds a NUL "
                                    "character"),
    ({"script_env": {1: "x"}}, "tflab_cluster: script_env={1: 'x'} is not allowed: its name 1 is a int"),
])
def test_a_wrong_argument_is_one_line_and_starts_nothing(arguments, expected, tflab_cluster, lab):
    with pytest.raises(pytest.fail.Exception) as failed:
        tflab_cluster(**arguments)
    assert str(failed.value).startswith(expected), str(failed.value)
    assert "\n" not in str(failed.value) and lab.started == []


def test_run_and_runs_dir_are_honoured(tflab_cluster, lab, tmp_path):
    run = tflab_cluster(run="mine", runs_dir=tmp_path / "elsewhere", workers=2, chief=True)
    assert run.run_dir == tmp_path / "elsewhere" / "mine"
    env = lab.started[0]
    assert (env["RUN"], env["RUNS_DIR"]) == ("mine", str(tmp_path / "elsewhere"))
    assert (env["WORKERS"], env["CHIEF"]) == ("2", "1")


def test_a_fresh_id_otherwise_and_a_run_that_exists_is_refused(tflab_cluster, lab, tmp_path):
    first = tflab_cluster()
    assert first.run_dir.parent == tmp_path / "runs" and first.run_dir.name.startswith("cluster-")
    (tmp_path / "mine" / "taken").mkdir(parents=True)
    with pytest.raises(pytest.fail.Exception, match=r"tflab_cluster: run='taken' exists already in .*mine; a run's "
                                                    "outputs are never overwritten"):
        tflab_cluster(run="taken", runs_dir=str(tmp_path / "mine"))
    assert len(lab.started) == 1


def test_a_lab_run_reads_a_foreign_folder_in_one_line(tmp_path):
    run_dir = tmp_path / "r"
    run_dir.mkdir()
    missing = pytest_plugin.LabRun(1, "the lab's output", run_dir)
    assert missing.ok is False
    with pytest.raises(LabError, match="run r has no summary.json: the lab ended"):
        missing.summary
    assert missing.why().endswith("the lab's output")
    (run_dir / "summary.json").write_text('{"tasks": [{"task": "w"}], "ok": "yes"}')
    with pytest.raises(LabError, match=r"summary.json is not a summary the lab wrote: tasks\[0\].status is missing"):
        pytest_plugin.LabRun(0, "", run_dir).summary
    (run_dir / "w.jsonl").write_text("hi\n" + json.dumps({"event": "epoch", "task": "w", "time": 1}) + "\n")
    assert pytest_plugin.LabRun(0, "", run_dir).of("w", "epoch") == []  # no loss: not an epoch the lab wrote


def test_audit_is_strict_unless_given(tflab_cluster, lab):
    tflab_cluster(workers=2)
    tflab_cluster(workers=2, audit="on")
    assert [env["AUDIT"] for env in lab.started] == ["strict", "on"]


@pytest.mark.parametrize("setting", ["tfjob", "trainjob"])
def test_a_replay_gets_no_audit_it_never_named(tflab_cluster, lab, tmp_path, setting):
    """The lab refuses AUDIT with TFJOB= and TRAINJOB= (the job's containers train as they say):
    the fixture's own AUDIT=strict default made every replay a refusal about AUDIT."""
    tflab_cluster(**{setting: tmp_path / "job.yaml"})
    assert "AUDIT" not in lab.started[0] and lab.started[0][setting.upper()] == str(tmp_path / "job.yaml")
