"""The trainer and the script launcher read config.json with the host's own checks: a bad one is an
`error` event naming the field in the task's JSONL, exit status 2, and no traceback."""

import json
import subprocess
import sys

import pytest
from labtest.cli import lab_env
from tflab.core import cluster
from tflab.core.schema import read_events
from tflab.core.settings import Settings

GOOD = Settings().to_dict()
BAD_CONFIGS = [
    ({"settings": {**GOOD, "strategy": "bogus"}}, "config.json: STRATEGY=bogus is not allowed: expected one of single"),
    ({"settings": {**GOOD, "epochs": -5}}, "EPOCHS=-5 is not allowed: expected an integer from 1 to 10000"),
    ({"settings": {**GOOD, "workers": 0}}, "WORKERS=0 is not allowed: expected an integer from 1 to 2147483647"),
    ({"settings": {**GOOD, "global_batch": 7}}, "GLOBAL_BATCH=7 is not divisible by the 2 replicas"),
    ({"settings": {**GOOD, "workers": "2"}}, 'WORKERS="2" is not allowed'),
    ({"settings": [1, 2]}, "settings is [1, 2], not an object"),
    ({"settings": None}, "settings is null, not an object"),
    ("{not json", "is not JSON: Expecting property name"),
    ("[]", "holds list, not the object the lab writes"),
    ("\xff", "is not JSON"),
]


def write_config(tmp_path, config) -> str:
    if isinstance(config, dict):
        config = json.dumps({"settings": GOOD, "cluster": cluster.cluster_spec(Settings()), **config})
    path = tmp_path / "config.json"
    path.write_bytes(config.encode("latin-1") if config == "\xff" else config.encode())
    return str(path)


def check(result, events, expected: str, config: str):
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert [e["event"] for e in events] == ["error"]
    message = events[0]["message"]
    assert message.startswith(config) and expected in message, message
    assert "\n" not in message
    assert result.stderr.strip().splitlines()[-1] == f"[worker-0] {message}"


@pytest.mark.parametrize("config, expected", BAD_CONFIGS)
def test_the_script_launcher_refuses_a_bad_config(tmp_path, config, expected):
    path = write_config(tmp_path, config)
    result = subprocess.run([sys.executable, "-m", "tflab.launch", "--", sys.executable, "-c", "pass"],
                            env=lab_env(TFLAB_CONFIG=path, TFLAB_TASK="worker-0"),
                            capture_output=True, text=True, timeout=60)
    check(result, read_events(tmp_path / "worker-0.jsonl"), expected, path)


@pytest.mark.tensorflow
def test_the_trainer_refuses_a_bad_config_before_training(tmp_path):
    """All the cases in one process: TensorFlow's import is the slow part."""
    program = """import json, sys
from tflab.trainer import train
print(json.dumps([train.main(["--config", path, "--task", "worker-0"]) for path in sys.argv[1:]]))
"""
    paths = []
    for index, (config, _) in enumerate(BAD_CONFIGS):
        (tmp_path / str(index)).mkdir()
        paths.append(write_config(tmp_path / str(index), config))
    result = subprocess.run([sys.executable, "-c", program, *paths], env=lab_env(),
                            capture_output=True, text=True, timeout=300)
    assert json.loads(result.stdout.splitlines()[-1]) == [2] * len(BAD_CONFIGS), result.stderr
    assert "Traceback" not in result.stderr
    for index, (_, expected) in enumerate(BAD_CONFIGS):
        events = read_events(tmp_path / str(index) / "worker-0.jsonl")
        assert [e["event"] for e in events] == ["error"]
        assert events[0]["message"].startswith(paths[index]) and expected in events[0]["message"]
        assert f"[worker-0] {events[0]['message']}\n" in result.stderr


@pytest.mark.tensorflow
def test_the_trainer_takes_config_jsons_cluster_and_builds_none(tmp_path, monkeypatch):
    """The host builds the cluster once and config.json records it; the trainer reads it back
    (at the addresses written there, here the local backend's ports) and builds none itself."""
    from tflab.core import runfolder
    from tflab.core.schema import EventLog
    from tflab.trainer import train

    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    host = cluster.build(Settings(), cluster.local_addresses([5001, 5002]))
    runfolder.write_config(run_dir, Settings(), host)
    config = runfolder.read_config(run_dir)
    settings = Settings.from_dict(config["settings"])
    monkeypatch.setattr(cluster, "build", lambda *args, **kwargs: pytest.fail("the trainer built a cluster"))
    monkeypatch.setenv("TF_CONFIG", host.tf_config_env("worker-1")["TF_CONFIG"])
    trained = []
    monkeypatch.setattr(train, "train", lambda settings, task, the_cluster, *rest: trained.append(the_cluster))
    log = EventLog(run_dir / "worker-1.jsonl", "worker-1")
    train.run_task(settings, "worker-1", config["cluster"], run_dir, log)
    log.close()
    assert trained == [host]
    assert trained[0].spec == {"worker": ["localhost:5001", "localhost:5002"]}
