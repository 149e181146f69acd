"""Tests of greedy and beam-search decoding on hand-built decoder steps with known probabilities.

The steps are Markov chains: the next-token logits depend only on the previous
id (and on which image), so every sequence's probability can be computed by
hand. A counter in the carried state checks that beams carry their own state.
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from components import caption_text
from components.trainer import decoding

PAD, UNK, START, END = (caption_text.PAD_ID, caption_text.UNK_ID, caption_text.START_ID,
                        caption_text.END_ID)
A, B, C = 4, 5, 6
VOCABULARY = 7
NEVER = 1e-12


def _markov_step(transition_tables):
    """``tables[image, previous id, next id]`` probabilities → a step over image ids whose
    state counts the steps taken."""
    log_tables = tf.constant(np.log(np.maximum(transition_tables, NEVER)), tf.float32)

    def step(image_index, token_ids, state):
        (steps_taken,) = state
        logits = tf.gather_nd(log_tables, tf.stack([image_index, token_ids], axis=-1))
        return logits, (steps_taken + 1,)
    return step


def _table(rows):
    table = np.full((VOCABULARY, VOCABULARY), NEVER)
    for previous, probabilities in rows.items():
        for token, probability in probabilities.items():
            table[previous, token] = probability
    return table


# Greedy takes "a" (0.6), then <end> (0.35): 0.21. "b <end>" has 0.4 * 0.9 = 0.36, the most
# probable sequence; every other continuation of "a" is below 0.6 * 0.33.
GREEDY_TRAP = _table({
    START: {A: 0.6, B: 0.4},
    A: {A: 0.33, C: 0.32, END: 0.35},
    B: {END: 0.9, C: 0.1},
    C: {END: 1.0},
})


def _decode(table_stack, images, max_length=6, beam_width=None):
    step = _markov_step(np.stack(table_stack))
    image_index = tf.constant(images, tf.int32)
    initial_state = (tf.zeros([len(images)], tf.int32),)
    if beam_width is None:
        ids, scores = decoding.greedy_decode(step, image_index, initial_state, max_length, VOCABULARY)
    else:
        ids, scores = decoding.beam_search_decode(step, image_index, initial_state, max_length,
                                                  VOCABULARY, beam_width)
    return ids.numpy(), scores.numpy()


def test_beam_search_finds_the_sequence_greedy_misses():
    greedy_ids, greedy_score = _decode([GREEDY_TRAP], [0])
    assert list(greedy_ids[0][:2]) == [A, END]
    assert greedy_score[0] == pytest.approx(math.log(0.6 * 0.35), rel=1e-5)
    for width in (2, 3):
        beam_ids, beam_score = _decode([GREEDY_TRAP], [0], beam_width=width)
        assert list(beam_ids[0][:2]) == [B, END] and np.all(beam_ids[0][2:] == PAD)
        assert beam_score[0] == pytest.approx(math.log(0.36), rel=1e-5)


def test_width_one_is_greedy():
    rng = np.random.RandomState(0)
    tables = [rng.dirichlet(np.ones(VOCABULARY) * 0.5, size=VOCABULARY) for _ in range(4)]
    greedy = _decode(tables, [0, 1, 2, 3], max_length=8)
    beam = _decode(tables, [0, 1, 2, 3], max_length=8, beam_width=1)
    np.testing.assert_array_equal(beam[0], greedy[0])
    np.testing.assert_allclose(beam[1], greedy[1], rtol=1e-5)


def test_forbidden_ids_are_never_emitted():
    # <unk>, <pad> and <start> are the most probable next ids everywhere; none may appear.
    table = _table({previous: {UNK: 0.5, PAD: 0.2, START: 0.2, A: 0.06, END: 0.04}
                    for previous in range(VOCABULARY)})
    for width in (None, 1, 3):
        ids, scores = _decode([table], [0], beam_width=width)
        assert not np.isin(ids, [UNK, START]).any()
        first_pad = np.argmax(ids[0] == PAD) if (ids[0] == PAD).any() else len(ids[0])
        assert np.all(ids[0][first_pad:] == PAD) and np.all(ids[0][:first_pad] != PAD)
        assert np.isfinite(scores).all()


def test_a_sequence_that_never_ends_stops_at_max_length_with_its_score():
    table = _table({START: {A: 1.0}, A: {A: 0.5, B: 0.5}, B: {A: 0.5, B: 0.5}})
    for width in (None, 2):
        ids, scores = _decode([table], [0], max_length=5, beam_width=width)
        assert ids.shape == (1, 4) and not np.isin(ids, [PAD, END]).any()
        assert scores[0] == pytest.approx(math.log(1.0 * 0.5 ** 3), rel=1e-4)


def test_each_image_in_a_batch_gets_its_own_caption():
    says_a = _table({START: {A: 0.9, B: 0.1}, A: {END: 1.0}, B: {END: 1.0}})
    says_b_c = _table({START: {B: 0.9, A: 0.1}, B: {C: 1.0}, C: {END: 1.0}, A: {END: 1.0}})
    for width in (None, 3):
        ids, _ = _decode([says_a, says_b_c], [0, 1, 1, 0], beam_width=width)
        assert [list(row[:3]) for row in ids] == [[A, END, PAD], [B, C, END], [B, C, END],
                                                  [A, END, PAD]]


def test_beams_carry_their_own_state_in_a_traced_function():
    """A step whose logits depend on its state: the state says how many tokens came before, and
    <end> is allowed only after 3. Reordered beams must keep their own counters."""
    def counting_step(image_index, token_ids, state):
        (steps_taken,) = state
        end_allowed = steps_taken >= 3
        logits = tf.where(end_allowed[:, tf.newaxis],
                          tf.math.log(tf.constant([[NEVER, NEVER, NEVER, 0.9, 0.05, 0.05, NEVER]])),
                          tf.math.log(tf.constant([[NEVER, NEVER, NEVER, NEVER, 0.5, 0.3, 0.2]])))
        return logits, (steps_taken + 1,)

    @tf.function
    def decode(image_index):
        return decoding.beam_search_decode(counting_step, image_index,
                                           (tf.zeros_like(image_index),), 8, VOCABULARY,
                                           tf.constant(3))
    ids, scores = decode(tf.constant([0, 1]))
    assert ids.numpy()[:, 3].tolist() == [END, END] and np.all(ids.numpy()[:, :3] >= A)
    assert scores.numpy() == pytest.approx([math.log(0.5 ** 3 * 0.9)] * 2, rel=1e-5)


def test_ids_to_captions_stops_at_end_and_drops_reserved_ids():
    vocabulary = tf.constant(["<pad>", "<unk>", "<start>", "<end>", "a", "b", "c"])
    ids = tf.constant([[A, B, END, C, PAD], [C, PAD, PAD, PAD, PAD], [END, A, A, A, A]])
    captions = decoding.ids_to_captions(ids, vocabulary).numpy().tolist()
    assert captions == [b"a b", b"c", b""]


def test_length_penalty_prefers_the_longer_caption_only_when_asked():
    # "<end>" at once: 0.4. "a b <end>": 0.6 * 0.7 * 0.9 = 0.378, slightly less probable in
    # total but far more per word; with alpha = 1 it wins (0.378 normalised by 8/6 vs 0.4 by 6/6).
    table = _table({START: {END: 0.4, A: 0.6}, A: {B: 0.7, END: 0.3}, B: {END: 0.9, C: 0.1},
                    C: {END: 1.0}})
    plain_ids, plain_score = _decode([table], [0], beam_width=3)
    assert plain_ids[0][0] == END and plain_score[0] == pytest.approx(math.log(0.4), rel=1e-5)
    step = _markov_step(np.stack([table]))
    ids, score = decoding.beam_search_decode(step, tf.constant([0]), (tf.zeros([1], tf.int32),), 6,
                                             VOCABULARY, 3, length_alpha=1.0)
    assert list(ids.numpy()[0][:3]) == [A, B, END]
    assert score.numpy()[0] == pytest.approx(math.log(0.378), rel=1e-5)  # the plain sum


def test_sampling_draws_by_the_model_probabilities_and_follows_the_decoding_rules():
    """GREEDY_TRAP sampled 2,000 times: "a <end>" has 0.6 x 0.35 = 0.21, "b <end>" 0.36; the
    returned score is each sample's own log-probability; the same seed gives the same captions."""
    rows = 2000
    step = _markov_step(np.stack([GREEDY_TRAP]))
    image_index = tf.zeros([rows], tf.int32)
    initial_state = (tf.zeros([rows], tf.int32),)
    ids, scores = decoding.sample_decode(step, image_index, initial_state, 6, VOCABULARY,
                                         tf.constant([3, 0], tf.int32))
    ids, scores = ids.numpy(), scores.numpy()
    first_two = [tuple(row[:2]) for row in ids]
    assert abs(first_two.count((A, END)) / rows - 0.21) < 0.03
    assert abs(first_two.count((B, END)) / rows - 0.36) < 0.03
    assert not np.isin(ids, [START, UNK]).any()
    for row, score in zip(ids, scores, strict=True):
        ended = list(row).index(END) if END in row else len(row)
        assert (row[ended + 1:] == PAD).all() and (row[:ended] >= A).all()
        probability, previous = 1.0, START
        for token in row[:ended + 1]:
            probability *= GREEDY_TRAP[previous, token]
            previous = token
        assert score == pytest.approx(math.log(probability), abs=1e-4)
    again, _ = decoding.sample_decode(step, image_index, initial_state, 6, VOCABULARY,
                                      tf.constant([3, 0], tf.int32))
    other, _ = decoding.sample_decode(step, image_index, initial_state, 6, VOCABULARY,
                                      tf.constant([4, 0], tf.int32))
    assert (again.numpy() == ids).all() and not (other.numpy() == ids).all()
