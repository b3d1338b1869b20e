"""`make chaos SCENARIO=preempt` on real Compose: a notice, a grace, a kill, and what it cost.

Two workers at smoke size, as test_chaos.py. Each run is asserted on several things at once, to
keep the suite's time small: one preemption whose notice the trainer meets (GCE's, through
TensorFlow's PreemptionCheckpointHandler in the custom loop: resumes at the saved step, same
final weights as an undisturbed run, no step lost) and one whose grace it does not meet (GCE's
notice under fit: TF saves on the notice, then trains on through its hour-long GCE grace, and is
killed at GRACE: said so, resumed from its last checkpoint at or before the kill, steps lost counted)."""

import logging
import math

import pytest
from tflab.core.schema import attempts, by_event

log = logging.getLogger("tflab.tests")

SIZE = dict(STRATEGY="multiworker", WORKERS=2, EPOCHS=5, EXAMPLES=2048, GLOBAL_BATCH=64, SEED=0)
STEPS = 2048 // 64
# The custom loop runs an epoch in 0.2-0.5 s here: at 5 epochs it could end
# before TF's once-a-second poll of the metadata server saw the notice given after epoch 2 (seen:
# 9.3 s for the whole run, no preemption). At 30 it trains on for seconds after.
CUSTOM_SIZE = {**SIZE, "EPOCHS": 30}


@pytest.fixture(scope="module")
def custom_reference(lab):
    run = lab.run("preempt-reference-custom", LOOP="custom", **CUSTOM_SIZE)
    assert run.finished.returncode == 0, run.why()
    return run


def the_preemption(run) -> dict:
    found = run.summary["chaos"]["preemptions"]
    assert len(found) == 1, run.summary["chaos"]
    log.info("%s: %s", run.name, {k: v for k, v in found[0].items() if k != "noticed_at"})
    return found[0]


@pytest.mark.xdist_group("preempt-gce-custom")
def test_a_gce_notice_is_met_by_tensorflows_handler_and_costs_no_step(lab, custom_reference):
    run = lab.run("preempt-gce-custom", command="chaos", SCENARIO="preempt", NOTICE="gce", GRACE=30,
                  TARGET="worker-1", AT="epoch:2", LOOP="custom", **CUSTOM_SIZE)
    assert run.finished.returncode == 0, run.why()
    assert run.summary["chaos"]["outcome"] == "survived" and len(run.summary["restarts"]) == 1, run.why()
    found = the_preemption(run)
    assert found["notice"] == "gce" and not found["killed"] and found["exit_code"] == 143, found
    assert found["exit_seconds"] < 15, found  # TF polls the metadata server once a second
    for task in run.task_names:
        first = by_event(attempts(run.events(task))[0], "error")
        assert first and first[0]["message"].startswith("preempted (GCE notice): every worker saved"), first
    # Every worker resumed at the very step TF saved at, which is past the notice's epoch.
    steps = set(found["resumed_steps"].values())
    assert len(steps) == 1 and steps.pop() > 2 * STEPS, found
    assert found["steps_lost"] == 0, found
    assert found["training_again_seconds"] < 120, found
    assert "preemption: notice gce at step" in run.finished.stdout
    # Resumed at the step, data skipped to it: the undisturbed run's weights, to the bit.
    assert run.of("worker-0", "end")[-1]["weights_sha256"] == \
        custom_reference.of("worker-0", "end")[0]["weights_sha256"], run.why()
    assert run.summary["weights_agree"]


@pytest.mark.xdist_group("preempt-gce-fit")
def test_a_grace_not_met_is_killed_said_and_resumed_from_the_last_checkpoint(lab):
    """fit with BackupAndRestore(save_before_preemption): TF's GCE path saves on the notice, then
    trains on (its grace on Google Cloud is an hour); the lab's 3 s grace ends first."""
    run = lab.run("preempt-gce-fit", command="chaos", SCENARIO="preempt", NOTICE="gce", GRACE=3,
                  TARGET="worker-1", AT="epoch:2", **{**SIZE, "EPOCHS": 20})
    assert run.finished.returncode == 0, run.why()
    assert run.summary["chaos"]["outcome"] == "survived" and len(run.summary["restarts"]) == 1, run.why()
    found = the_preemption(run)
    assert found["killed"] and found["exit_code"] == 137, found
    assert 3 <= found["exit_seconds"] < 10, found
    line = (f"worker-1 did not exit in the 3 s grace: killed; its last checkpoint was step "
            f"{found['last_checkpoint_step']}")
    assert line in run.finished.stdout, run.finished.stdout[-3000:]
    steps = set(found["resumed_steps"].values())
    assert len(steps) == 1, found
    resumed = steps.pop()
    # Killed at the grace's end, it resumed from its last checkpoint at or before the kill, not from
    # the start: TF's save on the notice or an epoch's backup. The steps of the notice and the kill
    # are the lab's estimates from the epochs' pace, so that checkpoint may lie a little before the
    # notice's step (seen: resumed at 218, notice at 224) or after the kill's (seen on a loaded
    # machine: resumed at 288, the epoch's end, where the kill was estimated at 286), never an
    # epoch past it. What it trained past that checkpoint is counted as lost, never less than none.
    assert 0 < resumed <= found["step_reached"] + STEPS, found
    assert found["steps_lost"] == max(0, found["step_reached"] - resumed), found
    for task in run.task_names:  # the step each task's own `restored` event says, as the summary records it
        restored = by_event(attempts(run.events(task))[-1], "restored")
        assert restored and (restored[0]["epoch"] - 1) * STEPS + restored[0]["step"] == resumed, (task, restored)
    assert run.losses("worker-0")[-1] < run.losses("worker-0")[0]


@pytest.mark.xdist_group("preempt-gce-script")
def test_a_users_script_hears_the_gce_notice_saves_and_resumes(lab, custom_reference):
    # AT=seconds:5 counts from the script's start: on a busy machine the notice comes before the
    # script has imported TensorFlow and formed its cluster, which it must do before its first step
    # can answer it. A fixed 30 s grace once ran out there (worker-1 killed, beside a second suite);
    # the grace is three of this machine's own times to a formed cluster, 30 s at least.
    grace = max(30, math.ceil(3 * custom_reference.ready_seconds))
    run = lab.run("preempt-gce-script", command="chaos", SCENARIO="preempt", NOTICE="gce", GRACE=grace,
                  TARGET="worker-1", AT="seconds:5", SCRIPT="tests/integration/scripts/preempt_notice.py",
                  ARGS="--epochs 40 --checkpoints /lab/run/user-ckpt", STRATEGY="multiworker", WORKERS=2)
    assert run.finished.returncode == 0, run.why()
    assert len(run.summary["restarts"]) == 1, run.why()
    found = the_preemption(run)
    assert not found["killed"] and found["exit_code"] == 143, found
    output = (run.run_dir / "output.log").read_text()
    assert "notice heard: saved at step" in output and "resumed at step" in output
