"""PRECISION and PRECISIONS: the setting, what the trainer does under each value (trainer/precision.py,
decided without TensorFlow), the run's first line and summary line, and make compare's runs per precision."""

import pytest
from tflab import console
from tflab.core import cluster
from tflab.core.runsummary import Summary
from tflab.core.settings import Settings, SettingsError
from tflab.reports import compare
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


@pytest.mark.parametrize("value, policy, float32_output, loss_scale", [
    ("float32", "float32", False, False),  # the model and optimizer as before PRECISION: losses to the bit
    ("mixed_float16", "mixed_float16", True, True),
    ("mixed_bfloat16", "mixed_bfloat16", True, False),  # float32's range: no loss scaling
])
def test_what_each_precision_asks_of_keras(value, policy, float32_output, loss_scale):
    assert precision.plan(value) == precision.Plan(policy, float32_output, loss_scale)


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
