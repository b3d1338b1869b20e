"""make matrix: its cells (n/a with the reason, never a refusal), the small size, matrix.json's schema
(typed, versioned, one writer), matrix.md and matrix.png, the verdict, the exit status and an
interrupt, with the runs themselves stood in for (tests/integration/test_tf_matrix.py runs real ones)."""

import json

import pytest
from tflab import backends
from tflab.core.foreign import ForeignFile
from tflab.core.settings import Settings, SettingsError
from tflab.reports import matrix, matrixverdict
from tflab.reports.matrix import Cell, Matrix
from tflab.supervisor import runner

pytestmark = pytest.mark.unit


def cell(tf, keras, strategy, outcome="ok", **fields) -> Cell:
    return Cell(tf=tf, tf_release={"2.15": "2.15.1", "2.21": "2.21.0", "2.22": "2.22.0rc0"}.get(tf, tf), keras=keras,
                strategy=strategy, outcome=outcome, **fields)


def test_the_default_matrix_and_its_cells_that_cannot_be(tmp_path):
    planned = matrix.plan(Settings(), tmp_path)
    assert len(planned) == 4 * 2 * 2  # TF="2.15 2.18 2.21 next" x KERAS="tf-keras keras3" x mirrored, multiworker
    na = {(c.tf, c.keras, c.strategy): c.what for c, one in planned if one is None}
    assert set(na) == {("2.15", "keras3", "mirrored"), ("2.15", "keras3", "multiworker"),
                       ("2.22", "tf-keras", "mirrored"), ("2.22", "tf-keras", "multiworker")}
    assert na[("2.15", "keras3", "mirrored")].startswith("its tf.keras is the bundled Keras 2")
    assert all(c.outcome == "n/a" and c.run is None for c, one in planned if one is None)
    runs = {c.run: one for c, one in planned if one is not None}
    assert "tf2-21-keras3-multiworker" in runs and "tf2-22-keras3-mirrored" in runs
    one = runs["tf2-15-tf-keras-multiworker"]
    assert (one.tf, one.keras, one.strategy, one.run, one.runs_dir) == ("2.15", "tf-keras", "multiworker",
                                                                        "tf2-15-tf-keras-multiworker", str(tmp_path))


def test_the_labs_evaluator_under_keras_3_is_a_cell_marked_n_a_not_a_refusal(tmp_path):
    planned = matrix.plan(Settings(tf="2.21", keras="tf-keras keras3 3.15", strategies="multiworker",
                                   evaluator=1), tmp_path)
    na = {c.keras: c.what for c, one in planned if one is None}
    assert set(na) == {"keras3", "3.15"}
    assert all(what.startswith("Keras 3 has no SidecarEvaluator") and what.endswith("EVALUATOR=0")
               for what in na.values())
    assert [(c.keras, one.evaluator) for c, one in planned if one is not None] == [("tf-keras", 1)]


def test_a_setting_no_cell_can_run_with_is_refused_naming_the_cell(tmp_path):
    with pytest.raises(SettingsError, match=r"^matrix cell TF=2.15 KERAS=tf-keras STRATEGY=multiworker: GLOBAL_BATCH"):
        matrix.plan(Settings(tf="2.15", keras="tf-keras", strategies="multiworker", workers=3), tmp_path)


def test_the_labs_model_is_small_unless_told_and_a_script_as_it_is():
    assert (matrix.sized(Settings(), {}).epochs, matrix.sized(Settings(), {}).examples) == (3, 2048)
    assert matrix.sized(Settings(epochs=7), {"EPOCHS": "7"}).epochs == 7
    assert matrix.sized(Settings(epochs=7), {"EPOCHS": "7"}).examples == 2048
    script = Settings(script="train.py", strategy="multiworker")
    assert matrix.sized(script, {}) is script


def test_the_verdict_says_what_breaks_where_and_what_passes():
    cells = [cell("2.15", "tf-keras", "multiworker", final_loss=19.28891),
             cell("2.15", "keras3", "multiworker", "n/a", what="its tf.keras is the bundled Keras 2"),
             cell("2.21", "tf-keras", "multiworker", final_loss=19.28895),
             cell("2.21", "keras3", "multiworker", "failed", signature="keras3-multiworker")]
    assert matrixverdict.verdict(cells) == ("2.15 → 2.21: multiworker breaks under keras3 on 2.21: keras3-multiworker "
                                     "(keras#20585); with tf-keras every cell passes; final losses agree to 2e-06; "
                                     "1 cell(s) n/a")
    assert not matrix.passed(cells)
    assert matrix.passed([c for c in cells if c.outcome != "failed"])
    assert not matrix.passed([cells[1]])  # nothing ran: nothing passed


def test_matrix_json_is_typed_and_versioned_and_reads_back(tmp_path):
    cells = [cell("2.15", "tf-keras", "mirrored", final_loss=1.5, steady_step_seconds=0.002, losses=[3.0, 1.5],
                  peak_rss_bytes=400_000_000, wall_seconds=20.0, run="tf2-15-tf-keras-mirrored"),
             cell("2.22", "keras3", "multiworker", "failed", signature="keras3-multiworker", what="w", fix="f",
                  run="tf2-22-keras3-multiworker"),
             cell("2.22", "tf-keras", "mirrored", "n/a", what="PyPI has no tf-keras for it")]
    written = matrix.write(tmp_path, Settings(), cells)
    data = json.loads((tmp_path / "matrix.json").read_text())
    assert data["version"] == 3 and data["ok"] is False and data["verdict"] == written.verdict
    assert set(data["cells"][0]) == {"tf", "tf_release", "keras", "strategy", "outcome", "signature", "what", "fix",
                                     "final_loss", "steady_step_seconds", "peak_rss_bytes", "wall_seconds", "losses",
                                     "run", "keras_imported", "precision"}
    back = Matrix.read(tmp_path)
    assert [c.to_dict() for c in back.cells] == [c.to_dict() for c in cells]
    text = (tmp_path / "matrix.md").read_text()
    assert "| TF | tf-keras mirrored | keras3 multiworker |" in text and "| next (2.22.0rc0) | n/a | failed: " \
        "keras3-multiworker |" in text
    assert "- tf2-15-tf-keras-mirrored: 3 1.5" in text
    assert (tmp_path / "matrix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("change, named", [
    (lambda d: d.update(version=4), "version is 4, not one of 1, 2, 3"),
    (lambda d: d["cells"][0].update(outcome="great"), "cells[0].outcome is 'great'"),
    (lambda d: d["cells"][0].update(final_loss="low"), "cells[0].final_loss is \"low\""),
    (lambda d: d["cells"][0].update(losses=[1, "x"]), "cells[0].losses[1] is \"x\", not a number"),
    (lambda d: d.pop("cells"), "not a matrix"),
])
def test_a_matrix_json_the_lab_did_not_write_is_one_line(tmp_path, change, named):
    matrix.write(tmp_path, Settings(), [cell("2.15", "tf-keras", "mirrored")])
    data = json.loads((tmp_path / "matrix.json").read_text())
    change(data)
    (tmp_path / "matrix.json").write_text(json.dumps(data))
    with pytest.raises(ForeignFile) as error:
        Matrix.read(tmp_path)
    assert named in str(error.value) and "\n" not in str(error.value)


@pytest.fixture
def stood_in(monkeypatch, tmp_path):
    """matrix.matrix with each cell's run stood in for: `outcomes` says what each run ends as."""
    ran, outcomes = [], {}
    monkeypatch.setattr(backends, "check_engine", lambda settings: None)

    def up(settings, link_latest=True):
        ran.append(settings.run)
        what = outcomes.get(settings.run, "ok")
        if what == "interrupt":
            raise KeyboardInterrupt
        if what == "image":
            raise matrix.LabError("downloading the packages of /job/requirements.txt failed (ERROR: Cannot install "
                                  "numpy>=2 because these package versions have conflicting dependencies.) for the "
                                  "pins of 2.15.txt")
        return 0

    def fill(one, run_dir):
        one.outcome = outcomes.get(one.run, "ok")
        one.final_loss = 1.0

    monkeypatch.setattr(runner, "up", up)
    monkeypatch.setattr(matrix, "fill", fill)
    return ran, outcomes, Settings(runs_dir=str(tmp_path), run="m", tf="2.15 2.21", keras="tf-keras keras3",
                                   strategies="multiworker")


def test_every_cell_runs_once_and_the_exit_is_0_only_when_all_that_can_be_are_ok(stood_in, tmp_path, capsys):
    ran, outcomes, settings = stood_in
    assert matrix.matrix(settings) == 0
    assert ran == ["tf2-15-tf-keras-multiworker", "tf2-21-tf-keras-multiworker", "tf2-21-keras3-multiworker"]
    out = capsys.readouterr()
    assert "TF    tf-keras multiworker  keras3 multiworker\n2.15  ok                    n/a\n2.21  ok" in out.out
    assert "tflab: verdict: 2.15 → 2.21: every cell passes; final losses identical; 1 cell(s) n/a" in out.out
    outcomes["tf2-21-keras3-multiworker"] = "failed"
    assert matrix.matrix(settings.replace(run="m2")) == 1
    assert [c.outcome for c in Matrix.read(tmp_path / "m2").cells] == ["ok", "n/a", "ok", "failed"]


def test_a_cell_whose_image_or_packages_cannot_be_had_is_explained_and_the_rest_run(stood_in, tmp_path):
    ran, outcomes, settings = stood_in
    outcomes["tf2-21-tf-keras-multiworker"] = "image"
    assert matrix.matrix(settings) == 1
    failed = Matrix.read(tmp_path / "m").cells[2]
    assert (failed.outcome, failed.signature, failed.run) == ("failed", "not-installable", None)
    assert len(ran) == 3


def test_an_interrupt_stops_the_matrix_and_says_which_cells_never_ran(stood_in, tmp_path):
    ran, outcomes, settings = stood_in
    outcomes["tf2-21-tf-keras-multiworker"] = "interrupt"
    with pytest.raises(KeyboardInterrupt):
        matrix.matrix(settings)
    assert ran == ["tf2-15-tf-keras-multiworker", "tf2-21-tf-keras-multiworker"]
    written = Matrix.read(tmp_path / "m")
    assert [c.outcome for c in written.cells] == ["ok", "n/a", "interrupted", "not run"]
    assert written.verdict == "2.15 → 2.21: interrupted: 2 cell(s) did not finish; 1 cell(s) n/a"


def test_a_version_1_matrix_reads_back_with_no_keras_imported(tmp_path):
    matrix.write(tmp_path, Settings(), [cell("2.15", "tf-keras", "mirrored")])
    data = json.loads((tmp_path / "matrix.json").read_text())
    data["version"] = 1
    for one in data["cells"]:
        one.pop("keras_imported")
    (tmp_path / "matrix.json").write_text(json.dumps(data))
    assert Matrix.read(tmp_path).cells[0].keras_imported is None


NIGHTLY = "nightly (3.16.0.dev2026102704, 2026-10-27)"


@pytest.mark.parametrize("outcomes, said", [
    (("ok", "failed", "failed", "ok"), f"mirrored: breaks from Keras 3.14 (exception); fixed in {NIGHTLY}"),
    (("failed", "failed", "failed", "ok"),
     f"mirrored: fails on Keras 3.12, the oldest Keras run (exception); fixed in {NIGHTLY}"),
    (("ok", "ok", "failed", "failed"),
     f"mirrored: breaks from Keras 3.15 (exception); not fixed up to {NIGHTLY}, the newest Keras run"),
    (("ok", "failed", "ok", "failed"), "mirrored: breaks from Keras 3.14 (exception), passes on Keras 3.15 "
                                       f"between; not fixed up to {NIGHTLY}, the newest Keras run"),
])
def test_the_verdict_says_where_a_failure_starts_and_where_it_is_fixed_along_keras_releases(outcomes, said):
    # Given in any order: the verdict orders releases itself, nightly last.
    kerases = ("3.12", "3.14", "3.15", "nightly")
    cells = [cell("2.21", keras, "mirrored", outcome, signature="exception" if outcome == "failed" else None,
                  final_loss=2.0 if outcome == "ok" else None) for keras, outcome in zip(kerases, outcomes)]
    cells = [cells[3], cells[1], cells[0], cells[2]]
    assert (matrixverdict.verdict(cells) + ";").startswith(f"2.21: {said};")
    assert not matrix.passed(cells)


def test_a_keras_release_pip_cannot_install_is_a_cell_marked_so_with_pips_reason(tmp_path):
    """The locks in requirements/keras say so (tools/lock.py wrote them): TF 2.21 asks keras>=3.12."""
    planned = matrix.plan(Settings(tf="2.21 2.15", keras="3.10 3.12 tf-keras", strategies="mirrored"), tmp_path)
    by = {(c.tf, c.keras): (c, one) for c, one in planned}
    refused, none = by[("2.21", "3.10")]
    assert none is None and refused.outcome == "not installable" and refused.run is None
    assert refused.what == "pip: The user requested keras==3.10.0; tensorflow-cpu 2.21.0 depends on keras>=3.12.0"
    runs, one = by[("2.21", "3.12")]
    assert runs.run == "tf2-21-keras3-12-mirrored" and one.keras == "3.12"
    assert by[("2.15", "3.12")][0].outcome == "n/a"  # tf.keras is Keras 2 there
    cells = [c for c, _ in planned]
    for c in cells:
        if c.outcome == "not run":
            c.outcome, c.final_loss = "ok", 1.0
    assert matrix.passed(cells)  # not installable is no failure of the matrix
    assert matrixverdict.verdict(cells) == ("2.21 → 2.15: every cell passes; final losses identical; not installable "
                                            "(pip): Keras 3.10; 2 cell(s) n/a")
    matrix.write(tmp_path, Settings(), cells)
    text = (tmp_path / "matrix.md").read_text()
    assert "| TF | Keras 3.10 mirrored | Keras 3.12 mirrored | tf-keras mirrored |" in text
    assert "| 2.21 | not installable | ok | ok |" in text


def test_each_cell_says_the_keras_its_chief_imported(tmp_path):
    from tflab.core import runfolder

    run = tmp_path / "r"
    run.mkdir()
    start = {"event": "start", "task": "worker-0", "time": 1.0, "role": "script", "strategy": "mirrored",
             "cluster": {}, "versions": {"tensorflow": "2.21.0", "keras": "keras 3.15.1"}, "settings": {}}
    imported = {"event": "imported", "task": "worker-0", "time": 2.0, "module": "keras",
                "version": "3.16.0.dev2026102704"}
    runfolder.log_path(run, "worker-0").write_text(json.dumps(start) + "\n" + json.dumps(imported) + "\n")
    assert matrix.imported_keras(run, "worker-0") == "keras 3.16.0.dev2026102704"  # the process's own word wins
    runfolder.log_path(run, "worker-0").write_text(json.dumps(start) + "\n")
    assert matrix.imported_keras(run, "worker-0") == "keras 3.15.1"
    done = cell("2.21", "nightly", "mirrored", keras_imported="keras 3.16.0.dev2026102704")
    assert matrix.said(done) == "ok (keras 3.16.0.dev2026102704)"


def ran(tf, keras, strategy, losses):
    return cell(tf, keras, strategy, losses=list(losses), final_loss=losses[-1])


def test_a_synchronous_cell_whose_losses_part_from_the_single_runs_is_wrong():
    """Same data, seed and global batch: only the all-reduce's float rounding may part them (4e-5 measured)."""
    cells = [ran("2.21", "keras3", "single", [30.6279, 26.6177, 21.6584]),
             ran("2.21", "keras3", "mirrored", [30.6279, 26.6178, 21.6583]),
             ran("2.21", "keras3", "multiworker", [30.6279, 27.9, 24.1]),
             ran("2.21", "keras3", "parameter_server", [31.09, 25.0, 20.1]),  # asynchronous: never compared
             ran("2.21", "tf-keras", "mirrored", [1.0, 9.0, 9.0])]  # no single cell of its own to compare with
    matrix.compare_with_single(cells, Settings())
    assert [c.outcome for c in cells] == ["ok", "ok", "wrong", "ok", "ok"]
    assert cells[2].signature == "losses-differ"
    assert cells[2].what.startswith("epoch 3: loss 24.1 under multiworker against 21.6584 on one device (1.1e-01 apart")
    assert "multiworker ends ok and trains wrong under keras3 on 2.21: losses-differ" in matrixverdict.verdict(cells)
    script = [ran("2.21", "keras3", "single", [3.0]), ran("2.21", "keras3", "mirrored", [9.0])]
    matrix.compare_with_single(script, Settings(script=__file__))  # a script's data and seeds are its own
    assert [c.outcome for c in script] == ["ok", "ok"]


def test_a_cell_whose_loss_went_nan_is_wrong_not_ok(tmp_path, monkeypatch):
    """Every task exited 0: the cell ran, and learned nothing."""
    from tflab.core import runsummary
    from tflab.core.runsummary import Summary, TaskRow

    row = {"final_loss": float("nan"), "steady_step_seconds": 0.01, "peak_rss_per_process_bytes": 1,
           "wall_seconds": 9.0, "losses": [float("nan")] * 3}
    monkeypatch.setattr(matrix.report, "run_row", lambda run_dir: row)
    finding = {"kind": "non-finite", "tasks": ["worker-0"], "message": "worker-0: the loss was nan from epoch 1 on",
               "fix": "f"}
    for audit_setting, findings in (("on", [finding]), ("strict", [finding]), ("off", [])):
        summary = Summary(run="r", strategy="multiworker", backend="compose", outcome="failed" if audit_setting
                          == "strict" else "ok", ok=audit_setting != "strict", launched_at=1.0, wall_seconds=9.0,
                          settings={}, weights_agree=True, tasks=[TaskRow(task="worker-0", status="ok")],
                          findings=findings)
        monkeypatch.setattr(runsummary.Summary, "read", classmethod(lambda cls, run_dir, s=summary: s))
        one = cell("2.21", "keras3", "multiworker", outcome="not run")
        matrix.fill(one, tmp_path)
        assert (one.outcome, one.signature) == ("wrong", "non-finite-loss")
        assert one.what == (finding["message"] if findings else "the chief's loss per epoch was nan nan nan")
    assert matrix.mark(one) == "wrong: non-finite-loss" and not matrix.passed([one])


def test_a_cell_whose_keras_has_no_parameter_server_training_is_n_a_with_the_reason(tmp_path, monkeypatch):
    """Keras 3 under parameter_server (in a matrix, a replayed job with PS replicas: STRATEGIES has no
    parameter_server) fails on whatever it lacks first (explain.py's keras3-parameter-server): the cell cannot
    be, as a Keras a TF cannot have cannot, and fails nothing; any other failure still does."""
    from tflab.core import explain, runsummary
    from tflab.core.runsummary import Summary, TaskRow

    row = {"final_loss": None, "steady_step_seconds": None, "peak_rss_per_process_bytes": 1, "wall_seconds": 9.0,
           "losses": []}
    monkeypatch.setattr(matrix.report, "run_row", lambda run_dir: row)
    ps = explain.BY_NAME["keras3-parameter-server"]
    for signature, outcome in (("keras3-parameter-server", "n/a"), ("removed-api", "failed")):
        said = {"task": "chief-0", "signature": signature, "what": "w", "fix": "f", "link": "", "retry": False}
        summary = Summary(run="r", strategy="parameter_server", backend="compose", outcome="failed", ok=False,
                          launched_at=1.0, wall_seconds=9.0, settings={}, weights_agree=None,
                          tasks=[TaskRow(task="chief-0", status="failed", explanation=said),
                                 TaskRow(task="worker-0", status="ok")])
        monkeypatch.setattr(runsummary.Summary, "read", classmethod(lambda cls, run_dir, s=summary: s))
        one = cell("2.21", "keras3", "tfjob", outcome="not run", run="tf2-21-keras3-tfjob")
        matrix.fill(one, tmp_path)
        assert (one.outcome, one.signature) == (outcome, signature)
    ok = cell("2.21", "tf-keras", "tfjob", final_loss=1.0)
    na = cell("2.21", "keras3", "tfjob", "n/a", signature=ps.name, what=ps.what)
    assert matrix.passed([ok, na]) and matrix.mark(na) == "n/a"
    assert matrixverdict.verdict([ok, na]) == "2.21: every cell passes; 1 cell(s) n/a (keras3-parameter-server)"


REPLAYED_JOB = """\
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mw}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: Never
      template:
        spec:
          containers:
          - name: tensorflow
            image: IMAGE
            env: ENV
"""


def replayed_job(tmp_path, image="tflab-trainer:cpu-0123456789ab", env="[]") -> str:
    path = tmp_path / "job.yaml"
    path.write_text(REPLAYED_JOB.replace("IMAGE", image).replace("ENV", env))
    return str(path)


def test_a_replayed_job_is_one_column_named_for_its_kind_with_its_own_settings(tmp_path):
    """make matrix TFJOB=: one cell per TF x KERAS, no strategy (the job fixes its cluster), no
    MATRIX_SIZE (its containers run their own command)."""
    settings = Settings(tfjob=replayed_job(tmp_path), tf="2.15 2.21", keras="tf-keras keras3")
    assert matrix.sized(settings, {}) is settings
    planned = matrix.plan(settings, tmp_path / "m")
    assert [(c.tf, c.keras, c.strategy, c.outcome, c.run) for c, _ in planned] == [
        ("2.15", "tf-keras", "tfjob", "not run", "tf2-15-tf-keras-tfjob"), ("2.15", "keras3", "tfjob", "n/a", None),
        ("2.21", "tf-keras", "tfjob", "not run", "tf2-21-tf-keras-tfjob"),
        ("2.21", "keras3", "tfjob", "not run", "tf2-21-keras3-tfjob")]
    one = planned[-1][1]
    assert (one.tf, one.keras, one.strategy, one.tfjob) == ("2.21", "keras3", settings.strategy, settings.tfjob)
    assert [c.strategy for c, _ in matrix.plan(Settings(trainjob=settings.tfjob, tf="2.21"), tmp_path)] == [
        "trainjob", "trainjob"]


@pytest.mark.parametrize("image", ["kubeflow/tf-mnist-with-summaries:latest", "tflab-trainer-packages:cpu-0123",
                                   "registry.example.com/tflab-trainer:1",
                                   "tflab-trainer@sha256:" + "0" * 64])
def test_a_replayed_job_on_a_foreign_image_is_refused_naming_it(tmp_path, image):
    from tflab.k8s import tfjob

    plan = tfjob.load(Settings(tfjob=replayed_job(tmp_path, image)))
    with pytest.raises(matrix.LabError) as error:
        matrix.refuse_foreign(plan)
    said = str(error.value)
    assert f"worker-0's image is {image}, not the lab's trainer image" in said and "\n" not in said
    assert "only the lab's own (tflab-trainer:<tag>, as make k8s writes it)" in said
    assert said.endswith(f"run this one as it is with make up TFJOB={plan.path}")


def test_a_cell_puts_its_image_and_its_keras_in_place_of_the_manifests(tmp_path):
    """make k8s writes TF_USE_LEGACY_KERAS=1 into every replica: a keras3 cell sets it to 0."""
    from tflab.k8s import tfjob

    env = "[{name: A, value: b}, {name: TF_USE_LEGACY_KERAS, value: '1'}]"
    plan = tfjob.load(Settings(tfjob=replayed_job(tmp_path, env=env)))
    matrix.refuse_foreign(plan)
    cast = matrix.recast(plan, "tflab-trainer:cpu-tf2.15-0123", {"TF_USE_LEGACY_KERAS": "0"})
    assert {(t.image, t.service["image"]) for t in cast.tasks} == {("tflab-trainer:cpu-tf2.15-0123",) * 2}
    environment = cast.tasks[0].service["environment"]
    assert (environment["A"], environment["TF_USE_LEGACY_KERAS"]) == ("b", "0") and "TF_CONFIG" in environment
    assert plan.tasks[0].image == "tflab-trainer:cpu-0123456789ab"  # the job as read is left as it was


@pytest.mark.parametrize("words, said", [
    (["STRATEGIES=mirrored"], "STRATEGIES=mirrored does not apply with TFJOB={job}: the TFJob's replicas fix its "
                              "cluster (spec.tfReplicaSpecs); make matrix varies only TF and KERAS for a replay; "
                              "leave STRATEGIES out"),
    (["WORKERS=3"], "WORKERS=3 does not apply with TFJOB={job}: the TFJob's Worker replicas set the workers"),
    (["IMAGE"], "TFJOB={job}: worker-0's image is kubeflow/tf-dist-mnist-test:latest, not the lab's trainer image"),
])
def test_make_matrix_refuses_a_replay_it_cannot_vary_in_one_line_and_writes_nothing(tmp_path, words, said):
    from labtest.cli import assert_refused, run_lab

    image = "kubeflow/tf-dist-mnist-test:latest" if words == ["IMAGE"] else "tflab-trainer:cpu-0123456789ab"
    job = replayed_job(tmp_path, image)
    runs = tmp_path / "runs"
    result = run_lab("matrix", f"TFJOB={job}", f"RUNS_DIR={runs}", "TF=2.21", *[w for w in words if "=" in w])
    assert_refused(result, said.format(job=job), runs)


def test_make_matrix_trainjob_refuses_strategies(tmp_path):
    from labtest.cli import assert_refused, run_lab

    runs = tmp_path / "runs"
    result = run_lab("matrix", f"TRAINJOB={replayed_job(tmp_path)}", f"RUNS_DIR={runs}", "STRATEGIES=mirrored")
    assert_refused(result, f"STRATEGIES=mirrored does not apply with TRAINJOB={tmp_path / 'job.yaml'}: the TrainJob "
                           "and its runtime fix its cluster", runs)


def test_each_replayed_cell_runs_on_its_image_with_its_keras(stood_in, tmp_path, monkeypatch):
    """The cells of a replay go to the replay (replay.up) with the plan recast, not to runner.up."""
    from tflab import replay

    ran, outcomes, _ = stood_in
    replayed, built = [], []
    monkeypatch.setattr(matrix.images, "ensure_image", lambda base, variant: built.append(variant) or
                        f"tflab-trainer:{variant.tag if hasattr(variant, 'tag') else 'x'}")

    def up(settings, given, recast=None, link_latest=True):
        plan = recast(replay.load_plan(settings))
        replayed.append((settings.run, plan.tasks[0].service["environment"]["TF_USE_LEGACY_KERAS"], link_latest))
        return 0

    monkeypatch.setattr(replay, "up", up)
    settings = Settings(runs_dir=str(tmp_path), run="r", tf="2.21", keras="tf-keras keras3",
                        tfjob=replayed_job(tmp_path))
    assert matrix.matrix(settings, {"TFJOB": settings.tfjob}) == 0
    assert ran == [] and replayed == [("tf2-21-tf-keras-tfjob", "1", False), ("tf2-21-keras3-tfjob", "0", False)]
    assert len(built) == 2
    assert [c.strategy for c in Matrix.read(tmp_path / "r").cells] == ["tfjob", "tfjob"]


def test_precisions_make_one_cell_per_precision_each_named_and_headed_for_it(tmp_path):
    planned = matrix.plan(Settings(tf="2.21", keras="tf-keras", strategies="single mirrored",
                                   precisions="float32 mixed_float16"), tmp_path)
    assert [(c.strategy, c.precision, c.run, one.precision) for c, one in planned] == [
        ("single", "float32", "tf2-21-tf-keras-single", "float32"),
        ("single", "mixed_float16", "tf2-21-tf-keras-single-mixed-float16", "mixed_float16"),
        ("mirrored", "float32", "tf2-21-tf-keras-mirrored", "float32"),
        ("mirrored", "mixed_float16", "tf2-21-tf-keras-mirrored-mixed-float16", "mixed_float16")]
    alone = matrix.plan(Settings(tf="2.21", keras="tf-keras", strategies="mirrored", precision="mixed_bfloat16"),
                        tmp_path)
    assert [(c.precision, one.precision) for c, one in alone] == [("mixed_bfloat16", "mixed_bfloat16")]
    cells = [c for c, _ in planned]
    grid = matrix.grid(Matrix(run="m", settings={}, cells=cells, verdict="v", ok=False))
    assert grid[0] == ["TF", "tf-keras single", "tf-keras single mixed_float16", "tf-keras mirrored",
                       "tf-keras mirrored mixed_float16"]


def test_each_precision_is_compared_with_the_single_cell_of_its_own_precision():
    """The trainer's own losses, measured on this machine's CPUs (tf-keras, mlp, 1024 examples, global batch
    64, 2 logical CPUs): mixed_float16's mirrored-2 parts from its single run by 4.0e-3 (its replicas round
    their halves in float16), under MIXED_LOSS_TOLERANCE; float32's agree to 1e-6."""
    runs = {("single", "float32"): [25.61029, 24.57014, 23.66417],
            ("single", "mixed_float16"): [25.74974, 24.73783, 23.79824],
            ("mirrored", "float32"): [25.61029, 24.57014, 23.66416],
            ("mirrored", "mixed_float16"): [25.68095, 24.63906, 23.77158]}
    cells = []
    for (strategy, precision), losses in runs.items():
        cells.append(ran("2.21", "tf-keras", strategy, losses))
        cells[-1].precision = precision
    matrix.compare_with_single(cells, Settings())
    assert [c.outcome for c in cells] == ["ok"] * 4
    cells[3].losses = [loss / 2 for loss in runs[("mirrored", "mixed_float16")]]  # a loss divided by 2 replicas
    matrix.compare_with_single(cells, Settings())
    assert (cells[3].outcome, cells[3].signature) == ("wrong", "losses-differ")
    assert "mixed_float16's rounding stays under 0.02" in cells[3].what
    assert "keras-loss-in-replica" in cells[3].fix


@pytest.mark.parametrize("imported, precision, strategy, signature", [
    ("keras 3.15.1", "mixed_float16", "mirrored", "keras3-loss-scale-nan"),  # measured: NaN from epoch 1
    ("tf-keras 2.21.0", "mixed_float16", "mirrored", "non-finite-loss"),  # tf-keras trained: not its doing
    ("keras 3.15.1", "mixed_bfloat16", "mirrored", "non-finite-loss"),  # no loss scale
    ("keras 3.15.1", "mixed_float16", "single", "non-finite-loss"),  # one replica: measured to train
    ("keras 3.15.1", "mixed_float16", "multiworker", "non-finite-loss"),  # never measured: fit fails first there
])
def test_a_nan_of_keras_3s_loss_scale_over_replicas_is_named_with_the_way_out(tmp_path, monkeypatch, imported,
                                                                               precision, strategy, signature):
    from tflab.core import runsummary
    from tflab.core.runsummary import Summary, TaskRow

    row = {"final_loss": float("nan"), "steady_step_seconds": 0.01, "peak_rss_per_process_bytes": 1,
           "wall_seconds": 9.0, "losses": [float("nan")] * 3}  # the trainer's losses, Keras 3.15.1, mirrored-2
    monkeypatch.setattr(matrix.report, "run_row", lambda run_dir: row)
    summary = Summary(run="r", strategy=strategy, backend="local", outcome="ok", ok=True, launched_at=1.0,
                      wall_seconds=9.0, settings={}, weights_agree=True, tasks=[TaskRow(task="worker-0", status="ok")])
    monkeypatch.setattr(runsummary.Summary, "read", classmethod(lambda cls, run_dir: summary))
    monkeypatch.setattr(matrix, "imported_keras", lambda run_dir, task: imported)
    one = cell("2.21", "keras3", strategy, outcome="not run", precision=precision)
    matrix.fill(one, tmp_path)
    assert (one.outcome, one.signature) == ("wrong", signature)
    if signature == "keras3-loss-scale-nan":
        assert "first replica's gradients" in one.what and one.fix.startswith("KERAS=tf-keras")


def test_make_matrix_refuses_precisions_with_a_replay_in_one_line(tmp_path):
    from labtest.cli import assert_refused, run_lab

    runs = tmp_path / "runs"
    result = run_lab("matrix", f"TRAINJOB={replayed_job(tmp_path)}", f"RUNS_DIR={runs}", "PRECISIONS=mixed_float16")
    assert_refused(result, f"PRECISIONS=mixed_float16 does not apply with TRAINJOB={tmp_path / 'job.yaml'}: the "
                           "TrainJob and its runtime fix how it trains", runs)


def test_a_version_2_matrix_reads_back_with_every_cell_float32(tmp_path):
    matrix.write(tmp_path, Settings(), [cell("2.21", "tf-keras", "mirrored")])
    data = json.loads((tmp_path / "matrix.json").read_text())
    data["version"] = 2
    for one in data["cells"]:
        one.pop("precision")
    (tmp_path / "matrix.json").write_text(json.dumps(data))
    assert Matrix.read(tmp_path).cells[0].precision == "float32"
