"""Greedy, beam-search and sampled caption decoding as TensorFlow graph code (exportable).

Both drive a decoder one token at a time through
``step(image_context, token_ids, state) -> (logits [batch, vocabulary], state)``:
``image_context`` is whatever the step reads of each image (the projected
feature map), ``state`` a tuple of ``[batch, ...]`` tensors the step carries
(the LSTM states), starting from ``initial_state``. The first token is
``<start>``.

Rules, for all three: ``<pad>``, ``<start>`` and ``<unk>`` are never emitted; a
sequence ends at ``<end>`` (kept out of the caption) and is padded after it; a
sequence that never emits ``<end>`` ends after ``max_length - 1`` tokens with
its score so far. Scores are summed log-probabilities of the emitted ids,
``<end>`` included. Beam search keeps ``beam_width`` hypotheses per image
(their states reordered with them) and returns the best; width 1 is exactly
greedy. Sampling (the self-critical phase's policy) draws each id from the
softmax over the allowed ids. All stop early once every sequence of the batch
has ended.

Written here rather than taken from a library: KerasHub's samplers are not
installed on this stack (TF 2.16 / Keras 3.12 pins) and expect a cache-based
``next`` function; this is ~100 lines with tests.
"""

from typing import Callable, Tuple

import tensorflow as tf

from components import caption_text

State = Tuple[tf.Tensor, ...]
Step = Callable[[tf.Tensor, tf.Tensor, State], Tuple[tf.Tensor, State]]
_FORBIDDEN = (caption_text.PAD_ID, caption_text.START_ID, caption_text.UNK_ID)


def forbidden_bias(vocabulary: tf.Tensor) -> tf.Tensor:
    """``[vocabulary]``: -1e9 at the ids never emitted, 0 elsewhere (computed once per call)."""
    forbidden = tf.reduce_any(tf.equal(tf.range(vocabulary)[:, tf.newaxis],
                                       tf.constant(_FORBIDDEN, tf.int32)[tf.newaxis, :]), axis=-1)
    return tf.where(forbidden, tf.constant(-1e9, tf.float32), 0.0)


def _allowed_log_probs(logits: tf.Tensor, finished: tf.Tensor, forbidden_bias: tf.Tensor,
                       pad_only: tf.Tensor) -> tf.Tensor:
    """log-softmax with forbidden ids at -1e9; finished rows may only emit padding, at 0 cost."""
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1) + forbidden_bias
    return tf.where(finished[..., tf.newaxis], pad_only, log_probs)


def _pad_only(vocabulary: tf.Tensor) -> tf.Tensor:
    return tf.where(tf.equal(tf.range(vocabulary), caption_text.PAD_ID), 0.0, -1e9)


def _decode_one_per_row(step: Step, image_context: tf.Tensor, initial_state: State, max_length: int,
                        vocabulary_size: int, choose: Callable[[tf.Tensor, tf.Tensor], tf.Tensor]):
    """One caption per row, each id ``choose(allowed log-probabilities [batch, vocabulary],
    position)``; returns (ids [batch, max_length - 1], summed log-probability [batch])."""
    batch = tf.shape(image_context)[0]
    tokens = tf.fill([batch], caption_text.START_ID)
    state = tuple(initial_state)
    finished = tf.zeros([batch], tf.bool)
    scores = tf.zeros([batch], tf.float32)
    ids = tf.zeros([batch, max_length - 1], tf.int32)
    bias, pad_only = forbidden_bias(vocabulary_size), _pad_only(vocabulary_size)
    for position in tf.range(max_length - 1):
        logits, state = step(image_context, tokens, state)
        log_probs = _allowed_log_probs(logits, finished, bias, pad_only)
        tokens = choose(log_probs, position)
        scores += tf.gather(log_probs, tokens, batch_dims=1)
        ids += tokens[:, tf.newaxis] * tf.one_hot(position, max_length - 1, dtype=tf.int32)
        finished = tf.logical_or(finished, tf.equal(tokens, caption_text.END_ID))
        if tf.reduce_all(finished):
            break
    return ids, scores


def greedy_decode(step: Step, image_context: tf.Tensor, initial_state: State, max_length: int,
                  vocabulary_size: int):
    """Returns (ids [batch, max_length - 1] without <start>, score [batch]).

    Stops early once every caption of the batch has ended.
    """
    return _decode_one_per_row(
        step, image_context, initial_state, max_length, vocabulary_size,
        lambda log_probs, position: tf.argmax(log_probs, axis=-1, output_type=tf.int32))


def sample_decode(step: Step, image_context: tf.Tensor, initial_state: State, max_length: int,
                  vocabulary_size: int, seed: tf.Tensor):
    """Returns (ids [batch, max_length - 1] without <start>, log-probability [batch]) of one
    caption per row sampled from the decoder: each id drawn from the softmax over the allowed
    ids (``forbidden_bias``), padding after ``<end>``. ``seed``: int32 ``[2]``, the stateless
    random seed of the call (the same seed and weights give the same captions).
    """
    def draw(log_probs, position):
        return tf.reshape(tf.random.stateless_categorical(
            log_probs, 1, seed=tf.stack([seed[0], seed[1] + position]), dtype=tf.int32), [-1])

    return _decode_one_per_row(step, image_context, initial_state, max_length, vocabulary_size, draw)


def length_penalty(lengths: tf.Tensor, alpha: float) -> tf.Tensor:
    """GNMT's length penalty ((5 + length) / 6) ** alpha; 1 everywhere when alpha is 0."""
    return tf.pow((5.0 + tf.cast(lengths, tf.float32)) / 6.0, alpha)


def beam_search_decode(step: Step, image_context: tf.Tensor, initial_state: State, max_length: int,
                       vocabulary_size: int, beam_width: tf.Tensor, length_alpha: float = 0.0):
    """Returns the best beam per image: (ids [batch, max_length - 1], score [batch]).

    Hypotheses are ranked by summed log-probability divided by
    :func:`length_penalty` of their length (``length_alpha`` 0: not normalised,
    which favours short captions); the returned score is the plain sum.
    """
    beam_width = tf.cast(beam_width, tf.int32)
    batch = tf.shape(image_context)[0]
    flat = batch * beam_width
    # Rows are image-major: row b * beam_width + k is beam k of image b.
    beam_context = tf.repeat(image_context, beam_width, axis=0)
    state = tuple(tf.repeat(tensor, beam_width, axis=0) for tensor in initial_state)
    tokens = tf.fill([flat], caption_text.START_ID)
    ids = tf.zeros([batch, beam_width, max_length - 1], tf.int32)
    # Only beam 0 is live at the start, so the first step does not pick one token K times.
    scores = tf.tile(tf.where(tf.range(beam_width) == 0, 0.0, -1e9)[tf.newaxis], [batch, 1])
    finished = tf.zeros([batch, beam_width], tf.bool)
    lengths = tf.zeros([batch, beam_width], tf.int32)  # emitted ids, <end> included
    bias, pad_only = forbidden_bias(vocabulary_size), _pad_only(vocabulary_size)
    for position in tf.range(max_length - 1):
        # top_k(k=beam_width) loses a static width, so let the beam dimension vary.
        tf.autograph.experimental.set_loop_options(shape_invariants=[
            (ids, tf.TensorShape([None, None, None])), (scores, tf.TensorShape([None, None])),
            (finished, tf.TensorShape([None, None])), (tokens, tf.TensorShape([None])),
            (lengths, tf.TensorShape([None, None])),
            (state, tuple(tf.TensorShape([None, *tensor.shape[1:]]) for tensor in state))])
        logits, state = step(beam_context, tokens, state)
        log_probs = _allowed_log_probs(tf.reshape(logits, [batch, beam_width, vocabulary_size]),
                                       finished, bias, pad_only)
        candidates = tf.reshape(scores[..., tf.newaxis] + log_probs,
                                [batch, beam_width * vocabulary_size])
        # A finished hypothesis keeps its length; a live one grows by the id it emits.
        candidate_lengths = tf.reshape(tf.repeat(
            tf.where(finished, lengths, lengths + 1)[..., tf.newaxis], vocabulary_size, axis=-1),
            [batch, beam_width * vocabulary_size])
        _, flat_choice = tf.math.top_k(
            candidates / length_penalty(candidate_lengths, length_alpha), k=beam_width)
        scores = tf.gather(candidates, flat_choice, batch_dims=1)
        lengths = tf.gather(candidate_lengths, flat_choice, batch_dims=1)
        parent = flat_choice // vocabulary_size
        token = flat_choice % vocabulary_size
        one_hot = tf.one_hot(position, max_length - 1, dtype=tf.int32)
        ids = tf.gather(ids, parent, batch_dims=1) * (1 - one_hot) + token[..., tf.newaxis] * one_hot
        finished = tf.logical_or(tf.gather(finished, parent, batch_dims=1),
                                 tf.equal(token, caption_text.END_ID))
        parent_rows = tf.reshape(parent + beam_width * tf.range(batch)[:, tf.newaxis], [flat])
        state = tuple(tf.gather(tensor, parent_rows) for tensor in state)
        tokens = tf.reshape(token, [flat])
        if tf.reduce_all(finished):
            break
    best = tf.argmax(scores / length_penalty(lengths, length_alpha), axis=-1, output_type=tf.int32)
    return tf.gather(ids, best, batch_dims=1), tf.gather(scores, best, batch_dims=1)


def ids_to_captions(ids: tf.Tensor, vocabulary: tf.Tensor) -> tf.Tensor:
    """[batch, length] ids → captions: words up to <end>, joined by spaces."""
    before_end = tf.math.cumsum(tf.cast(tf.equal(ids, caption_text.END_ID), tf.int32), axis=-1) == 0
    keep = tf.logical_and(before_end, ids >= caption_text.NUM_RESERVED_IDS)
    words = tf.ragged.boolean_mask(tf.gather(vocabulary, ids), keep)
    return tf.strings.reduce_join(words, axis=-1, separator=" ")
