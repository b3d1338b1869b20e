"""Hostile tasks on the real stack (issue 34): a pull request's script, run by a lab that is root in
CI, plants links to a root-only host file at every name it can reach, tries the lab's records, and
races the host's reads (tests/integration/scripts/hostile_task.py). Through up, summary, why, logs,
report, down, chaos (a GCE preemption: notices, chaos events, a restart) and the fixture's
reading of the run: no host file changes, none is printed, no
process is signalled, no traceback."""

import os

import pytest
from labtest.cli import REPO, lab_env, run_lab
from tflab import pytest_plugin

HOSTILE = REPO / "tests/integration/scripts/hostile_task.py"
SECRET = "root-only-host-secret-7c2e41"


def host_secret(root):
    """A root-only host file (0600) an attacker would aim at, and what must not change of it."""
    target = root / "host-secret"
    target.write_text(SECRET)
    target.chmod(0o600)
    return target, state(target)


def state(target):
    return target.read_text(), target.stat().st_mode, target.stat().st_mtime_ns


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory, trainer_image, compose_env):
    root = tmp_path_factory.mktemp("hostile")
    target, before = host_secret(root)
    runs = root / "runs"
    env = lab_env(**compose_env["v2"], RUNS_DIR=str(runs), RUN="hostile", STRATEGY="multiworker", WORKERS="2",
                  SCRIPT=str(HOSTILE), SCRIPT_ENV=f"HOSTILE_TARGET={target}", RESTARTS="0", TIMEOUT="300")
    up = run_lab("up", env=env)
    said = {"up": up}
    for command in ("summary", "why", "logs", "report"):
        said[command] = run_lab(command, env=env)
    said["down"] = run_lab("down", env={**env, "FORCE": "1"})
    return {"said": said, "target": target, "before": before, "run_dir": runs / "hostile"}


def test_no_host_file_changed_and_none_printed(hostile_run):
    target = hostile_run["target"]
    assert state(target) == hostile_run["before"]
    for command, result in hostile_run["said"].items():
        assert SECRET not in result.output, f"`tflab {command}` printed the host file"
        assert "Traceback" not in result.output, (command, result.output[-3000:])
        assert result.returncode in (0, 1, 2), (command, result.returncode, result.output[-2000:])
        if result.returncode == 2:
            assert len(result.stderr.splitlines()) == 1, (command, result.stderr)


def test_the_task_could_write_none_of_the_labs_records(hostile_run):
    logs = hostile_run["said"]["logs"].output
    assert "hostile: WROTE" not in logs
    assert logs.count("hostile: could not write /lab/config.json: Read-only file system") == 2  # each worker
    assert "planted links at" in logs
    run_dir = hostile_run["run_dir"]
    for name in ("config.json", "owner.json", "summary.json", "output.log"):
        assert (run_dir / name).is_file() and not (run_dir / name).is_symlink(), name


def test_the_run_reads_as_the_tasks_left_it_each_link_said_not_followed(hostile_run):
    up = hostile_run["said"]["up"].output
    assert "is a link, which the lab never follows" in up or "is not a regular file" in up, up[-3000:]
    lab = pytest_plugin.LabRun(returncode=0, output="", run_dir=hostile_run["run_dir"])
    assert [row.task for row in lab.summary.tasks] == ["worker-0", "worker-1"]
    assert SECRET not in lab.why()
    assert os.path.islink(lab.tasks_dir / "model.keras")  # left as the task made it: the lab writes nothing there


@pytest.fixture(scope="module")
def hostile_chaos(tmp_path_factory, trainer_image, compose_env):
    """The same task under `make chaos SCENARIO=preempt NOTICE=gce`: the lab posts a GCE notice in
    its metadata/ (read-only in the stand-in alone), appends chaos.jsonl and restarts every task,
    while the tasks keep planting links (HOSTILE_SECONDS) where those files once were."""
    root = tmp_path_factory.mktemp("hostile-chaos")
    target, before = host_secret(root)
    runs = root / "runs"
    env = lab_env(**compose_env["v2"], RUNS_DIR=str(runs), RUN="hostile-chaos", STRATEGY="multiworker", WORKERS="2",
                  SCRIPT=str(HOSTILE), SCRIPT_ENV=f"HOSTILE_TARGET={target} HOSTILE_SECONDS=20",
                  SCENARIO="preempt", NOTICE="gce", GRACE="2", TARGET="worker-1", AT="seconds:4", TIMEOUT="300")
    said = {"chaos": run_lab("chaos", env=env)}
    for command in ("summary", "why", "logs"):
        said[command] = run_lab(command, env=env)
    return {"said": said, "target": target, "before": before, "run_dir": runs / "hostile-chaos"}


def test_chaos_on_a_hostile_task_writes_only_the_labs_own_files(hostile_chaos):
    target = hostile_chaos["target"]
    assert state(target) == hostile_chaos["before"]
    for command, result in hostile_chaos["said"].items():
        assert SECRET not in result.output and "Traceback" not in result.output, (command, result.output[-3000:])
    run_dir = hostile_chaos["run_dir"]
    assert "notice" in hostile_chaos["said"]["chaos"].output, hostile_chaos["said"]["chaos"].output[-3000:]
    for name in ("chaos.jsonl", "summary.json", "output.log"):
        assert (run_dir / name).is_file() and not (run_dir / name).is_symlink(), name
    assert not (run_dir / "metadata" / "worker-1.json").exists()  # the notice taken back, in the lab's space
