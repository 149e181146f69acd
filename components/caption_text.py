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

import tensorflow as tf

PAD_ID = 0
UNK_ID = 1
START_ID = 2
END_ID = 3
RESERVED_TOKENS = ("<pad>", "<unk>", "<start>", "<end>")
NUM_RESERVED_IDS = len(RESERVED_TOKENS)


def normalize(captions: tf.Tensor) -> tf.Tensor:
    """Applies the normalisation to a string tensor of any shape (ragged included)."""
    lowered = tf.strings.lower(captions, encoding="utf-8")
    spaced = tf.strings.regex_replace(lowered, r"[^a-z0-9]+", " ")
    return tf.strings.strip(spaced)


def tokenize(captions: tf.Tensor) -> tf.RaggedTensor:
    """``[n]`` strings → ``[n, (words)]`` normalised tokens."""
    return tf.strings.split(normalize(captions))


def normalize_python(caption: str) -> str:
    """The same rule in plain Python, for reports and tests on the host."""
    import re

    return re.sub(r"[^a-z0-9]+", " ", caption.lower()).strip()
