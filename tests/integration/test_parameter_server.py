"""STRATEGY=parameter_server on real Compose: a chief running fit, two workers and a ps, each a
container of the same image; the workers and the ps only serve, and the lab ends them. The same
with a user's SCRIPT shaped as TF's parameter-server tutorial, run by every task."""

from pathlib import Path

import pytest
from tflab.core.schema import completeness

EPOCHS = 10
SCRIPTS = Path(__file__).parent / "scripts"


@pytest.fixture(scope="module")
def run(lab):
    return lab.run("parameter-server", STRATEGY="parameter_server", WORKERS=2, PS=1, EPOCHS=EPOCHS)


def test_every_task_ends_ok_and_the_servers_are_ended_by_the_lab(run):
    assert run.finished.returncode == 0, run.why()
    assert run.task_names == ["chief-0", "worker-0", "worker-1", "ps-0"]
    rows = {row["task"]: row for row in run.summary["tasks"]}
    assert all(row["status"] == "ok" and row["exit_code"] == 0 for row in rows.values()), rows
    assert [rows[t]["role"] for t in run.task_names] == ["trainer", "server", "server", "server"]
    assert "the chief is done; ending worker-0, worker-1, ps-0" in run.finished.stdout


def test_logs_are_complete_for_the_chief_and_the_servers(run):
    assert completeness(run.events("chief-0"), epochs=EPOCHS) == [], run.why()
    for server in ("worker-0", "worker-1", "ps-0"):
        assert completeness(run.events(server), epochs=EPOCHS, role="server") == [], run.why()
        ready, end = run.of(server, "cluster_ready")[0], run.of(server, "end")[0]
        assert 0 < ready["seconds"] < end["total_seconds"]
    cluster = run.config["cluster"]
    assert cluster == {"chief": ["chief-0:2222"], "worker": ["worker-0:2222", "worker-1:2222"], "ps": ["ps-0:2222"]}


def test_it_converges(run):
    """Asynchronous updates make the losses differ from the synchronous strategies', but the
    same bound holds: measured here 0.84 / 21.09 baseline at the defaults."""
    losses = run.losses("chief-0")
    baseline = run.of("chief-0", "start")[0]["baseline_loss"]
    assert len(losses) == EPOCHS and losses[-1] < losses[0]
    assert losses[-1] < 0.25 * baseline, (losses, baseline)
    assert (run.tasks_dir / "model.keras").exists()


def test_the_audit_finds_nothing_and_leaves_the_remote_steps_alone(run):
    """The steps run on the workers, where the chief's Python cannot look: no batch is sampled, and
    the chief's writes (its model, its backups) are the only ones."""
    assert run.summary["findings"] == [], run.why()
    assert run.of("chief-0", "audit_batch") == []
    assert {r["writer"] for r in run.of("chief-0", "audit_write")} >= {"Model.save"}


@pytest.fixture(scope="module")
def script_run(tmp_path_factory):
    """A user's parameter-server script shaped as TF's tutorial: every task runs it with its own
    TF_CONFIG and tells its role itself; the fixture's default, AUDIT=strict."""
    from tflab.pytest_plugin import run_lab

    return run_lab(tmp_path_factory.mktemp("ps-script"), "ps-script",
                   {"strategy": "parameter_server", "workers": 2, "ps": 1, "evaluator": 1, "restarts": 0,
                    "script": SCRIPTS / "parameter_server_tutorial.py", "args": "--epochs 4"})


def test_a_script_runs_in_every_task_and_the_servers_are_ended_when_the_chief_is_done(script_run):
    """As the training operator runs a TFJob: the job succeeds when the chief does, and the servers,
    which serve forever (server.join()), are then ended as `cleanPodPolicy: Running` ends them:
    SIGTERM, which the script does not handle (exit 143), and no failure."""
    assert script_run.ok and script_run.returncode == 0, script_run.why()
    tasks = script_run.tasks
    assert list(tasks) == ["chief-0", "worker-0", "worker-1", "ps-0", "evaluator-0"]
    assert all(task.status == "ok" and task.role == "script" for task in tasks.values()), script_run.why()
    assert tasks["chief-0"].exit_code == 0 and tasks["evaluator-0"].exit_code in (0, 143)
    assert {tasks[name].exit_code for name in ("worker-0", "worker-1", "ps-0")} <= {0, 143}
    assert all(tasks[name].error is None for name in ("worker-0", "worker-1", "ps-0"))
    assert "the chief is done; ending worker-0, worker-1" in script_run.output
    for task in tasks:  # each its own TF_CONFIG: the same cluster, its own type and index
        start = tasks[task].of("start")[0]
        assert start["cluster"] == script_run.config["cluster"]
    losses = script_run.losses("chief-0")  # Keras's own epochs, from the chief's fit
    assert len(losses) == 4 and losses[-1] < 0.5 * losses[0], losses
    assert script_run.findings == [], script_run.findings
    assert "[ps-0] ps 0 serving" in script_run.output and "[worker-1] worker 1 serving" in script_run.output
