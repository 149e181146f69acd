"""Gradient clipping and mixed-precision overflow handling on 2 replicas (2 logical CPU devices)
act on the gradient of all replicas, as on 1 device, not on each replica's part."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from components.trainer import optimizers, run_fn

REPLICA_GRADIENTS = ([3.0, 0.0], [0.0, 4.0])  # summed: [3, 4], norm 5


def _apply_on_two_replicas(make_optimizer, replica_gradients):
    """Each replica applies its own gradient to one weight vector in one step, with the
    optimizer ``make_optimizer()`` builds in the strategy's scope; returns ``(weights after the
    step, the optimizer)``."""
    strategy = run_fn.make_strategy()
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        optimizer = make_optimizer()
        weights = keras.Variable(np.zeros(2, np.float32), name="weights")
        optimizer.build([weights])
    gradients = tf.constant(replica_gradients, "float32")

    @tf.function
    def step():
        def replica_step():
            index = tf.distribute.get_replica_context().replica_id_in_sync_group
            optimizer.apply_gradients([(tf.gather(gradients, index), weights)])
        strategy.run(replica_step)

    step()
    return weights.numpy(), optimizer


class ReducedGradientClipSGD(optimizers.ReducedGradientClipping, keras.optimizers.SGD):
    """Plain SGD shows the gradient it applied in its weights (Adam's first step hides it)."""


def test_clipping_acts_on_the_summed_gradient_not_on_each_replica():
    weights, _ = _apply_on_two_replicas(
        lambda: ReducedGradientClipSGD(learning_rate=1.0, clipnorm=1.0), REPLICA_GRADIENTS)
    np.testing.assert_allclose(weights, [-0.6, -0.8], rtol=1e-6)  # the clipped sum [3, 4] / 5
    # Keras' own SGD clips each replica's part first: [1, 0] + [0, 1].
    stock, _ = _apply_on_two_replicas(lambda: keras.optimizers.SGD(learning_rate=1.0, clipnorm=1.0),
                                         REPLICA_GRADIENTS)
    np.testing.assert_allclose(stock, [-1.0, -1.0], rtol=1e-6)


def test_clipping_on_two_replicas_updates_as_one_device_with_the_summed_gradient():
    two_replicas, _ = _apply_on_two_replicas(
        lambda: optimizers.ReducedGradientClipAdam(learning_rate=0.1, clipnorm=1.0), REPLICA_GRADIENTS)
    one_device = keras.Variable(np.zeros(2, np.float32))
    optimizer = optimizers.ReducedGradientClipAdam(learning_rate=0.1, clipnorm=1.0)
    optimizer.apply_gradients([(tf.constant([3.0, 4.0]), one_device)])
    np.testing.assert_allclose(two_replicas, one_device.numpy(), rtol=1e-6)


@pytest.mark.parametrize("overflowing_replica", [0, 1])
def test_an_overflow_on_any_replica_skips_the_step_on_all(overflowing_replica):
    replica_gradients = [[1.0, 1.0], [1.0, 1.0]]
    replica_gradients[overflowing_replica] = [np.inf, 1.0]
    weights, optimizer = _apply_on_two_replicas(
        lambda: optimizers.ReplicaAgreedLossScaleOptimizer(
            optimizers.ReducedGradientClipAdam(learning_rate=0.1, clipnorm=1.0)), replica_gradients)
    np.testing.assert_array_equal(weights, [0.0, 0.0])
    assert float(optimizer.dynamic_scale.numpy()) < 2.0 ** 15  # the scale was lowered


def test_keras_loss_scale_optimizer_alone_writes_nan_weights_when_replica_1_overflows():
    """The failure the agreed decision prevents (reproduced from the issue)."""
    weights, _ = _apply_on_two_replicas(
        lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=0.1)),
        [[1.0, 1.0], [np.inf, 1.0]])
    assert not np.all(np.isfinite(weights))
