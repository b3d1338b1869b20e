"""The trainer's own training loops for LOOP=custom: the synchronous strategies' step without
Keras's fit (one packed all-reduce per step, the same losses as fit's to float rounding), and the
same step through TensorFlow's PreemptionCheckpointHandler under make chaos SCENARIO=preempt, so a
preempted run resumes at the very step it saved.
"""

import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

from tflab.core import runfolder
from tflab.core.explain import PREEMPTED  # TF's PreemptionCheckpointHandler exits so after its backup
from tflab.core.settings import Settings
from tflab.trainer import precision
from tflab.trainer.backups import gce_notice


def gradient_step(model, settings: Settings):
    """The custom loops' step, run on each replica: Keras's mse, its gradients (of the loss scaled and
    unscaled again under PRECISION=mixed_float16, trainer/precision.py) and the optimizer's update,
    with every gradient and the loss packed in one flat tensor so that a step has one all-reduce.
    The step returns the global batch's mean loss, the same on every replica."""
    variables = model.trainable_variables
    shapes = [v.shape for v in variables]
    sizes = [int(np.prod(v.shape)) for v in variables]
    optimizer = model.optimizer

    def step(x, y):
        with tf.GradientTape() as tape:
            per_example = tf.reduce_mean(tf.square(y - model(x, training=True)), axis=-1)  # Keras's mse
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=settings.global_batch)
            scaled = precision.scaled_loss(optimizer, loss)  # PRECISION=mixed_float16: a LossScaleOptimizer's
        gradients = precision.unscaled_gradients(optimizer, tape.gradient(scaled, variables))
        # Every gradient and the loss itself in one flat tensor: the step's only collective. Under mixed
        # precision too the variables, so the gradients, and the loss (the model ends in float32) are float32.
        flat = tf.concat([tf.reshape(g, [-1]) for g in gradients] + [[loss]], axis=0)
        flat = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, flat)
        grads = [tf.reshape(g, shape) for g, shape in zip(tf.split(flat[:-1], sizes), shapes)]
        optimizer.apply_gradients(zip(grads, variables), skip_gradients_aggregation=True)
        return flat[-1]

    return step


def custom_fit(model, strategy, dataset, settings: Settings, timing) -> list[float]:
    """The synchronous strategies' step without Keras's fit: the same loss, gradients and Adam
    update, but one all-reduce per step (every gradient and the loss packed in one flat tensor,
    where fit reduces each gradient and its metrics apart), and up to STEPS_PER_EXECUTION steps
    per call. The losses equal fit's to float rounding."""
    step = gradient_step(model, settings)

    @tf.function
    def run_steps(iterator, steps):
        total = tf.constant(0.0)
        for _ in tf.range(steps):
            total += strategy.experimental_local_results(strategy.run(step, args=next(iterator)))[0]
        return total

    distributed = strategy.experimental_distribute_dataset(dataset)
    steps_per_epoch, losses = settings.steps_per_epoch, []
    timing.on_train_begin()
    for epoch in range(settings.epochs):
        timing.on_epoch_begin(epoch)
        iterator, done, total = iter(distributed), 0, 0.0
        while done < steps_per_epoch:
            # The very first call is one step, so that its time is tracing plus one step, as in fit.
            steps = 1 if epoch == 0 and done == 0 else min(settings.steps_per_execution, steps_per_epoch - done)
            timing.on_train_batch_begin(done)
            total += float(run_steps(iterator, tf.constant(steps)))
            done += steps
            timing.on_train_batch_end(done - 1)
        losses.append(total / steps_per_epoch)
        timing.on_epoch_end(epoch, {"loss": losses[-1]})
    return losses


def preemptible_custom_loop(settings: Settings) -> bool:
    """LOOP=custom under make chaos SCENARIO=preempt: the loop runs each step through TensorFlow's
    PreemptionCheckpointHandler (multiworker, with a backup). Elsewhere the custom loop is the
    plain one, which has no backup and starts over after a restart."""
    return settings.scenario == "preempt" and settings.strategy == "multiworker" and settings.backup != "off"


def custom_fit_preemptible(model, strategy, dataset, settings: Settings, timing, run_dir: Path) -> list[float]:
    """custom_fit's step, one per call, through tf.distribute.experimental.PreemptionCheckpointHandler:
    on a notice (SIGTERM, or GCE's maintenance event with NOTICE=gce) every worker saves the model,
    the optimizer and the epoch's running loss at the same step in <run>/backup and exits (42 on
    SIGTERM, TensorFlow's 143 on Google Cloud); after the restart the handler restores them and the
    loop resumes at that very step, its data skipped to it, so the run ends with the weights an
    undisturbed one has. It saves only on a notice: a task killed without one starts over."""
    step = gradient_step(model, settings)  # custom_fit's, to the bit
    steps_per_epoch = settings.steps_per_epoch
    with strategy.scope():
        epoch_total = tf.Variable(0.0, dtype=tf.float64, trainable=False,
                                  aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        trained_steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, epoch_total=epoch_total,
                                     trained_steps=trained_steps)
    config = tf.distribute.experimental.TerminationConfig(grace_period=0) if gce_notice(settings) else \
        tf.distribute.experimental.TerminationConfig(exit_fn=lambda: sys.exit(PREEMPTED))
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, checkpoint, str(run_dir / runfolder.BACKUP), config)

    @tf.function
    def run_step(iterator):
        loss = strategy.experimental_local_results(strategy.run(step, args=next(iterator)))[0]
        epoch_total.assign_add(tf.cast(loss, tf.float64))
        trained_steps.assign_add(1)
        return loss

    distributed = strategy.experimental_distribute_dataset(dataset)
    start = int(trained_steps.numpy())  # steps trained before (the handler restored it): 0, or where it saved
    losses = []
    timing.on_train_begin()
    for epoch in range(start // steps_per_epoch, settings.epochs):
        timing.on_epoch_begin(epoch)
        iterator = iter(distributed)
        done = start % steps_per_epoch if epoch == start // steps_per_epoch else 0
        if not done:
            epoch_total.assign(0.0)
        for _ in range(done):  # the steps this epoch had trained before the notice: their data skipped
            next(iterator)
        while done < steps_per_epoch:
            timing.on_train_batch_begin(done)
            handler.run(run_step, iterator)
            timing.on_train_batch_end(done)
            done += 1
        losses.append(float(epoch_total.numpy()) / steps_per_epoch)
        timing.on_epoch_end(epoch, {"loss": losses[-1]})
    return losses
