"""`make chaos` on real Compose, every scenario once at smoke size, each outcome asserted.

Every run trains two workers on the same data and seed as an undisturbed reference run. Bounds
are stated where they are used; times are generous because the machine is shared, and what is
asserted is the outcome and its order of magnitude, not a speed."""

import json
import math
import threading
import time
from pathlib import Path

import pytest
from labtest.runs import LabRun
from tflab.backends import compose
from tflab.core import cluster, runfolder
from tflab.core.runfolder import read_run_config
from tflab.core.schema import attempts, by_event, completeness, read_events
from tflab.core.stacks import stacks_file

SIZE = dict(STRATEGY="multiworker", WORKERS=2, EPOCHS=5, EXAMPLES=2048, GLOBAL_BATCH=64, SEED=0)
STEPS = 2048 // 64
# Restored at an epoch boundary, training is the undisturbed run's to float rounding; restored
# mid-epoch (a SIGTERM backup), Keras starts that epoch's data over, so a few batches repeat:
# measured 0.2 % off at the end here; 2 % bounds it.
MID_EPOCH_RTOL = 0.02


@pytest.fixture(scope="module")
def reference(lab):
    run = lab.run("chaos-reference", **SIZE)
    assert run.finished.returncode == 0, run.why()
    return run


def chaos(lab, name, **settings):
    return lab.run(f"chaos-{name}", command="chaos", **SIZE, **settings)


def epochs_after(run, task, epoch):
    return [e for e in run.of(task, "epoch") if e["epoch"] > epoch]


def first_attempt(run, task, event):
    """The task's `event` records from before the lab's first restart."""
    return by_event(attempts(run.events(task))[0], event)


def assert_survived(run, restarts):
    assert run.finished.returncode == 0, run.why()
    assert run.summary["ok"] and run.summary["chaos"]["outcome"] == "survived", run.why()
    assert len(run.summary["restarts"]) == restarts, run.why()
    for task in run.task_names:
        assert completeness(run.events(task), epochs=SIZE["EPOCHS"]) == [], run.why()
    assert run.summary["weights_agree"]
    assert (run.run_dir / "chaos.jsonl").exists()


# Under xdist each scenario is a group of its own (so they run side by side), and the reference run
# is made once for all (conftest.py's Lab). A scenario whose assertion reads epoch times runs alone.
@pytest.mark.xdist_group("chaos-kill")
def test_kill_restarts_the_cluster_and_resumes_exactly(lab, reference):
    run = chaos(lab, "kill", SCENARIO="kill", TARGET="worker-1", AT="epoch:2")
    assert_survived(run, restarts=1)
    result = run.summary["chaos"]
    assert result["detection_seconds"] < 10  # the lab sees the container die within a poll or two
    # Stop, restart, imports, rendezvous, restore, one epoch: a fresh start of the cluster, so the
    # undisturbed run's whole time at this machine's pace (its containers' start and stop included),
    # thrice for a restart beside other runs. A fixed 120 s was a third of one `import tensorflow` at
    # load 12 on 2 cores; ready plus an epoch alone left out the engine's own start and stop, which
    # do not shrink with the machine's load (idle: 14.5 s against 3 x (3.6 + 0.7) s).
    assert result["recovery_seconds"] < 3 * reference.seconds, (result, reference.seconds)
    # The kill lands once the lab has seen epoch 2, but epochs take well under a second, so a
    # third may be done (and backed up) by then: the resume point is the epoch after the last
    # one the chief reported before it died, which is never earlier than 3.
    reported = len(first_attempt(run, "worker-0", "epoch"))
    assert reported >= 2
    for task in run.task_names:
        assert [(r["epoch"], r["step"]) for r in run.of(task, "restored")] == [(reported + 1, 0)]
    assert run.losses("worker-0") == pytest.approx(reference.losses("worker-0"), rel=1e-6)
    assert run.of("worker-0", "end")[-1]["weights_sha256"] == reference.of("worker-0", "end")[0]["weights_sha256"]


@pytest.mark.xdist_group("chaos-verdict")
def test_a_kill_resumed_at_an_epoch_boundary_is_judged_equivalent_to_its_twin(lab, reference):
    """The kill test's run, judged (faults/verdict.py) against the reference run as its TWIN: resumed
    where the chief's last epoch ended, it ends at the reference's losses and weights within
    verdict.RTOL, no step repeated or skipped; the verdict is in the summary, the output and why()."""
    run = chaos(lab, "verdict", SCENARIO="kill", TARGET="worker-1", AT="epoch:2", VERDICT="auto",
                TWIN=reference.run_dir.name)
    assert_survived(run, restarts=1)
    judged = run.summary["chaos"]["verdict"]
    assert judged["kind"] == "equivalent", run.why()
    assert judged["twin"] == reference.run_dir.name
    assert (judged["steps_repeated"], judged["steps_skipped"]) == (0, 0), judged
    assert judged["difference"] <= 1, judged
    assert f"chaos: verdict: equivalent: {judged['words']}" in run.finished.output
    for task in run.task_names:  # the fingerprint the verdict compared is the trainer's own
        assert [v["name"] for v in run.of(task, "end")[-1]["weights_fingerprint"]] == \
            [v["name"] for v in reference.of(task, "end")[0]["weights_fingerprint"]]
    assert not any(path.name.startswith("twin-") for path in lab.runs_dir.iterdir())  # TWIN=: none run


@pytest.mark.xdist_group("chaos-kill-step")
def test_a_kill_at_a_step_lands_at_that_very_step_and_the_grid_says_so(lab):
    """make chaos-grid, one fault at two moments: AT=step:40, 32 steps an epoch, and a step past the
    run's last, which the grid marks n/a with make chaos's refusal and never runs. At step:40 the
    target's hooks log step 40 (epoch 2, its 8th step) and wait there for the kill
    (trainer/chaosstep.py), so it lands at step 40 itself (STEPS_PER_EXECUTION is 1: the hooks see
    every step) and never later, as AT=epoch:N can (a third epoch may be done by then, test_kill_...
    above). Killed inside epoch 2, the run resumes from epoch 1's backup, at epoch 2, on every task."""
    grid = lab.run("chaos-grid-kill-step", command="chaos-grid", **SIZE, SCENARIOS="kill", TARGET="worker-1",
                   MOMENTS=f"step:40 step:{SIZE['EPOCHS'] * STEPS + 1}", VERDICT="off")  # the twin: a test of its own
    assert grid.returncode == 0, grid.output
    cells = json.loads((grid.run_dir / "grid.json").read_text())["cells"]
    assert [(cell["at"], cell["outcome"]) for cell in cells] == [("step:40", "survived"), ("step:161", "n/a")], cells
    assert cells[1]["landed"].startswith("AT=step:161 is not allowed with EPOCHS=5 of 32 steps"), cells[1]
    assert "| kill | survived, " in (grid.run_dir / "grid.md").read_text()
    assert (grid.run_dir / "grid.png").exists() and (grid.run_dir / "grid.csv").exists()
    assert cells[0]["verdict"] == "no twin", cells[0]  # VERDICT=off: said, not guessed
    run = LabRun(0, grid.output, grid.run_dir / cells[0]["run"], name="chaos-grid-kill-step/01", settings=SIZE,
                 finished=grid.finished)
    assert_survived(run, restarts=1)
    result = run.summary["chaos"]
    assert result["landed_step"] == 40, result
    assert [(r["step"], r["epoch"]) for r in first_attempt(run, "worker-1", "step")] == [(40, 2)]
    assert len(first_attempt(run, "worker-1", "epoch")) == 1  # it never ended epoch 2
    for task in run.task_names:
        assert [(r["epoch"], r["step"]) for r in run.of(task, "restored")] == [(2, 0)]


@pytest.mark.xdist_group("chaos-kill-save")
def test_a_kill_while_the_chief_writes_its_backup_lands_between_shards_and_index(lab):
    """AT=save:2 on worker-0, the chief, whose backup (backup/chief) is the one every restarted task
    reads: its hooks hold once ckpt-2's shards are on disk and before its index is written
    (trainer/chaossave.py), and the kill lands there. The torn ckpt-2 is never read: every task
    restores epoch 1's backup and resumes at epoch 2, step 0."""
    run = chaos(lab, "kill-save", SCENARIO="kill", TARGET="worker-0", AT="save:2")
    assert_survived(run, restarts=1)
    [saving] = first_attempt(run, "worker-0", "saving")
    assert (saving["save"], saving["file"], saving["index_exists"]) == (2, "backup/chief/ckpt-2.index", False)
    assert saving["written"] and all(name.startswith("backup/chief/ckpt-2_temp/part-") for name in saving["written"])
    assert run.summary["chaos"]["landed"].startswith("while worker-0 wrote checkpoint 2, backup/chief/ckpt-2.index")
    assert len(first_attempt(run, "worker-0", "epoch")) == 1  # killed inside epoch 2's end, before its event
    for task in run.task_names:
        assert [(r["epoch"], r["step"]) for r in run.of(task, "restored")] == [(2, 0)]


@pytest.mark.xdist_group("chaos-stop")
def test_stop_is_a_preemption_saved_at_the_same_step_on_every_worker(lab, reference):
    run = chaos(lab, "stop", SCENARIO="stop", TARGET="worker-1", AT="epoch:2")
    assert_survived(run, restarts=1)
    for task in run.task_names:
        errors = [r["message"] for r in run.of(task, "error")]
        assert errors and errors[0].startswith("preempted (SIGTERM): every worker saved the backup"), errors
        # Saved mid-epoch: resumed inside the epoch that was running when the signal came.
        assert [r["epoch"] for r in run.of(task, "restored")] == [len(first_attempt(run, task, "epoch")) + 1]
    assert run.summary["chaos"]["detection_seconds"] < 10
    assert run.losses("worker-0")[-1] == pytest.approx(reference.losses("worker-0")[-1], rel=MID_EPOCH_RTOL)


@pytest.mark.xdist_group("chaos-pause-short")
@pytest.mark.alone  # a 3 s pause must stay under the heartbeat's timeout with no other run beside it
def test_a_short_pause_is_survived_without_a_restart(lab):
    """Paused for 3 s: under TensorFlow's heartbeat timeout (measured: a pause is noticed after
    about 7-9 s), so the cluster waits and carries on."""
    run = chaos(lab, "pause-short", SCENARIO="pause", TARGET="worker-1", AT="epoch:2", HEAL=3)
    assert_survived(run, restarts=0)
    # The chief waited for its frozen peer: between two of its epochs that the pause overlaps lie
    # about 3 s, where an undisturbed epoch takes well under one. (Not within one epoch's own
    # `seconds`: a pause that lands between two epochs is waited for outside both.)
    moments = {record["event"]: record["time"] for record in read_events(run.run_dir / "chaos.jsonl")}
    ends = [record["time"] for record in run.of("worker-0", "epoch")]
    overlapping = [later - earlier for earlier, later in zip(ends, ends[1:])
                   if earlier <= moments["undone"] and later >= moments["injected"]]
    assert max(overlapping) > 2.5, (moments, ends)


@pytest.mark.xdist_group("chaos-pause-long")
def test_a_long_pause_is_detected_by_the_heartbeat_and_restarted(lab):
    run = chaos(lab, "pause-long", SCENARIO="pause", TARGET="worker-1", AT="epoch:2", HEAL=40)
    assert_survived(run, restarts=1)
    assert 3 < run.summary["chaos"]["detection_seconds"] < 30  # heartbeats, not an instant error


def ask_for_stacks_until_hung(run_dir: Path, target: str, timeout: int) -> None:
    """Once the hang is injected, asks every task of the run for its stacks through the backend
    (Backend.dump_stacks), again each second until the target's show it hung; bounded by the
    run's own TIMEOUT, never timed."""
    chaos_log, hung = run_dir / runfolder.CHAOS_LOG, run_dir / runfolder.TASKS / stacks_file(target)
    stack = None
    for _ in range(timeout):
        if chaos_log.exists() and "injected" in chaos_log.read_text():
            if stack is None:  # config.json is there by now
                settings = read_run_config(run_dir / runfolder.CONFIG)[1]
                stack = compose.ComposeStack(compose.find_compose(), run_dir, settings, "unused",
                                             cluster.build(settings))
            stack.dump_stacks(stack.tasks)
            if hung.exists() and "in _hang" in hung.read_text():
                return
        time.sleep(1)


@pytest.mark.xdist_group("chaos-hang")
def test_a_hang_outlasts_the_heartbeat_without_a_restart_and_every_task_tells_where_it_is(lab):
    """Hung for 20 s, past TensorFlow's heartbeat timeout (a pause that long is a restart, above):
    the target's process and heartbeats live on, so nothing fails, its peer waits, and both carry
    on when it is released. Asked meanwhile, each container writes its Python stacks: the target's
    main thread in the hang, its peer still inside fit, blocked in TensorFlow."""
    run_dir = lab.runs_dir / "test-chaos-hang"
    asking = threading.Thread(target=ask_for_stacks_until_hung, args=(run_dir, "worker-1", 600), daemon=True)
    asking.start()
    run = chaos(lab, "hang", SCENARIO="hang", TARGET="worker-1", AT="epoch:2", HEAL=20, TIMEOUT=600)
    asking.join(timeout=60)
    assert_survived(run, restarts=0)
    moments = {record["event"]: record["time"] for record in read_events(run.run_dir / "chaos.jsonl")}
    ends = [record["time"] for record in run.of("worker-0", "epoch")]
    overlapping = [later - earlier for earlier, later in zip(ends, ends[1:])
                   if earlier <= moments["undone"] and later >= moments["injected"]]
    assert max(overlapping) > 15, (moments, ends)  # the chief waited out most of the 20 s
    target = (run.run_dir / runfolder.TASKS / stacks_file("worker-1")).read_text()
    peer = (run.run_dir / runfolder.TASKS / stacks_file("worker-0")).read_text()
    assert "signals.py" in target and "in _hang" in target
    assert "in fit" in peer and "in _hang" not in peer


@pytest.mark.xdist_group("chaos-partition")
def test_a_partition_never_undone_ends_cleanly_naming_the_unreachable_peer(lab, reference):
    # PEER_TIMEOUT is how long a worker waits for a peer that has not registered, in the first
    # attempt too, where a peer that only imports TensorFlow more slowly is no fault: a fixed 10 s
    # gave up on it on a busy machine. So it is the undisturbed run's own time to a formed cluster
    # here and now (10 s at least); the restarted cluster, cut off again, gives up after it.
    peer_timeout = max(10, math.ceil(reference.ready_seconds))
    run = chaos(lab, "partition-never", SCENARIO="partition", TARGET="worker-1", AT="epoch:2", HEAL="never",
                RESTARTS=1, PEER_TIMEOUT=peer_timeout)
    assert run.finished.returncode == 1, run.why()
    assert run.summary["chaos"]["outcome"] == "ended cleanly"
    assert len(run.summary["restarts"]) == 1
    messages = [row["error"] for row in run.summary["tasks"]]
    assert any(m and f"gave up after {peer_timeout} s waiting for the cluster; could not reach worker-" in m
               for m in messages), (messages, [row["earlier_errors"] for row in run.summary["tasks"]], run.why())
    # It ended by itself, not by TIMEOUT: two attempts, each an undisturbed run's time and a peer
    # wait, and a third of that again for the heartbeat's detection, the lab's grace and the restart.
    assert run.summary["wall_seconds"] < 3 * (reference.summary["wall_seconds"] + peer_timeout), \
        (run.summary["wall_seconds"], reference.summary["wall_seconds"], peer_timeout)


# How much a CPU cap slows the tiny MLP depends on how busy the rest of the machine is: measured
# here, 0.25 CPUs made epochs 1.35 to 3.2 times slower (a CI run once saw 1.35, under a 1.5
# bound), 0.05 CPUs 17 times. 0.1 leaves no doubt and costs about 10 s.
@pytest.mark.parametrize("scenario, extra", [
    pytest.param("slow-link", {"SLOW_LINK": "10ms,100mbit"}, marks=pytest.mark.xdist_group("chaos-slow-link")),
    pytest.param("slow-node", {"SLOW_CPUS": 0.1}, marks=pytest.mark.xdist_group("chaos-slow-node"))])
@pytest.mark.alone  # epoch times before and after, which another run beside it would disturb
def test_a_slow_link_or_node_slows_the_steps_after_it(lab, reference, scenario, extra):
    run = chaos(lab, scenario, SCENARIO=scenario, TARGET="worker-1", AT="epoch:2", **extra)
    assert_survived(run, restarts=0)
    before = run.of("worker-0", "epoch")[1]["seconds"]
    # Injected once the lab sees epoch 2's event: its poll (0.5 s) and the engine's update take
    # longer than an epoch (about 0.25 s), so epochs 3 and even 4 can end before the fault lands (a
    # full suite once saw epoch 4 at 0.26 s and epoch 5 at 2.1 s). The last epoch is after it.
    after = [e["seconds"] for e in epochs_after(run, "worker-0", 3)]
    assert after[-1] > 1.5 * before, (before, after)
    assert run.losses("worker-0") == pytest.approx(reference.losses("worker-0"), rel=1e-6)


@pytest.mark.xdist_group("chaos-hang-never")
def test_a_hang_never_released_is_a_stall_named_at_its_target_and_not_restarted(lab):
    """Issue 42 on the real stack: a worker that stops taking part while its process, heartbeats
    and network live on. Before, the run waited for TIMEOUT and said "nothing to explain"; now the
    watch calls it within its own limit, asks every task where it is, names the target, and does
    not restart a stall."""
    run = chaos(lab, "hang-never", SCENARIO="hang", TARGET="worker-1", AT="epoch:2", HEAL="never", TIMEOUT=900)
    summary = run.summary
    assert (run.finished.returncode, summary["outcome"], summary["restarts"]) == (1, "stalled", []), run.why()
    found = summary["stall"]
    assert (found["moment"], found["kind"]) == ("stall", "hang"), found
    assert found["what"].startswith("worker-1 stopped"), found
    assert set(found["places"]) == {"worker-0", "worker-1"}, found
    # Called by the watch, at its limit (5 x the run's pace, 30 s to 300 s), not by TIMEOUT
    assert found["limit_seconds"] <= found["quiet_seconds"] < summary["wall_seconds"] < 900, found
    assert run.why().startswith("run chaos-hang-never: stall (hang): worker-1 stopped"), run.why()
