"""Loss and metric for next-token prediction over padded captions.

The original model fed linear outputs, clipped to [-10, 10], to
``SparseCategoricalCrossentropy(from_logits=False)``. Keras then treats them as
probabilities: it clips them to [1e-7, 1 - 1e-7] and takes the log, which is
not cross-entropy and has zero gradient for every output ≤ 0 or ≥ 1. Here the
loss is computed from logits (log-softmax), padding (target id 0) is excluded
exactly once, and the sum is divided by the number of real tokens, or by 1 for
a batch that is all padding, so it is always finite.

Under ``MirroredStrategy`` each replica's loss must also be divided by the
number of replicas before the gradients are summed. Keras does that only for
its ``sum_over_batch_size`` reduction, so the loss uses it: the per-token
values are weighted so that Keras' sum / (batch × time) is the mean over real
tokens, those of the whole global batch (their count summed over the replicas),
so the loss and gradients are the single-device ones however unevenly the real
tokens fall on the replicas. (With ``reduction="sum"`` Keras skips the scaling: on 2 replicas the
reported loss was twice the true one and the gradients were summed, not averaged.)
"""

import keras
import tensorflow as tf
from keras import ops

from components import caption_text


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN/inf loss; no model is written."""


@keras.saving.register_keras_serializable(package="flickr8k_captioning")
class MaskedCaptionLoss(keras.losses.Loss):
    """Mean sparse cross-entropy from logits over non-padding target tokens."""

    def __init__(self, name: str = "masked_caption_loss", **kwargs):
        super().__init__(name=name, reduction="sum_over_batch_size", **kwargs)

    def call(self, target_ids, logits):
        target_ids = ops.cast(target_ids, "int32")
        logits = ops.cast(logits, "float32")  # float32 even under mixed precision
        token_losses = keras.losses.sparse_categorical_crossentropy(
            target_ids, logits, from_logits=True)
        mask = ops.cast(ops.not_equal(target_ids, caption_text.PAD_ID), "float32")
        elements = ops.cast(ops.size(mask), "float32")
        real_tokens = ops.maximum(ops.sum(mask), 1.0)
        replica_context = tf.distribute.get_replica_context()
        if replica_context is not None and replica_context.num_replicas_in_sync > 1:
            # The mean over the global batch's real tokens, not a mean of per-replica means:
            # replicas holding different numbers of real tokens (image-major batches do)
            # would otherwise weigh their tokens unequally.
            global_tokens = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, ops.sum(mask))
            real_tokens = ops.maximum(global_tokens, 1.0) / float(replica_context.num_replicas_in_sync)
        return token_losses * mask * (elements / real_tokens)


@keras.saving.register_keras_serializable(package="flickr8k_captioning")
class MaskedTokenAccuracy(keras.metrics.Mean):
    """Share of non-padding target tokens whose arg-max logit is the target."""

    def __init__(self, name: str = "masked_accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def update_state(self, target_ids, logits, sample_weight=None):
        del sample_weight
        target_ids = ops.cast(target_ids, "int32")
        mask = ops.cast(ops.not_equal(target_ids, caption_text.PAD_ID), "float32")
        correct = ops.cast(ops.equal(ops.cast(ops.argmax(logits, axis=-1), "int32"), target_ids),
                           "float32")
        return super().update_state(ops.reshape(correct, [-1]), sample_weight=ops.reshape(mask, [-1]))
