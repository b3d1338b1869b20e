"""explain.py: every known failure signature against a recorded log (tests/unit/logs/<name>.log,
whose first line `#! key=value ...` gives the evidence beyond the output), the exception head of
a traceback (tracebacks.py), the restart policies, and the warning a SCRIPT's imports earn before it runs."""

import dataclasses
import json
import re
import time
from pathlib import Path

import pytest
from labtest.fakes import FakeBackend
from tflab.backends.userscript import script_warnings
from tflab.core import cluster, explain, tracebacks
from tflab.core.explain import Evidence
from tflab.core.restarts import restart_verdict
from tflab.core.settings import Settings, SettingsError
from tflab.core.tracebacks import exception_head
from tflab.supervisor import runner, summary, table
from tflab.supervisor.labrun import LabRun

pytestmark = pytest.mark.unit
LOGS = Path(__file__).parent / "logs"


def recorded(name: str, task: str = "worker-0", folder: Path = LOGS) -> Evidence:
    """A recorded log as the lab would see it: the launcher's `error` event is the traceback's
    exception head (or the header's error=), the output is the whole log."""
    text = (folder / f"{name}.log").read_text()
    header, _, output = text.partition("\n") if text.startswith("#!") else ("", "", text)
    fields = dict(re.findall(r"(\w+)=(.*?)(?= \w+=|$)", header[2:].strip()))
    return Evidence(task=task, exit_code=int(fields.get("exit_code", 1)),
                    error=fields.get("error") or exception_head(output), output=output,
                    oom_killed={"true": True, "false": False}.get(fields.get("oom_killed", "")),
                    memory=fields.get("memory", "0"), strategy=fields.get("strategy", ""),
                    peers_done=tuple(fields["peers_done"].split(",")) if fields.get("peers_done") else ())


@pytest.mark.parametrize("signature", list(explain.BY_NAME.values()), ids=lambda s: s.name)
def test_each_signature_explains_its_recorded_log(signature):
    found = explain.explain(recorded(signature.name))
    assert found is not None and found.signature == signature.name, found
    assert found.what and found.fix and found.link.startswith("https://")


def test_every_recorded_log_belongs_to_a_signature():
    assert {path.stem for path in LOGS.glob("*.log")} == set(explain.BY_NAME)


def test_keras_3_is_named_with_its_upstream_issue_and_the_fix():
    found = explain.explain(recorded("keras3-multiworker"))
    assert "keras-team/keras#20585" in found.what and "tensorflow/tensorflow#72388" in found.what
    assert "tf_keras" in found.fix and "TF_USE_LEGACY_KERAS=1" in found.fix and not found.retry


def test_a_memory_kill_names_the_limit_and_the_last_measured_memory():
    evidence = recorded("oom-killed")
    assert "MEMORY=250m" in explain.explain(evidence).what
    assert "nothing measured" in explain.explain(evidence).what
    measured = Evidence("worker-0", 137, oom_killed=True, memory="250m", last_memory_bytes=240_000_000)
    assert "last measured: 240 MB" in explain.explain(measured).what


def test_a_kill_with_the_engine_saying_no_memory_kill_is_not_called_one():
    found = explain.explain(Evidence("worker-1", 137, oom_killed=False, memory="250m"))
    assert found.signature == "exit code" and found.what == "was ended by SIGKILL (exit code 137)"


def test_an_ok_task_has_no_explanation():
    assert explain.explain(Evidence("worker-0", 0, output="Traceback (most recent call last):")) is None


def test_the_exception_head_is_the_final_exception_not_the_last_line():
    head = exception_head((LOGS / "keras3-multiworker.log").read_text())
    lines = head.splitlines()
    assert lines[0] == "ValueError: Attempt to convert a value (PerReplica:{"
    assert lines[-1].endswith("with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) "
                              "to a Tensor.")
    assert re.fullmatch(r"  \.\.\. \(\d+ lines\)", lines[tracebacks.HEAD_LINES])
    assert len(lines) == tracebacks.HEAD_LINES + 3


def test_an_unknown_exception_is_given_by_its_type_and_message_head():
    output = ("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    boom()\n"
              "KeyError: 'labels'\n\nDuring handling of the above exception, another exception occurred:\n\n"
              "Traceback (most recent call last):\n  File \"train.py\", line 5, in <module>\n"
              "    raise RuntimeError('no labels in\\nthe data set')\n"
              "RuntimeError: no labels in\nthe data set\n"
              "I0000 00:00:1733230000.000000  1 log.cc:1] a later log line\n")
    found = explain.explain(Evidence("worker-0", 1, output=output))
    assert found.signature == "exception"
    # a chain is told by its root cause, then what that led to
    assert found.what == "exited with code 1 after KeyError: 'labels'\n  which led to RuntimeError: no labels in"
    assert exception_head("no traceback here\nValueError: x") == ""
    assert exception_head(output.split("\n\nDuring")[0]) == "KeyError: 'labels'"


# Keras's get_file: the download failed (no route out), and its clean-up then hit the read-only folder
# the file was in (the chain a replay of an MNIST example ended with, issue 35).
READ_ONLY_AFTER = """

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/lab/script/download.py", line 9, in <module>
    (x_train, y_train), _ = tf.keras.datasets.mnist.load_data()
  File "/opt/venv/lib/python3.11/site-packages/keras/src/utils/file_utils.py", line 318, in get_file
    os.remove(fpath)
OSError: [Errno 30] Read-only file system: '/data/mnist.npz'
"""


def test_a_chained_exception_is_explained_by_its_root_cause_not_its_last_link():
    output = (LOGS / "no-route-out.log").read_text().partition("\n")[2] + READ_ONLY_AFTER
    head = exception_head(output)
    assert head.startswith("socket.gaierror: [Errno -3] Temporary failure in name resolution")
    assert head.endswith("which led to OSError: [Errno 30] Read-only file system: '/data/mnist.npz'")
    for error in (head, "train.py exited with code 1: " + head, ""):
        found = explain.explain(Evidence("worker-0", 1, error=error, output=output))
        assert found.signature == "no-route-out", (error, found)
    # the read-only write on its own is still the read-only signature
    assert explain.explain(recorded("read-only-file")).signature == "read-only-file"


def test_a_missing_module_names_a_requirements_file_or_the_image_to_rebuild():
    found = explain.explain(recorded("module-not-found"))
    assert "retrying" in found.what and "requirements.txt beside the script" in found.fix
    assert found.retry is False
    replayed = explain.explain(dataclasses.replace(recorded("module-not-found"), replay=True))
    assert "retrying" in replayed.what and "build the image again" in replayed.fix
    assert "requirements.txt" in replayed.fix  # the lab's own answer, for a SCRIPT run


def test_a_replays_download_names_its_ways_out():
    replayed = explain.explain(dataclasses.replace(recorded("no-route-out"), replay=True))
    assert replayed.signature == "no-route-out"
    for way in ("DATA=", "CLAIMS=", "NETWORK=bridge"):
        assert way in replayed.fix, way
    assert "beside the script" not in replayed.fix
    bridged = explain.explain(dataclasses.replace(recorded("no-route-out"), replay=True, network="bridge"))
    assert "NETWORK=bridge" not in bridged.fix and "this host's own network" in bridged.what


# -- RESTART_POLICY ---------------------------------------------------------------------------

KILLED = Evidence("worker-1", 137, oom_killed=False)
SURVIVOR = Evidence("worker-0", 1, error="UnavailableError: Connection reset by peer")
UNKNOWN_SURVIVOR = Evidence("worker-0", 1, error="InternalError: something TensorFlow said")
BUG = Evidence("worker-0", 1, error="NameError: name 'x' is not defined")


@pytest.mark.parametrize("failed, restart", [
    ([KILLED, SURVIVOR], True),  # make chaos SCENARIO=kill
    ([KILLED, UNKNOWN_SURVIVOR], True),  # the kill is the cause; what the survivor said does not matter
    ([SURVIVOR], True),  # a long pause: the frozen peer was stopped by the lab, the survivor lost it
    ([Evidence("worker-0", 42), Evidence("worker-1", 42)], True),  # a preemption
    # TF's handler on Google Cloud (SCENARIO=preempt NOTICE=gce): 143, retried as a signal's code
    ([Evidence("worker-0", 143, error="preempted (GCE notice): every worker saved the backup at the same step, "
                                      "then exited with code 143 to be restarted"), Evidence("worker-1", 143)], True),
    ([Evidence("worker-1", 137, error="gave up after 60 s waiting for the cluster; could not reach worker-0 "
                                      "(worker-0:2222: name does not resolve)")], True),  # killed by peerwait
    ([BUG], False),  # 1-127: permanent
    ([BUG, SURVIVOR], False),
    ([recorded("keras3-multiworker"), recorded("keras3-multiworker", "worker-1")], False),
    ([recorded("oom-killed"), SURVIVOR], False),  # 137, but the engine says memory: it would come back
])
def test_exit_code_policy(failed, restart):
    assert restart_verdict("ExitCode", failed)[0] is restart


def test_on_failure_restarts_everything_and_never_nothing():
    assert restart_verdict("OnFailure", [BUG, recorded("oom-killed")]) == (True, "")
    assert restart_verdict("Never", [KILLED]) == (False, "RESTART_POLICY=Never")


def test_the_reason_for_not_restarting_names_the_task_and_the_rule():
    assert restart_verdict("ExitCode", [BUG])[1] == (
        "worker-0 exited with code 1: 1-127 is permanent under RESTART_POLICY=ExitCode")
    assert restart_verdict("ExitCode", [recorded("keras3-multiworker")])[1] == (
        "worker-0 failed in a way a restart repeats (keras3-multiworker), RESTART_POLICY=ExitCode")


def test_restart_policy_is_a_setting_with_exit_code_by_default():
    assert Settings().restart_policy == "ExitCode"
    assert Settings.from_env({"RESTART_POLICY": "Never"}).restart_policy == "Never"
    with pytest.raises(SettingsError, match="^RESTART_POLICY=always is not allowed: expected one of "
                                            "ExitCode, OnFailure, Never$"):
        Settings.from_env({"RESTART_POLICY": "always"})


def ending_at_once(run_dir: Path, attempts: list[dict]) -> FakeBackend:
    """Every task ends at once with the codes and error events of its attempt (the last one repeats)."""

    def write_logs(backend: FakeBackend, attempt: int) -> None:
        for task, (code, message, oom) in attempts[min(attempt, len(attempts) - 1)].items():
            with open(run_dir / f"{task}.jsonl", "a") as log:
                for event, fields in [("start", {"versions": {"tensorflow": "2.21.0", "keras": "keras 3"}}),
                                      ("error", {"message": message})][: 1 + bool(message)]:
                    log.write(json.dumps({"event": event, "task": task, "time": 0, **fields}) + "\n")
            backend.oom_killed[task] = oom

    codes = [[{task: code for task, (code, _, _) in attempt.items()}] for attempt in attempts]
    backend = FakeBackend(cluster.build(Settings(workers=len(attempts[0]))), run_dir, codes, on_start=write_logs)
    backend.start()
    return backend


KERAS_3 = "train.py exited with code 1: " + exception_head((LOGS / "keras3-multiworker.log").read_text())


@pytest.mark.parametrize("policy, attempts, restarts", [
    ("ExitCode", [{"worker-0": (1, KERAS_3, False), "worker-1": (1, KERAS_3, False)}], 0),
    ("OnFailure", [{"worker-0": (1, KERAS_3, False), "worker-1": (1, KERAS_3, False)}], 2),
    ("ExitCode", [{"worker-0": (1, "UnavailableError: Socket closed", False), "worker-1": (137, "", False)},
                  {"worker-0": (0, "", False), "worker-1": (0, "", False)}], 1),
    ("ExitCode", [{"worker-0": (1, "UnavailableError: Socket closed", False), "worker-1": (137, "", True)}], 0),
    ("Never", [{"worker-0": (1, "UnavailableError: Socket closed", False), "worker-1": (137, "", False)}], 0),
    ("ExitCode", [{"worker-0": (42, "preempted (SIGTERM): ...", False), "worker-1": (42, "", False)}], 2),
])
def test_supervise_restarts_as_the_policy_says_and_restarts_bound_it(tmp_path, capsys, policy, attempts, restarts):
    settings = Settings(workers=2, restarts=2, restart_policy=policy, backup="off")
    backend = ending_at_once(tmp_path, attempts)
    run = LabRun(settings, backend, tmp_path)
    made = run.restarts_made
    outcome, _ = runner.supervise(runner.Supervision(run))
    assert len(made) == restarts and backend.starts == restarts + 1
    assert outcome == ("ok" if attempts[-1]["worker-0"][0] == 0 else "failed")
    if policy == "ExitCode" and not restarts:
        assert re.search(r"^tflab: not restarting: worker-\d failed in a way a restart repeats \((keras3-multiworker|"
                         r"oom-killed)\)", capsys.readouterr().out, re.M)



def test_a_failure_past_the_deadline_is_not_restarted_and_the_run_timed_out(tmp_path, capsys, monkeypatch):
    """TIMEOUT is a bound, not a hint (issue 44): a failure the policy would restart, found once the
    deadline passed, ends the run "timed out" with no restart; before, the restart ran on past it."""
    settings = Settings(workers=2, restarts=2, restart_policy="OnFailure", backup="off", timeout=60)
    backend = ending_at_once(tmp_path, [{"worker-0": (1, "UnavailableError: Socket closed", False),
                                      "worker-1": (1, "UnavailableError: Socket closed", False)}])
    run = LabRun(settings, backend, tmp_path)
    monkeypatch.setattr(run, "deadline", lambda started: time.monotonic() - 1)  # passed as the tasks ended
    monkeypatch.setattr(runner, "FAILURE_GRACE_SECONDS", 0)
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.02)
    assert runner.supervise(runner.Supervision(run)) == ("timed out", [])
    assert not run.restarts_made and backend.starts == 1
    assert "tflab: TIMEOUT=60 s passed; no restart past it" in capsys.readouterr().out


def test_a_task_removed_from_outside_is_named_before_the_failures_it_caused(tmp_path, capsys):
    """The peer of a removed container fails within a second, so one read can see both: the run
    still ends naming the removed task, and restarts nothing (the lab does not recreate it)."""
    settings = Settings(workers=2, restarts=2, backup="off")
    backend = ending_at_once(tmp_path, [{"worker-0": (1, "UnavailableError: Socket closed", False),
                                      "worker-1": (explain.VANISHED, "", False)}])
    run = LabRun(settings, backend, tmp_path)
    made = run.restarts_made
    assert runner.supervise(runner.Supervision(run)) == ("failed", [])
    out = capsys.readouterr().out
    assert "tflab: worker-1 vanished: its container or service was removed from outside the lab; ending the run" in out
    assert "tflab: not restarting: worker-1 vanished" in out and not made
    result = summary.summarise(tmp_path, summary.lab_rows(settings, cluster.build(settings), tmp_path,
                                                         backend.exit_codes(), [], "failed", {}), "failed", 0, 1)
    rows = {row["task"]: row for row in result["tasks"]}
    assert rows["worker-1"]["explanation"]["signature"] == "vanished"
    assert rows["worker-0"]["explanation"]["signature"] == "lost-peer"

# -- the summary ------------------------------------------------------------------------------


@pytest.mark.parametrize("line", [
    "worker-0 | 2026-12-03T12:17:28.892Z ValueError: x",  # local, swarm
    "worker-0_1     | 2026-12-03T12:17:28.892856219Z ValueError: x",  # Compose v1
    "tflab-run-abcd-worker-0-1  | 2026-12-03T12:17:28.892856219Z ValueError: x",  # Compose v2
])
def test_a_tasks_output_is_found_in_output_log_whatever_wrote_it(line):
    log = f"{line}\n{line.replace('worker-0', 'worker-10')}\nworker-1 | 2026-12-03T12:17:29.000Z other"
    assert summary.task_output(log, "worker-0") == "ValueError: x"
    assert summary.task_output(log, "worker-1") == "other"


def test_the_summary_and_its_table_carry_the_explanation(tmp_path):
    settings = Settings(workers=2, memory="250m")
    for task in ("worker-0", "worker-1"):
        (tmp_path / f"{task}.jsonl").write_text(json.dumps({"event": "error", "task": task, "time": 0,
                                                            "message": KERAS_3}) + "\n")
    (tmp_path / "output.log").write_text("worker-0 | 2026-12-03T12:00:00.000Z hello\n")
    result = summary.summarise(tmp_path, summary.lab_rows(settings, cluster.build(settings), tmp_path,
                                                         {"worker-0": 1, "worker-1": 137}, [], "failed",
                                                         {"worker-1": True}), "failed", 0, 1)
    rows = {row["task"]: row for row in result["tasks"]}
    assert rows["worker-0"]["explanation"]["signature"] == "keras3-multiworker"
    assert rows["worker-1"]["explanation"]["signature"] == "oom-killed"
    lines = table.table(dataclasses.replace(result, run="r", wall_seconds=1.0)).splitlines()
    assert lines[-1] == "run r: failed in 1.0 s"
    explained = lines[lines.index(next(line for line in lines if line.startswith("worker-0: Keras 3"))):]
    assert explained[1] == "  error: " + KERAS_3.splitlines()[0]
    assert explained[2] == "  fix: " + explain.BY_NAME["keras3-multiworker"].fix
    assert explained[3] == "  see: " + explain.KERAS_ISSUE
    assert explained[4].startswith("worker-1: killed by the kernel for memory (the engine says OOMKilled): "
                                   "it reached its limit MEMORY=250m")


# -- before the run ---------------------------------------------------------------------------


@pytest.mark.parametrize("source, strategy, warned", [
    ("import keras\n", "multiworker", True),
    ("import os\nfrom keras import layers\n", "multiworker", True),
    ("import keras.layers as kl\n", "multiworker", True),
    ("import keras\n", "mirrored", False),  # Keras 3's fit works under MirroredStrategy
    ("import keras\n", "parameter_server", True),  # recorded: keras3-parameter-server
    ("import tf_keras as keras\n", "multiworker", False),
    ("import tensorflow as tf\nmodel = tf.keras.Sequential()\n", "multiworker", False),
    ("from . import keras\n", "multiworker", False),  # the script's own module
    ("import keras\ndef (:\n", "multiworker", False),  # Python will say so itself
])
def test_a_scripts_imports_warn_of_keras_3_under_multiworker(tmp_path, source, strategy, warned):
    script = tmp_path / "train.py"
    script.write_text(source)
    found = script_warnings(script, strategy)
    assert bool(found) is warned, found
    if warned:
        issue = explain.PS_TUTORIAL if strategy == "parameter_server" else explain.KERAS_ISSUE
        assert found[0].startswith("train.py:") and issue in found[0]


def test_a_second_strategy_after_tf_config_changed_is_the_same_mistake():
    """Measured (TF 2.21): a second MultiWorkerMirroredStrategy built after TF_CONFIG changed does
    not fail, it warns; a task that then fails for an unknown reason is explained by it."""
    output = ("WARNING:absl:Enabling collective ops after program startup may cause error when accessing "
              "previously created tensors.\n")
    assert explain.explain(Evidence("worker-0", 1, output=output)).signature == "collectives-after-startup"


def test_the_keras_3_custom_loop_names_keras_23085_and_a_fix_to_take_today():
    """Recorded: TF's guide's custom loop with Adam under MirroredStrategy, Keras 3.15.1, 2 logical CPUs."""
    found = explain.explain(recorded("keras3-custom-loop-optimizer", "mirrored"))
    assert "keras#23085" in found.what and "keras#23087" in found.what and "3.16" in found.what
    assert "optimizer.build(model.trainable_variables)" in found.fix and "TF_USE_LEGACY_KERAS=1" in found.fix
    assert found.link.endswith("/keras/issues/23085") and found.retry is False


def test_keras_3_fit_with_steps_per_execution_under_mirrored_is_not_the_custom_loops_optimizer():
    """Recorded: the lab's trainer, STEPS_PER_EXECUTION=2, mirrored over 2 logical CPUs, TF 2.21, under Keras
    3.15.1 (logs/) and keras-nightly 3.16.0.dev2026102704 (data/keras3/): the placeholder lies in fit's
    while loop (multi_step_on_iterator, Keras's TensorFlow trainer), not the custom loop's cond/else; building the
    optimizer first did not help and nightly failed too, so neither may be offered as the fix."""
    for evidence in (recorded("keras3-steps-per-execution-mirrored", "mirrored"),
                     recorded("fit-steps-per-execution-nightly", "mirrored", KERAS3)):
        found = explain.explain(evidence)
        assert found.signature == "keras3-steps-per-execution-mirrored", found
        assert "keras-team/keras#19246" in found.what and found.link.endswith("/keras/issues/19246")
        assert "steps_per_execution=1" in found.fix and "KERAS=tf-keras" in found.fix and found.retry is False
        assert "does not help, nor does keras-nightly" in found.fix
    custom_loop = recorded("keras3-custom-loop-optimizer", "mirrored")
    assert explain.match(custom_loop).name == "keras3-custom-loop-optimizer"
    assert "while/body" not in custom_loop.output


def test_a_keras_loss_inside_strategy_run_names_keras_3s_scaling_by_the_replicas_and_the_fix():
    found = explain.explain(recorded("keras-loss-in-replica"))
    assert "Keras 3 takes it and divides each replica's loss by the replica count" in found.what
    assert "huggingface/transformers#28296" in found.what and found.retry is False
    assert "tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)" in found.fix


def test_keras_3_under_parameter_server_strategy_is_named_with_the_tf_keras_fix():
    """Recorded: the chief of a parameter-server script written for Keras 3 (`import keras`, fit on a dataset)."""
    found = explain.explain(recorded("keras3-parameter-server", "chief-0"))
    assert found.what.startswith("Keras 3 has no parameter-server training at all")
    assert "keras-team/keras#20585" in found.what and found.link == explain.KERAS_ISSUE
    assert "KERAS=tf-keras" in found.fix and "TF_USE_LEGACY_KERAS=1" in found.fix and "DatasetCreator" in found.fix
    assert "ClusterCoordinator" in found.fix and found.retry is False


KERAS3 = LOGS.parent / "data" / "keras3"


@pytest.mark.parametrize("name, otherwise", [
    ("trainer-datasetcreator", "removed-api"),  # the lab's own chief: tf.keras.utils.experimental.DatasetCreator
    ("tutorial-preprocessing", "removed-api"),  # TF's tutorial: tf.keras.layers.experimental.preprocessing
    ("import-datasetcreator", "module-not-found"),  # from tensorflow.keras.utils.experimental import ...
    ("fit-tf-keras-datasetcreator", "exception"),  # Keras 3's fit given tf_keras's DatasetCreator
])
def test_whatever_keras_3_lacks_under_parameter_server_is_its_missing_parameter_server_training(name, otherwise):
    """Recorded under TF 2.21 and Keras 3.15.1 (the attribute and import errors are Keras's own words). Under
    parameter_server the first thing missing is named as what it is; under any other strategy, or where the
    strategy is unknown, the same traceback is what it was."""
    evidence = recorded(name, "chief-0", KERAS3)
    found = explain.explain(evidence)
    assert found.signature == "keras3-parameter-server", found
    assert found.what.startswith("Keras 3 has no parameter-server training at all")
    assert "Keras 2's API" not in found.what and found.link == explain.KERAS_ISSUE
    for strategy in ("multiworker", "mirrored", ""):
        assert explain.explain(dataclasses.replace(evidence, strategy=strategy)).signature == otherwise


def test_tf_keras_missing_a_name_under_parameter_server_is_not_keras_3s_doing():
    """Recorded under TF 2.21 with TF_USE_LEGACY_KERAS=1: tf-keras's tf.keras lives in .../tf_keras/..., and a
    name it lacks (a misspelt SidecarEvaluator) is the script's own mistake; Keras 3's path is named so."""
    evidence = recorded("tf-keras-import", "chief-0", KERAS3)
    assert explain.explain(evidence).signature == "exception"
    keras_3 = evidence.output.replace("tf_keras/api/_v2/keras/utils", "keras/_tf_keras/keras/utils")
    assert explain.match(dataclasses.replace(evidence, output=keras_3)).name == "keras3-parameter-server"


def test_an_evaluator_task_under_keras_3_is_told_what_the_labs_own_refusal_says():
    """Recorded under TF 2.21 and Keras 3.15.1: the parameter-server tutorial's evaluator (its log, under
    parameter_server, where the evaluator's own problem outranks keras3-parameter-server) and
    tf.keras.experimental.SidecarEvaluator under multiworker."""
    for evidence in (recorded("keras3-no-sidecar-evaluator", "evaluator-0"),
                     recorded("evaluator-experimental", "evaluator-0", KERAS3)):
        found = explain.explain(evidence)
        assert found.signature == "keras3-no-sidecar-evaluator", found
        assert found.what.startswith(explain.KERAS3_NO_EVALUATOR) and "KERAS=tf-keras" in found.fix
        assert found.link == explain.SIDECAR_EVALUATOR and found.retry is False
    refusal = Settings(keras="keras3", evaluator=1, strategy="multiworker", tf="2.21", backend="compose")
    with pytest.raises(SettingsError, match=re.escape(explain.KERAS3_NO_EVALUATOR)):
        refusal.validated()
    tf_keras = recorded("tf-keras-import", "evaluator-0", KERAS3).output.replace("Evaluater", "Evaluator")
    assert explain.match(Evidence("evaluator-0", 1, output=tf_keras)) is None  # tf-keras has it: not this


def test_the_summary_hands_the_strategy_to_the_explanation():
    settings = Settings(strategy="parameter_server", workers=2)
    error = {"event": "error", "message": "AttributeError: module 'keras.utils' has no attribute 'experimental'"}
    evidence = summary.evidence_of("chief-0", [error], [error], 1, settings, "", None)
    assert evidence.strategy == "parameter_server"
    assert explain.explain(evidence).signature == "keras3-parameter-server"


# -- a peer that exited 0 is never a lost peer (issue 42) -----------------------------------------

def test_a_peer_that_exited_0_turns_a_lost_peer_into_a_deadlock_that_is_not_restarted():
    lost = recorded("chief-only-save")
    assert explain.explain(dataclasses.replace(lost, peers_done=())).signature == "lost-peer"
    found = explain.explain(lost)
    assert found.signature == "chief-only-save" and "worker-1, which had already exited 0" in found.what
    assert found.retry is False and "every worker call save" in found.fix
    assert restart_verdict("ExitCode", [lost]) == (
        False, "worker-0 failed in a way a restart repeats (chief-only-save), RESTART_POLICY=ExitCode")
    assert restart_verdict("ExitCode", [dataclasses.replace(lost, peers_done=())]) == (True, "")


def test_on_failure_restarts_a_deadlock_and_says_it_will_stall_again():
    restart, why = restart_verdict("OnFailure", [recorded("chief-only-save")])
    assert restart and why.endswith("as RESTART_POLICY=OnFailure does: it will stall again")
    assert "worker-0 deadlocked" in why and "(chief-only-save)" in why


def test_the_stacks_name_the_deadlock_before_the_error_does():
    waiting_in_save = ('File "/opt/venv/lib/python3.11/site-packages/tensorflow/python/saved_model/save.py", '
                       'line 1432 in save')
    evidence = dataclasses.replace(recorded("peer-exited-mid-collective"), stacks=waiting_in_save)
    assert explain.explain(evidence).signature == "chief-only-save"


def test_a_killed_peer_is_still_a_lost_peer_for_its_survivor():
    survivor = Evidence("worker-0", 1, error="UnavailableError: Connection reset by peer")
    assert restart_verdict("ExitCode", [Evidence("worker-1", 137), survivor]) == (True, "")


def test_the_summary_names_the_peers_that_exited_0_to_the_survivor_only():
    the_cluster = cluster.build(Settings(strategy="multiworker", workers=3))
    codes = {"worker-0": 1, "worker-1": 0, "worker-2": None}
    assert summary.peers_done(the_cluster, codes, "worker-0") == ("worker-1",)
    assert summary.peers_done(the_cluster, codes, "worker-1") == ()
    assert summary.peers_done(cluster.build(Settings(strategy="multiworker", workers=2, evaluator=1)),
                              {"worker-0": 1, "worker-1": 1, "evaluator-0": 0}, "worker-0") == ()


def test_a_chief_that_saved_alone_is_not_restarted_and_the_line_names_the_save(tmp_path, capsys):
    """stall_chief_save.py of issue 42 as the runner sees it: worker-1 exits 0, then worker-0 fails
    with the coordination service's words; its own output (<task>.out) holds the save's frames."""
    settings = Settings(workers=2, restarts=2, backup="off", script=str(tmp_path / "chiefsave.py"))
    heartbeats = "UnavailableError: The following tasks are unhealthy (stopped sending heartbeats)"

    def write_logs(backend: FakeBackend, attempt: int) -> None:
        for task in backend.tasks:
            with open(tmp_path / f"{task}.jsonl", "a") as log:
                log.write(json.dumps({"event": "start", "task": task, "time": 0, "versions": {}}) + "\n")
        with open(tmp_path / "worker-0.jsonl", "a") as log:
            log.write(json.dumps({"event": "error", "task": "worker-0", "time": 1, "message": heartbeats}) + "\n")
        (tmp_path / "worker-0.out").write_text((LOGS / "chief-only-save.log").read_text().partition("\n")[2])

    backend = FakeBackend(cluster.build(settings), tmp_path, [[{"worker-1": 0}, {"worker-0": 1, "worker-1": 0}]],
                          on_start=write_logs)
    backend.start()
    run = LabRun(settings, backend, tmp_path)
    assert runner.supervise(runner.Supervision(run)) == ("failed", []) and not run.restarts_made
    assert ("tflab: not restarting: worker-0 failed in a way a restart repeats (chief-only-save), "
            "RESTART_POLICY=ExitCode") in capsys.readouterr().out


@pytest.mark.parametrize("code, output, what, checks", [
    (127, "sh: 1: python: not found\n", "exited with code 127, the shell's code for a command not found "
     "(`python`, its output says)", "`python3` and no `python`"),
    (127, 'OCI runtime create failed: exec: "train": executable file not found in $PATH\n',
     "exited with code 127, the shell's code for a command not found (`train`, its output says)", "PATH"),
    (127, "", "exited with code 127, the shell's code for a command not found: the task's command", "installed"),
    (126, "bash: ./run.sh: Permission denied\n", "exited with code 126, the shell's code for a command found but "
     "not run (`./run.sh`, its output says)", "chmod +x"),
])
def test_the_shells_own_codes_say_what_was_not_found_or_not_run(code, output, what, checks):
    """Issue 56: exit 127 was "read its output"; it is the shell's (and a container runtime's) code for
    a command it could not find, 126 for one it found and could not run (POSIX 2.9.1.1)."""
    found = explain.explain(Evidence("worker-0", code, output=output))
    assert found.signature == "exit code" and found.what.startswith(what), found.what
    assert checks in found.fix and "read its output" not in found.fix
    assert explain.explain(Evidence("worker-0", 3, output=output)).fix.startswith("read its output")
