"""The Trainer's optimizers, corrected for several replicas (``MirroredStrategy`` over GPUs).

Keras 3 (TensorFlow backend) has two per-replica decisions that should be global:

* **Clipping** happens in ``BaseOptimizer._backend_apply_gradients`` before
  ``_backend_update_step`` all-reduces the gradients, so each replica's part is
  clipped alone and the effective threshold grows with the number of GPUs
  (2 logical devices holding gradients ``[3, 0]`` and ``[0, 4]``, ``clipnorm=1``:
  update ``[-1, -1]`` instead of the clipped sum's ``[-0.6, -0.8]``).
  :class:`ReducedGradientClipAdam` clips the all-reduced gradient instead, so a
  result does not depend on the replica count. ``clipnorm`` keeps Keras' meaning
  (each variable's gradient norm).
* **Loss scaling** (``LossScaleOptimizer``, mixed float16) checks the gradients'
  finiteness per replica before they are summed: an overflow on one replica only
  let the others apply their step, with the overflowed sum, and wrote NaN
  weights. :class:`ReplicaAgreedLossScaleOptimizer` skips the step on every
  replica when any replica overflowed.

Both are registered Keras objects, so saved models and backups reload them.
"""

import keras
import tensorflow as tf
from keras import ops


def _num_replicas() -> int:
    context = tf.distribute.get_replica_context()
    return context.num_replicas_in_sync if context is not None else 1


class ReducedGradientClipping:
    """Mixed into a Keras optimizer (before it): ``clipnorm`` / ``global_clipnorm`` /
    ``clipvalue`` act on the gradient summed over the replicas, not on each replica's part."""

    def _clip_gradients(self, grads):
        # Called by Keras before the all-reduce: clipping waits for _backend_update_step.
        return grads

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        variables = [variable.value if isinstance(variable, keras.Variable) else variable
                     for variable in trainable_variables]
        reduced = self._all_reduce_sum_gradients(list(zip(grads, variables, strict=True)))
        clipped = super()._clip_gradients([gradient for gradient, _ in reduced])
        tf.__internal__.distribute.interim.maybe_merge_call(
            self._distributed_tf_update_step, self._distribution_strategy,
            list(zip(clipped, [variable for _, variable in reduced], strict=True)), learning_rate)


@keras.saving.register_keras_serializable(package="flickr8k_captioning")
class ReducedGradientClipAdam(ReducedGradientClipping, keras.optimizers.Adam):
    """The Trainer's Adam, clipping the all-replica gradient."""


@keras.saving.register_keras_serializable(package="flickr8k_captioning")
class ReplicaAgreedLossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """``LossScaleOptimizer`` whose finite-gradients decision is one for all replicas."""

    def check_finite(self, grads):
        finite = super().check_finite(grads)
        context = tf.distribute.get_replica_context()
        if context is None or _num_replicas() == 1:
            return finite
        overflowed = context.all_reduce(tf.distribute.ReduceOp.SUM,
                                        ops.cast(ops.logical_not(finite), "float32"))
        return ops.equal(overflowed, 0.0)
