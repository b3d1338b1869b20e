"""Runs always end clean: a signal to the lab (what `timeout`, a CI cancel, systemd or Ctrl-C send),
the fixture's own timeout, or a container removed from outside each end the run with nothing left
on the engine and a summary that says what happened; two labs share one engine untouched."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labtest.cli import REPO, lab_env
from tflab.core.runfolder import task_space
from tflab.core.schema import read_events
from tflab.engine import labels
from tflab.pytest_plugin import run_lab as fixture_run

# A run long enough to be caught in the middle: about 30 s of epochs after a ready of 5-10 s.
LONG = {"EPOCHS": "200", "EXAMPLES": "1024", "RESTARTS": "0"}
CLEANUP_BOUND = 15  # seconds from the signal to no container left: the bound (measured: about 3 s)


def start_lab(runs: Path, run: str, *command: str, **settings: str) -> subprocess.Popen:
    env = lab_env(RUNS_DIR=str(runs), RUN=run, **{**LONG, **settings})
    return subprocess.Popen([sys.executable, "-m", "tflab", *(command or ["up"])], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_training(run_dir: Path, lab: subprocess.Popen, task: str = "worker-0") -> None:
    """Until the task has logged an epoch: its container runs and its peers are there. As long as
    the lab runs, which its TIMEOUT bounds: a fixed 120 s was under two `import tensorflow` at
    load 12 on 2 cores (90 s each), where the run itself would have trained."""
    while lab.poll() is None:
        if any(r.get("event") == "epoch" for r in read_events(task_space(run_dir) / f"{task}.jsonl")):
            return
        time.sleep(0.5)
    pytest.fail(f"the lab ended (exit {lab.returncode}) before {task} of {run_dir} logged an epoch")


def engine_objects(run_dir: Path) -> list[str]:
    """Containers and networks on the engine that belong to the run (or to runs under it)."""
    left = []
    for kind in (["ps", "--all"], ["network", "ls"]):
        found = subprocess.run(["docker", *kind, "--filter", f"label={labels.RUN_DIR}", "--format",
                                f'{{{{.Label "{labels.RUN_DIR}"}}}}'], capture_output=True, text=True, check=True)
        left += [value for value in found.stdout.split() if labels.within(value, run_dir)]
    return left


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda n: n.name)
def test_a_signal_removes_the_run_and_writes_its_summary(engine, trainer_image, tmp_path, number):
    lab = start_lab(tmp_path, "sig")
    try:
        wait_for_training(tmp_path / "sig", lab)
        assert engine_objects(tmp_path / "sig")
        lab.send_signal(number)
        sent = time.monotonic()
        output, _ = lab.communicate(timeout=CLEANUP_BOUND)
        seconds = time.monotonic() - sent
    finally:
        if lab.poll() is None:
            lab.kill()
    assert lab.returncode == 128 + number, output
    assert engine_objects(tmp_path / "sig") == [], output
    summary = json.loads((tmp_path / "sig" / "summary.json").read_text())
    assert (summary["outcome"], summary["ok"]) == ("interrupted", False)
    assert f"interrupted by {number.name}: stopping every task" in output
    print(f"{number.name}: {seconds:.1f} s from the signal to the lab's exit, nothing left")


def test_sigterm_stops_a_compare_and_runs_nothing_after(engine, trainer_image, tmp_path):
    lab = start_lab(tmp_path, "cmp", "compare", COMPARE="multiworker-2 single")
    try:
        wait_for_training(tmp_path / "cmp" / "multiworker-2", lab)
        lab.send_signal(signal.SIGTERM)
        output, _ = lab.communicate(timeout=CLEANUP_BOUND)
    finally:
        if lab.poll() is None:
            lab.kill()
    assert lab.returncode == 128 + signal.SIGTERM, output
    assert engine_objects(tmp_path / "cmp") == []
    summary = json.loads((tmp_path / "cmp" / "multiworker-2" / "summary.json").read_text())
    assert summary["outcome"] == "interrupted"
    assert not (tmp_path / "cmp" / "single").exists(), "the compare went on after SIGTERM"


def test_the_fixture_stops_a_run_that_overruns_its_timeout(engine, trainer_image, tmp_path):
    started = time.monotonic()
    run = fixture_run(tmp_path, "overrun", {"epochs": 200, "examples": 1024, "restarts": 0}, timeout=20)
    assert not run.ok and run.returncode == 128 + signal.SIGTERM, run.why()
    assert run.summary["outcome"] == "interrupted"
    assert "the lab overran 20 s and was stopped with SIGTERM" in run.output
    assert engine_objects(tmp_path / "overrun") == []
    print(f"the fixture's timeout run ended in {time.monotonic() - started:.1f} s")


def test_a_container_removed_from_outside_ends_the_run_naming_it(engine, trainer_image, tmp_path):
    lab = start_lab(tmp_path, "gone", RESTARTS="2")
    try:
        wait_for_training(tmp_path / "gone", lab)
        project = labels.project_name(tmp_path / "gone")
        victim = subprocess.run(["docker", "ps", "--quiet", "--filter", f"label=com.docker.compose.project={project}",
                                 "--filter", "label=com.docker.compose.service=worker-1"],
                                capture_output=True, text=True, check=True).stdout.split()
        subprocess.run(["docker", "rm", "--force", *victim], check=True, capture_output=True)
        removed = time.monotonic()
        output, _ = lab.communicate(timeout=60)
        seconds = time.monotonic() - removed
    finally:
        if lab.poll() is None:
            lab.kill()
    assert lab.returncode == 1, output
    assert "worker-1 vanished: its container or service was removed from outside the lab" in output
    assert "restarting" not in output.replace("not restarting", ""), "the lab restarted a cluster it had lost"
    summary = json.loads((tmp_path / "gone" / "summary.json").read_text())
    assert not summary["ok"]
    assert engine_objects(tmp_path / "gone") == []
    print(f"a vanished container ended the run {seconds:.1f} s after its removal")


def test_two_compares_at_once_on_one_engine_do_not_touch_each_other(engine, trainer_image, tmp_path):
    """Both compares name their sub-runs single and multiworker-2; before runs were scoped, their
    Compose projects collided."""
    settings = {"COMPARE": "single multiworker-2", "EPOCHS": "2", "EXAMPLES": "1024"}
    labs = [start_lab(tmp_path / name, "cmp", "compare", **settings) for name in ("a", "b")]
    outputs = [lab.communicate(timeout=600)[0] for lab in labs]
    for lab, output in zip(labs, outputs):
        assert lab.returncode == 0, output
    losses = []
    for name in ("a", "b"):
        for entry in ("single", "multiworker-2"):
            summary = json.loads((tmp_path / name / "cmp" / entry / "summary.json").read_text())
            assert summary["ok"], (name, entry)
            losses.append((entry, [task["final_loss"] for task in summary["tasks"]]))
        assert engine_objects(tmp_path / name) == []
    assert losses[:2] == losses[2:], "the same settings trained to different losses side by side"


# ---- One run id, one owner: claims, `down`, make's signals, SIGKILL, a full disk, a long log ----

REAP_BOUND = 30  # seconds from SIGKILL of the lab's whole process group to nothing of its run left


def finish(lab: subprocess.Popen, timeout: float) -> str:
    try:
        return lab.communicate(timeout=timeout)[0]
    finally:
        if lab.poll() is None:
            lab.kill()
            lab.wait()


def test_a_second_up_of_the_same_run_is_refused_and_leaves_the_first_alone(engine, trainer_image, tmp_path):
    """Two `up RUN=same` 0.1 s apart: both pass the "already exists" check, one claims the folder
    (either may be first there), the other is refused in one line and must not touch the
    claimant's containers or files."""
    labs = [start_lab(tmp_path, "same", EPOCHS="3")]
    time.sleep(0.1)
    labs.append(start_lab(tmp_path, "same", EPOCHS="3"))
    outputs = [finish(lab, 300) for lab in labs]
    refused = [i for i, lab in enumerate(labs) if lab.returncode == 2]
    assert len(refused) == 1, outputs
    loser, winner = refused[0], 1 - refused[0]
    assert outputs[loser].count("\n") == 1 and "Traceback" not in outputs[loser], outputs[loser]
    assert outputs[loser].startswith("tflab: RUN=same already exists"), outputs[loser]
    assert labs[winner].returncode == 0, outputs[winner]
    summary = json.loads((tmp_path / "same" / "summary.json").read_text())
    assert summary["outcome"] == "ok" and "removed from outside the lab" not in outputs[winner]
    assert "worker-0 | " in (tmp_path / "same" / "output.log").read_text(), "the claimant's output.log was replaced"
    assert json.loads((tmp_path / "same" / "owner.json").read_text())["pid"] == labs[winner].pid
    assert engine_objects(tmp_path / "same") == []
    print(f"lab {winner + 1} of 2 claimed the run; the other was refused")


def test_down_leaves_a_live_run_alone_and_force_ends_it_as_interrupted(engine, trainer_image, tmp_path):
    lab = start_lab(tmp_path, "live")
    try:
        wait_for_training(tmp_path / "live", lab)
        down = subprocess.run([sys.executable, "-m", "tflab", "down"], cwd=REPO, env=lab_env(RUNS_DIR=str(tmp_path)),
                              capture_output=True, text=True, timeout=120)
        assert down.returncode == 0, down.stdout + down.stderr
        assert down.stdout == (f"tflab: run live is still running (pid {lab.pid}); leaving it: "
                               "`python3 -m tflab down RUN=live FORCE=1` ends it\n")  # as it was run
        time.sleep(2)
        assert lab.poll() is None and engine_objects(tmp_path / "live"), "down ended a live run"
        forced = subprocess.run([sys.executable, "-m", "tflab", "down"], cwd=REPO, timeout=120, capture_output=True,
                                env=lab_env(RUNS_DIR=str(tmp_path), RUN="live", FORCE="1"), text=True)
        output = finish(lab, CLEANUP_BOUND)
    finally:
        if lab.poll() is None:
            lab.kill()
    assert forced.returncode == 0 and "(run live, ended by tflab down)" in forced.stdout, forced.stdout + forced.stderr
    assert "tflab: ended by tflab down: stopping every task" in output, output
    assert "removed from outside the lab" not in output
    summary = json.loads((tmp_path / "live" / "summary.json").read_text())
    assert (summary["outcome"], summary["ok"]) == ("interrupted", False)
    assert engine_objects(tmp_path / "live") == []


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGHUP], ids=lambda n: n.name)
def test_a_signal_to_makes_own_pid_reaches_the_run(engine, trainer_image, tmp_path, number):
    """GNU make passes only SIGTERM on to its recipe; `kill -INT <make pid>` used to leave the run
    training until TIMEOUT."""
    env = lab_env()
    # make takes a signal it was started ignoring for one to ignore, as any program may: so does a
    # shell's background job's SIGINT (`.ci/run &` in a script), and then `kill -INT` of make did
    # nothing and the run trained to its end. The test is of a make that handles the signal.
    make = subprocess.Popen(["make", "--no-print-directory", "up", f"RUNS_DIR={tmp_path}", "RUN=make",
                             *[f"{k}={v}" for k, v in LONG.items()]], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(number, signal.SIG_DFL))
    try:
        wait_for_training(tmp_path / "make", make)
        make.send_signal(number)
        sent = time.monotonic()
        output = finish(make, CLEANUP_BOUND)
        seconds = time.monotonic() - sent
    finally:
        if make.poll() is None:
            make.kill()
    assert make.returncode == -number, output  # make re-raises the signal on itself once the lab is done
    assert f"interrupted by {number.name}: stopping every task" in output, output
    assert json.loads((tmp_path / "make" / "summary.json").read_text())["outcome"] == "interrupted"
    assert engine_objects(tmp_path / "make") == []
    print(f"{number.name} to make's pid: make exited {seconds:.1f} s later, nothing left")


def test_a_lab_killed_with_sigkill_leaves_nothing_behind(engine, trainer_image, tmp_path):
    """What a CI job's timeout does: SIGKILL to the lab's whole process group. The run's reaper,
    in its own session, removes what carries the run's label."""
    env = lab_env(RUNS_DIR=str(tmp_path), RUN="killed", **LONG)
    lab = subprocess.Popen([sys.executable, "-m", "tflab", "up"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_training(tmp_path / "killed", lab)
        assert engine_objects(tmp_path / "killed")
        os.killpg(lab.pid, signal.SIGKILL)
        killed = time.monotonic()
        lab.wait()
        while engine_objects(tmp_path / "killed") and time.monotonic() - killed < REAP_BOUND:
            time.sleep(0.2)
        seconds = time.monotonic() - killed
    finally:
        if lab.poll() is None:
            lab.kill()
    assert engine_objects(tmp_path / "killed") == [], f"left {REAP_BOUND} s after SIGKILL"
    assert not (tmp_path / "killed" / "summary.json").exists()
    print(f"SIGKILL of the lab's process group -> nothing left: {seconds:.1f} s")


def test_a_run_that_ends_by_itself_releases_its_reaper(engine, trainer_image, tmp_path):
    lab = start_lab(tmp_path, "calm", EPOCHS="2")
    output = finish(lab, 300)
    assert lab.returncode == 0, output
    reapers = subprocess.run(["pgrep", "-f", f"tflab.engine.reaper {tmp_path / 'calm'}$"], capture_output=True,
                             text=True)
    assert reapers.stdout == "", "the reaper outlived a run that ended by itself"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_disk_removes_the_run_first_and_says_so_in_one_line(engine, trainer_image, tmp_path):
    """RUNS_DIR on a 2 MB tmpfs that another writer fills while the run trains."""
    runs = tmp_path / "small"
    runs.mkdir()
    # mode 755: a tmpfs is 1777 by default, a RUNS_DIR every user may write, which the lab refuses
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=755", "tmpfs", str(runs)], check=True)
    try:
        lab = start_lab(runs, "full", TIMEOUT="60")
        try:
            wait_for_training(runs / "full", lab)
            filler = os.open(runs / "filler", os.O_WRONLY | os.O_CREAT)
            try:
                while True:
                    os.write(filler, b"x" * 512)
            except OSError as error:
                assert error.errno == errno.ENOSPC
            finally:
                os.close(filler)
            output = finish(lab, 180)
        finally:
            if lab.poll() is None:
                lab.kill()
        assert lab.returncode not in (0, None), output
        assert "Traceback" not in output, output
        full = [line for line in output.splitlines() if "is full" in line]
        assert len(full) == 1 and full[0].startswith(f"tflab: the disk holding {runs / 'full'} is full: "), output
        assert engine_objects(runs / "full") == [], output
        assert not list((runs / "full").glob(".*.tmp")), "a temporary file was left behind"
        summary = runs / "full" / "summary.json"
        assert not summary.exists() or json.loads(summary.read_text())["run"] == "full", "summary.json is cut"
    finally:
        subprocess.run(["umount", "--lazy", str(runs)], check=False)


LOUD_SCRIPT = """import sys
line = "x" * 100
for i in range(550_000):  # about 60 MB: more than the engine's log rotation keeps (10 MB x 3 here)
    sys.stdout.write(f"line {i:06d} {line}\\n")
sys.stdout.flush()
"""


def test_output_log_keeps_every_line_of_a_task_that_prints_60_mb(engine, trainer_image, tmp_path_factory):
    folder = tmp_path_factory.mktemp("loud")
    (folder / "loud.py").write_text(LOUD_SCRIPT)
    folder.chmod(0o755)  # the tasks run as uid 1000 where the host user is root
    runs = tmp_path_factory.mktemp("runs")
    lab = start_lab(runs, "loud", STRATEGY="single", SCRIPT=str(folder / "loud.py"))
    output = finish(lab, 600)
    assert lab.returncode == 0, output
    lines = [line for line in (runs / "loud" / "output.log").read_text().splitlines() if " line " in line]
    numbers = [int(line.split(" line ")[1].split()[0]) for line in lines]
    assert numbers[0] == 0 and numbers[-1] == 549_999, (numbers[:1], numbers[-1:])
    assert len(numbers) == 550_000 and numbers == sorted(numbers), f"{550_000 - len(numbers)} lines lost"


def task_processes(run_dir: Path) -> list[int]:
    """This user's processes whose environment names the run's config.json: BACKEND=local's tasks."""
    marker = f"TFLAB_CONFIG={run_dir / 'config.json'}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker in (proc / "environ").read_bytes().split(b"\0") and \
                        (proc / "stat").read_text().rpartition(")")[2].split()[0] not in ("Z", "X"):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads the tasks' environment from /proc")
def test_a_local_lab_killed_with_sigkill_leaves_no_task_running(tmp_path):
    """BACKEND=local: each task leads its own session, so a SIGKILL of the lab's group misses them;
    the reaper kills their groups."""
    env = lab_env(RUNS_DIR=str(tmp_path), RUN="local", BACKEND="local", **LONG)
    lab = subprocess.Popen([sys.executable, "-m", "tflab", "up"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_training(tmp_path / "local", lab)
        assert len(task_processes(tmp_path / "local")) >= 2
        os.killpg(lab.pid, signal.SIGKILL)
        killed = time.monotonic()
        lab.wait()
        while task_processes(tmp_path / "local") and time.monotonic() - killed < REAP_BOUND:
            time.sleep(0.2)
        seconds = time.monotonic() - killed
    finally:
        if lab.poll() is None:
            lab.kill()
        for pid in task_processes(tmp_path / "local"):
            os.kill(pid, signal.SIGKILL)
    assert task_processes(tmp_path / "local") == [], f"local tasks left {REAP_BOUND} s after SIGKILL"
    print(f"SIGKILL of a local lab's process group -> no task left: {seconds:.1f} s")


def test_sigterm_mid_chaos_is_interrupted_with_no_verdict_on_the_fault(engine, trainer_image, tmp_path):
    """The lab's own stop kills every task (137): the chaos run read "ended cleanly" and "verdict:
    failed: worker-0 exited 137" (issue 56). Here a pause that holds worker-1 until the signal."""
    lab = start_lab(tmp_path, "chaos", "chaos", SCENARIO="pause", TARGET="worker-1", AT="epoch:1", HEAL="600",
                    VERDICT="off")
    try:
        log = tmp_path / "chaos" / "chaos.jsonl"
        while lab.poll() is None and not (log.exists() and '"injected"' in log.read_text()):
            time.sleep(0.5)
        lab.send_signal(signal.SIGTERM)
    finally:
        output = finish(lab, CLEANUP_BOUND)
    assert lab.returncode == 128 + signal.SIGTERM, output
    chaos = json.loads((tmp_path / "chaos" / "summary.json").read_text())["chaos"]
    assert (chaos["injected"], chaos["outcome"], chaos["verdict"]["kind"]) == (True, "interrupted", "interrupted")
    assert "chaos: pause on worker-1 at epoch:1: interrupted; " in output
    assert "chaos: verdict: interrupted: the lab was stopped" in output and "no verdict on the fault" in output
    assert "ended cleanly" not in output and "verdict: failed" not in output


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads the tasks' environment from /proc")
def test_a_local_lab_killed_with_sigkill_leaves_no_daemon_of_a_task_running(tmp_path):
    """Issue 56: a script's daemon (setsid, a second fork) is in no task's process group, and the
    lab's subreaper, which ends it at a run's end, dies with a lab killed with SIGKILL; the reaper
    finds it by the run's mark in its environment."""
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "late"
    env = lab_env(RUNS_DIR=str(tmp_path), RUN="daemon", BACKEND="local", STRATEGY="single", TIMEOUT="120",
                  SCRIPT=str(REPO / "tests/integration/scripts/daemon_child.py"),
                  SCRIPT_ENV=f"DAEMON_TARGET={target} DAEMON_SLEEP=60 DAEMON_WAIT=60")
    lab = subprocess.Popen([sys.executable, "-m", "tflab", "up"], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.STDOUT, start_new_session=True)
    daemon = 0
    try:
        for _ in range(300):  # the daemon's pid file, then the lab still up (the script waits, DAEMON_WAIT)
            if (outside / "late.pid").exists() and (outside / "late.pid").read_text():
                daemon = int((outside / "late.pid").read_text())
                break
            time.sleep(0.1)
        assert daemon and lab.poll() is None
        os.killpg(lab.pid, signal.SIGKILL)
        killed = time.monotonic()
        lab.wait()
        while os.path.exists(f"/proc/{daemon}") and time.monotonic() - killed < REAP_BOUND:
            time.sleep(0.2)
        seconds = time.monotonic() - killed
    finally:
        if lab.poll() is None:
            lab.kill()
        alive = daemon and os.path.exists(f"/proc/{daemon}")
        if alive:
            os.kill(daemon, signal.SIGKILL)
    assert not alive, f"the task's daemon was left {REAP_BOUND} s after SIGKILL of the lab"
    print(f"SIGKILL of a local lab's process group -> its task's daemon gone: {seconds:.1f} s")
