"""PRECISION and PRECISIONS: the setting, what the trainer does under each value (trainer/precision.py,
decided without TensorFlow), the run's first line and summary line, and make compare's runs per precision."""

import re
from pathlib import Path

import pytest
from labtest.cli import assert_refused, lab_env, run_lab
from tflab import console
from tflab.core import cluster, rules, versions
from tflab.core.runsummary import Summary
from tflab.core.settings import Settings, SettingsError
from tflab.reports import compare, matrix
from tflab.supervisor import table
from tflab.trainer import precision

pytestmark = pytest.mark.unit


def test_precision_is_float32_unless_told_and_anything_else_is_one_line_naming_the_allowed():
    assert Settings().precision == "float32" and Settings().precisions == ""
    assert Settings.from_env({}, {"PRECISION": "mixed_bfloat16"}).precision == "mixed_bfloat16"
    with pytest.raises(SettingsError) as error:
        Settings.from_env({}, {"PRECISION": "fp16"})
    assert str(error.value) == ("PRECISION=fp16 is not allowed: expected one of float32, mixed_float16, "
                                "mixed_bfloat16")
    assert "\n" not in str(error.value)


def test_precisions_is_a_list_each_checked_and_said_once():
    assert Settings.from_env({}, {"PRECISIONS": "float32  mixed_float16 float32"}).precisions == \
        "float32 mixed_float16"
    with pytest.raises(SettingsError, match=r"^PRECISIONS=float32 half is not allowed: half is not one of float32 \| "
                                            r"mixed_float16 \| mixed_bfloat16, one or more$"):
        Settings.from_env({}, {"PRECISIONS": "float32 half"})


def test_float16_under_parameter_servers_is_refused_and_bfloat16_is_not():
    # tf-keras's LossScaleOptimizer raises under ParameterServerStrategy (strategy_supports_loss_scaling).
    with pytest.raises(SettingsError, match=r"^PRECISION=mixed_float16 is not allowed with STRATEGY=parameter_server: "
                                            r".*expected PRECISION=float32 or mixed_bfloat16$"):
        Settings(strategy="parameter_server", precision="mixed_float16").validated()
    assert Settings(strategy="parameter_server", precision="mixed_bfloat16").validated().precision == "mixed_bfloat16"


# --- mixed_float16 over several replicas under any Keras 3 the lab pins (issue 45) ----------------
# The lab's finding (reports/matrixverdict.py KERAS3_LOSS_SCALE, 2026-12-07): Keras 3.15.1's
# LossScaleOptimizer (keras/src/optimizers/loss_scale_optimizer.py, _tf_apply) checks the first
# replica's gradients only, and mirrored-2 went NaN from epoch 1, fit and LOOP=custom; tf-keras trained;
# keras-nightly 3.16.0.dev2026102704's mirrored-2 fit went NaN from epoch 1 too (make matrix, the same day).
NAN_LOSS = (r"^PRECISION=mixed_float16 is not allowed with TF=2\.21 KERAS={keras} and STRATEGY={strategy} \(2 "
            r"replicas\): Keras {pinned}'s LossScaleOptimizer checks only the first replica's gradients for inf or "
            r"NaN, before the all-reduce, .*the loss goes NaN \(the lab's own finding on Keras 3\.15\.1 and "
            r"keras-nightly 3\.16\.0\.dev2026102704; related: keras-team/keras#18666\); expected "
            r"PRECISION=mixed_bfloat16, which needs no loss scaling, or KERAS=tf-keras$")


@pytest.mark.parametrize("keras, pinned", [("keras3", "3.15.1"), ("3.15", "3.15.1"), ("3.12", "3.12.4"),
                                           ("nightly", "3.16.0.dev2026102704")])
@pytest.mark.parametrize("strategy", ["mirrored", "multiworker"])
@pytest.mark.parametrize("loop", ["fit", "custom"])
def test_float16_over_replicas_under_a_pinned_keras_3_is_refused_in_one_line(keras, pinned, strategy, loop):
    with pytest.raises(SettingsError) as error:
        Settings(tf="2.21", keras=keras, strategy=strategy, loop=loop, precision="mixed_float16").validated()
    assert re.match(NAN_LOSS.format(keras=keras, strategy=strategy, pinned=re.escape(pinned)), str(error.value)), \
        str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("changes", [
    {"keras": "tf-keras"},  # its LossScaleOptimizer reduces the gradients first: measured to train
    {"keras": ""},  # tf-keras, the lab's default
    {"precision": "mixed_bfloat16"},  # no loss scaling
    {"precision": "float32"},
    {"strategy": "single"},  # one replica: measured to train
    {"replicas": 1},  # mirrored over one replica
    {"strategy": "multiworker", "workers": 1},
    {"script": "train.py"},  # a SCRIPT's precision is its own
])
def test_float16_under_keras_3_is_refused_only_over_replicas_of_a_pinned_release(changes):
    settings = Settings(**{"tf": "2.21", "keras": "3.15", "strategy": "mirrored", "precision": "mixed_float16",
                           **changes})
    assert rules.keras3_loss_scale_refusal(settings.tf, settings.keras, settings.precision, settings.strategy,
                                           settings.replicas_in_sync, not settings.script) is None
    assert rules.keras3_refusal(settings) is None


def test_the_keras_3_each_line_runs_is_what_its_lock_pins():
    """versions.keras3_release names KERAS=keras3's release by the locks: TF 2.16 to 2.21 pin keras
    3.15.1 (the measured one), TF=next keras-nightly; a lock that moves must move the rule."""
    requirements = Path(__file__).resolve().parents[2] / "requirements"
    for tf in versions.RELEASES:
        if "keras3" not in versions.kerases(tf):
            assert versions.keras3_release(tf, "") is None
            continue
        lock = requirements / ("trainer.txt" if tf == versions.DEFAULT else f"tf/{tf}.txt")
        pins = dict(re.findall(r"^(keras|keras-nightly)==(\S+)", lock.read_text(), re.M))
        release = versions.keras3_release(tf, "keras3")
        assert pins == {"keras-nightly" if release == "nightly" else "keras": versions.KERAS_RELEASES[release]}, tf
        assert (release == "nightly") == (tf == versions.NEXT)
    assert versions.keras3_release("2.21", "3.12") == "3.12" and versions.keras3_release("2.21", "tf-keras") is None


def test_make_up_refuses_it_in_one_line_and_starts_nothing(tmp_path):
    runs = tmp_path / "runs"
    result = run_lab("up", "TF=2.21", "KERAS=3.15", "STRATEGY=mirrored", "PRECISION=mixed_float16",
                     f"RUNS_DIR={runs}", env=lab_env())
    assert_refused(result, "PRECISION=mixed_float16 is not allowed with TF=2.21 KERAS=3.15 and STRATEGY=mirrored "
                           "(2 replicas): Keras 3.15.1's LossScaleOptimizer", runs)
    assert result.stderr.rstrip().endswith("expected PRECISION=mixed_bfloat16, which needs no loss scaling, or "
                                           "KERAS=tf-keras")


def test_make_compare_refuses_it_naming_the_entry():
    with pytest.raises(SettingsError, match=r"^COMPARE entry mirrored-2-mixed-float16: PRECISION=mixed_float16 is "
                                            r"not allowed with TF=2\.21 KERAS=keras3 and STRATEGY=mirrored"):
        compare.compare_runs(Settings(tf="2.21", keras="keras3", compare="single mirrored-2",
                                      precisions="float32 mixed_float16"))


def test_make_matrix_marks_a_keras_3_cell_over_replicas_n_a_and_runs_the_rest(tmp_path):
    """The matrix is not refused: a cell the settings refuse is n/a with the reason (rules.keras3_refusal),
    keras-nightly's over replicas too (measured NaN), and one replica's cells and tf-keras's run."""
    planned = matrix.plan(Settings(tf="2.21", keras="3.15 nightly tf-keras", strategies="single mirrored",
                                   precisions="mixed_float16"), tmp_path)
    na = {(c.keras, c.strategy): c.what for c, one in planned if one is None}
    assert list(na) == [("3.15", "mirrored"), ("nightly", "mirrored")]
    assert na[("3.15", "mirrored")].startswith("Keras 3.15.1's LossScaleOptimizer checks only the first replica's")
    assert na[("nightly", "mirrored")].startswith("Keras 3.16.0.dev2026102704's LossScaleOptimizer")
    assert {c.outcome for c, one in planned if one is None} == {"n/a"}
    ran = {(c.keras, c.strategy): one for c, one in planned if one is not None}
    assert set(ran) == {("3.15", "single"), ("nightly", "single"), ("tf-keras", "single"), ("tf-keras", "mirrored")}
    assert (ran[("tf-keras", "mirrored")].precision, ran[("tf-keras", "mirrored")].replicas_in_sync) == (
        "mixed_float16", 2)


def test_a_precision_the_settings_never_allow_is_no_plan():
    with pytest.raises(ValueError, match="PRECISION=float16 is not one of"):
        precision.plan("float16")


class TfKerasScaler:
    """tf-keras's LossScaleOptimizer's two methods, at a loss scale of 8."""

    def get_scaled_loss(self, loss):
        return loss * 8

    def get_unscaled_gradients(self, gradients):
        return [g / 8 for g in gradients]


class Keras3Scaler:
    """Keras 3's: scale_loss; its apply_gradients unscales (so the gradients pass as they are)."""

    def scale_loss(self, loss):
        return loss * 8


class TfKerasAdam:
    """tf-keras's plain optimizer has neither."""


@pytest.mark.parametrize("optimizer, scaled, gradients", [
    (TfKerasScaler(), 16.0, [0.5, 1.0]),
    (Keras3Scaler(), 16.0, [4.0, 8.0]),
    (TfKerasAdam(), 2.0, [4.0, 8.0]),
])
def test_the_custom_loop_scales_as_its_keras_does(optimizer, scaled, gradients):
    assert precision.scaled_loss(optimizer, 2.0) == scaled
    assert precision.unscaled_gradients(optimizer, [4.0, 8.0]) == gradients


def test_the_runs_first_line_says_a_mixed_precision_and_float32_reads_as_before():
    mixed = Settings(strategy="mirrored", precision="mixed_float16")
    assert console.describe_run(mixed, cluster.build(mixed)) == (
        "mirrored, 2 replicas, mlp, mixed_float16, 10 epochs of 4096 examples, global batch 64, seed 0")
    assert "float32" not in console.describe_run(Settings(), cluster.build(Settings()))


def test_compare_runs_every_entry_once_per_precision_side_by_side():
    runs = compare.compare_runs(Settings(compare="single mirrored-2", precisions="float32 mixed_float16"))
    assert [(label, one.strategy, one.precision, one.run) for label, one in runs] == [
        ("single-float32", "single", "float32", "single-float32"),
        ("single-mixed-float16", "single", "mixed_float16", "single-mixed-float16"),
        ("mirrored-2-float32", "mirrored", "float32", "mirrored-2-float32"),
        ("mirrored-2-mixed-float16", "mirrored", "mixed_float16", "mirrored-2-mixed-float16")]
    one = compare.compare_runs(Settings(compare="single mirrored-2", precision="mixed_bfloat16"))
    assert [(label, s.precision) for label, s in one] == [("single", "mixed_bfloat16"),
                                                          ("mirrored-2", "mixed_bfloat16")]


def test_compare_refuses_a_precision_one_entry_cannot_train_naming_the_entry():
    with pytest.raises(SettingsError, match=r"^COMPARE entry parameter-server-2-mixed-float16: "
                                            r"PRECISION=mixed_float16 is not allowed with STRATEGY=parameter_server"):
        compare.compare_runs(Settings(compare="single parameter-server-2", precisions="float32 mixed_float16"))


@pytest.mark.parametrize("value, line", [
    ("mixed_bfloat16", "run r1 at mixed_bfloat16: ok in 12.5 s"),
    ("float32", "run r1: ok in 12.5 s"),
    (None, "run r1: ok in 12.5 s"),  # a summary from before PRECISION
])
def test_the_summarys_last_line_says_a_mixed_precision(value, line):
    settings = {} if value is None else {"precision": value}
    result = Summary.from_dict({"run": "r1", "strategy": "single", "backend": "local", "outcome": "ok", "ok": True,
                                "launched_at": 1000.0, "wall_seconds": 12.5, "settings": settings,
                                "weights_agree": True, "tasks": []})
    assert table.table(result).splitlines()[-1] == line
