"""CIDEr-D with document frequencies computed once: the self-critical phase's reward.

The arithmetic is pycocoevalcap's ``Cider`` (which is CIDEr-D: tf-idf n-gram
vectors for n = 1..4, the hypothesis' counts clipped to the reference's, a
Gaussian length penalty with sigma 6, the mean over n and over the references,
times 10), including its quirks: a caption's "length" is its number of bigrams,
and an n-gram the corpus never saw gets the highest idf, ``log(corpus images)``.
``tests/trainer/test_cider_d.py`` holds the scores equal to pycocoevalcap's on real
Flickr8k captions.

Written here and not called from pycocoevalcap because pycocoevalcap recomputes the
document frequencies from the references it is given on every call (and the
references' vectors once per hypothesis): measured 1.66 s per 1,000 captions,
more than a cross-entropy training step, and its idf would come from the batch,
not from the train split. Here the document frequencies come from a corpus fixed
when the scorer is built (the train split's captions, as self-critical.pytorch's
``CiderD`` with ``coco-train-idxs``), and each image's reference vectors are built
once per call however many hypotheses are scored against them (``make bench``:
"CIDEr-D reward" rows).

Tokens are anything hashable: words for the metric, caption ids for the reward.
"""

import collections
import math
from typing import Dict, Hashable, Iterable, List, Sequence, Tuple

import numpy as np

MAX_NGRAM = 4
SIGMA = 6.0
Tokens = Sequence[Hashable]


def ngram_counts(tokens: Tokens, max_n: int = MAX_NGRAM) -> collections.Counter:
    """Every n-gram (as a tuple) of ``tokens`` for n = 1..max_n, with its count."""
    tokens = tuple(tokens)
    return collections.Counter(tokens[start:start + n] for n in range(1, max_n + 1)
                               for start in range(len(tokens) - n + 1))


class _Vector:
    """A caption's tf-idf weight per n-gram (all orders in one dict), the norm of each order's
    part and pycocoevalcap's length (its bigrams)."""

    __slots__ = ("weights", "norms", "length")

    def __init__(self, weights: Dict[tuple, float], norms: List[float], length: int):
        self.weights, self.norms, self.length = weights, norms, length


class CiderD:
    """CIDEr-D scorer with document frequencies from ``reference_corpus``: one list of
    reference captions (token sequences) per image; an n-gram's document frequency is the
    number of images whose references hold it."""

    def __init__(self, reference_corpus: Iterable[Sequence[Tokens]], max_n: int = MAX_NGRAM,
                 sigma: float = SIGMA):
        self.max_n, self.sigma = max_n, sigma
        document_frequency: collections.Counter = collections.Counter()
        images = 0
        for references in reference_corpus:
            images += 1
            document_frequency.update(
                {ngram for reference in references for ngram in ngram_counts(reference, max_n)})
        if images == 0:
            raise ValueError("CIDEr-D needs a reference corpus of at least one image.")
        self.log_images = math.log(float(images))
        # idf per n-gram of the corpus; an unseen n-gram's is log(images) (document frequency
        # taken as 1, as pycocoevalcap does).
        self.idf = {ngram: self.log_images - math.log(max(1.0, count))
                    for ngram, count in document_frequency.items()}

    def _vector(self, tokens: Tokens) -> _Vector:
        weights = {}
        squares = [0.0] * self.max_n
        length = 0
        for ngram, count in ngram_counts(tokens, self.max_n).items():
            weight = count * self.idf.get(ngram, self.log_images)
            weights[ngram] = weight
            squares[len(ngram) - 1] += weight * weight
            if len(ngram) == 2:
                length += count
        return _Vector(weights, [math.sqrt(square) for square in squares], length)

    def _similarity(self, hypothesis: _Vector, reference: _Vector) -> float:
        totals = [0.0] * self.max_n
        reference_weights = reference.weights
        for ngram, weight in hypothesis.weights.items():
            reference_weight = reference_weights.get(ngram)
            if reference_weight is not None:
                totals[len(ngram) - 1] += min(weight, reference_weight) * reference_weight
        for order in range(self.max_n):
            if hypothesis.norms[order] != 0 and reference.norms[order] != 0:
                totals[order] /= hypothesis.norms[order] * reference.norms[order]
        delta = float(hypothesis.length - reference.length)
        return sum(totals) / self.max_n * math.exp(-(delta ** 2) / (2 * self.sigma ** 2))

    def reference_vectors(self, references: Sequence[Tokens]) -> Tuple[_Vector, ...]:
        """An image's references as vectors, to score many hypotheses against (``score``)."""
        return tuple(self._vector(reference) for reference in references)

    def score(self, hypothesis: Tokens, reference_vectors: Tuple[_Vector, ...]) -> float:
        """One hypothesis against one image's ``reference_vectors``; 0 with no reference."""
        if not reference_vectors:
            return 0.0
        vector = self._vector(hypothesis)
        return 10.0 * sum(self._similarity(vector, reference) for reference in reference_vectors) / len(
            reference_vectors)

    def scores(self, hypotheses_per_image: Sequence[Sequence[Tokens]],
               references_per_image: Sequence[Sequence[Tokens]]) -> np.ndarray:
        """``[images, hypotheses]`` scores: each image's hypotheses against its references
        (every image the same number of hypotheses); an image without references scores 0."""
        if len(hypotheses_per_image) != len(references_per_image):
            raise ValueError(f"{len(hypotheses_per_image)} images of hypotheses for "
                             f"{len(references_per_image)} images of references.")
        rows = []
        for hypotheses, references in zip(hypotheses_per_image, references_per_image, strict=True):
            vectors = self.reference_vectors(references)
            rows.append([self.score(hypothesis, vectors) for hypothesis in hypotheses])
        return np.asarray(rows, dtype=np.float64).reshape(len(rows), -1)
