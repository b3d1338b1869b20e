"""`make migrate TFJOB=`: the table of what differs between a TFJob's replay and its TrainJob's
(reports/migratediff.py, a pure function of two summaries and two manifests), tested on made-up
summaries, hostile ones among them; and the command's refusals, one line each with nothing
written, before anything starts. The real replays are tests/integration/test_migrate_replays.py's.

The causes named are the manifests' own fields: the training operator's runPolicy.backoffLimit and
restartPolicy (training-operator pkg/controller.v1/common/job.go PastBackoffLimit,
tensorflow/tfjob_controller.go) against JobSet's failurePolicy.maxRestarts (jobset_controller.go
executeFailurePolicy), and the operator's TF_CONFIG (tensorflow.go genTFConfigJSONStr) against the
one the node builds (trainer/tfconfig.py)."""

import copy
import json
from pathlib import Path

import pytest
import yaml
from labtest.cli import assert_refused, lab_env, run_lab
from tflab.cli.protocol import settings_of
from tflab.core.runsummary import Summary, TaskRow
from tflab.core.settings import Settings
from tflab.k8s import fromtfjob, trainjob
from tflab.k8s import writer as k8s
from tflab.reports import migratediff
from tflab.reports.migratediff import SAME, MigrateError, Side, differences, markdown, table

pytestmark = pytest.mark.unit

TASKS = ("worker-0", "worker-1")
LOSSES = [22.1214, 18.0203, 14.5]
WEIGHTS = "8a0ddb86fa3a" + "0" * 52


def summary(ok=True, outcome="ok", restarts=(), reason=None, losses=LOSSES, attempts=1, **row) -> Summary:
    rows = [TaskRow(task=task, status="ok" if ok else "failed", exit_code=0 if ok else 1, epochs_done=len(losses),
                    losses=list(losses), final_loss=losses[-1] if losses else None, attempts=attempts,
                    weights_sha256=WEIGHTS, **row) for task in TASKS]
    return Summary(run="r", strategy="tfjob", backend="compose", outcome=outcome, ok=ok, launched_at=1.0,
                   wall_seconds=9.0, settings={}, weights_agree=True, tasks=rows, restarts=list(restarts),
                   reason=reason)


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """The TFJob `make k8s WORKERS=2` writes, the TrainJob `tflab k8s TFJOB=` turns it into, and
    each side's TF_CONFIGs as its replay's config.json records them (its plan's cluster)."""
    settings = Settings(workers=2, k8s_image="registry.example/tflab:test")
    rendered, _ = k8s.render(settings, "test", k8s.manifests_cluster(settings))
    path = tmp_path_factory.mktemp("migrate") / "tfjob.yaml"
    path.write_text(k8s.to_yaml_documents(rendered["tfjob.yaml"]))
    conversion = fromtfjob.convert(Settings(tfjob=str(path)))
    trainjob_plan = conversion.trainjob_plan(path.parent / "trainjob.yaml", Settings(tfjob=str(path)))
    return conversion, conversion.plan.as_cluster().tf_configs(), trainjob_plan.as_cluster().tf_configs()


ALIKE = object()  # a side's summary left as summary() makes it


def sides(jobs, old=ALIKE, new=ALIKE, files=(["volumes/out/a"], ["volumes/out/a"])):
    conversion, old_configs, new_configs = jobs
    return (Side(summary() if old is ALIKE else old, conversion.tfjob_documents, old_configs, files[0]),
            Side(summary() if new is ALIKE else new, conversion.documents, new_configs, files[1]))


def by_what(rows):
    return {row.what: row for row in rows}


def test_two_alike_runs_differ_only_where_the_manifests_do(jobs):
    rows = by_what(differences(*sides(jobs)))
    assert rows["end"].same and rows["end"].tfjob == "ok" and rows["end"].cause == SAME
    assert rows["restarts"].same and rows["files written"].same
    assert rows["weights"].same and rows["weights"].tfjob == f"every task {WEIGHTS[:12]}"
    for task in TASKS:
        assert rows[f"losses {task}"].same and rows[f"losses {task}"].tfjob == "22.1214 18.0203 14.5"
        tf_config = rows[f"TF_CONFIG {task}"]
        assert not tf_config.same  # the operator's Service names against JobSet's pod names
        assert json.loads(tf_config.tfjob)["cluster"]["worker"][0].startswith("tflab-worker-0.default.svc:")
        assert json.loads(tf_config.trainjob)["cluster"]["worker"][0] == "tflab-node-0-0.tflab:2222"
        assert "genClusterSpec" in tf_config.cause and "spec.trainer.env TFLAB_NUM_NODES=2 " in tf_config.cause
    assert (rows["condition"].tfjob, rows["condition"].trainjob) == ("Succeeded (TFJobSucceeded)", "Complete")
    who = rows["restarted by"]
    assert who.tfjob.startswith("the training operator: spec.runPolicy.backoffLimit")
    assert who.trainjob.startswith("the node Job: backoffLimit 0, restartPolicy Never; then JobSet: "
                                   "spec.template.spec.failurePolicy.maxRestarts")
    assert "spec.tfReplicaSpecs.Worker.restartPolicy" in who.cause and "ClusterTrainingRuntime tflab-tensorflow" \
        in who.cause


def test_a_restart_on_one_side_names_both_restart_fields(jobs):
    old = summary(restarts=[5.0], attempts=2, losses=[22.1, 19.0, 15.0])
    new = summary(ok=False, outcome="failed", reason="ReachedMaxRestarts")
    rows = by_what(differences(*sides(jobs, old, new)))
    assert not rows["end"].same and rows["end"].trainjob == "failed (worker-0, worker-1 failed)"
    assert "spec.runPolicy.backoffLimit" in rows["end"].cause and "failurePolicy.maxRestarts" in rows["end"].cause
    assert rows["condition"].trainjob == "Failed (ReachedMaxRestarts)"
    assert rows["restarts"].tfjob == "1 (worker-0 ran 2 times, worker-1 ran 2 times)" and rows["restarts"].trainjob \
        == "0"
    assert rows["losses worker-0"].cause == rows["restarts"].cause  # the restart is why they part


@pytest.mark.parametrize("outcome, expected", [
    ("failed", "Failed (TFJobFailed)"),  # Never, or ExitCode's 1-127: the operator fails it, no limit named
    ("timed out", "none: the lab stopped it (timed out)"),  # TIMEOUT, where a cluster would run on
    ("interrupted", "none: the lab stopped it (interrupted)"),
])
def test_a_tfjob_the_operator_failed_without_a_limit_reads_failed(jobs, outcome, expected):
    old = summary(ok=False, outcome=outcome)
    rows = by_what(differences(*sides(jobs, old, summary())))
    assert rows["condition"].tfjob == expected


def test_losses_part_beyond_printing_only(jobs):
    close = [loss * (1 + 1e-8) for loss in LOSSES]
    assert by_what(differences(*sides(jobs, new=summary(losses=close))))["losses worker-0"].same
    apart = by_what(differences(*sides(jobs, new=summary(losses=[22.1214, 18.0203, 14.6]))))["losses worker-1"]
    assert not apart.same and "spec.trainer.args" in apart.cause and "command and args" in apart.cause
    assert not apart.cause.startswith("the first epoch already differs")  # epoch 1 equal: the training parts
    nan = summary(losses=[float("nan")])
    assert by_what(differences(*sides(jobs, nan, nan)))["losses worker-0"].same


def test_losses_apart_from_the_first_epoch_with_no_restart_name_an_unseeded_program_first(jobs):
    """make migrate of the operator's simple.yaml with --fake_data (unseeded: random images and
    initial weights): no fault, no restart, the same command on both sides, and the losses differ
    from epoch 1 on, as two runs of one manifest do."""
    old, new = summary(losses=[2.30577, 2.30269]), summary(losses=[2.30646, 2.30276])
    cause = by_what(differences(*sides(jobs, old, new)))["losses worker-0"].cause
    assert cause.startswith("the first epoch already differs with no restart on either side: a program that is not "
                            "seeded trains otherwise each run, one manifest or two; else the training itself: TFJob ")
    restarted = summary(losses=[2.30577, 2.30269], attempts=2)
    cause = by_what(differences(*sides(jobs, restarted, summary(losses=[2.30646, 2.30276], attempts=2))))[
        "losses worker-0"].cause
    assert cause.startswith("the training itself")  # a restart on either side: the first epoch was run again


def test_tensorboard_event_files_are_compared_by_their_folder(jobs):
    """tf.summary's file names hold the time and the host, so two runs never share one."""
    files = (["volumes/out/tflab/tensorboard/events.out.tfevents.1765065600.tflab-worker-0.default.svc.7.0.v2"],
             ["volumes/out/tflab/tensorboard/events.out.tfevents.1765065687.tflab-node-0-0.9.0.v2"])
    row = by_what(differences(*sides(jobs, files=files)))["files written"]
    assert row.same and row.tfjob == "1 files"
    files = (files[0], ["volumes/out/tflab/events.out.tfevents.1765065687.tflab-node-0-0.9.0.v2"])
    row = by_what(differences(*sides(jobs, files=files)))["files written"]
    assert not row.same and row.trainjob == "1 files; only here: volumes/out/tflab/events.out.tfevents.*"


def test_files_only_one_side_wrote_are_named(jobs):
    files = (["volumes/out/tflab/worker-0.jsonl", "volumes/out/model"], ["volumes/out/tflab/worker-0.jsonl"])
    row = by_what(differences(*sides(jobs, files=files)))["files written"]
    assert (row.tfjob, row.trainjob) == ("2 files; only here: volumes/out/model", "1 files") and not row.same


def test_the_table_and_markdown_say_same_for_equal_rows(jobs):
    rows = differences(*sides(jobs))
    text = markdown(rows, "Migrate m")
    assert text.startswith("# Migrate m\n\n4 of ") and "| end | ok | same | same |" in text
    assert "| what | TFJob | TrainJob | why (the field of either manifest) |" in text
    printed = table(rows)
    assert "why: " in printed and printed.splitlines()[0].startswith("what")


HOSTILE_SUMMARIES = [
    (None, "not a summary: no list of tasks"),
    ([], "not a summary: no list of tasks"),
    ({"tasks": "x"}, "not a summary: no list of tasks"),
    ({"tasks": [7]}, "tasks[0] is a JSON int, not an object"),
    ({**summary().to_dict(), "restarts": "soon"}, "restarts is \"soon\", not a list"),
    ({**summary().to_dict(), "tasks": [{**summary().tasks[0].to_dict(), "losses": ["a"]}]}, "tasks[0].losses[0]"),
    ({**summary().to_dict(), "ok": "yes"}, "ok is \"yes\", not a bool"),
    ({**summary().to_dict(), "outcome": None}, "outcome is null, not a str"),
]


@pytest.mark.parametrize("data, said", HOSTILE_SUMMARIES)
def test_a_summary_the_lab_did_not_write_is_one_line(jobs, data, said):
    old, new = sides(jobs, new=copy.deepcopy(data))
    with pytest.raises(MigrateError) as error:
        differences(old, new)
    message = str(error.value)
    assert message.startswith("the TrainJob replay's summary is not one the lab wrote: ") and said in message
    assert "\n" not in message


@pytest.mark.parametrize("side, field, value, said", [
    (0, "tf_configs", ["worker-0"], "the TFJob replay's tf_config is a JSON list"),
    (1, "tf_configs", {"worker-0": "x"}, "the TrainJob replay's tf_config of worker-0 is a JSON str"),
    (0, "files", "volumes/out", "the TFJob replay's files are not a list"),
    (1, "files", [1, 2], "the TrainJob replay's files are not a list"),
    (0, "documents", "tfjob", "the TFJob manifest is a str, not a list of objects"),
    (0, "documents", [{"kind": "TFJob"}, {"kind": "TFJob"}], "holds 2 TFJobs, expected exactly one"),
    (0, "documents", [{"kind": "TFJob", "spec": {"tfReplicaSpecs": []}}], "the TFJob has no spec.tfReplicaSpecs"),
    (1, "documents", [{"kind": "TrainJob"}], "holds 1 TrainJobs and 0 runtimes, expected one of each"),
])
def test_other_hostile_records_are_one_line(jobs, side, field, value, said):
    pair = list(sides(jobs))
    pair[side] = Side(**{**pair[side].__dict__, field: value})
    with pytest.raises(MigrateError, match=said.replace("(", r"\(").replace(")", r"\)")):
        differences(*pair)


def test_strange_fields_and_names_are_shown_escaped_never_a_traceback(jobs):
    conversion, old_configs, new_configs = jobs
    documents = copy.deepcopy(conversion.tfjob_documents)
    (job,) = [d for d in documents if d["kind"] == "TFJob"]
    job["spec"]["runPolicy"] = {"backoffLimit": {"a": [1]}}
    job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = ["\x1b[31m"]
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["command"] = 5
    job["spec"]["tfReplicaSpecs"][3] = "not a replica"
    old = summary()
    old.tasks[0].task = "worker-0\x1b]0;owned\x07"
    rows = differences(Side(old, documents, {"\x1b": None, "worker-1": {1: "a", "b": 2}}, []),
                       Side(summary(), conversion.documents, new_configs, []))
    text = table(rows) + markdown(rows, "m")
    assert "\x1b" not in text and "\x07" not in text and "\\x1b" in text
    assert 'backoffLimit {"a": [1]}' in by_what(rows)["restarted by"].tfjob
    assert by_what(rows)["TF_CONFIG worker-1"].tfjob == "(not JSON: dict)"


def test_migrate_reads_only_its_settings():
    assert settings_of("migrate") == ["RUN", "TIMEOUT", "RUNS_DIR", "COMPOSE", "SCENARIO", "TARGET", "AT", "HEAL",
                                      "TFJOB", "K8S_RUNTIME"]
    assert migratediff.LOSS_RTOL == 1e-6  # the replay tests' tolerance: float printing, nothing more


@pytest.fixture
def tfjob_file(tmp_path):
    settings = Settings(workers=2, k8s_image="registry.example/tflab:test")
    rendered, _ = k8s.render(settings, "test", k8s.manifests_cluster(settings))
    path = tmp_path / "tfjob.yaml"
    path.write_text(k8s.to_yaml_documents(rendered["tfjob.yaml"]))
    return path


def refused(tmp_path, expected, *arguments):
    runs = tmp_path / "runs"
    assert_refused(run_lab("migrate", f"RUNS_DIR={runs}", *arguments, env=lab_env()), expected, runs)


@pytest.mark.parametrize("arguments, expected", [
    ((), "make migrate needs TFJOB=<a TFJob manifest>"),
    (("EPOCHS=3",), "EPOCHS=3 is not a setting of make migrate"),
    (("TRAINJOB=x.yaml",), "TRAINJOB=x.yaml is not a setting of make migrate"),
    (("{tfjob}", "AT=epoch:1"), "AT=epoch:1 applies only with SCENARIO=<a fault>"),
    (("{tfjob}", "WORKERS=3"), "WORKERS=3 is not a setting of make migrate"),
    (("{tfjob}", "SCENARIO=kill", "AT=step:3"), "AT=step:3 is not allowed with TFJOB"),
    (("{tfjob}", "SCENARIO=kill", "TARGET=worker-7"), "TARGET=worker-7 is not a task of this run"),
    (("{tfjob}", "SCENARIO=blink"), "SCENARIO=blink is not allowed"),
])
def test_bad_input_is_one_line_and_nothing_written(tmp_path, tfjob_file, arguments, expected):
    arguments = [a.replace("{tfjob}", f"TFJOB={tfjob_file}") for a in arguments]
    refused(tmp_path, expected, *arguments)


def test_a_file_that_is_no_tfjob_or_has_no_trainjob_form_is_one_line(tmp_path, tfjob_file):
    trainjob = tmp_path / "trainjob.yaml"
    trainjob.write_text(yaml.safe_dump({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                        "metadata": {"name": "x"}, "spec": {}}))
    refused(tmp_path, f"TFJOB={trainjob}: holds 0 TFJobs, expected exactly one", f"TFJOB={trainjob}")
    chief = tmp_path / "chief.yaml"
    settings = Settings(chief=1, workers=2, global_batch=96, k8s_image="registry.example/tflab:test")
    rendered, _ = k8s.render(settings, "test", k8s.manifests_cluster(settings))
    chief.write_text(k8s.to_yaml_documents(rendered["tfjob.yaml"]))
    refused(tmp_path, f"TFJOB={chief}: spec.tfReplicaSpecs.Chief has no TrainJob form", f"TFJOB={chief}")


def test_the_trainjob_checked_in_memory_is_the_one_its_replay_reads_from_the_file(tfjob_file):
    """migrate checks the TrainJob (and the fault against its nodes) before it writes trainjob.yaml;
    that check must be of what the replay will read back from the written text."""
    settings = Settings(tfjob=str(tfjob_file))
    conversion = fromtfjob.convert(settings)
    path = tfjob_file.parent / "trainjob.yaml"
    in_memory = conversion.trainjob_plan(path, settings)
    path.write_text(conversion.text)
    from_file = trainjob.load(Settings(trainjob=str(path)))
    assert [(t.name, t.host, t.tf_config, t.service) for t in in_memory.tasks] == \
        [(t.name, t.host, t.tf_config, t.service) for t in from_file.tasks]
    assert (in_memory.backoff_limit, in_memory.not_applied) == (from_file.backoff_limit, from_file.not_applied)


def args_only(tfjob_file, args):
    """The TFJob with its tensorflow container's command taken out (the operator's
    distribution_strategy example gives only args, run after the image's entrypoint)."""
    documents = list(yaml.safe_load_all(tfjob_file.read_text()))
    (job,) = [d for d in documents if d.get("kind") == "TFJob"]
    container = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container.pop("command", None)
    container.pop("args", None)
    if args is not None:
        container["args"] = args
    tfjob_file.write_text(yaml.safe_dump_all(documents))
    return tfjob_file


class Inspected:
    def __init__(self, returncode, stdout):
        self.returncode, self.stdout = returncode, stdout


@pytest.mark.parametrize("args, config, expected", [
    (["--epochs", "2"], {"Entrypoint": ["python", "/train.py"], "Cmd": ["--epochs", "9"]},
     ["python", "/train.py", "--epochs", "2"]),  # args replace Cmd (k8s: command absent, args given)
    (None, {"Entrypoint": ["python", "/train.py"], "Cmd": ["--epochs", "9"]}, ["python", "/train.py", "--epochs", "9"]),
    (None, {"Entrypoint": None, "Cmd": ["python", "/t.py"]}, ["python", "/t.py"]),
])
def test_a_tfjob_without_a_command_runs_its_images_entrypoint_read_from_the_engine(monkeypatch, tfjob_file, args,
                                                                                     config, expected):
    found = Inspected(0, json.dumps(config))
    monkeypatch.setattr(fromtfjob.docker, "image_inspect", lambda image, template=None: found)
    conversion = fromtfjob.convert(Settings(tfjob=str(args_only(tfjob_file, args))))
    (job,) = [d for d in conversion.documents if d["kind"] == "TrainJob"]
    assert job["spec"]["trainer"]["args"] == expected
    assert any("entrypoint" in line and "read from this Docker engine" in line for line in conversion.said)


@pytest.mark.parametrize("found, expected", [
    (Inspected(1, ""), "that image is not on this Docker engine to read it from"),
    (Inspected(0, "{not json"), "that image is not on this Docker engine to read it from"),
    (Inspected(0, json.dumps({"Entrypoint": "python /x.py"})), "that image is not on this Docker engine"),
    (Inspected(0, json.dumps({"Entrypoint": [], "Cmd": None})), "has neither an entrypoint nor a Cmd"),
])
def test_a_tfjob_without_a_command_whose_image_cannot_say_is_one_line(monkeypatch, tmp_path, tfjob_file, found,
                                                                      expected):
    monkeypatch.setattr(fromtfjob.docker, "image_inspect", lambda image, template=None: found)
    with pytest.raises(fromtfjob.ManifestError, match=expected) as raised:
        fromtfjob.convert(Settings(tfjob=str(args_only(tfjob_file, None))))
    assert "\n" not in str(raised.value) and "nothing was written" in str(raised.value)


@pytest.mark.parametrize("policy, backoff, job, max_restarts", [
    ("OnFailure", 3, {"backoffLimit": 3, "restartPolicy": "OnFailure"}, 0),
    ("Always", None, {"backoffLimit": 2, "restartPolicy": "OnFailure"}, 0),  # no limit: RESTARTS's 2
    ("ExitCode", 3, {"backoffLimit": 0, "restartPolicy": "Never"}, 3),
    ("Never", 3, {"backoffLimit": 0, "restartPolicy": "Never"}, 0),  # the operator restarts nothing
])
def test_a_replica_restarted_in_place_stays_so_in_the_node_job(tfjob_file, policy, backoff, job, max_restarts):
    """OnFailure (and Always) restart a failed container in place, alone, under the operator and a
    Job alike: the node Job takes the policy and the TFJob's backoffLimit (its count of in-place
    restarts, job_controller.go pastBackoffLimitOnFailure, as the operator's core/job.go
    PastBackoffLimit counts), and JobSet restarts nothing more; ExitCode fails the Job at its
    first failed pod, and JobSet's maxRestarts restarts the job; Never restarts nothing at all."""
    documents = list(yaml.safe_load_all(tfjob_file.read_text()))
    (tfjob_doc,) = [d for d in documents if d.get("kind") == "TFJob"]
    tfjob_doc["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = policy
    run_policy = tfjob_doc["spec"].setdefault("runPolicy", {})
    run_policy.pop("backoffLimit", None)
    if backoff is not None:
        run_policy["backoffLimit"] = backoff
    tfjob_file.write_text(yaml.safe_dump_all(documents))
    settings = Settings(tfjob=str(tfjob_file), restarts=2)
    conversion = fromtfjob.convert(settings)
    (runtime,) = [d for d in conversion.documents if d["kind"].endswith("TrainingRuntime")]
    jobset = runtime["spec"]["template"]["spec"]
    node = jobset["replicatedJobs"][0]["template"]["spec"]
    assert {"backoffLimit": node["backoffLimit"], "restartPolicy": node["template"]["spec"]["restartPolicy"]} == job
    assert jobset["failurePolicy"]["maxRestarts"] == max_restarts
    plan = conversion.trainjob_plan(tfjob_file.parent / "trainjob.yaml", settings)  # what its replay takes
    assert [task.name for task in plan.tasks] == ["worker-0", "worker-1"]
    if policy == "Always":
        assert any(line.startswith("restartPolicy Always") for line in conversion.said)
        assert "no backoffLimit (no limit to the operator): the node Job's backoffLimit is 2, RESTARTS's" in \
            conversion.said


# --- the command's glue, with the replays stood in for (the real ones: tests/integration) ---------

def stand_in_replays(monkeypatch, ends):
    """migrate.replayed as a replay that writes what a real one does (config.json from its plan,
    summary.json, a file in a claim) and ends as `ends` says for its run (tfjob, trainjob)."""
    from tflab import replay
    from tflab.core import runfolder
    from tflab.reports import migrate

    replayed = []

    def fake(settings, fault):
        run_dir = Path(settings.runs_dir) / settings.run
        runfolder.make(run_dir, link_latest=False, owner=True)
        plan = replay.load_plan(settings)  # the TFJob, or the TrainJob read back from trainjob.yaml
        runfolder.write_config(run_dir, {}, plan.as_cluster())
        ok = ends[settings.run]
        summary(ok=ok, outcome="ok" if ok else "failed", reason=None if ok else "ReachedMaxRestarts").write(run_dir)
        (run_dir / "volumes" / "out").mkdir(parents=True)
        (run_dir / "volumes" / "out" / "model.txt").write_text("w")
        (run_dir / "volumes" / "tflab-hooks").mkdir()
        (run_dir / "volumes" / "tflab-hooks" / "events.jsonl").write_text("")  # the lab's own: not counted
        replayed.append((settings.run, plan.kind, fault))
        return 0 if ok else 1

    monkeypatch.setattr(migrate, "replayed", fake)
    monkeypatch.setattr(migrate, "check_engine", lambda *args: None)
    return migrate, replayed


def test_migrate_writes_the_trainjob_replays_both_and_writes_the_table(monkeypatch, tmp_path, tfjob_file, capsys):
    migrate, replayed = stand_in_replays(monkeypatch, {"tfjob": True, "trainjob": True})
    settings = Settings(tfjob=str(tfjob_file), runs_dir=str(tmp_path / "runs"), run="m")
    assert migrate.migrate(settings, {"TFJOB": str(tfjob_file)}) == 0
    folder = tmp_path / "runs" / "m"
    assert replayed == [("tfjob", "TFJob", False), ("trainjob", "TrainJob", False)]
    assert (folder / "trainjob.yaml").read_text() == fromtfjob.convert(Settings(tfjob=str(tfjob_file))).text
    record = json.loads((folder / "migrate.json").read_text())
    rows = {row["what"]: row for row in record["rows"]}
    assert record["same_end"] and record["fault"] is None and record["summary"].startswith("4 of ")
    assert rows["files written"] == {"what": "files written", "tfjob": "1 files", "trainjob": "1 files", "same": True,
                                     "cause": SAME}
    assert json.loads(rows["TF_CONFIG worker-1"]["trainjob"])["cluster"]["worker"][1] == "tflab-node-0-1.tflab:2222"
    assert (folder / "migrate.md").read_text().startswith("# Migrate m: TFJob tflab and its TrainJob")
    printed = capsys.readouterr().out
    assert "TF_CONFIG worker-0" in printed and record["summary"] in printed


def test_jobs_that_end_apart_exit_1_and_a_fault_goes_to_both(monkeypatch, tmp_path, tfjob_file):
    migrate, replayed = stand_in_replays(monkeypatch, {"tfjob": True, "trainjob": False})
    settings = Settings(tfjob=str(tfjob_file), runs_dir=str(tmp_path / "runs"), run="m", scenario="kill", at="epoch:1")
    assert migrate.migrate(settings, {"TFJOB": str(tfjob_file), "SCENARIO": "kill", "AT": "epoch:1"}) == 1
    assert [fault for _, _, fault in replayed] == [True, True]
    record = json.loads((tmp_path / "runs" / "m" / "migrate.json").read_text())
    assert record["fault"] == {"scenario": "kill", "target": "", "at": "epoch:1", "heal": "5"}
    assert not record["same_end"] and record["rows"][0]["trainjob"] == "failed (worker-0, worker-1 failed)"
