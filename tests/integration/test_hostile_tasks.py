"""Hostile tasks on the real stack (issue 34): a pull request's script, run by a lab that is root in
CI, plants links to a root-only host file at every name it can reach, tries the lab's records, and
races the host's reads (tests/integration/scripts/hostile_task.py). Through up, summary, why, logs,
report, down, chaos (a GCE preemption: notices, chaos events, a restart) and the fixture's
reading of the run: no host file changes, none is printed, no
process is signalled, no traceback."""

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]


def nobody_reaches(path) -> bool:
    """Whether an unprivileged host user (nobody) can even see `path` (the test runs as root)."""
    return subprocess.run([*NOBODY, "test", "-e", str(path)]).returncode == 0


def set_id_left(*roots) -> list[str]:
    """Everything under `roots` (no link followed) that has a set-ID bit, looked at as root."""
    found = []
    for root in roots:
        for folder, names, files in os.walk(root):
            for name in names + files:
                mode = os.lstat(os.path.join(folder, name)).st_mode
                if mode & (stat.S_ISUID | stat.S_ISGID) and not stat.S_ISLNK(mode):
                    found.append(os.path.join(folder, name))
    return found


@pytest.fixture(scope="module")
def open_folder():
    """A folder every host user may pass through (pytest's own tmp folders are root's 0700, where
    nobody could reach nothing anyway): what keeps them out of a run must be the lab's doing."""
    folder = Path(tempfile.mkdtemp(prefix="tflab-hostile-"))
    folder.chmod(0o755)
    control = folder / "control"
    control.write_text("")
    assert nobody_reaches(control)  # the check can say yes
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory, trainer_image, compose_env, open_folder):
    root = tmp_path_factory.mktemp("hostile")
    target, before = host_secret(root)
    runs = open_folder / "runs"
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


def test_no_set_id_program_a_task_planted_outlives_the_run_or_reaches_another_user(hostile_run):
    """Issue 41: the SCRIPT task, as uid 1000, left set-ID copies of the shell and set-group-ID
    folders in its tasks' space and working folder; once the run is handed back none has the bit,
    and an unprivileged host user cannot even see them (the run folder is 0700)."""
    run_dir = hostile_run["run_dir"]
    planted = [path for path in (run_dir / "tasks").rglob("*") if path.name.split("-")[0] in ("su", "sg", "sgdir")
               and not path.is_symlink() and "deep-" not in str(path)]
    assert len(planted) == 2 * 2 * 3, planted  # 2 workers x (space, work folder) x 3 names
    # Issue 56: each worker's 70-deep chain, made first, past the walk's bound (64): its bottom keeps
    # its bit and is named, and the walk went on to strip every other one
    deep = [str(Path(path).relative_to(run_dir)) for path in set_id_left(run_dir)]
    assert sorted(deep) == [f"tasks/deep-{task}/" + "/".join(f"d{level}" for level in range(70)) + f"/su-{task}"
                            for task in ("worker-0", "worker-1")], deep
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert not any(nobody_reaches(path) for path in planted + [run_dir / "tasks"])
    up = hostile_run["said"]["up"].output
    assert "stripped the set-ID bits from 12 files a task wrote" in up
    assert ("tflab: did not look for set-ID bits in tasks/deep-worker-" in up and "(not looked into: deeper than 64 "
            "folders below the top)" in up and "no other user of this host can reach the run folder (mode 700)" in up)


@pytest.fixture(scope="module")
def hostile_chaos(tmp_path_factory, trainer_image, compose_env, open_folder):
    """The same task under `make chaos SCENARIO=preempt NOTICE=gce`: the lab posts a GCE notice in
    its metadata/ (read-only in the stand-in alone), appends chaos.jsonl and restarts every task,
    while the tasks keep planting links (HOSTILE_SECONDS) where those files once were."""
    root = tmp_path_factory.mktemp("hostile-chaos")
    target, before = host_secret(root)
    runs = open_folder / "runs"
    env = lab_env(**compose_env["v2"], RUNS_DIR=str(runs), RUN="hostile-chaos", STRATEGY="multiworker", WORKERS="2",
                  SCRIPT=str(HOSTILE), SCRIPT_ENV=f"HOSTILE_TARGET={target} HOSTILE_SECONDS=20",
                  SCENARIO="preempt", NOTICE="gce", GRACE="2", TARGET="worker-1", AT="seconds:4", TIMEOUT="300",
                  VERDICT="off")  # no undisturbed twin run after it (faults/twin.py)
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
    # Each task's set-ID programs, planted again after the restart too: none left with its bit but
    # the two past the walk's depth bound (named), each 70 folders down its chain
    assert [path for path in set_id_left(run_dir) if "/deep-worker-" not in path] == []
    assert len(set_id_left(run_dir)) == 2 and not nobody_reaches(run_dir / "tasks")
    assert "stripped the set-ID bits from" in hostile_chaos["said"]["chaos"].output


# Issue 41's replay: each replica root (the chief by runAsUser: 0 on the lab's own image, whose
# user is 1000; the worker by its image's user, the lab's base image) plants set-ID programs in all
# it can write: its hooks folder, the run's claim volume, a CLAIMS host folder; then waits for the
# test's word (a file in the claim), so the test looks at them mid-run with no clock involved.
PLANT = """
t=$(hostname)
for d in /opt/tflab-hooks/log /vol /claim; do
  cp /bin/sh $d/su-$t && chmod 4755 $d/su-$t
  cp /bin/sh $d/sg-$t && chmod 2755 $d/sg-$t
  mkdir $d/sgdir-$t && chmod 2777 $d/sgdir-$t
done
touch /claim/planted-$t
n=0
while [ ! -e /claim/go ] && [ $n -lt 3000 ]; do sleep 0.2; n=$((n+1)); done
"""


def replica(image: str, security: dict) -> dict:
    return {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {
        **({"securityContext": security} if security else {}),
        "containers": [{"name": "tensorflow", "image": image, "command": ["/bin/sh", "-c", PLANT],
                        "volumeMounts": [{"name": "data", "mountPath": "/vol"},
                                         {"name": "out", "mountPath": "/claim"}]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "out", "persistentVolumeClaim": {"claimName": "out"}}]}}}


@pytest.fixture(scope="module")
def setid_replay(trainer_image, compose_env, open_folder):
    base_image = "tflab-base:bookworm"
    if subprocess.run(["docker", "image", "inspect", base_image], capture_output=True).returncode != 0:
        pytest.skip(f"{base_image} is not on this engine (the trainer was built from another base)")
    manifest = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "setid"},
                "spec": {"runPolicy": {"activeDeadlineSeconds": 900}, "tfReplicaSpecs": {
                    "Chief": replica(trainer_image, {"runAsUser": 0}), "Worker": replica(base_image, {})}}}
    path = open_folder / "setid-tfjob.yaml"
    path.write_text(json.dumps(manifest))  # JSON is YAML
    claims = open_folder / "claims"  # a writable claim must lie in a folder only the lab's user enters
    (claims / "out").mkdir(parents=True)
    claims.chmod(0o700)
    (claims / "out").chmod(0o777)
    runs = open_folder / "runs"
    env = lab_env(**compose_env["v2"], RUNS_DIR=str(runs), RUN="setid-replay", TFJOB=str(path),
                  CLAIMS=f"out={claims / 'out'}")
    lab = subprocess.Popen([sys.executable, "-m", "tflab", "up"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    run_dir = runs / "setid-replay"
    marks = [claims / "out" / f"planted-setid-{task}" for task in ("chief-0", "worker-0")]
    while lab.poll() is None and not all(mark.exists() for mark in marks):
        time.sleep(0.5)  # bounded by the replicas' own pace: they plant, then wait for the word
    planted = sorted([*(run_dir / "volumes").rglob("s*-setid-*"), *(claims / "out").glob("s*-setid-*")])
    mid_run = {"set_id": set_id_left(run_dir, claims), "nobody": [p for p in planted if nobody_reaches(p)]}
    (claims / "out" / "go").touch()
    output, _ = lab.communicate(timeout=900)
    return {"output": output, "code": lab.returncode, "run_dir": run_dir, "claims": claims, "planted": planted,
            "mid_run": mid_run}


def test_root_replicas_set_id_programs_reach_no_other_user_mid_run_and_lose_their_bits(setid_replay):
    output = setid_replay["output"]
    assert setid_replay["code"] == 0, output[-3000:]
    planted = setid_replay["planted"]
    # 2 replicas x (hooks folder, claim volume, CLAIMS folder) x (su, sg, sgdir)
    assert len(planted) == 18, planted
    assert all(os.lstat(path).st_uid == 0 for path in planted)
    # mid-run: the bits were there (root wrote them), and yet nobody could see a single one
    assert len(setid_replay["mid_run"]["set_id"]) == 18 and setid_replay["mid_run"]["nobody"] == []
    # after: no bit anywhere, the files where the replicas left them, and still out of nobody's reach
    assert set_id_left(setid_replay["run_dir"], setid_replay["claims"]) == []
    assert all(os.path.lexists(path) for path in planted)
    assert not any(nobody_reaches(path) for path in planted)
    assert "tflab: chief-0 (runAsUser: 0) and worker-0 (its image's user) run as root: they can write their hooks " \
           "folders and the claim volumes data in the run folder, CLAIMS out" in output
    assert "tflab: stripped the set-ID bits from 18 files a task wrote: " in output
    assert "Traceback" not in output


def test_a_lab_that_is_not_root_strips_a_root_replicas_file_through_a_container(open_folder):
    """A laptop's lab runs as its user, in the docker group: fchmod of a root replica's set-user-ID
    file fails (EPERM), so supervisor/setid.py's throwaway container takes the bit away."""
    import grp

    try:
        docker_gid = grp.getgrnam("docker").gr_gid
    except KeyError:
        pytest.skip("no docker group here to run a non-root lab in")
    run_dir = open_folder / "not-root-lab"
    (run_dir / "tasks").mkdir(parents=True)
    planted = run_dir / "tasks" / "rootsh"
    shutil.copyfile("/bin/sh", planted)
    planted.chmod(0o4755)  # root's, as a root replica leaves it
    for folder in (run_dir, run_dir / "tasks"):
        os.chown(folder, 1000, 1000)
    run_dir.chmod(0o700)
    if subprocess.run(["docker", "image", "inspect", "tflab-base:bookworm"], capture_output=True).returncode != 0:
        pytest.skip("tflab-base:bookworm is not on this engine")
    as_lab = ["setpriv", "--reuid=1000", "--regid=1000", f"--groups={docker_gid}", "--", sys.executable, "-c"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "scripts"), "HOME": "/tmp"}
    if subprocess.run([*as_lab, "import tflab.supervisor.setid"], env=env, capture_output=True).returncode != 0:
        pytest.skip("uid 1000 cannot read this checkout or its Python")
    program = ("from pathlib import Path; from tflab.supervisor import setid; "
               f"print(setid.strip_run(Path({str(run_dir)!r}), image='tflab-base:bookworm')[0])")
    result = subprocess.run([*as_lab, program], capture_output=True, text=True, env=env)
    expected = "stripped the set-ID bit from 1 file a task wrote: tasks/rootsh (uid 0, was 4755)"
    assert result.stdout.strip() == expected, result.stdout + result.stderr
    assert stat.S_IMODE(planted.stat().st_mode) == 0o755 and planted.stat().st_uid == 0


DAEMON = REPO / "tests/integration/scripts/daemon_child.py"


def test_a_local_scripts_double_forked_child_does_not_outlive_the_run(tmp_path):
    """Issue 56: under BACKEND=local, a script's daemon (setsid, a second fork) left the task's
    process group, outlived the run as the lab's user (root) and wrote a root 4755 file after the
    set-ID check; the run said ok and nothing said the script ran as root."""
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "late-setuid"
    env = lab_env(RUNS_DIR=str(tmp_path / "runs"), RUN="daemon", BACKEND="local", STRATEGY="single",
                  SCRIPT=str(DAEMON), SCRIPT_ENV=f"DAEMON_TARGET={target} DAEMON_SLEEP=4", TIMEOUT="120")
    up = run_lab("up", env=env)
    assert up.returncode == 0, up.output[-3000:]
    assert "daemon started" in up.output
    daemon = int((outside / "late-setuid.pid").read_text())
    assert not os.path.exists(f"/proc/{daemon}"), "the script's daemon outlived the run"
    assert f"killed 1 process the tasks had left running on their own (setsid, a double fork): {daemon} (" \
        in up.output, up.output[-3000:]
    if os.geteuid() == 0:
        assert "BACKEND=local runs the script as the lab's user, root here" in up.output.splitlines()[2]
    time.sleep(6)  # past the daemon's 4 s: had it lived, it would have written by now
    assert not target.exists()
