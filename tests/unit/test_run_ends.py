"""How a run begins and ends, without an engine: the claim of its id, owner.json as `down` reads
it, whole-or-nothing writes, the reaper's pipe, make's signals read from /proc, the memory check,
and output.log's copy of a task's stream."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from labtest.fakes import docker_on_path
from tflab import backends, cli
from tflab.backends import compose
from tflab.cli import makesignals
from tflab.core import cluster, processes, runfolder, runowner
from tflab.core.errors import LabError
from tflab.core.settings import Settings
from tflab.engine import reaper
from tflab.supervisor import runner


def test_a_run_id_is_claimed_once_however_many_ask_at_once(tmp_path):
    """Eight threads claim one RUN together: exactly one gets it, the others are refused in one line."""
    run_dir = tmp_path / "runs" / "same"
    outcomes, barrier = [], threading.Barrier(8)

    def claim() -> None:
        barrier.wait()
        try:
            runfolder.make(run_dir, link_latest=True, owner=True)
            outcomes.append("claimed")
        except LabError as error:
            outcomes.append(str(error))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes.count("claimed") == 1
    refusals = [o for o in outcomes if o != "claimed"]
    assert len(refusals) == 7 and all(r.startswith("RUN=same already exists") and "\n" not in r for r in refusals)
    assert os.readlink(tmp_path / "runs" / "latest") == "same"
    assert json.loads((run_dir / runfolder.OWNER).read_text())["pid"] == os.getpid()
    assert [p.name for p in (tmp_path / "runs").iterdir() if p.name.startswith(".")] == [], "a temporary link was left"


def test_latest_always_names_a_whole_run_while_runs_are_claimed(tmp_path):
    runs = tmp_path / "runs"
    names = [f"r{i}" for i in range(40)]
    seen, done = [], threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                seen.append(os.readlink(runs / "latest"))
            except FileNotFoundError:
                seen.append(None)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for name in names:
            runfolder.make(runs / name, link_latest=True)
    finally:
        done.set()
        reader.join()
    after_first = seen[next((i for i, s in enumerate(seen) if s), len(seen)):]
    assert set(after_first) <= set(names), "runs/latest was missing or half-made while runs were claimed"
    assert os.readlink(runs / "latest") == names[-1]


def test_write_json_is_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    runfolder.write_json(path, {"ok": True})

    def full_disk(descriptor):  # the text is written, in the page cache; the disk has no room for it
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runfolder.os, "fsync", full_disk)
    with pytest.raises(OSError) as raised:
        runfolder.write_json(path, {"ok": False, "long": "x" * 10_000})
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"ok": True}, "the old file was cut"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"], "a temporary file was left"


def test_a_full_disk_is_one_line_naming_the_folder(tmp_path):
    error = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "output.log"))
    line = runner.unwritable(tmp_path, error)
    assert line.startswith(f"the disk holding {tmp_path} is full: output.log could not be written") and "\n" not in line
    other = runner.unwritable(tmp_path, OSError(errno.EACCES, "Permission denied", str(tmp_path / "summary.json")))
    assert "summary.json: Permission denied" in other


def owner(run_dir: Path, **record) -> Path:
    """A run folder as the lab makes it (its tasks' space apart), with this owner.json."""
    (run_dir / runfolder.TASKS).mkdir(parents=True, exist_ok=True)
    (run_dir / runfolder.OWNER).write_text(json.dumps(record))
    return run_dir


def test_down_tells_a_live_owner_from_a_gone_or_reused_one(tmp_path):
    here = socket.gethostname()
    me = processes.owner_record(os.getpid())
    assert runowner.live_owner(owner(tmp_path / "live", **me)) == os.getpid()
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid is free
    assert runowner.live_owner(owner(tmp_path / "gone", pid=child.pid, host=here)) is None
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    time.sleep(0.5)  # exited, not reaped
    try:
        assert runowner.live_owner(owner(tmp_path / "zombie", **processes.owner_record(zombie.pid))) is None
    finally:
        zombie.wait()
    reused = {**me, "process_start": "1"}  # this pid, but a process that started at another time
    if processes.process_start(os.getpid()) is not None:
        assert runowner.live_owner(owner(tmp_path / "reused", **reused)) is None
    far = {**me, "host": here + "-elsewhere"}  # cannot be asked: counted live, left alone
    assert runowner.owner_of(owner(tmp_path / "far", **far)) == runowner.Owner(os.getpid(), here=False)
    assert runowner.owner_of(tmp_path / "live").here
    assert runowner.live_owner(tmp_path / "nothing") is None


@pytest.mark.parametrize("change, doubt", [
    ({"process_start": None}, "with no start time to check it by"),
    ({"process_start": "nope"}, "with no start time to check it by"),
    ({"command": ["sleep", "100"]}, "command line is not the one its lab recorded"),
    ({"command": None}, "command line is not the one its lab recorded"),
    ({"pid": "1"}, "names no process id the lab writes"),
])
def test_down_signals_only_a_process_proven_to_be_the_runs_lab(tmp_path, change, doubt):
    """Issue 34: a task rewrote owner.json to name an unrelated host process with no start time,
    and root's `down FORCE=1` sent it SIGTERM. A pid is now given only with its start time matching
    and its command line the one recorded at the claim; otherwise the doubt is said, nothing sent."""
    me = processes.owner_record(os.getpid(), "r")
    found = runowner.owner_of(owner(tmp_path / "r", **{**me, **change}))
    assert found.pid is None and doubt in found.doubt


def test_an_owner_record_a_task_could_write_is_not_trusted(tmp_path):
    me = processes.owner_record(os.getpid(), "r")
    old = tmp_path / "old"
    old.mkdir()
    (old / runfolder.OWNER).write_text(json.dumps(me))  # one folder for the lab and its tasks
    assert "from before the lab kept its records apart" in runowner.owner_of(old).doubt
    shared = owner(tmp_path / "shared", **me)
    shared.chmod(0o777)  # anyone may replace the record
    assert "writable by others" in runowner.owner_of(shared).doubt
    linked = owner(tmp_path / "linked", **me)
    (linked / runfolder.OWNER).unlink()
    (linked / runfolder.OWNER).symlink_to(shared / runfolder.OWNER)
    assert "is a link" in runowner.owner_of(linked).doubt


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
OWNER_FILES = st.one_of(
    st.binary(max_size=300),
    JSON.map(lambda value: json.dumps(value).encode()),
    st.fixed_dictionaries({"pid": st.one_of(st.integers(), st.text(max_size=5), st.booleans(), st.none(),
                                            st.floats(allow_nan=True)),
                           "host": st.one_of(st.just(socket.gethostname()), st.text(max_size=10), st.integers()),
                           "process_start": st.one_of(st.none(), st.text(max_size=10), st.integers(), st.lists(
                               st.integers(), max_size=2))}).map(lambda d: json.dumps(d).encode()),
)


@settings(max_examples=300, deadline=None, database=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=OWNER_FILES)
def test_a_hostile_owner_file_never_raises_and_never_names_a_stranger(tmp_path, content):
    """owner.json is read by `down`, so it is foreign input: any bytes give a pid or None, and a
    pid only where the process exists (or lives on another host)."""
    (tmp_path / runfolder.TASKS).mkdir(exist_ok=True)
    (tmp_path / runfolder.OWNER).write_bytes(content)
    found = runowner.owner_of(tmp_path)
    assert found.pid is None or (isinstance(found.pid, int) and found.pid > 0)
    if found.pid is not None and found.here:
        os.kill(found.pid, 0)  # raises if no such process: down would have named a stranger
        assert found.pid == os.getpid()  # only this test's own process has its start and command recorded


def test_the_reaper_removes_only_when_the_lab_did_not_release_it(tmp_path, monkeypatch):
    """The real pipe and process, with `docker` a stand-in that records what it is asked."""
    record = tmp_path / "asked"
    docker_on_path(tmp_path, f'#!/bin/sh\necho "$@" >> {record}\n', monkeypatch)
    calm = reaper.watch(tmp_path / "calm")
    calm.release()
    assert not record.exists(), "a released reaper touched the engine"
    dying = subprocess.Popen([sys.executable, "-c", f"""
import sys, time
sys.path.insert(0, {str(Path(reaper.__file__).parents[2])!r})
from tflab.engine import reaper
guard = reaper.watch(__import__("pathlib").Path({str(tmp_path / "killed")!r}))
print(guard.process.pid, flush=True)
time.sleep(60)
"""], stdout=subprocess.PIPE, text=True, start_new_session=True)
    reaper_pid = int(dying.stdout.readline())
    os.killpg(dying.pid, signal.SIGKILL)  # the lab's whole group, as a CI timeout does
    dying.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not record.exists():
        time.sleep(0.1)
    asked = record.read_text() if record.exists() else ""
    assert f"label=tflab.run-dir={tmp_path / 'killed'}" in asked, "the reaper did not outlive its lab's group"
    assert "calm" not in asked
    deadline = time.monotonic() + 30  # the stand-in engine has nothing: the reaper settles and exits
    while time.monotonic() < deadline and Path(f"/proc/{reaper_pid}").exists():
        time.sleep(0.2)
    assert not Path(f"/proc/{reaper_pid}").exists() or "Z" in Path(f"/proc/{reaper_pid}/stat").read_text().split()[2]


def test_make_above_and_make_in_its_handler_are_read_from_proc(tmp_path):
    """The lab finds the make that runs it, and sees make sit in its SIGHUP handler (GNU make does
    not pass SIGHUP on: it waits there for its recipe to end)."""
    if not Path("/proc/self/status").exists():
        pytest.skip("no /proc")
    makefile = tmp_path / "Makefile"
    code_root = Path(makesignals.__file__).parents[2]
    probe = f"{sys.executable} -c 'import sys; sys.path.insert(0, \"{code_root}\"); " \
            "from tflab.cli import makesignals; print(makesignals.make_above(), flush=True); " \
            "import time; time.sleep(30)'"
    makefile.write_text(f"probe:\n\t@{probe}\n")
    make = subprocess.Popen(["make", "-s", "-f", str(makefile), "probe"], stdout=subprocess.PIPE, text=True)
    try:
        assert int(make.stdout.readline()) == make.pid
        assert makesignals.in_handler(make.pid) is None
        make.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while makesignals.in_handler(make.pid) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert makesignals.in_handler(make.pid) == signal.SIGHUP
        assert make.poll() is None, "make ended without waiting for its recipe"
    finally:
        for child in subprocess.run(["ps", "-o", "pid=", "--ppid", str(make.pid)], capture_output=True,
                                    text=True).stdout.split():
            os.kill(int(child), signal.SIGKILL)
        make.wait(timeout=10)


@contextlib.contextmanager
def a_make_waiting(tmp_path: Path):
    """A real make whose recipe has started and waits, in a session of its own so that its group is
    removed whole."""
    (tmp_path / "Makefile").write_text("wait:\n\t@echo started; sleep 300\n")
    make = subprocess.Popen(["make", "-s", "-f", str(tmp_path / "Makefile"), "wait"], start_new_session=True,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert make.stdout.readline() == "started\n"  # make's handlers are in place once it runs a recipe
        yield make
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(make.pid, signal.SIGKILL)
        make.wait()
        make.stdout.close()


def watchers() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "make-signals"]


def test_a_command_called_in_process_under_make_leaves_no_thread_behind(tmp_path, monkeypatch, capsys):
    """The unit suite run through make once called the lab in-process 450 times, each call starting
    a make-signals watcher that lived as long as make: 795 threads and a load of 96 on 2 cores. Each
    call's watcher runs while its command does and ends with it."""
    if not Path("/proc/self/status").exists():
        pytest.skip("no /proc")
    during = []
    monkeypatch.setitem(cli.COMMANDS, "settings", (lambda settings: during.append(len(watchers())) or 0, "stand-in"))
    with a_make_waiting(tmp_path) as make:
        monkeypatch.setattr(makesignals, "make_above", lambda: make.pid)
        before = threading.active_count()
        for _ in range(CALLS_UNDER_MAKE):
            assert cli.main(["settings"]) == 0
        assert threading.active_count() == before, [thread.name for thread in threading.enumerate()]
    assert during == [1] * CALLS_UNDER_MAKE  # a watcher ran during each command: the count above could rise


CALLS_UNDER_MAKE = 50


def test_the_signal_make_is_handling_reaches_the_lab(tmp_path, monkeypatch):
    """make sits in its SIGHUP handler (it does not pass SIGHUP on to its recipe): the watcher sends
    the lab the same signal, then ends."""
    if not Path("/proc/self/status").exists():
        pytest.skip("no /proc")
    received = []
    previous = signal.signal(signal.SIGHUP, lambda number, frame: received.append(number))
    try:
        with a_make_waiting(tmp_path) as make:
            make.send_signal(signal.SIGHUP)
            while makesignals.in_handler(make.pid) is None:  # its handler blocks SIGHUP while it waits
                assert make.poll() is None, "make ended without waiting for its recipe"
                time.sleep(0.05)
            monkeypatch.setattr(makesignals, "make_above", lambda: make.pid)
            stop = makesignals.forward_from_make()
            for watcher in watchers():
                watcher.join()  # it ends once it has signalled (or if make is gone, which the next line tells)
            stop()
            assert make.poll() is None
        assert received == [signal.SIGHUP]
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_a_run_that_cannot_fit_the_engines_memory_is_refused_up_front():
    many = Settings(workers=64)
    with pytest.raises(LabError) as refused:
        backends.check_memory(many, cluster.build(many), 8 * 10**9, "this Docker engine")
    assert str(refused.value) == ("64 tasks need about 20.8 GB of memory (320 MB each, the lab's trainer's measured "
                                  "own memory, and 300 MB of TensorFlow's libraries they share), more than this "
                                  "Docker engine's 8.0 GB; at most 24 fit: use fewer WORKERS (or PS), or a machine "
                                  "with more memory")
    backends.check_memory(many, cluster.build(many), 24 * 2**30, "this Docker engine")  # 64 fit in 24 GiB
    assert backends.most_tasks(24 * 2**30) == 79
    capped = Settings(workers=32, memory="256m")
    backends.check_memory(capped, cluster.build(capped), 9 * 10**9, "x")  # 32 x 268 MB + 300 MB
    with pytest.raises(LabError, match=r"\(268 MB each, MEMORY=256m, and 300 MB"):
        backends.check_memory(capped, cluster.build(capped), 8 * 10**9, "x")
    backends.check_memory(many, cluster.build(many), None, "x")  # unknown memory: nothing refused


def test_task_output_copies_every_line_stamped_and_says_a_full_disk_once(tmp_path):
    output = compose.TaskOutput(tmp_path, "output.log")
    output._open()
    stand_in = [sys.executable, "-c", "import sys\nfor i in range(20000): print(f'line {i}')\n"
                "sys.stdout.write('no newline at the end')"]
    process = subprocess.Popen(stand_in, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    reader = threading.Thread(target=output._copy, args=("worker-0", process, True))
    reader.start()
    output.followers.append(compose.Follower("worker-0", process, reader, "c"))
    output.finish(["worker-0"])
    lines = (tmp_path / "output.log").read_text().splitlines()
    assert len(lines) == 20001 and lines[-1].endswith(" no newline at the end")
    assert all(line.startswith("worker-0 | 20") for line in lines)
    assert [int(line.rsplit(" ", 1)[1]) for line in lines[:-1]] == list(range(20000))

    class FullDisk:
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def flush(self):
            pass

        def close(self):
            pass

    full = compose.TaskOutput(tmp_path, "full.log")
    full.file = FullDisk()
    process = subprocess.Popen([sys.executable, "-c", "print('x\\n' * 1000)"], stdout=subprocess.PIPE)
    full._copy("worker-1", process, False)  # reads to the end although every write fails
    assert process.wait() == 0
    with pytest.raises(OSError) as raised:
        full.finish([])
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(tmp_path / "full.log")
    full.finish([])  # said once


def test_up_with_more_tasks_than_the_engines_memory_holds_is_refused_before_anything(tmp_path):
    """Through the CLI, against an engine (a stand-in) with 4 GiB: one line with the estimate, no
    run folder, no image build, no container."""
    from labtest.cli import assert_refused, lab_env, run_lab
    from test_cli_errors import fake_engine

    runs = tmp_path / "runs"
    path, calls = fake_engine(tmp_path, {"MemTotal": 4 * 2**30, "NCPU": 2})
    result = run_lab("up", f"RUNS_DIR={runs}", "WORKERS=32", env=lab_env(PATH=path))
    assert_refused(result, "32 tasks need about 10.5 GB of memory (320 MB each, the lab's trainer's measured own "
                           "memory, and 300 MB of TensorFlow's libraries they share), more than this Docker "
                           "engine's 4.3 GB; at most 12 fit", runs)
    assert "build" not in calls.read_text() and "up" not in calls.read_text().split()
    fits = run_lab("config", "WORKERS=32", env=lab_env(PATH=path))
    assert fits.returncode == 0, fits.stderr  # 32 is an allowed value; only a run is checked against memory


def test_the_reaper_kills_local_tasks_when_their_lab_is_killed(tmp_path, monkeypatch):
    """BACKEND=local's tasks lead sessions of their own, so a SIGKILL of the lab's group misses
    them: the reaper kills the groups the lab told it of."""
    docker_on_path(tmp_path, "#!/bin/sh\nexit 0\n", monkeypatch)  # no engine here: nothing to remove
    lab = subprocess.Popen([sys.executable, "-c", f"""
import subprocess, sys, time
sys.path.insert(0, {str(Path(reaper.__file__).parents[2])!r})
from tflab.engine import reaper
guard = reaper.watch(__import__("pathlib").Path({str(tmp_path / "local")!r}))
task = subprocess.Popen(["sleep", "120"], start_new_session=True)
guard.watch_group(task.pid)
print(task.pid, flush=True)
time.sleep(120)
"""], stdout=subprocess.PIPE, text=True, start_new_session=True)
    task = int(lab.stdout.readline())
    os.killpg(lab.pid, signal.SIGKILL)
    lab.wait()
    killed = time.monotonic()

    def alive() -> bool:
        try:
            return Path(f"/proc/{task}/stat").read_text().rpartition(")")[2].split()[0] not in ("Z", "X")
        except OSError:
            return False

    while alive() and time.monotonic() - killed < 30:
        time.sleep(0.1)
    assert not alive(), "a local task outlived its killed lab"


def test_a_container_that_does_not_start_is_one_line_naming_the_task(tmp_path, monkeypatch):
    """`docker start --attach` of a created container fails (a stand-in engine says why): the run
    ends at once naming the task and the engine's reason, not at TIMEOUT with the task 'running'."""
    docker_on_path(tmp_path, '#!/bin/sh\ncase "$1" in\n'
                             '  start) echo "Error response from daemon: no such device" >&2; exit 1 ;;\n'
                             '  inspect) echo created ;;\nesac\n', monkeypatch)
    output = compose.TaskOutput(tmp_path, "output.log")
    output.attach("worker-0", "abc")
    with pytest.raises(LabError) as refused:
        output.check_started(timeout=30)
    assert str(refused.value) == "compose up failed: worker-0 did not start: Error response from daemon: no such device"
    output.finish(["worker-0"])
    assert "worker-0 | " in (tmp_path / "output.log").read_text()


class FullStream:
    """Standard output on a full disk (`up > /dev/full`): with `full`, every write fails with ENOSPC."""

    def __init__(self, full: bool):
        self.full, self.written = full, []

    def write(self, text: str) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.written.append(text)
        return len(text)

    def flush(self) -> None:
        pass


class NoGuard:
    def release(self) -> None:
        pass


@pytest.mark.parametrize("when", ["at the first line", "while the tasks run"])
def test_a_run_whose_stdout_is_full_ends_whole_and_says_so_once(tmp_path, monkeypatch, when):
    """Issue 56: `tflab up > /dev/full` raised at the run's first line, after the claim, and left
    config.json, owner.json and an empty tasks/ with no summary and no set-ID check. Now the run is
    ended whole: its tasks stopped and removed, set-ID bits stripped, its summary written; the
    error goes up to main, which says it on stderr (exit 1)."""
    import io
    import shutil

    from labtest.fakes import FakeBackend
    from tflab import console
    from tflab.supervisor.labrun import LabRun

    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(runner.reaper, "watch", lambda run_dir: NoGuard())
    monkeypatch.setattr(runner, "quiet_stdout", lambda: monkeypatch.setattr(sys, "stdout", io.StringIO()))
    stream = FullStream(full=when == "at the first line")
    monkeypatch.setattr(sys, "stdout", console.GuardedStdout(stream))
    settings = Settings(workers=2, runs_dir=str(tmp_path / "runs"), run="r1")
    run_dir = tmp_path / "runs" / "r1"
    the_cluster = cluster.build(settings)

    def plant_then_fill(backend, attempt):  # a task leaves a set-ID shell; then the disk fills
        shutil.copyfile("/bin/sh", run_dir / "tasks" / "sh")
        (run_dir / "tasks" / "sh").chmod(0o4755)
        stream.full = True
        console.say("a line a printer says while the tasks run")

    backend = FakeBackend(the_cluster, run_dir, [[{}]], on_start=plant_then_fill)  # tasks that run on and on
    with pytest.raises(console.StdoutError, match="No space left on device"):
        runner.run(LabRun(settings, backend, run_dir))
    assert backend.closed
    result = json.loads((run_dir / runfolder.SUMMARY).read_text())
    assert result["outcome"] == "failed" and (run_dir / runfolder.SETID).is_file()
    assert result["notes"] == ["the lab stopped the run at once: its standard output could not be written (No space "
                               "left on device)"]
    if when == "while the tasks run":
        assert backend.ended == dict.fromkeys(the_cluster.tasks, 137) and stream.written  # stopped
        assert (run_dir / "tasks" / "sh").stat().st_mode & 0o7777 == 0o755
    else:
        assert backend.starts == 0 and stream.written == []
