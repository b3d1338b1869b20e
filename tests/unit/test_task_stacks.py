"""The task side of "where every task is" (issue 42): a task answers STACKS_SIGNAL with its every
thread's Python stacks in `stacks_file(task)`, and the lab's hang on purpose (HANG_SIGNAL, then
RELEASE_SIGNAL) stops its main thread and lets it go; each backend sends the signal its way.
Run in real processes (no TensorFlow): a stdlib stand-in for a task blocked in C."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from labtest.fakes import FakeEngine, answered
from tflab.backends import compose
from tflab.core import cluster
from tflab.core.settings import Settings
from tflab.core.stacks import STACKS_SIGNAL, stacks_file
from tflab.core.task import HANG_SIGNAL, RELEASE_SIGNAL
from tflab.replay import stack as replay_stack
from tflab.trainer import launch, replayhooks

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
WAIT_STEPS = 600  # 0.05 s each: a bound on a blink of this machine's pace, never the measure of a test

# A task stand-in: the lab's signals installed as the trainer does, a thread blocked in a lock (C),
# its main thread in a loop of Python that says when it is ready and prints "done" once told to end.
TASK = """
import os, sys, threading, time
from tflab.trainer import signals
if sys.argv[2] == "own-handler-first":  # a program's own handler, there before the lab's
    import signal
    signal.signal(signal.SIGUSR1, lambda *_: open(os.path.join(sys.argv[1], "own"), "a").write("x"))
signals.install_in(sys.argv[1], "worker-1")

def blocked_in_a_collective():
    threading.Lock().acquire(); threading.Lock().acquire()
    lock = threading.Lock(); lock.acquire(); lock.acquire()

threading.Thread(target=blocked_in_a_collective, daemon=True).start()
open(os.path.join(sys.argv[1], "ready"), "w").close()
while not os.path.exists(os.path.join(sys.argv[1], "end")):
    time.sleep(0.01)
print("done", flush=True)
"""


def wait_for(what, why: str):
    for _ in range(WAIT_STEPS):
        found = what()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"never happened: {why}")


def start_task(tmp_path: Path, mode: str = "") -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(SCRIPTS)}
    process = subprocess.Popen([sys.executable, "-c", TASK, str(tmp_path), mode], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: (tmp_path / "ready").exists() or process.poll() is not None, "the task started")
    assert process.poll() is None, process.communicate()
    return process


def dumps(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def finish(tmp_path: Path, process: subprocess.Popen) -> tuple[int, str, str]:
    (tmp_path / "end").touch()
    out, err = process.communicate(timeout=60)
    return process.returncode, out, err


@pytest.mark.parametrize("mode", ["", "own-handler-first"])
def test_a_task_answers_every_stacks_signal_with_every_threads_stack_and_runs_on(tmp_path, mode):
    process = start_task(tmp_path, mode)
    stacks = tmp_path / stacks_file("worker-1")
    for asked in (1, 2):
        process.send_signal(signal.Signals[STACKS_SIGNAL])
        wait_for(lambda: dumps(stacks).count("Current thread") == asked, f"dump {asked} written")
    text = dumps(stacks)
    assert text.count('in blocked_in_a_collective') == 2  # the other thread's, blocked in C
    assert text.count("Thread 0x") == 2 and "(most recent call first)" in text
    code, out, _ = finish(tmp_path, process)
    assert (code, out) == (0, "done\n")  # the signal, twice, ended nothing
    if mode:  # chain=True: a handler of the program's own still runs, once a signal
        assert (tmp_path / "own").read_text() == "xx"


def test_a_hung_task_stops_where_it_stands_answers_for_its_stacks_and_goes_on_when_released(tmp_path):
    process = start_task(tmp_path)
    stacks = tmp_path / stacks_file("worker-1")
    process.send_signal(signal.Signals[HANG_SIGNAL])
    (tmp_path / "end").touch()  # a task that is not hung would now end

    def main_thread_now() -> list[str]:
        """The main thread's block (the one that runs <module>; "Current thread" is whichever the
        kernel handed the signal to) of a dump asked for now, into the emptied file (appended to)."""
        stacks.write_text("")
        process.send_signal(signal.Signals[STACKS_SIGNAL])
        wait_for(lambda: dumps(stacks).count("Current thread") == 1, "the task's stacks")
        return next(block for block in dumps(stacks).split("\n\n") if "in <module>" in block).splitlines()

    # Its handler runs at the main thread's next line of Python: until then it is not yet hung.
    main = wait_for(lambda: next((lines for lines in [main_thread_now()] if "in _hang" in lines[1]), None),
                    "the main thread hung")
    assert "signals.py" in main[1] and main[2].strip().endswith("in <module>") and process.poll() is None
    process.send_signal(signal.Signals[HANG_SIGNAL])  # twice: still one hang, one release ends it
    process.send_signal(signal.Signals[RELEASE_SIGNAL])
    out, err = process.communicate(timeout=60)
    assert (process.returncode, out) == (0, "done\n")
    assert "training hung on purpose" in err and "training released" in err


def test_a_release_without_a_hang_does_nothing(tmp_path):
    process = start_task(tmp_path)
    process.send_signal(signal.Signals[RELEASE_SIGNAL])
    assert finish(tmp_path, process)[:2] == (0, "done\n")


def test_the_launcher_hands_the_labs_signals_on_to_the_script():
    assert {signal.Signals[name] for name in (STACKS_SIGNAL, HANG_SIGNAL, RELEASE_SIGNAL)} == set(launch.HANDED_ON)


def test_a_local_script_task_dumps_its_scripts_stacks_through_its_launcher(tmp_path):
    """BACKEND=local: the signal goes to the task's process, the launcher, which hands it to the
    script's (inscript's hook registered the dump there); the task runs on."""
    from tflab.backends.local import LocalProcesses

    script = tmp_path / "script.py"
    script.write_text("import os, threading\nopen(os.environ['TFLAB_OUTPUT'] + '/ready', 'w').close()\n"
                      "def waits_for_data():\n    threading.Event().wait()\nwaits_for_data()\n")
    settings = Settings(strategy="single", backend="local", script=str(script))
    (tmp_path / "config.json").write_text(json.dumps({"settings": settings.to_dict(), "cluster": {}}))
    (tmp_path / "tasks").mkdir()
    tasks = LocalProcesses(settings, tmp_path, cluster.build(settings), sys.executable)
    tasks.start()
    stacks = tmp_path / "tasks" / stacks_file("single")
    try:
        wait_for(lambda: (tmp_path / "tasks" / "ready").exists(), "the script started")
        tasks.dump_stacks(["single", "gone-0"])  # a task it has not: nothing, no error
        wait_for(lambda: "waits_for_data" in dumps(stacks), "the script's stacks")
        assert "script.py" in dumps(stacks) and tasks.exit_codes() == {"single": None}
    finally:
        tasks.close()
    tasks.dump_stacks(["single"])  # ended: nothing, no error


def test_compose_signals_each_named_tasks_container_through_the_engine(tmp_path, monkeypatch):
    settings = Settings()
    stack = compose.ComposeStack(compose.ComposeCli(("docker-compose",), "1.29.2"), tmp_path / "r",
                                 settings, "img", cluster.build(settings))

    def answer(command):
        if "ps" in command:
            service = next(part.split("=", 2)[2] for part in command if "com.docker.compose.service=" in part)
            return answered(command, stdout={"worker-0": "c0\n", "worker-1": "c1\n"}.get(service, ""))
        return None
    engine = FakeEngine(monkeypatch, answer)
    stack.dump_stacks(["worker-0", "worker-1", "worker-7"])
    assert engine.calls[-1][0] == ("kill", "--signal", STACKS_SIGNAL, "c0", "c1")
    engine.commands.clear()
    stack.dump_stacks(["worker-7"])  # no container: no kill
    assert not any("kill" in command for command in engine.commands)


@pytest.mark.parametrize("mark, signalled", [
    (f"hooked: python 3.11.2; {replayhooks.ANSWERS}", True),
    ("lab: the lab's own program runs here and logs itself", True),
    ("hooked: python 3.11.2", False),  # under a shell that stays: the signal would end the shell
    ("failed: ImportError: x", False),
    (None, False),  # no hooks at all
])
def test_a_replay_signals_only_the_replicas_whose_program_answers(tmp_path, monkeypatch, mark, signalled):
    sent = []
    monkeypatch.setattr(compose.ComposeStack, "dump_stacks", lambda self, tasks: sent.extend(tasks))
    monkeypatch.setattr(replay_stack, "hooks_mark", lambda run_dir, task: mark or "")
    stack = object.__new__(replay_stack.ReplayStack)
    stack.run_dir = tmp_path
    stack.dump_stacks(["worker-0"])
    assert sent == (["worker-0"] if signalled else [])


def test_every_backend_asks_its_own_way_and_a_swarm_through_each_tasks_node():
    from tflab.backends import swarm
    from tflab.backends.local import LocalProcesses

    for kind in (compose.ComposeStack, LocalProcesses, swarm.SwarmStack, replay_stack.ReplayStack):
        assert "dump_stacks" in vars(kind), kind
    sent = []
    stack = object.__new__(swarm.SwarmStack)
    stack._kill = lambda tasks, *signal_name: sent.append((tasks, signal_name))  # the node-aware docker kill
    stack.dump_stacks(["worker-1"])
    assert sent == [(["worker-1"], (STACKS_SIGNAL,))]


# A script whose process has no handler for the stack request (a process still starting, before
# inscript's hooks ran, reads the same), which says when it is ready and then waits.
NO_HANDLER = ("import os, signal, threading\nsignal.signal(signal.SIGUSR1, signal.SIG_DFL)\n"
              "open(os.environ['TFLAB_OUTPUT'] + '/ready', 'w').close()\nthreading.Event().wait()\n")


def test_the_stack_request_is_not_handed_on_to_a_script_that_would_die_of_it(tmp_path):
    """Issue 56: a worker's script that had no SIGUSR1 handler ended with 138 at the lab's stack
    request, and the lab said "file_shards.py exited with code 138". The launcher now withholds it."""
    from tflab.backends.local import LocalProcesses

    script = tmp_path / "script.py"
    script.write_text(NO_HANDLER)
    settings = Settings(strategy="single", backend="local", script=str(script))
    (tmp_path / "config.json").write_text(json.dumps({"settings": settings.to_dict(), "cluster": {}}))
    (tmp_path / "tasks").mkdir()
    tasks = LocalProcesses(settings, tmp_path, cluster.build(settings), sys.executable)
    tasks.start()
    try:
        wait_for(lambda: (tmp_path / "tasks" / "ready").exists(), "the script started")
        tasks.dump_stacks(["single"])
        wait_for(lambda: "was not handed on" in (tmp_path / "output.log").read_text(), "the launcher's line")
        time.sleep(0.5)
        assert tasks.exit_codes() == {"single": None}  # the script runs on
    finally:
        tasks.close()
    said = (tmp_path / "output.log").read_text()
    assert "tflab: the lab's stack request (SIGUSR1) was not handed on to the script: its process has no handler " \
           "for it (not yet, or none), and would have been ended by it" in said


# The launcher where /proc cannot tell whether the script catches SIGUSR1 (not Linux): it hands the
# request on, and the script's death of it is the lab's, not the script's own exit.
BLIND_LAUNCHER = """
import sys
from tflab.core import processes
from tflab.trainer import launch
processes.catches = lambda pid, signum: None
sys.exit(launch.main(["--", sys.executable, sys.argv[1]]))
"""


def test_a_script_ended_by_the_labs_stack_request_is_not_said_to_have_exited_by_itself(tmp_path):
    script = tmp_path / "file_shards.py"
    script.write_text(NO_HANDLER)
    settings = Settings(strategy="single", backend="local", script=str(script))
    (tmp_path / "config.json").write_text(json.dumps({"settings": settings.to_dict(), "cluster": {}}))
    (tmp_path / "tasks").mkdir()
    env = {**os.environ, "PYTHONPATH": str(SCRIPTS), "TFLAB_CONFIG": str(tmp_path / "config.json"),
           "TFLAB_TASK": "worker-9", "TFLAB_OUTPUT": str(tmp_path / "tasks")}
    launcher = subprocess.Popen([sys.executable, "-c", BLIND_LAUNCHER, str(script)], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (tmp_path / "tasks" / "ready").exists(), "the script started")
        launcher.send_signal(signal.SIGUSR1)
        assert launcher.wait(timeout=30) == 128 + signal.SIGUSR1
    finally:
        launcher.kill()
    events = [json.loads(line) for line in (tmp_path / "tasks" / "worker-9.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "error"
    assert events[-1]["message"] == ("file_shards.py was ended by the lab's stack request (SIGUSR1; it has no "
                                     "handler for it), exit 138")


def test_local_asks_no_task_process_that_has_no_handler_yet(tmp_path):
    """BACKEND=local signals the task's own process (a launcher, the lab's trainer): one still
    starting, before its handler, would die of the request (138); /proc's SigCgt tells."""
    from tflab.backends.local import LocalProcesses
    from tflab.core import processes

    catching = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                                 "signal.signal(signal.SIGUSR1, lambda *_: print('asked', flush=True))\n"
                                 "print('ready', flush=True)\ntime.sleep(30)\n"], stdout=subprocess.PIPE, text=True)
    starting = subprocess.Popen(["sleep", "30"])
    try:
        assert catching.stdout is not None and catching.stdout.readline() == "ready\n"
        assert processes.catches(catching.pid, signal.SIGUSR1) is True
        assert processes.catches(starting.pid, signal.SIGUSR1) is False
        tasks = object.__new__(LocalProcesses)
        tasks._processes = {"worker-0": catching, "worker-9": starting}
        tasks.dump_stacks(["worker-0", "worker-9"])
        assert catching.stdout.readline() == "asked\n"
        time.sleep(0.3)
        assert starting.poll() is None  # not ended by the lab's question
    finally:
        catching.kill()
        starting.kill()
        catching.wait()
        starting.wait()
    assert processes.catches(starting.pid, signal.SIGUSR1) is None  # gone
