"""PRECISION in the lab's trainer: what each value asks of Keras, decided here without TensorFlow
(train.py and customloop.py apply it; tests/unit/test_precision.py holds the decisions).

Keras's mixed-precision guide (https://www.tensorflow.org/guide/mixed_precision): set the global dtype
policy before the model is built (its layers then compute in float16 or bfloat16 and keep float32
variables), end the model in float32 (the guide's float32 softmax; here a float32 linear activation,
so the loss is float32 too), and under mixed_float16 scale the loss so that small float16 gradients do
not underflow: a LossScaleOptimizer, which compile would add by itself but a custom loop must use by
hand. bfloat16 has float32's range and needs no loss scaling. Under float32 nothing changes: the same
model, optimizer and losses as before PRECISION existed.

tf-keras and Keras 3 scale differently: tf-keras's LossScaleOptimizer has get_scaled_loss and
get_unscaled_gradients; Keras 3's has scale_loss, and its apply_gradients unscales the gradients
itself. The loop asks the optimizer which it is (`scaled_loss`, `unscaled_gradients`), as the
trainer runs under either (KERAS).
"""

from __future__ import annotations

from dataclasses import dataclass

from tflab.core.grammars import PRECISIONS


@dataclass(frozen=True)
class Plan:
    policy: str  # Keras's global dtype policy: float32, mixed_float16 or mixed_bfloat16
    float32_output: bool  # a float32 linear activation after the model's last layer
    loss_scale: bool  # the optimizer wrapped in a LossScaleOptimizer


def plan(precision: str) -> Plan:
    """What PRECISION asks of the trainer (Settings checked the value; ValueError for any other)."""
    if precision not in PRECISIONS:
        raise ValueError(f"PRECISION={precision} is not one of {', '.join(PRECISIONS)}")
    return Plan(policy=precision, float32_output=precision != "float32", loss_scale=precision == "mixed_float16")


def is_tf_keras_scaler(optimizer) -> bool:
    """tf-keras's LossScaleOptimizer (get_scaled_loss), not Keras 3's (scale_loss) nor a plain optimizer."""
    return hasattr(optimizer, "get_scaled_loss") and hasattr(optimizer, "get_unscaled_gradients")


def scaled_loss(optimizer, loss):
    """The loss to take gradients of: scaled by a LossScaleOptimizer, as it is otherwise."""
    if is_tf_keras_scaler(optimizer):
        return optimizer.get_scaled_loss(loss)
    if hasattr(optimizer, "scale_loss"):  # Keras 3: every optimizer has it; 1 unless a LossScaleOptimizer
        return optimizer.scale_loss(loss)
    return loss


def unscaled_gradients(optimizer, gradients: list) -> list:
    """Gradients of `scaled_loss`, as apply_gradients takes them: tf-keras's unscaled here, Keras 3's
    as they are (its LossScaleOptimizer's apply_gradients divides by the scale and skips a step whose
    gradients are not finite)."""
    if is_tf_keras_scaler(optimizer):
        return optimizer.get_unscaled_gradients(gradients)
    return gradients
