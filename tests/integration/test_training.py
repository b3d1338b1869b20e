"""Real runs of every strategy on real Compose (and the local backend), checked through their logs.

Every run uses the same data, seed and global batch (96 splits evenly over 1, 2 and 3 replicas),
so besides each run's own checks, their per-epoch losses must agree.
"""

import json
import math
import statistics

import pytest
from tflab.core.schema import completeness

SAME = dict(SEED=0, GLOBAL_BATCH=96, EXAMPLES=4096, EPOCHS=10)
RUNS = {  # name -> (Compose CLI, settings); None: the CLI the lab picks by itself
    "single": (None, dict(STRATEGY="single")),
    "mirrored-2": (None, dict(STRATEGY="mirrored", REPLICAS=2)),
    "multiworker-2-v1": ("v1", dict(STRATEGY="multiworker", WORKERS=2)),
    "multiworker-2-v2": ("v2", dict(STRATEGY="multiworker", WORKERS=2)),
    "multiworker-3": (None, dict(STRATEGY="multiworker", WORKERS=3)),
    "local-2": (None, dict(STRATEGY="multiworker", WORKERS=2, BACKEND="local")),
    # The lab's own loop (one packed all-reduce per step, 8 steps per call) must train the same.
    "multiworker-2-custom": (None, dict(STRATEGY="multiworker", WORKERS=2, LOOP="custom", STEPS_PER_EXECUTION=8)),
}
# A model that learned nothing scores about the baseline, the mean of y^2 (predicting 0). After 10
# epochs at global batch 96 this one measured 0.15 x baseline (0.04 at the default batch 64); 0.25
# leaves room for float rounding, none for a model that stopped learning halfway.
FINAL_LOSS_BOUND = 0.25
# Same data, seed and global batch: the strategies differ only in how float32 sums are ordered
# (all-reduce vs one device), measured here at up to 4e-5 relative over 10 epochs.
LOSS_RTOL = 1e-4


# Under xdist each run's tests are one group, so the seven runs go side by side (conftest.py).
@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.xdist_group(f"training-{name}")) for name in RUNS])
def run(request, lab):
    cli, settings = RUNS[request.param]
    return lab.run(request.param, cli=cli, **SAME, **settings)


def test_every_task_exited_0_and_the_lab_said_ok(run):
    assert run.finished.returncode == 0, run.why()
    assert run.summary["ok"] and run.summary["outcome"] == "ok", run.why()
    assert [row["status"] for row in run.summary["tasks"]] == ["ok"] * len(run.task_names), run.why()
    assert [row["exit_code"] for row in run.summary["tasks"]] == [0] * len(run.task_names)
    expected = {"single": 1, "mirrored": 1, "multiworker": int(run.settings.get("WORKERS", 0))}
    assert len(run.task_names) == expected[run.settings["STRATEGY"]]
    assert f"run test-{run.name}: ok in" in run.finished.stdout


def test_the_audit_finds_nothing_wrong_and_saw_each_worker_train_on_its_own_share(run):
    """AUDIT=on (the default): the lab's own model is sharded by DATA, saved by the chief alone
    and trained in sync, under every strategy and loop: no finding, no false alarm."""
    assert run.summary["findings"] == [], run.why()
    if run.settings["STRATEGY"] == "single":  # no strategy, nothing distributed: nothing to compare
        return
    batches = {task: [r["digest"] for r in run.of(task, "audit_batch")] for task in run.task_names}
    assert all(len(digests) == 16 * SAME["EPOCHS"] for digests in batches.values()), run.why()
    for task in run.task_names[1:]:
        assert not set(batches[task]) & set(batches[run.task_names[0]])  # each its own share of every step
    ends = [r for task in run.task_names for r in run.of(task, "audit_weights") if r["at"] == "end"]
    assert len({r["digest"] for r in ends}) == 1 and len(ends) == len(run.task_names)


def test_every_log_is_complete_and_valid(run):
    for task in run.task_names:
        assert completeness(run.events(task), epochs=SAME["EPOCHS"]) == [], run.why()
        start = run.of(task, "start")[0]
        assert start["strategy"] == run.settings["STRATEGY"]
        assert start["cluster"] == run.config["cluster"]
        assert start["versions"]["tensorflow"].startswith("2.21.")
        assert start["versions"]["keras"].startswith("tf-keras 2.21.")


def test_loss_falls_every_epoch_and_ends_well_below_the_baseline(run):
    for task in run.task_names:
        losses = run.losses(task)
        baseline = run.of(task, "start")[0]["baseline_loss"]
        assert all(later < earlier for earlier, later in zip(losses, losses[1:])), losses
        assert losses[-1] < FINAL_LOSS_BOUND * baseline, (losses[-1], baseline)
        assert run.of(task, "end")[0]["final_loss"] == losses[-1]


def test_timings_are_positive_and_consistent(run):
    steps = SAME["EXAMPLES"] // SAME["GLOBAL_BATCH"]
    for task in run.task_names:
        records = run.events(task)
        times = [r["time"] for r in records]
        assert times == sorted(times)
        ready, end = run.of(task, "cluster_ready")[0], run.of(task, "end")[0]
        epochs = run.of(task, "epoch")
        assert 0 < ready["seconds"] < end["total_seconds"] < run.seconds
        assert all(e["steps"] == steps for e in epochs), [e["steps"] for e in epochs]
        for e in epochs:
            assert e["seconds"] > 0
            assert math.isclose(e["examples_per_second"], steps * SAME["GLOBAL_BATCH"] / e["seconds"])
        assert sum(e["seconds"] for e in epochs) < end["total_seconds"] - ready["seconds"]
        # Tracing makes the first step (timed from fit's start) the slowest by far.
        assert 0 < end["steady_step_seconds"] < end["first_step_seconds"] < end["total_seconds"] - ready["seconds"]
        assert end["steady_step_seconds"] < statistics.median(e["seconds"] for e in epochs[1:]) / steps * 3
        assert end["peak_rss_bytes"] > 100e6  # TensorFlow alone takes more than this
        assert ready["replicas"] == {"single": 1, "mirrored": 2}.get(run.settings["STRATEGY"], len(run.task_names))


def test_every_worker_ends_with_the_same_weights(run):
    digests = {run.of(task, "end")[0]["weights_sha256"] for task in run.task_names}
    assert len(digests) == 1 and len(digests.pop()) == 64
    assert run.summary["weights_agree"]


def test_the_chief_alone_wrote_the_model_and_the_outputs_are_all_there(run):
    names = {path.name for path in run.run_dir.iterdir()}
    assert {"config.json", "summary.json", "output.log", "owner.json", "tasks"} <= names  # the lab's
    written = {path.name for path in run.tasks_dir.iterdir()}  # the tasks' space: all they could write
    assert {"model.keras"} | {f"{task}.jsonl" for task in run.task_names} <= written
    assert not names & written, "the lab's records and the tasks' files are apart"
    assert not [name for name in names | written if "scratch" in name or name.startswith("tflab-")]
    output = (run.run_dir / "output.log").read_text()
    for task in run.task_names:
        assert f"[{task}] done: final loss" in output, f"{task} missing from output.log"
    assert (run.run_dir.parent / "latest").resolve().parent == run.run_dir.parent


def test_the_summary_is_the_logs(run):
    for row, task in zip(run.summary["tasks"], run.task_names):
        end = run.of(task, "end")[0]
        assert row["task"] == task
        assert row["final_loss"] == end["final_loss"]
        assert row["steady_step_seconds"] == end["steady_step_seconds"]
        assert row["losses"] == run.losses(task)
        assert row["examples_per_second"] == pytest.approx(SAME["GLOBAL_BATCH"] / end["steady_step_seconds"])
    # The same, read from the files on disk with json alone: the summary and the fixture's readers
    # (run.of, run.summary) share the lab's log reading, so a fault there would agree with itself.
    written = json.loads((run.run_dir / "summary.json").read_text())
    expected_tasks = {"single": ["single"], "mirrored": ["mirrored"]}.get(
        run.settings["STRATEGY"], [f"worker-{index}" for index in range(int(run.settings.get("WORKERS", 0)))])
    assert [row["task"] for row in written["tasks"]] == expected_tasks
    for row in written["tasks"]:
        lines = (run.tasks_dir / f"{row['task']}.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        ends = [record for record in records if record["event"] == "end"]
        assert len(ends) == 1
        assert row["final_loss"] == ends[0]["final_loss"]
        assert row["steady_step_seconds"] == ends[0]["steady_step_seconds"]
        assert row["losses"] == [record["loss"] for record in records if record["event"] == "epoch"]
        assert len(row["losses"]) == SAME["EPOCHS"]


def test_the_strategies_agree_epoch_by_epoch(lab):
    runs = {name: lab.run(name, cli=cli, **SAME, **settings) for name, (cli, settings) in RUNS.items()}
    reference = runs["single"].losses("single")
    assert len(reference) == SAME["EPOCHS"]
    for name, run in runs.items():
        for task in run.task_names:
            assert run.losses(task) == pytest.approx(reference, rel=LOSS_RTOL), (name, task)
