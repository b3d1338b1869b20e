"""supervisor/stall.py and core/stacks.py: the watch over event streams with an injected clock
(no timed assertion), faulthandler's dumps read back, and the finding, who waits on whom, from
dumps written by hand the way faulthandler writes TensorFlow 2.21's frames (tests of the real
recordings join them once they are recorded)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from labtest.fakes import FakeBackend
from tflab.backends.base import Observers
from tflab.core import cluster, restarts, stacks
from tflab.core.runsummary import Summary
from tflab.core.settings import Settings, SettingsError
from tflab.faults import chaos
from tflab.supervisor import runner, stall, table
from tflab.supervisor.labrun import LabRun
from tflab.supervisor.runner import Supervision

pytestmark = pytest.mark.unit

SITE = "/opt/venv/lib/python3.11/site-packages"
EXECUTE = f'  File "{SITE}/tensorflow/python/eager/execute.py", line 53 in quick_execute'
STEP = "\n".join([
    EXECUTE,
    f'  File "{SITE}/tensorflow/python/eager/polymorphic_function/concrete_function.py", line 1322 in _call_flat',
    f'  File "{SITE}/tensorflow/python/eager/polymorphic_function/polymorphic_function.py", line 878 in _call',
    f'  File "{SITE}/tf_keras/src/engine/training.py", line 1807 in fit',
    f'  File "{SITE}/tf_keras/src/utils/traceback_utils.py", line 65 in error_handler'])
IDLE_THREAD = ("Thread 0x00007f3b5effd6c0 (most recent call first):\n"
               '  File "/usr/local/lib/python3.11/threading.py", line 331 in wait\n'
               '  File "/usr/local/lib/python3.11/threading.py", line 1002 in _bootstrap\n\n')


def dump(main: str, *others: str) -> str:
    return "".join(others) + IDLE_THREAD + f"Current thread 0x00007f3b6d5e4740 (most recent call first):\n{main}\n"


# stall.py of issue 42: worker-1 blocks in a callback after its first epoch, worker-0 goes on.
IN_CALLBACK = dump('  File "/lab/script/stall.py", line 23 in on_epoch_end\n'
                   f'  File "{SITE}/tf_keras/src/callbacks.py", line 453 in on_epoch_end\n'
                   f'  File "{SITE}/tf_keras/src/engine/training.py", line 1856 in fit\n'
                   '  File "/lab/script/stall.py", line 40 in <module>')
IN_STEP = dump(STEP + '\n  File "/lab/script/stall.py", line 40 in <module>')
# a generator that never yields again: its thread is tf.data's, the main thread waits in the step
IN_GENERATOR = dump(STEP + '\n  File "/lab/script/pipeline.py", line 51 in <module>',
                    "Thread 0x00007f3b4ffff6c0 (most recent call first):\n"
                    '  File "/lab/script/pipeline.py", line 18 in generate\n'
                    f'  File "{SITE}/tensorflow/python/data/ops/from_generator_op.py", line 135 in generator_py_func\n'
                    f'  File "{SITE}/tensorflow/python/ops/script_ops.py", line 268 in __call__\n\n')
# chiefsave.py: worker-0 saves alone, worker-1 has exited 0
IN_SAVE = dump(EXECUTE + "\n"
               f'  File "{SITE}/tensorflow/python/checkpoint/functional_saver.py", line 519 in save\n'
               f'  File "{SITE}/tensorflow/python/saved_model/save.py", line 1432 in save\n'
               '  File "/lab/script/chiefsave.py", line 41 in <module>')


# -- the dump read back --------------------------------------------------------------------------

def test_the_last_dump_of_a_file_is_read_with_every_thread_and_frame():
    threads = stacks.parse("stray text the task wrote\n" + IN_STEP + IN_CALLBACK)
    assert [thread.current for thread in threads] == [False, True]
    main = threads[-1]
    assert main.frames[0] == stacks.Frame("/lab/script/stall.py", 23, "on_epoch_end")
    assert main.outermost == stacks.Frame("/lab/script/stall.py", 40, "<module>")
    assert threads[0].frames[0].function == "wait"


def test_a_real_faulthandler_dump_parses(tmp_path):
    import faulthandler
    import threading
    done = threading.Event()
    waiter = threading.Thread(target=done.wait)
    waiter.start()
    with open(tmp_path / "dump", "w") as file:
        faulthandler.dump_traceback(file, all_threads=True)
    done.set()
    waiter.join()
    threads = stacks.parse((tmp_path / "dump").read_text())
    assert len(threads) >= 2 and threads[-1].current
    assert any(frame.function == "test_a_real_faulthandler_dump_parses" for frame in threads[-1].frames)
    assert any(frame.file.endswith("threading.py") for thread in threads[:-1] for frame in thread.frames)


def test_a_half_written_or_hostile_dump_is_bounded_and_never_raises():
    assert stacks.parse("") == []
    assert stacks.parse('  File "x.py", line 1 in f\n') == []  # a frame before any thread
    many = "Current thread 0x1 (most recent call first):\n" + '  File "x.py", line 1 in f\n' * 1000
    assert len(stacks.parse(many)[0].frames) == stacks.MAX_FRAMES
    assert stacks.parse("Current thread 0x1 (most recent call first):\n  ...\n")[0].cut


# -- who waits on whom ---------------------------------------------------------------------------

def places(**dumps: str) -> dict[str, stall.Place]:
    return {task.replace("_", "-"): stall.place_of(task.replace("_", "-"), stacks.parse(text))
            for task, text in dumps.items()}


def test_a_callback_that_never_returns_is_named_with_its_line_and_the_peer_waiting_for_it():
    found = stall.finding(places(worker_0=IN_STEP, worker_1=IN_CALLBACK), [], [])
    assert found.kind == "stuck-callback"
    assert found.what == ("worker-1 stopped in a callback (on_epoch_end) at /lab/script/stall.py:23 in on_epoch_end; "
                          "worker-0 waits for it in an all-reduce")
    assert "make the callback return" in found.fix
    assert found.places["worker-0"].startswith("worker-0 waits in an all-reduce inside model.fit")


def test_a_stuck_generator_is_the_input_pipeline_though_the_main_thread_waits_in_the_step():
    found = stall.finding(places(worker_0=IN_STEP, worker_1=IN_GENERATOR), [], [])
    assert found.kind == "stuck-input-pipeline"
    assert found.what.startswith("worker-1 stopped in the input pipeline at /lab/script/pipeline.py:18 in generate")


def test_a_save_on_the_chief_alone_with_its_peer_exited_is_the_chief_only_save():
    found = stall.finding(places(worker_0=IN_SAVE), [], ["worker-1"])
    assert found.kind == "chief-only-save" and "worker-1, which had already exited 0" in found.what
    assert "every worker call save" in found.fix


def test_a_hang_on_purpose_is_named_as_such_with_where_training_stood():
    hung = dump('  File "/opt/tflab/tflab/trainer/signals.py", line 71 in _hang\n'
                f'  File "{SITE}/tf_keras/src/engine/training.py", line 1853 in fit\n'
                '  File "/opt/tflab/tflab/trainer/train.py", line 433 in run_task\n'
                '  File "/opt/tflab/tflab/trainer/train.py", line 82 in main')
    found = stall.finding(places(worker_0=IN_STEP, worker_1=hung), [], [])
    assert found.kind == "hang"
    assert found.what.startswith("worker-1 stopped in a hang on purpose (SCENARIO=hang) at "
                                 "/opt/tflab/tflab/trainer/train.py:433 in run_task; worker-0 waits for it")


def test_every_task_waiting_and_none_done_is_said_as_such_and_silence_too():
    assert stall.finding(places(worker_0=IN_STEP, worker_1=IN_STEP), [], []).kind == "all-waiting"
    found = stall.finding({}, ["worker-0", "worker-1"], [])
    assert found.kind == "no-stacks" and "worker-0, worker-1" in found.what


def test_a_silent_worker_after_its_peer_exited_0_is_stuck_in_teardown():
    """A user's MWMS script whose worker-1 ends after task 0 has exited: it spins in TensorFlow's
    teardown (the coordination service's shutdown, led by task 0) with no Python line left to answer
    the lab's signal; stop 48 reported it only as "no task answered". With no peer done, silence is
    still only silence."""
    found = stall.finding({}, ["worker-1"], ["worker-0"])
    assert found.kind == "stuck-in-teardown"
    assert found.what.startswith("worker-1 did not answer for its stacks after worker-0 exited 0: past the program's "
                                 "last line of Python, in TensorFlow's teardown")
    assert "os._exit(0)" in found.fix and found.link.endswith("coordination_service_agent.cc")
    assert stall.finding({}, ["worker-1"], []).kind == "no-stacks"
    assert stall.finding(places(worker_1=IN_STEP), [], ["worker-0"]).kind != "stuck-in-teardown"


# -- the watch -----------------------------------------------------------------------------------

class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watching(tmp_path, limits=stall.Limits(), tasks=("worker-0", "worker-1")):
    clock = Clock()
    return stall.Watch(tmp_path, list(tasks), limits, clock), clock


def feed(watch, clock, events: list[tuple[float, str, str]]) -> list[float]:
    """(seconds later, task, event): each event seen at its time; returns when a stall was found."""
    found = []
    for later, task, event in events:
        for _ in range(int(later)):  # the runner polls: every second in between, a look
            clock.now += 1
            if watch.stalled(["worker-0", "worker-1"]):
                found.append(clock.now)
        clock.now += later - int(later)
        watch.saw(task, {"event": event, "task": task})
    return found


def epochs(count: int, every: float, start: float = 0) -> list[tuple[float, str, str]]:
    stream = [(start, "worker-0", "cluster_ready"), (0, "worker-1", "cluster_ready")]
    for _ in range(count):
        stream += [(every, "worker-0", "epoch"), (0.1, "worker-1", "epoch")]
    return stream


def test_the_pace_is_learned_and_a_stall_is_a_multiple_of_it_within_floor_and_ceiling(tmp_path):
    watch, clock = watching(tmp_path)
    assert not feed(watch, clock, epochs(5, 8.0))
    assert watch.pace == pytest.approx(8.0)
    assert watch.limits.limit(watch.pace) == stall.FACTOR * 8.0
    clock.now += stall.FACTOR * 8.0 - 1
    assert watch.stalled(["worker-0"]) is None
    clock.now += 2
    found = watch.stalled(["worker-0"])
    assert found is not None and found.limit_seconds == 40.0 and "5 x its pace of 8.0 s" in found.line()
    assert watch.stalled(["worker-0"]) is None  # said once


def test_quick_epochs_stall_at_the_floor_and_slow_ones_at_the_ceiling(tmp_path):
    assert stall.Limits().limit(0.2) == stall.FLOOR_SECONDS
    assert stall.Limits().limit(100.0) == stall.CEILING_SECONDS
    assert stall.Limits().limit(None) == stall.CEILING_SECONDS
    assert stall.Limits.from_setting("45").limit(0.2) == 45.0
    watch, clock = watching(tmp_path, stall.Limits.from_setting("off"))
    clock.now += 10_000
    assert watch.stalled(["worker-0"]) is None


@pytest.mark.parametrize("name, stream", [
    # a long first step (tracing, a slow import): no pace yet, the ceiling holds
    ("long first step", [(0, "worker-0", "cluster_ready"), (stall.CEILING_SECONDS - 1, "worker-0", "epoch")]),
    # a SCRIPT's long first step: each worker's fit starts a fraction of a second after the other's,
    # a gap that is no pace; only a step that ran bounds the wait by the pace (make bench BENCH=stall
    # saw the 30 s floor call a 45 s first step a stall)
    ("script's long first step", [(0, "worker-0", "fit"), (0.2, "worker-1", "fit"),
                                  (stall.CEILING_SECONDS - 1, "worker-0", "audit_batch")]),
    # slow-node: every epoch slower than the last, up to three times the first
    ("slow node", epochs(3, 5.0) + [(10.0, "worker-0", "epoch"), (15.0, "worker-0", "epoch")]),
    # a large checkpoint: one gap five times the epochs'
    ("large checkpoint", epochs(3, 5.0) + [(20.0, "worker-0", "checkpoint"), (5.0, "worker-0", "epoch")]),
])
def test_no_stall_on_a_healthy_run_that_is_slow_in_its_own_ways(tmp_path, name, stream):
    watch, clock = watching(tmp_path)
    assert not feed(watch, clock, stream), name


def test_an_audit_pass_of_no_step_is_no_first_step(tmp_path):
    """The arm64 image under emulation on a loaded machine (CI, 2026-12-06): each worker's audit
    logged a pass of 0 steps (an iterator made before fit) 23 s after the rendezvous, a fraction of
    a second apart; taken as a step, that gap set the 30 s floor, and the first epoch, over 30 s
    under qemu, was called a stall."""
    watch, clock = watching(tmp_path)
    for task in ("worker-0", "worker-1"):
        watch.saw(task, {"event": "cluster_ready", "task": task})
    clock.now += 23
    for task in ("worker-0", "worker-1"):
        clock.now += 0.3
        watch.saw(task, {"event": "audit_pass", "task": task, "pass": 1, "steps": 0, "examples": 0})
    clock.now += stall.CEILING_SECONDS - 1  # the first epoch, still running
    assert watch.stalled(["worker-0", "worker-1"]) is None and watch.known_pace() is None
    watch.saw("worker-0", {"event": "audit_pass", "task": "worker-0", "pass": 1, "steps": 16, "examples": 512})
    assert watch.known_pace() is not None  # a pass of steps is a step that ran


def test_before_a_step_ran_the_ceiling_bounds_the_wait_and_after_it_the_pace(tmp_path):
    watch, clock = watching(tmp_path)
    assert not feed(watch, clock, [(0, "worker-0", "fit"), (0.2, "worker-1", "fit")])
    clock.now += stall.CEILING_SECONDS + 1
    found = watch.stalled(["worker-0", "worker-1"])
    assert found is not None and found.limit_seconds == stall.CEILING_SECONDS and found.pace_seconds is None
    assert "before its first step" in found.line()
    watch, clock = watching(tmp_path)
    assert not feed(watch, clock, [(0, "worker-0", "fit"), (0.2, "worker-1", "fit"), (2.0, "worker-0", "audit_batch")])
    assert not feed(watch, clock, [(stall.FLOOR_SECONDS + 2, "worker-1", "cluster_ready")])  # a sampled step: no pace
    assert not feed(watch, clock, [(2.0, "worker-0", "epoch")])
    assert feed(watch, clock, [(stall.FLOOR_SECONDS + 2, "worker-1", "cluster_ready")])  # an epoch ran: the floor holds


def slowed_epoch(watch, clock, step_seconds: float, first_epochs: int = 2, steps: int = 32) -> None:
    """The lab's trainer, as its log reads: `first_epochs` quick epochs of `steps` steps (0.6 s each,
    the audit's 16 sampled steps first), then a pass whose sampled steps come every `step_seconds`."""
    def saw(task, event, **fields):
        watch.saw(task, {"event": event, "task": task, **fields})

    for task in ("worker-0", "worker-1"):
        saw(task, "cluster_ready")
    for epoch in range(1, first_epochs + 2):
        for task in ("worker-0", "worker-1"):
            saw(task, "audit_pass", **{"pass": epoch, "steps": steps if epoch > 1 else 0})
        pace = 0.6 / steps if epoch <= first_epochs else step_seconds
        for step in range(1, 17):
            clock.now += pace
            for task in ("worker-0", "worker-1"):
                saw(task, "audit_batch", **{"pass": epoch, "step": step})
        if epoch <= first_epochs:
            clock.now += 16 * pace
            for task in ("worker-0", "worker-1"):
                saw(task, "epoch", epoch=epoch, steps=steps)


def test_a_node_slowed_tenfold_mid_run_is_slow_and_not_stalled(tmp_path):
    """CI, 2026-12-06, make chaos SCENARIO=slow-node SLOW_CPUS=0.1: after two quick epochs worker-1's
    audit logged epoch 3's 16 sampled steps every 2-4 s, then nothing for its 16 unsampled ones; the
    watch called the 37th silent second a stall. The sampled steps' pace says how long the rest of
    the epoch is silent, and the limit allows it on top; a stall past that is still found."""
    watch, clock = watching(tmp_path)
    slowed_epoch(watch, clock, step_seconds=3.0)
    limit = stall.Limits().limit(watch.known_pace())
    assert limit == stall.FLOOR_SECONDS and watch.tail == 16 * 3.0  # the quick epochs' pace: the floor
    clock.now += 16 * 3.0 + 1  # the unsampled steps, still running
    assert watch.stalled(["worker-0", "worker-1"]) is None
    clock.now += limit
    found = watch.stalled(["worker-0", "worker-1"])
    assert found is not None and found.limit_seconds == limit + 48.0 and found.tail_seconds == 48.0
    assert "and 48 s for the epoch's steps after the audit's sampled ones" in found.line()


def test_the_audits_sampled_steps_are_no_pace_and_a_long_first_epoch_no_stall(tmp_path):
    """A long first epoch: its 16 sampled steps quick, the rest silent past the floor. Taken as steps
    that ran, the burst set a pace of a fraction of a second and the floor called the rest a stall;
    now the first epoch is held to the ceiling, and its end's gap is the pace."""
    watch, clock = watching(tmp_path)
    slowed_epoch(watch, clock, step_seconds=0.5, first_epochs=0, steps=1000)
    assert watch.known_pace() is None  # no step that ran: the burst is a sign of life
    clock.now += stall.CEILING_SECONDS - 1
    assert watch.stalled(["worker-0", "worker-1"]) is None
    for task in ("worker-0", "worker-1"):
        watch.saw(task, {"event": "epoch", "task": task, "epoch": 1, "steps": 1000})
    assert watch.known_pace() is not None and watch.known_pace() >= stall.CEILING_SECONDS - 1


def first_epoch_steps(watch, clock, steps: int, every: float, fit_steps: int | None = None) -> None:
    """A SCRIPT's first epoch as its log reads: each worker's fit starts (with the steps of an epoch
    where fit knows them), then the audit's sampled steps 1..`steps`, `every` seconds apart after a
    first step of 7 s (its tracing)."""
    for task in ("worker-0", "worker-1"):
        watch.saw(task, {"event": "fit", "task": task, "epoch": 1, "step": 0, "epochs": 5}
                  | ({"steps": fit_steps} if fit_steps else {}))
    for step in range(1, steps + 1):
        clock.now += 7.0 if step == 1 else every
        for task in ("worker-0", "worker-1"):
            watch.saw(task, {"event": "audit_batch", "task": task, "pass": 1, "step": step})


def test_a_stall_among_the_first_epochs_sampled_steps_is_found_at_their_pace_not_the_ceiling(tmp_path):
    """Issue 56: a worker stuck at the 12th step of the first epoch was found at the 300 s ceiling
    (313.6 s): the sampled steps were signs of life only. While they come, the next one is due
    within FACTOR x their widest gap, at least the floor."""
    watch, clock = watching(tmp_path)
    first_epoch_steps(watch, clock, steps=11, every=0.4)
    assert watch.known_pace() is None  # no epoch yet: the ceiling would bound the wait
    clock.now += stall.FLOOR_SECONDS - 1
    assert watch.stalled(["worker-0", "worker-1"]) is None
    clock.now += 2
    found = watch.stalled(["worker-0", "worker-1"])
    assert found is not None and found.limit_seconds == stall.FLOOR_SECONDS and found.step_seconds == pytest.approx(0.4)
    assert ("(the limit: 30 s, 5 x the 400 ms between its sampled steps, at least 30 s: the next was due)"
            in found.line())
    slow, clock = watching(tmp_path)  # steps of 10 s: 5 x 10 s, over the floor
    first_epoch_steps(slow, clock, steps=5, every=10.0)
    clock.now += 49
    assert slow.stalled(["worker-0", "worker-1"]) is None
    clock.now += 2
    found = slow.stalled(["worker-0", "worker-1"])
    assert found.limit_seconds == 50.0 and "5 x the 10.0 s between its sampled steps" in found.line()


@pytest.mark.parametrize("steps, fit_steps, limit", [
    (16, None, stall.CEILING_SECONDS),  # the last sampled step: the epoch's silent rest, at the ceiling
    (8, 8, stall.CEILING_SECONDS),  # an epoch of 8 steps as fit said: its end may save for long
    (1, None, stall.CEILING_SECONDS),  # one step: no gap measured yet
])
def test_no_sampled_step_is_due_after_the_last_of_a_pass_or_before_a_gap_is_measured(tmp_path, steps, fit_steps,
                                                                                      limit):
    watch, clock = watching(tmp_path)
    first_epoch_steps(watch, clock, steps=steps, every=0.4, fit_steps=fit_steps)
    clock.now += limit - 1
    assert watch.stalled(["worker-0", "worker-1"]) is None
    clock.now += 2
    assert watch.stalled(["worker-0", "worker-1"]).limit_seconds == limit


def test_an_epochs_end_and_a_restart_end_what_its_sampled_steps_owed(tmp_path):
    watch, clock = watching(tmp_path)
    first_epoch_steps(watch, clock, steps=8, every=0.4)
    for task in ("worker-0", "worker-1"):  # a pass of 8 steps ended; its save then takes long
        watch.saw(task, {"event": "epoch", "task": task, "epoch": 1, "steps": 8})
    assert watch.step_limit({"worker-0", "worker-1"}) is None
    first_epoch_steps(watch, clock, steps=5, every=0.4)
    assert watch.step_limit({"worker-0", "worker-1"}) == (stall.FLOOR_SECONDS, pytest.approx(0.4))
    watch.restarted()
    assert watch.step_limit({"worker-0", "worker-1"}) is None


def test_a_script_is_watched_from_its_first_advance_until_its_fit_planned_epochs_are_done(tmp_path):
    clock = Clock()
    watch = stall.Watch(tmp_path, ["worker-0", "worker-1"], stall.Limits(fixed=30), clock, armed=False)
    clock.now += 1000  # imports, a long preparation: a script that logged nothing says nothing of its pace
    assert watch.stalled(["worker-0", "worker-1"]) is None
    watch.saw("worker-0", {"event": "fit", "epoch": 1, "step": 0, "epochs": 2})
    clock.now += 31
    assert watch.stalled(["worker-0", "worker-1"]) is not None
    watch = stall.Watch(tmp_path, ["worker-0", "worker-1"], stall.Limits(fixed=30), clock, armed=False)
    for task in ("worker-0", "worker-1"):
        watch.saw(task, {"event": "fit", "epoch": 1, "step": 0, "epochs": 2})
        watch.saw(task, {"event": "epoch", "epoch": 2})
    clock.now += 1000  # a long save or evaluation after training: no stall ...
    assert watch.stalled(["worker-0", "worker-1"]) is None
    # ... unless a peer exited 0 meanwhile: the save on the chief alone
    assert watch.stalled(["worker-0"], done=["worker-1"]) is not None


def test_the_evaluator_and_servers_are_not_watched(tmp_path):
    watch, clock = watching(tmp_path, tasks=["worker-0"])
    clock.now += stall.CEILING_SECONDS * 2
    assert watch.stalled(["evaluator-0"]) is None
    assert watch.stalled(["worker-0", "evaluator-0"]) is not None


def test_a_restart_starts_the_clock_again(tmp_path):
    watch, clock = watching(tmp_path, stall.Limits(fixed=30))
    clock.now += 29
    watch.restarted()
    clock.now += 29
    assert watch.stalled(["worker-0"]) is None


def test_training_held_on_purpose_counts_from_its_release_and_is_no_pace(tmp_path):
    """make chaos SCENARIO=hang HEAL=20: a CI run called the hang a stall 10 s after its release,
    its 20 s held counted; held, the watch counts from the release, and learns no pace from it."""
    watch, clock = watching(tmp_path)
    assert not feed(watch, clock, epochs(3, 0.6))
    for _ in range(int(stall.FLOOR_SECONDS * 3)):  # held three times the limit, looked at every second
        clock.now += 1
        watch.hold()
        assert watch.stalled(["worker-0", "worker-1"]) is None
    clock.now += stall.FLOOR_SECONDS - 1
    assert watch.stalled(["worker-0", "worker-1"]) is None
    assert not feed(watch, clock, [(0.5, "worker-0", "epoch")])
    assert watch.pace == pytest.approx(stall.FLOOR_SECONDS - 0.5)  # from the release, not the hold
    clock.now += stall.CEILING_SECONDS + 1  # released, a task that never moves again is a stall
    assert watch.stalled(["worker-0", "worker-1"]) is not None


@pytest.mark.parametrize("heal, undone, holds", [(20, False, True), (20, True, False), (None, False, False)])
def test_a_fault_holds_the_training_while_injected_with_a_heal_due(heal, undone, holds):
    fault = chaos.Chaos(Settings(workers=2, scenario="hang", heal="never" if heal is None else str(heal)))
    assert not fault.holds()  # not injected yet
    fault.injected_at = 1.0
    if undone:
        fault.healed_at = 21.0
    assert fault.holds() is holds
    assert runner.NO_OBSERVER.holds() is False
    assert Observers(fault).holds() is holds


def test_a_restarted_cluster_is_held_to_the_ceiling_until_its_first_step(tmp_path):
    """sim-pause on a simulated swarm: after the restart the new attempt took over 30 s to its first
    step, and the pace of the attempt before (0.8 s) called that a stall at the 30 s floor."""
    watch, clock = watching(tmp_path)
    assert not feed(watch, clock, epochs(3, 0.8))
    watch.restarted()
    assert not feed(watch, clock, [(stall.FLOOR_SECONDS * 3, "worker-0", "cluster_ready"),
                                   (stall.FLOOR_SECONDS * 3, "worker-0", "restored")])
    clock.now += stall.CEILING_SECONDS + 1  # a restart that never comes back is still a stall
    assert watch.stalled(["worker-0", "worker-1"]) is not None
    watch, clock = watching(tmp_path)
    assert not feed(watch, clock, epochs(3, 0.8))
    watch.restarted()
    assert not feed(watch, clock, [(40, "worker-0", "cluster_ready"), (1.0, "worker-0", "epoch"),
                                   (0.1, "worker-1", "epoch")])
    assert feed(watch, clock, [(stall.FLOOR_SECONDS + 2, "worker-1", "cluster_ready")])  # the pace holds again


def test_the_watch_reads_the_tasks_logs_as_they_grow(tmp_path):
    watch, clock = watching(tmp_path)
    log = tmp_path / "worker-0.jsonl"

    def epoch(number: int) -> str:
        return json.dumps({"event": "epoch", "task": "worker-0", "time": 1, "epoch": number, "loss": 1.0,
                           "seconds": 1.0, "steps": 64}) + "\n"

    log.write_text(epoch(1) + "not json\n")
    clock.now += 3
    watch.read()
    assert watch.pace is None and watch.advanced["worker-0"]["epoch"] == 1  # the first advance: no gap yet
    with open(log, "a") as file:
        file.write(epoch(2))
    clock.now += 7
    watch.read()
    assert watch.pace == 7 and watch.advanced["worker-0"]["epoch"] == 2


def test_stall_is_a_setting_with_its_grammar():
    assert Settings().stall == "auto"
    assert Settings.from_env({"STALL": "60"}).stall == "60"
    with pytest.raises(SettingsError, match="^STALL=2 is not allowed: expected auto, off, or a number of seconds "
                                            "from 5 to 86400$"):
        Settings.from_env({"STALL": "2"})


# -- in a run ------------------------------------------------------------------------------------

def test_a_stalled_run_says_who_waits_on_whom_is_not_restarted_and_keeps_the_finding(tmp_path, capsys,
                                                                                   monkeypatch):
    settings = Settings(workers=2, restarts=2, restart_policy="OnFailure", backup="off", stall="5")
    backend = FakeBackend(cluster.build(settings), tmp_path, [[{}]])  # both run forever
    backend.stacks = {"worker-0": IN_STEP, "worker-1": IN_CALLBACK}
    clock = Clock()
    monkeypatch.setattr(stall.time, "monotonic", clock)
    monkeypatch.setattr(runner.time, "sleep", lambda seconds: setattr(clock, "now", clock.now + seconds))
    run = LabRun(settings, backend, tmp_path)
    backend.start()
    seen = runner.Supervision(run)
    assert runner.supervise(seen) == ("stalled", ["worker-0", "worker-1"])
    out = capsys.readouterr().out
    assert "tflab: stalled: no task advanced for 6 s (the limit: 5 s" in out
    assert "tflab: stall (stuck-callback): worker-1 stopped in a callback (on_epoch_end)" in out
    assert "tflab: not restarting: a stall is no failure" in out and not run.restarts_made
    assert backend.asked_stacks == [["worker-0", "worker-1"]] and backend.ended == dict.fromkeys(backend.tasks, 137)
    result = Summary(run="r", strategy="multiworker", backend="compose", outcome="stalled", ok=False, launched_at=0,
                     wall_seconds=6, settings={}, weights_agree=False, tasks=[], stall=seen.stall_finding)
    lines = table.why_lines(Summary.from_dict(json.loads(json.dumps(result.to_dict()))))
    assert lines[0].startswith("stall (stuck-callback): worker-1 stopped") and lines[1].startswith("  fix: ")


def grace_run(tmp_path, monkeypatch, policy: str, stuck: str) -> tuple[LabRun, FakeBackend]:
    """Issue 56's early stall: worker-1 blocks (its stacks: `stuck`) and worker-0's collective gives up
    first, exit 1 with a lost peer's words; the lab asks worker-1 where it is at the grace's end."""
    settings = Settings(workers=2, restarts=2, restart_policy=policy, backup="off", stall="off")

    def log_error(backend, attempt):
        with open(tmp_path / "worker-0.jsonl", "a") as log:
            for event, fields in [("start", {}), ("error", {"message": "UnavailableError: Collective ops is "
                                                                       "aborted by: Socket closed"})]:
                log.write(json.dumps({"event": event, "task": "worker-0", "time": 0, **fields}) + "\n")

    backend = FakeBackend(cluster.build(settings), tmp_path, [[{}, {"worker-0": 1}]], on_start=log_error)
    backend.stacks = {"worker-1": stuck}
    clock = Clock()
    monkeypatch.setattr(runner.time, "monotonic", clock)
    monkeypatch.setattr(runner.time, "sleep", lambda seconds: setattr(clock, "now", clock.now + seconds))
    monkeypatch.setattr(stall, "STACKS_WAIT_SECONDS", 0)
    run = LabRun(settings, backend, tmp_path)
    backend.start()
    return run, backend


def test_a_program_stall_found_at_the_graces_end_is_not_restarted_whoever_exited_first(tmp_path, capsys,
                                                                                          monkeypatch):
    """Issue 56: worker-0's exit 1 (a lost peer's, which ExitCode retries) came before the lab named
    worker-1's stuck callback at the end of the grace; the lab then restarted every task, the same
    program stalled again and the run ended at TIMEOUT (605.5 s). The restart decision reads what
    the grace's look found: a stall of the program's own ends the run."""
    run, backend = grace_run(tmp_path, monkeypatch, "ExitCode", IN_CALLBACK)
    seen = runner.Supervision(run)
    assert runner.supervise(seen) == ("failed", ["worker-1"])
    out = capsys.readouterr().out
    assert "tflab: where every task was at the end of the failure's grace (stuck-callback): worker-1 stopped" in out
    assert ("tflab: not restarting: the lab found at the end of the failure's grace (stuck-callback, above) is the "
            "program's own, and a restart runs the same program into it again, whichever task exited first; "
            "RESTART_POLICY=ExitCode") in out
    assert not run.restarts_made and backend.starts == 1 and seen.stall_finding["kind"] == "stuck-callback"


@pytest.mark.parametrize("policy, stuck, restarted, says", [
    ("OnFailure", IN_CALLBACK, 2, "restarting all the same, as RESTART_POLICY=OnFailure does: it will stall again"),
    ("Never", IN_CALLBACK, 0, "not restarting: RESTART_POLICY=Never"),
    # stopped in its own code in no phase the lab knows (a read that may come back): the lost peer decides
    ("ExitCode", dump('  File "/lab/script/fetch.py", line 9 in read_remote\n'
                      '  File "/lab/script/fetch.py", line 30 in <module>'), 2, ""),
    # waiting in its all-reduce for the peer that failed (a kill, a partition): a restart brings it back
    ("ExitCode", IN_STEP, 2, "where every task was at the end of the failure's grace (all-waiting)"),
], ids=["on-failure", "never", "stuck-task", "all-waiting"])
def test_a_diagnosis_refines_the_policy_and_only_a_program_stall_stops_a_restart(tmp_path, capsys, monkeypatch,
                                                                                  policy, stuck, restarted, says):
    run, backend = grace_run(tmp_path, monkeypatch, policy, stuck)
    runner.supervise(runner.Supervision(run))
    assert len(run.restarts_made) == restarted and backend.starts == restarted + 1
    assert says in capsys.readouterr().out


def test_a_timeout_asks_where_every_task_is_before_it_stops_them(tmp_path, capsys, monkeypatch):
    settings = Settings(workers=2, backup="off", stall="off", timeout=10)
    backend = FakeBackend(cluster.build(settings), tmp_path, [[{}]])
    backend.stacks = {"worker-0": IN_STEP, "worker-1": IN_GENERATOR}
    run = LabRun(settings, backend, tmp_path)
    monkeypatch.setattr(run, "deadline", lambda started: 0)  # already passed
    backend.start()
    assert runner.supervise(runner.Supervision(run))[0] == "timed out"
    out = capsys.readouterr().out
    assert out.index("TIMEOUT=10 s passed") < out.index(
        "where every task was at TIMEOUT (stuck-input-pipeline): worker-1 stopped")


def test_a_hostile_finding_in_a_summary_is_shown_escaped_or_left_out():
    base = dict(run="r", strategy="multiworker", backend="compose", outcome="stalled", ok=False, launched_at=0,
                wall_seconds=1, settings={}, weights_agree=False, tasks=[])
    assert table.stall_lines(Summary(**base, stall={"kind": 1})) == []
    lines = table.stall_lines(Summary(**base, stall={"kind": "k", "what": "\x1b[2Jx", "fix": "f"}))
    assert "\x1b" not in "".join(lines)


# -- a real run, recorded (tests/unit/data/stalls/<case>/: its tasks' logs and stacks) -----------

RECORDED = Path(__file__).parent / "data" / "stalls"


def recorded_places(case: str) -> dict[str, stall.Place]:
    return {path.stem: stall.place_of(path.stem, stacks.parse(path.read_text()))
            for path in sorted((RECORDED / case).glob("*.stacks"))}


def replayed_watch(case: str, armed: bool = False) -> tuple[stall.Watch, Clock]:
    """The watch fed a recorded run's events at the times its tasks logged them."""
    records = sorted((json.loads(line) for path in (RECORDED / case).glob("*.jsonl")
                      for line in path.read_text().splitlines()
                      if path.stem != "chaos"), key=lambda record: record["time"])
    clock = Clock()
    clock.now = records[0]["time"]
    watch = stall.Watch(RECORDED / case, sorted({r["task"] for r in records}), stall.Limits(), clock, armed=armed)
    for record in records:
        clock.now = record["time"]
        watch.saw(record["task"], record)
    return watch, clock


def test_the_recorded_callback_stall_is_named_from_the_real_stacks():
    """stall_callback.py (issue 42's stall.py), SCRIPT on compose, TF 2.21 and tf-keras: worker-1
    blocks in on_epoch_end after its first epoch; worker-0 waits in the all-reduce of fit's next
    epoch (in a pool thread of cross_device_ops, its main thread in Python's threading wait)."""
    found = stall.finding(recorded_places("callback"), [], [])
    assert found.kind == "stuck-callback"
    assert found.what == ("worker-1 stopped in a callback (on_epoch_end) at /lab/script/stall_callback.py:23 in "
                          "on_epoch_end; worker-0 waits for it in an all-reduce")


def test_the_recorded_callback_stall_is_found_well_before_its_timeout():
    """The watch over the recorded events: the pace is the first step's tracing (about 7 s), so
    the stall is called about 35 s after the last event, where the recorded run waited for
    TIMEOUT=150 (the default is 900)."""
    watch, clock = replayed_watch("callback")
    summary = json.loads((RECORDED / "callback" / "summary.json").read_text())
    limit = watch.limits.limit(watch.pace)
    assert stall.FLOOR_SECONDS <= limit < summary["settings"]["timeout"] - (clock.now - summary["launched_at"])
    clock.now += limit - 1
    assert watch.stalled(["worker-0", "worker-1"]) is None
    clock.now += 2
    assert watch.stalled(["worker-0", "worker-1"]) is not None


@pytest.mark.parametrize("case, done, kind, says", [
    ("callback", [], "stuck-callback", "worker-1 stopped in a callback (on_epoch_end) at "
                                       "/lab/script/stall_callback.py:23 in on_epoch_end; worker-0 waits for it"),
    # worker-1 had exited 0; worker-0's second dump waits in the save's all-reduce
    ("chief_save", ["worker-1"], "chief-only-save", "worker-0 waited in a save's collective for worker-1, which "
                                                    "had already exited 0"),
    ("hang", [], "hang", "worker-1 stopped in a hang on purpose (SCENARIO=hang) at /opt/tflab/tflab/trainer/"
                         "train.py:185 in train; worker-0 waits for it in an all-reduce"),
    # issue 56's early stall: the stacks the lab asked for at the stall it called
    ("early_callback", [], "stuck-callback", "worker-1 stopped in a callback (block) at "
                                             "/lab/script/stall_at.py:47 in block; worker-0 waits for it"),
    # worker-1 had failed by then (its error explains the run: collective-mismatch); worker-0 waits alone
    ("uneven_data", [], "all-waiting", "worker-0 waits in an all-reduce inside model.fit at "
                                       "/lab/script/stall_uneven_data.py:31 in <module>"),
])
def test_each_recorded_stall_is_named_as_its_recording_says(case, done, kind, says):
    """tests/unit/data/stalls/README.md says what happened in each run; the finding must say it."""
    places = {task: place for task, place in recorded_places(case).items()
              if (RECORDED / case / f"{task}.stacks").read_text().strip() and task not in done}
    found = stall.finding(places, [], done)
    assert found.kind == kind and says in found.what, found.what


def test_the_recorded_early_stall_is_called_at_its_sampled_steps_pace_read_in_one_poll():
    """Issue 56, recorded with the watch of this change (data/stalls/README.md): worker-1 blocked at
    its 12th step of the first epoch. The events are read in one poll here, as a poll reads a burst:
    the sampled steps' gaps come from the tasks' own stamps (0.24 s at most), so the next step was
    due at the floor; the watch before held it to the 300 s ceiling."""
    records = sorted((json.loads(line) for path in (RECORDED / "early_callback").glob("*.jsonl")
                      for line in path.read_text().splitlines()), key=lambda record: record["time"])
    clock = Clock()
    clock.now = records[-1]["time"] + 1
    watch = stall.Watch(RECORDED / "early_callback", ["worker-0", "worker-1"], stall.Limits(), clock, armed=False)
    for record in records:
        watch.saw(record["task"], record)
    limit, gap = watch.step_limit({"worker-0", "worker-1"})
    assert limit == stall.FLOOR_SECONDS and gap == pytest.approx(0.186, abs=0.001)
    clock.now += stall.FLOOR_SECONDS - 1
    assert watch.stalled(["worker-0", "worker-1"]) is None
    clock.now += 2
    assert watch.stalled(["worker-0", "worker-1"]).step_seconds == gap
    summary = json.loads((RECORDED / "early_callback" / "summary.json").read_text())
    assert summary["stall"]["kind"] == "stuck-callback" and summary["stall"]["limit_seconds"] == stall.FLOOR_SECONDS


def test_the_recorded_uneven_data_failure_is_a_collective_mismatch_and_not_restarted():
    from tflab.core import explain, tracebacks
    output = (RECORDED / "uneven_data" / "worker-1.out").read_text()
    failed = explain.Evidence("worker-1", 1, error=tracebacks.exception_head(output), output=output)
    survivor = explain.Evidence("worker-0", 1, error="UnavailableError: The following tasks are unhealthy "
                                                     "(stopped sending heartbeats)")
    assert explain.explain(failed).signature == "collective-mismatch"
    assert restarts.restart_verdict("ExitCode", [failed, survivor])[0] is False


def test_the_recorded_hang_of_the_labs_trainer_is_found_before_its_timeout():
    """SCENARIO=hang at epoch 2 on the lab's trainer (watched from its start): the watch over the
    recorded events calls the stall within the limit its pace sets, before TIMEOUT=120."""
    watch, clock = replayed_watch("hang", armed=True)
    summary = json.loads((RECORDED / "hang" / "summary.json").read_text())
    limit = watch.limits.limit(watch.pace)
    assert clock.now - summary["launched_at"] + limit < summary["settings"]["timeout"]
    clock.now += limit + 1
    found = watch.stalled(["worker-0", "worker-1"])
    assert found is not None and found.pace_seconds == watch.pace


# -- before a stop the user asked for: an interrupt, `down FORCE=1` ----------------------------------

class Guard:
    def release(self) -> None:
        pass


def interrupted_run(tmp_path, monkeypatch, dumps: dict[str, str], before=None):
    """runner.run of two workers that run on until the lab gets SIGTERM at its first wait (what
    `down FORCE=1` sends the run's lab, after it marked the run); before(seen) runs just before it,
    with the runner's Supervision of the run (its folder, its stall watch)."""
    import signal

    from tflab.cli import Interrupted

    monkeypatch.setattr(runner.reaper, "watch", lambda run_dir: Guard())
    settings = Settings(workers=2, backup="off", runs_dir=str(tmp_path / "runs"), run="r1")
    run_dir = tmp_path / "runs" / "r1"
    backend = FakeBackend(cluster.build(settings), run_dir, [[{}]])  # both run on
    backend.stacks = dumps
    run = LabRun(settings, backend, run_dir)
    made = []
    monkeypatch.setattr(runner, "Supervision", lambda kind: made.append(Supervision(kind)) or made[-1])

    def signalled(seconds):
        if before:
            before(made[-1])
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(runner.time, "sleep", signalled)
    with pytest.raises(KeyboardInterrupt):
        runner.run(run)
    return backend, Summary.read(run_dir)


def test_an_interrupt_asks_where_every_task_is_before_it_stops_them_and_keeps_it(tmp_path, monkeypatch, capsys):
    backend, result = interrupted_run(tmp_path, monkeypatch, {"worker-0": IN_STEP, "worker-1": IN_CALLBACK})
    out = capsys.readouterr().out
    # asked once, of the tasks still running, and answered: the fake answers only while a task runs
    assert backend.asked_stacks == [["worker-0", "worker-1"]] and backend.ended == dict.fromkeys(backend.tasks, 137)
    assert out.index("interrupted by SIGTERM: stopping every task") < out.index(
        "where every task was at SIGTERM to the lab (stuck-callback): worker-1 stopped in a callback (on_epoch_end)")
    assert result.outcome == "interrupted" and result.stall["moment"] == "SIGTERM to the lab"
    assert table.why_lines(result)[0].startswith("where every task was at SIGTERM to the lab (stuck-callback): ")


def test_a_down_of_a_live_run_is_named_and_only_tasks_with_a_stacks_file_are_asked(tmp_path, monkeypatch, capsys):
    def marked(seen):
        from tflab.core import runowner
        if not runowner.ended_by_down(seen.run_dir):
            runowner.mark_ended_by_down(seen.run_dir)  # as cli/upkeep.end_live_run does before its SIGTERM

    # worker-0's program never registered for the signal (no tasks/worker-0.stacks): not asked, not waited for
    backend, result = interrupted_run(tmp_path, monkeypatch, {"worker-1": IN_GENERATOR}, marked)
    out = capsys.readouterr().out
    assert backend.asked_stacks == [["worker-1"]]
    assert "ended by tflab down: stopping every task" in out
    assert "where every task was at tflab down (stuck-input-pipeline): worker-1 stopped in the input pipeline" in out
    assert result.stall["moment"] == "tflab down" and "worker-0: no stacks" in result.stall["places"]["worker-0"]


def test_an_interrupt_while_training_advances_says_where_each_task_was_without_a_diagnosis(tmp_path, monkeypatch,
                                                                                          capsys):
    def advancing(seen):
        for task in ("worker-0", "worker-1"):
            seen.watch.saw(task, {"event": "epoch", "task": task, "epoch": 1})

    _, result = interrupted_run(tmp_path, monkeypatch, {"worker-0": IN_STEP, "worker-1": IN_CALLBACK}, advancing)
    assert result.stall["kind"] == "running" and result.stall["fix"].startswith("nothing to fix: training was still")
    assert "worker-1 stopped in a callback (on_epoch_end)" in result.stall["what"]
    assert "where every task was at SIGTERM to the lab (running): " in capsys.readouterr().out


def test_an_interrupt_whose_stacks_request_fails_still_stops_and_summarises(tmp_path, monkeypatch, capsys):
    from tflab.core.errors import LabError

    def refused(tasks):
        raise LabError("docker kill: the engine is gone")

    monkeypatch.setattr(FakeBackend, "dump_stacks", lambda self, tasks: refused(tasks))
    backend, result = interrupted_run(tmp_path, monkeypatch, {"worker-0": IN_STEP})
    assert "the lab could not ask worker-0, worker-1 where they are (docker kill: the engine is gone)" in \
        capsys.readouterr().out
    assert backend.ended == dict.fromkeys(backend.tasks, 137) and result.outcome == "interrupted"
    assert result.stall is None


def test_the_limit_before_the_first_step_grows_with_the_tasks_each_cpu_starts():
    """64 workers on 2 CPUs printed nothing in 300 s (issue 51): each start is about 10 s of a CPU."""
    assert stall.Limits.from_setting("auto", 2, 2).limit(None) == stall.CEILING_SECONDS
    assert stall.Limits.from_setting("auto", 20, 2).limit(None) == stall.CEILING_SECONDS
    assert stall.Limits.from_setting("auto", 64, 2).limit(None) == 960
    assert stall.Limits.from_setting("auto", 64, 2).limit(1.0) == stall.FLOOR_SECONDS  # once stepping: the pace
    assert stall.Limits.from_setting("auto", 64, None).limit(None) == stall.CEILING_SECONDS
    assert stall.Limits.from_setting("120", 64, 2).limit(None) == 120
