"""Caption text rules shared by Transform and serving, so the two cannot drift.

Normalisation: lower-case, every run of characters other than ``a-z`` and
``0-9`` becomes one space (punctuation such as ``.,"';#!?&():=`` is dropped, so
"at&t" → "at t" and "man's" → "man s"), and leading/trailing spaces go.
Tokens are the space-separated words.

Token ids: 0 is padding and nothing else; 1 ``<unk>``, 2 ``<start>``,
3 ``<end>``; vocabulary word *i* (0-based, most frequent first) has id
``NUM_RESERVED_IDS + i``. The markers cannot collide with words, since
normalisation removes ``<`` and ``>``.
"""

import re

PAD_ID = 0
UNK_ID = 1
START_ID = 2
END_ID = 3
RESERVED_TOKENS = ("<pad>", "<unk>", "<start>", "<end>")
NUM_RESERVED_IDS = len(RESERVED_TOKENS)


# Every run of these becomes one space.
DROPPED_CHARACTERS = r"[^a-z0-9]+"


def normalize(captions):
    """Applies the normalisation to a string tensor of any shape (ragged included)."""
    import tensorflow as tf  # the reader uses only the Python twin, without TensorFlow

    lowered = tf.strings.lower(captions, encoding="utf-8")
    spaced = tf.strings.regex_replace(lowered, DROPPED_CHARACTERS, " ")
    return tf.strings.strip(spaced)


def tokenize(captions):
    """``[n]`` strings → ``[n, (words)]`` normalised tokens (a ``tf.RaggedTensor``)."""
    import tensorflow as tf

    return tf.strings.split(normalize(captions))


def normalize_python(caption: str) -> str:
    """The same rule in plain Python, for the reader, reports and tests on the host."""
    return re.sub(DROPPED_CHARACTERS, " ", caption.lower()).strip()
