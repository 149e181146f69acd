"""The ``transform`` config section: the caption vocabulary and the GloVe embedding matrix, read by
``preprocessing_fn`` and ``glove``."""

from __future__ import annotations

import dataclasses
from typing import Annotated

from components.config_fields import Ge, Interval, Note, check, non_empty


@dataclasses.dataclass(frozen=True)
class TransformConfig:
    """Caption vocabulary and GloVe embedding matrix."""

    # A GloVe text file (``.txt``, ``.txt.gz`` or the Stanford ``.zip``). Empty:
    # the demo's synthetic GloVe file when running on demo data, otherwise a
    # randomly initialised, trainable embedding.
    glove_path: str = ""
    glove_zip_member: Annotated[str, check(non_empty, "must name the GloVe file inside a zip")] = \
        "glove.6B.300d.txt"
    embedding_dim: Annotated[int, Ge(1)] = 300  # only used without a GloVe file
    # 0 derives the maximum caption length from the training captions.
    max_caption_length: Annotated[int, check(
        lambda value: value == 0 or value >= 3,
        "must be 0 (derived from the train captions) or >= 3 (start, a word, end)")] = 0
    max_caption_length_quantile: Annotated[float, Interval(gt=0, le=1)] = 0.99
    # Words seen fewer times in the train captions map to <unk> (what each threshold keeps of
    # real Flickr8k: README "Real Flickr8k vocabulary facts").
    vocab_frequency_threshold: Annotated[int, Ge(1)] = 5
    vocab_top_k: Annotated[int, Ge(0), Note("(0: no limit)")] = 0



