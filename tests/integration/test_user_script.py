"""SCRIPT=...: a user's own training script, written like TensorFlow's multi-worker tutorial
(examples/multiworker-tutorial/train.py: TF_CONFIG read by the script itself, Keras fit, a
requirements.txt of its own), run unmodified on the lab through the pytest fixture users import
(tflab.pytest_plugin.tflab_cluster)."""

import json
import os
import re
import shlex

import pytest
from labtest.cli import REPO
from tflab.core.schema import completeness

TUTORIAL = REPO / "examples/multiworker-tutorial/train.py"
EPOCHS = 3


@pytest.fixture(scope="module")
def tutorial(tmp_path_factory):
    from tflab.pytest_plugin import run_lab

    return run_lab(tmp_path_factory.mktemp("script"), "tutorial",
                   {"workers": 2, "script": TUTORIAL, "args": f"--epochs {EPOCHS}", "restarts": 0})


def test_the_script_runs_unmodified_on_every_worker_and_ends_ok(tutorial):
    assert tutorial.ok, tutorial.why()
    assert tutorial.findings == [] and tutorial.summary.settings["audit"] == "strict"  # the fixture's default
    assert sorted(tutorial.tasks) == ["worker-0", "worker-1"]
    for name, task in tutorial.tasks.items():
        assert task.status == "ok" and task.exit_code == 0, task
        assert task.role == "script"
        assert completeness(task.events, epochs=EPOCHS, role="script") == [], name
        start = task.of("start")[0]
        assert start["command"][-3:] == ["/lab/script/train.py", "--epochs", str(EPOCHS)]
        assert start["versions"]["keras"].startswith("tf-keras 2.21")


def test_its_requirements_were_layered_on_the_trainer_image(tutorial):
    # tabulate is not in the trainer image: the script imported it and printed its table.
    table_headers = re.findall(r"^worker-\d\S* +\| \S+ +epoch +loss$", (tutorial.run_dir / "output.log").read_text(),
                               re.M)
    assert len(table_headers) == 2, table_headers


def test_the_callback_logged_epochs_and_the_workers_trained_in_sync(tutorial):
    """MultiWorkerMirroredStrategy: every worker computes the same global-batch losses. The
    target y = x . (1..8)/8 has variance 204/64 = 3.2 predicting 0; 3 epochs of Adam(0.01) on
    2048 examples bring it well under a tenth of that (measured about 0.05)."""
    losses = {name: task.losses for name, task in tutorial.tasks.items()}
    assert losses["worker-0"] == pytest.approx(losses["worker-1"], rel=1e-6)
    assert len(losses["worker-0"]) == EPOCHS
    assert all(later < earlier for earlier, later in zip(losses["worker-0"], losses["worker-0"][1:]))
    assert tutorial.tasks["worker-0"].final_loss == losses["worker-0"][-1] < 0.32
    for record in tutorial.tasks["worker-0"].of("epoch"):
        assert record["steps"] == 2048 // 64 and record["examples_per_second"] > 0


def test_a_failing_script_fails_the_run_with_its_exit_code_and_last_words(tflab_cluster):
    lab = tflab_cluster(workers=2, script=TUTORIAL, args="--fail-with 3", restarts=0)
    assert lab.returncode == 1 and not lab.summary["ok"], lab.why()
    for task in lab.tasks.values():
        assert task.status == "failed" and task.exit_code == 3
        assert task.error == "train.py exited with code 3: failing on purpose"


def test_the_fixture_fails_a_test_on_a_refused_setting(tflab_cluster):
    with pytest.raises(pytest.fail.Exception, match="the lab refused the settings: tflab: SCRIPT=nowhere.py"):
        tflab_cluster(script="nowhere.py")


ARGV_SCRIPT = """import json, os, sys
with open(os.path.join(os.environ["TFLAB_OUTPUT"], "argv.json"), "w") as out:
    json.dump(sys.argv[1:], out)
"""
DOLLAR_ARGS = "--home $HOME --user ${USER} '$5' $$ --end $"


@pytest.mark.parametrize("backend", ["compose", "local"])
def test_dollars_in_args_reach_the_script_as_written_on_every_backend(lab, backend, tmp_path_factory):
    """Compose once read `$HOME` in ARGS as the host's; BACKEND=local never did."""
    folder = tmp_path_factory.mktemp("dollar$HOME")
    (folder / "argv.py").write_text(ARGV_SCRIPT)
    folder.chmod(0o755)  # pytest's folders are the host user's alone; the tasks run as uid 1000 when that is root
    run = lab.run(f"dollars-{backend}", STRATEGY="single", SCRIPT=str(folder / "argv.py"), ARGS=DOLLAR_ARGS,
                  BACKEND=backend, RESTARTS=0)
    assert run.finished.returncode == 0, run.why()
    assert json.loads((run.tasks_dir / "argv.json").read_text()) == shlex.split(DOLLAR_ARGS)


DATA_SCRIPT = """import json, os
with open("data.json") as data:  # next to the script: its folder is the working directory
    value = json.load(data)
with open(os.path.join(os.environ["TFLAB_OUTPUT"], "seen.json"), "w") as out:
    json.dump(value, out)
"""


def test_a_script_in_a_folder_only_its_owner_can_read_runs(tflab_cluster, tmp_path):
    """pytest's tmp_path is mode 0700. As root, where the tasks run as uid 1000, a script there once
    failed inside each task ("exited with code 2 ... Permission denied"): its folder is now copied
    into the run folder, the trainers', and the copy mounted. (The fixture's runs folder lies inside
    tmp_path too, and is left out of the copy.)"""
    (tmp_path / "train.py").write_text(DATA_SCRIPT)
    (tmp_path / "data.json").write_text('{"answer": 42}')
    tmp_path.chmod(0o700)
    lab = tflab_cluster(strategy="single", script=tmp_path / "train.py", restarts=0)
    assert lab.ok, lab.why()
    assert json.loads((lab.tasks_dir / "seen.json").read_text()) == {"answer": 42}
    copy = lab.run_dir / "script"
    if os.getuid() == 0:
        assert f"tflab: SCRIPT's folder {tmp_path} is not readable by uid 1000, as whom the tasks run: mounting " \
               "its copy, " in lab.output, lab.output
        assert sorted(p.name for p in copy.iterdir()) == ["data.json", "train.py"]  # not the runs folder
    else:  # the tasks run as the owner, who reads it where it is
        assert not copy.exists()


STRAY_SCRIPT = """import os
with open(os.environ["TFLAB_LOG"], "a") as log:
    log.write('hello from the script\\n[1, 2]\\n{"event": "epoch"}\\n{"task": 3, "event": "end"}\\n')
print("done")
"""


def test_a_scripts_stray_lines_in_its_log_are_skipped_and_the_run_ends_with_its_summary(tflab_cluster, tmp_path):
    """A task's own lines in $TFLAB_LOG once crashed the live printer: the run ended without a summary."""
    folder = tmp_path / "stray"
    folder.mkdir()
    (folder / "stray.py").write_text(STRAY_SCRIPT)
    folder.chmod(0o755)  # pytest's folders are the host user's alone; the tasks run as uid 1000 when that is root
    lab = tflab_cluster(strategy="single", script=folder / "stray.py", restarts=0)
    assert lab.ok, lab.why()
    assert [task.status for task in lab.tasks.values()] == ["ok"]
    assert re.search(r"^\[single\] skipped a line of single.jsonl that is not one of the lab's events "
                     r"\(.*\); the summary skips such lines too$", lab.output, re.M), lab.output


def test_a_save_on_the_chief_alone_is_named_and_never_restarted(tflab_cluster):
    """raydp#447's mistake, as the fixture's user meets it: `tf.saved_model.save` on worker-0
    only. Worker-1 ends with 0 and worker-0 waits in the save's all-reduce for ever. Before, the
    lab took worker-1 for a lost peer, restarted the cluster twice and timed out (156.5 s), with
    advice about BackupAndRestore; now it is named for what it is and not restarted."""
    lab = tflab_cluster(workers=2, script=REPO / "tests/integration/scripts/stall_chief_save.py", timeout=900)
    assert lab.returncode == 1 and not lab.summary["ok"] and lab.summary["restarts"] == [], lab.why()
    assert lab.tasks["worker-1"].exit_code == 0, lab.why()
    named = [lab.stall["kind"]] if lab.stall else []
    named += [row["explanation"]["signature"] for row in lab.summary["tasks"] if row.get("explanation")]
    assert "chief-only-save" in named, lab.why()
    assert "BackupAndRestore" not in lab.why()
