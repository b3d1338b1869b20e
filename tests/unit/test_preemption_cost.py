"""SCENARIO=preempt's pure parts: the step a task was at, what a preemption cost, the lab's words
for a grace not met, and the GCE metadata stand-in's answers (on loopback, as TensorFlow asks)."""

import json
import threading
import urllib.error
import urllib.request
from http.server import ThreadingHTTPServer

import pytest
from tflab.backends import compose
from tflab.core import cluster, runfolder
from tflab.core.errors import LabError
from tflab.core.settings import Settings, SettingsError
from tflab.faults import chaos
from tflab.supervisor import preemption
from tflab.trainer import metadata

STEPS = 32  # steps per epoch


def epochs(*ends):
    """`epoch` events ending at these times, each 0.5 s long."""
    return [{"event": "epoch", "epoch": n, "time": t, "seconds": 0.5} for n, t in enumerate(ends, 1)]


@pytest.mark.parametrize("moment, expected", [
    (9.0, 0),  # before the first epoch's end: nothing counted yet
    (10.0, 32),  # at the first epoch's end
    (10.25, 48),  # half an epoch's pace later
    (10.49, 63),
    (11.0, 64),  # the second epoch's end
    (30.0, 64 + 31),  # long after the last epoch (a stalled task): never a whole epoch more
])
def test_the_step_at_a_moment_counts_whole_epochs_and_the_share_of_the_next(moment, expected):
    assert preemption.step_at(epochs(10.0, 11.0), moment, STEPS) == expected


def test_an_attempt_with_no_epoch_yet_is_where_it_resumed():
    assert preemption.step_at([], 5.0, STEPS, first_step=70) == 70


@pytest.mark.parametrize("reached, backup, expected", [
    (100, "epoch", 96), (95, "epoch", 64), (100, "10", 100), (109, "10", 100), (100, "off", None),
    # A target killed at the grace's end before it logged an epoch has no step (Preemption._step):
    # no checkpoint is known, where `None // every` raised TypeError in the chaos tick before.
    (None, "epoch", None), (None, "10", None)])
def test_the_last_checkpoint_follows_backup(reached, backup, expected):
    assert preemption.checkpoint_step(reached, STEPS, backup) == expected


def test_steps_lost_are_what_was_trained_past_the_earliest_resume():
    assert preemption.resumed_step({"epoch": 3, "step": 5}, STEPS) == 69
    assert preemption.steps_lost(100, {"worker-0": 96, "worker-1": 96}) == 4
    assert preemption.steps_lost(100, {"worker-0": 96, "worker-1": 64}) == 36  # the cluster redoes from the earliest
    assert preemption.steps_lost(70, {"worker-0": 70}) == 0  # saved on the notice
    assert preemption.steps_lost(60, {"worker-0": 70}) == 0  # an estimate short of the save: never negative
    assert preemption.steps_lost(None, {"worker-0": 70}) is None and preemption.steps_lost(5, {}) is None


def test_a_grace_not_met_is_said_with_the_last_checkpoint():
    assert preemption.grace_line("worker-1", 30, 128) == \
        "worker-1 did not exit in the 30 s grace: killed; its last checkpoint was step 128"
    assert preemption.grace_line("worker-1", 2.5, None).startswith(
        "worker-1 did not exit in the 2.5 s grace: killed; it has no checkpoint")


def test_the_summary_line_of_a_preemption():
    record = {"notice": "gce", "step_at_notice": 70, "exit_code": 143, "killed": False, "exit_seconds": 1.23,
              "training_again_seconds": 9.87, "resumed_steps": {"worker-0": 71, "worker-1": 71}, "steps_lost": 0}
    assert preemption.result_line(record) == (
        "preemption: notice gce at step 70; exited (code 143) 1.2 s after it; training again 9.9 s after it, "
        "resumed at step 71 on every task; 0 steps lost")
    killed = {**record, "killed": True, "resumed_steps": {}, "steps_lost": None, "training_again_seconds": None}
    assert preemption.result_line(killed) == (
        "preemption: notice gce at step 70; killed at the grace's end 1.2 s after it; training again - after it, "
        "not resumed; - steps lost")


def test_notice_and_grace_are_checked():
    with pytest.raises(SettingsError, match="NOTICE=email is not allowed"):
        Settings.from_env({"NOTICE": "email"})
    with pytest.raises(SettingsError, match="GRACE=-1"):
        Settings.from_env({"GRACE": "-1"})
    settings = Settings(backend="swarm", scenario="preempt", notice="gce")
    with pytest.raises(LabError, match="NOTICE=gce is not allowed with BACKEND=swarm"):
        chaos.Chaos(settings).check(settings)


def test_a_gce_notice_gives_the_run_a_metadata_server_and_each_task_its_port():
    settings = Settings(workers=2, scenario="preempt", notice="gce")
    services = compose.render_run(settings, cluster.build(settings))["services"]
    assert services["metadata"]["command"] == ["python", "-m", "tflab.metadata"]
    assert services["metadata"]["environment"] == {"TFLAB_METADATA_TASKS": "worker-0,worker-1",
                                                   "TFLAB_METADATA_CONTROL": "/lab/metadata"}
    assert [services[t]["environment"]["GCE_METADATA_IP"] for t in ("worker-0", "worker-1")] == \
        ["metadata:8080", "metadata:8081"]
    for other in (Settings(workers=2, scenario="preempt"), Settings(workers=2, notice="gce")):
        assert "metadata" not in compose.render_run(other, cluster.build(other))["services"]


@pytest.fixture
def stand_in(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), metadata.handler_for(tmp_path / "metadata", "worker-1"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}/computeMetadata/v1/"
    server.shutdown()


def get(url, flavor="Google"):
    request = urllib.request.Request(url, headers={"Metadata-Flavor": flavor} if flavor else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode(), response.headers["Metadata-Flavor"]
    except urllib.error.HTTPError as error:
        return error.code, "", error.headers["Metadata-Flavor"]


def test_the_stand_in_answers_as_gce_and_turns_at_the_notice(stand_in):
    """The requests TensorFlow makes (failure_handling_util.py): instance/hostname to detect GCE,
    instance/maintenance-event to watch, each with Metadata-Flavor: Google."""
    run_dir, base = stand_in
    assert get(base + "instance/hostname") == (200, "worker-1.c.tflab.internal", "Google")
    assert get(base + "instance/maintenance-event")[:2] == (200, "NONE")
    assert get(base + "instance/preempted")[:2] == (200, "FALSE")
    assert get(base + "instance/hostname", flavor=None)[0] == 403  # as GCE refuses it
    assert get(base + "instance/attributes/x")[0] == 404
    runfolder.set_notice(run_dir, "worker-1", True)
    assert json.loads((run_dir / "metadata" / "worker-1.json").read_text()) == {"preempted": True}
    assert get(base + "instance/maintenance-event")[:2] == (200, "TERMINATE_ON_HOST_MAINTENANCE")
    assert get(base + "instance/preempted")[:2] == (200, "TRUE")
    runfolder.set_notice(run_dir, "worker-1", False)  # its replacement is told nothing
    assert get(base + "instance/preempted")[:2] == (200, "FALSE")
    (run_dir / "metadata" / "worker-1.json").write_text("[not what the lab writes")
    assert get(base + "instance/preempted")[:2] == (200, "FALSE")
