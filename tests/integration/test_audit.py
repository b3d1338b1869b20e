"""AUDIT (issue 25): runs that exit 0 on every worker and are still wrong are found out, with the
fix, and right ones are not: the wrong scripts here find fault; the lab's own model under every
strategy (test_training.py, mirrored among them), the tutorial-style example (test_user_script.py,
under the fixture's AUDIT=strict) and parameter_server (test_parameter_server.py) give none."""

import json
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture(scope="module")
def unsharded(tmp_path_factory):
    """Not sharded, and every worker saving to one path of the run folder; the fixture's default,
    AUDIT=strict."""
    from tflab.pytest_plugin import run_lab

    return run_lab(tmp_path_factory.mktemp("audit"), "unsharded",
                   {"workers": 2, "script": SCRIPTS / "audit_unsharded_shared_save.py", "args": "--epochs 2",
                    "restarts": 0})


@pytest.fixture(scope="module")
def drift(tmp_path_factory):
    from tflab.pytest_plugin import run_lab

    return run_lab(tmp_path_factory.mktemp("audit"), "drift",
                   {"workers": 2, "script": SCRIPTS / "audit_drift.py", "args": "--epochs 3", "restarts": 0,
                    "audit": "on"})


@pytest.fixture(scope="module")
def unseeded(tmp_path_factory):
    from tflab.pytest_plugin import run_lab

    return run_lab(tmp_path_factory.mktemp("audit"), "unseeded",
                   {"workers": 2, "script": SCRIPTS / "audit_unseeded_shuffle.py", "args": "--epochs 2",
                    "restarts": 0, "audit": "on"})


def kinds(lab) -> list[str]:
    return sorted(finding["kind"] for finding in lab.findings)


def test_unsharded_data_and_one_path_for_every_worker_are_findings_that_fail_a_strict_run(unsharded):
    assert [(task.status, task.exit_code) for task in unsharded.tasks.values()] == [("ok", 0), ("ok", 0)]
    assert not unsharded.ok and unsharded.returncode == 1 and unsharded.summary.outcome == "failed"
    assert kinds(unsharded) in (["shared-write", "unsharded"], ["overwrote-chief", "unsharded"]), unsharded.why()
    data = next(f for f in unsharded.findings if f["kind"] == "unsharded")
    assert data["tasks"] == ["worker-0", "worker-1"]
    # 16 steps an epoch (1024 examples, global batch 64), each worker handed the same 32 of every batch
    assert data["message"].startswith("worker-0 and worker-1 trained on the same examples in 32 of 32 sampled steps: "
                                      "the dataset is not sharded, and each consumed 512 examples in epoch 1")
    assert "AutoShardPolicy is OFF" in data["fix"]
    write = next(f for f in unsharded.findings if f["kind"] != "unsharded")
    assert "/model.keras" in write["message"] and "by Model.save at audit_unsharded_shared_save.py:" in write["message"]
    assert "write_filepath" in write["fix"]
    table = unsharded.output
    assert "finding (unsharded): worker-0 and worker-1 trained on the same examples" in table
    assert "2 audit findings (AUDIT=strict fails the run)" in table
    assert "finding (unsharded)" in unsharded.why()
    # what each worker logged: 16 sampled steps of each of 2 epochs, the counts, the write
    for task in unsharded.tasks.values():
        assert len(task.of("audit_batch")) == 2 * 16
        assert [r["examples"] for r in task.of("audit_pass") if r["steps"]] == [512, 512]
        assert [r["policy"] for r in task.of("audit_pass") if r["steps"]] == ["OFF", "OFF"]


def test_replicas_that_drift_in_a_custom_loop_are_a_finding_naming_the_first_epoch(drift):
    assert drift.ok and drift.returncode == 0, drift.why()  # AUDIT=on: reported, not failed
    assert kinds(drift) == ["replicas-differ"], drift.why()
    message = drift.findings[0]["message"]
    assert message.startswith("worker-0 and worker-1 hold different weights from epoch 1 on ("), message
    assert "1 audit finding" in drift.output and "fails the run" not in drift.output


def test_data_sharding_after_a_shuffle_with_no_seed_is_overlapping_shards(unseeded):
    """1024 examples shuffled apart on each worker, then every other one kept: of the 16 x 32 = 512
    each samples in an epoch, about a half of the other's, 256, are its own too (never 0 by chance)."""
    assert unseeded.ok, unseeded.why()
    assert kinds(unseeded) == ["overlapping-shards"], unseeded.why()
    message = unseeded.findings[0]["message"]
    assert message.startswith("worker-0 and worker-1 trained on ") and " of the same examples among the 512 each " \
        "sampled in epoch 1 (disjoint shards share none): their shards overlap" in message, message
    shared = int(message.split(" trained on ")[1].split()[0])
    assert 128 < shared < 384, message
    assert "seed" in unseeded.findings[0]["fix"]


@pytest.fixture(scope="module")
def nan_loss(tmp_path_factory):
    """The issue-36 run: an MWMS fit whose loss is nan every epoch and which exits 0 on every worker;
    the fixture's default, AUDIT=strict."""
    from tflab.pytest_plugin import run_lab

    return run_lab(tmp_path_factory.mktemp("audit"), "nan-loss",
                   {"workers": 2, "script": SCRIPTS / "nan_loss.py", "args": "--epochs 3", "restarts": 0})


def test_a_loss_that_went_nan_is_logged_and_a_finding_that_fails_a_strict_run(nan_loss):
    assert [(task.status, task.exit_code) for task in nan_loss.tasks.values()] == [("ok", 0), ("ok", 0)]
    assert not nan_loss.ok and nan_loss.returncode == 1 and nan_loss.summary.outcome == "failed", nan_loss.why()
    assert kinds(nan_loss) == ["non-finite"]
    finding = nan_loss.findings[0]
    assert finding["tasks"] == ["worker-0", "worker-1"]
    assert finding["message"].startswith("worker-0 and worker-1: the loss was nan from epoch 1 on (every epoch)")
    assert "STRATEGY=single" in finding["fix"] and "enable_check_numerics" in finding["fix"]
    # Every epoch is logged, its loss as the word JSON can carry, and read back as the float it was.
    epochs = nan_loss.tasks["worker-0"].of("epoch")
    assert [(e["epoch"], e["loss"]) for e in epochs] == [(1, "nan"), (2, "nan"), (3, "nan")]
    assert all(str(loss) == "nan" for loss in nan_loss.losses("worker-0"))
    from tflab.core import runfolder

    for line in runfolder.log_path(nan_loss.tasks_dir, "worker-0").read_text().splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in worker-0.jsonl is no JSON"))
    assert "finding (non-finite): worker-0 and worker-1: the loss was nan from epoch 1 on" in nan_loss.output


@pytest.fixture(scope="module", params=["operator", "tutorial"])
def worker_saves(request, tmp_path_factory):
    """The training operator's distribution_strategy save (worker_tmp_<i> inside the chief's
    SavedModel, never deleted), and TensorFlow's tutorial's (workertemp_<i>, deleted)."""
    from tflab.pytest_plugin import run_lab

    args = "--epochs 2" + (" --tutorial" if request.param == "tutorial" else "")
    return request.param, run_lab(tmp_path_factory.mktemp("audit"), f"saves-{request.param}",
                                  {"workers": 2, "script": SCRIPTS / "operator_worker_tmp.py", "args": args,
                                   "restarts": 0, "audit": "on"})


def test_a_non_chiefs_save_left_in_the_chiefs_saved_model_is_a_finding_and_a_deleted_one_is_not(worker_saves):
    way, lab = worker_saves
    assert [(task.status, task.exit_code) for task in lab.tasks.values()] == [("ok", 0), ("ok", 0)], lab.why()
    assert (lab.tasks_dir / "saved_model" / "saved_model.pb").is_file()
    if way == "tutorial":
        assert lab.findings == [], lab.why()
        assert not (lab.tasks_dir / "workertemp_1").exists()
        return
    assert kinds(lab) == ["worker-leftover"], lab.why()
    (finding,) = lab.findings
    assert finding["tasks"] == ["worker-1"]
    assert finding["message"].startswith("worker-1 left /lab/run/saved_model/worker_tmp_1 (a folder, by Model.save "
                                         "at operator_worker_tmp.py:")
    assert "remove_temp_dirpath" in finding["fix"]
    assert "finding (worker-leftover)" in lab.why()
    # each epoch's resident memory, from the script's own process
    for task in lab.tasks.values():
        assert all(r["rss_bytes"] > 100e6 for r in task.of("epoch")), task.of("epoch")
