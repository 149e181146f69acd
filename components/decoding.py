"""Greedy and beam-search caption decoding as TensorFlow graph code (exportable).

Both work on any ``step_logits(image_context, ids) -> [batch, length, vocabulary]``
(``image_context``: whatever the step reads of the image, e.g. its projected feature map)
function that is causal (the logits at position *i* depend on ids ≤ *i* only),
like the trained decoder. Ids live in a fixed ``[batch, max_length]`` buffer
that starts as ``<start>`` followed by padding; step *i* reads the logits at
position *i* and writes the chosen id at *i + 1*.

Rules, for both: ``<pad>``, ``<start>`` and ``<unk>`` are never emitted; a
sequence ends at ``<end>`` (kept out of the caption) and is padded after it; a
sequence that never emits ``<end>`` ends at ``max_length`` with its score so
far. Scores are summed log-probabilities of the emitted ids, ``<end>``
included. Beam search keeps ``beam_width`` hypotheses per image and returns
the best; width 1 is exactly greedy.

Written here rather than taken from a library: KerasHub's samplers are not
installed on this stack (TF 2.16 / Keras 3.12 pins) and expect a cache-based
``next`` function; this is ~100 lines with tests.
"""

from typing import Callable

import tensorflow as tf

from components import caption_text

StepLogits = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
_FORBIDDEN = (caption_text.PAD_ID, caption_text.START_ID, caption_text.UNK_ID)


def _allowed_log_probs(logits: tf.Tensor, finished: tf.Tensor) -> tf.Tensor:
    """log-softmax with forbidden ids at -inf; finished rows may only emit padding, at 0 cost."""
    vocabulary = tf.shape(logits)[-1]
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)
    forbidden = tf.reduce_any(tf.equal(tf.range(vocabulary)[:, tf.newaxis],
                                       tf.constant(_FORBIDDEN, tf.int32)[tf.newaxis, :]), axis=-1)
    log_probs = tf.where(forbidden, tf.constant(-1e9, tf.float32), log_probs)
    pad_only = tf.where(tf.equal(tf.range(vocabulary), caption_text.PAD_ID), 0.0, -1e9)
    return tf.where(finished[..., tf.newaxis], pad_only, log_probs)


def _start_buffer(batch: tf.Tensor, max_length: int) -> tf.Tensor:
    return tf.concat([tf.fill([batch, 1], caption_text.START_ID),
                      tf.zeros([batch, max_length - 1], tf.int32)], axis=1)


def _write_column(ids: tf.Tensor, column: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    one_hot = tf.one_hot(column, tf.shape(ids)[-1], dtype=tf.int32)
    return ids * (1 - one_hot) + values[..., tf.newaxis] * one_hot


def greedy_decode(step_logits: StepLogits, image_context: tf.Tensor, max_length: int):
    """Returns (ids [batch, max_length - 1] without <start>, score [batch])."""
    batch = tf.shape(image_context)[0]
    ids = _start_buffer(batch, max_length)
    finished = tf.zeros([batch], tf.bool)
    scores = tf.zeros([batch], tf.float32)
    for position in tf.range(max_length - 1):
        logits = step_logits(image_context, ids)[:, position, :]
        log_probs = _allowed_log_probs(logits, finished)
        chosen = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        scores += tf.reduce_max(log_probs, axis=-1)
        ids = _write_column(ids, position + 1, chosen)
        finished = tf.logical_or(finished, tf.equal(chosen, caption_text.END_ID))
    return ids[:, 1:], scores


def beam_search_decode(step_logits: StepLogits, image_context: tf.Tensor, max_length: int,
                       beam_width: tf.Tensor):
    """Returns the best beam per image: (ids [batch, max_length - 1], score [batch])."""
    beam_width = tf.cast(beam_width, tf.int32)
    batch = tf.shape(image_context)[0]
    flat = batch * beam_width
    beam_features = tf.repeat(image_context, beam_width, axis=0)  # [batch * beams, ...]
    ids = tf.reshape(_start_buffer(flat, max_length), [batch, beam_width, max_length])
    # Only beam 0 is live at the start, so the first step does not pick one token K times.
    scores = tf.tile(tf.where(tf.range(beam_width) == 0, 0.0, -1e9)[tf.newaxis], [batch, 1])
    finished = tf.zeros([batch, beam_width], tf.bool)
    for position in tf.range(max_length - 1):
        logits = step_logits(beam_features, tf.reshape(ids, [flat, max_length]))[:, position, :]
        vocabulary = tf.shape(logits)[-1]
        log_probs = _allowed_log_probs(tf.reshape(logits, [batch, beam_width, vocabulary]), finished)
        candidates = tf.reshape(scores[..., tf.newaxis] + log_probs, [batch, beam_width * vocabulary])
        scores, flat_choice = tf.math.top_k(candidates, k=beam_width)
        parent = flat_choice // vocabulary
        token = flat_choice % vocabulary
        ids = _write_column(tf.gather(ids, parent, batch_dims=1), position + 1, token)
        finished = tf.logical_or(tf.gather(finished, parent, batch_dims=1),
                                 tf.equal(token, caption_text.END_ID))
    best = tf.argmax(scores, axis=-1, output_type=tf.int32)
    return (tf.gather(ids, best, batch_dims=1)[:, 1:], tf.gather(scores, best, batch_dims=1))


def ids_to_captions(ids: tf.Tensor, vocabulary: tf.Tensor) -> tf.Tensor:
    """[batch, length] ids → captions: words up to <end>, joined by spaces."""
    before_end = tf.math.cumsum(tf.cast(tf.equal(ids, caption_text.END_ID), tf.int32), axis=-1) == 0
    keep = tf.logical_and(before_end, ids >= caption_text.NUM_RESERVED_IDS)
    words = tf.ragged.boolean_mask(tf.gather(vocabulary, ids), keep)
    return tf.strings.reduce_join(words, axis=-1, separator=" ")
