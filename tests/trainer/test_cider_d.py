"""The self-critical reward's CIDEr-D equals pycocoevalcap's on real Flickr8k captions, with its
document frequencies fixed by the corpus it was built from."""

import collections
import os

import numpy as np
import pytest

from components.trainer import cider_d
from tests import paths

TOKEN_FILE = os.path.join(paths.SHARED_DATA_DIR, "flickr8k_sample", "Flickr8k_text", "Flickr8k.token.txt")


def _real_captions(images: int) -> list:
    """The first ``images`` images of the real token file with 5 captions each, lower-cased and
    split on white space (pycocoevalcap's CIDEr splits on white space too)."""
    if not os.path.exists(TOKEN_FILE):
        pytest.skip(f"real Flickr8k captions not found at {TOKEN_FILE}")
    captions = collections.defaultdict(list)
    with open(TOKEN_FILE, encoding="utf-8") as stream:
        for line in stream:
            key, _, caption = line.rstrip("\n").partition("\t")
            captions[key.split("#")[0]].append(" ".join(caption.lower().split()))
    return [texts for texts in captions.values() if len(texts) == 5][:images]


def _pycocoevalcap_scores(hypotheses: list, references: list) -> np.ndarray:
    from pycocoevalcap.cider.cider import Cider

    _, scores = Cider().compute_score({index: refs for index, refs in enumerate(references)},
                                      {index: [hypothesis] for index, hypothesis in enumerate(hypotheses)})
    return np.asarray(scores)


def test_scores_equal_pycocoevalcap_on_real_flickr8k_captions():
    """300 images: each image's first caption against its other four (a good caption), and the
    next image's first caption against them (a wrong one); the document frequencies from the
    same references, as pycocoevalcap takes them."""
    images = _real_captions(300)
    references = [texts[1:] for texts in images]
    scorer = cider_d.CiderD([[text.split() for text in refs] for refs in references])
    for hypotheses in ([texts[0] for texts in images],
                       [images[(index + 1) % len(images)][0] for index in range(len(images))]):
        expected = _pycocoevalcap_scores(hypotheses, references)
        ours = scorer.scores([[text.split()] for text in hypotheses],
                             [[text.split() for text in refs] for refs in references])[:, 0]
        np.testing.assert_allclose(ours, expected, rtol=1e-9, atol=1e-12)
    # Not vacuous: right captions score far above wrong ones, and the scores vary.
    right = scorer.scores([[images[i][0].split()] for i in range(300)],
                          [[text.split() for text in refs] for refs in references])
    wrong = scorer.scores([[images[(i + 1) % 300][0].split()] for i in range(300)],
                          [[text.split() for text in refs] for refs in references])
    assert right.mean() > 5 * wrong.mean() and right.std() > 0.1


def test_document_frequencies_come_from_the_corpus_not_from_the_scored_batch():
    """A batch of 3 images scored by a scorer built on 300 gets the 300 images' idf
    (pycocoevalcap on those 3 alone would not), and the same scores as inside the full set."""
    images = _real_captions(300)
    references = [[text.split() for text in texts[1:]] for texts in images]
    hypotheses = [[texts[0].split()] for texts in images]
    scorer = cider_d.CiderD(references)
    full = scorer.scores(hypotheses, references)[:, 0]
    batch = scorer.scores(hypotheses[:3], references[:3])[:, 0]
    np.testing.assert_allclose(batch, full[:3], rtol=1e-12)
    per_batch_idf = _pycocoevalcap_scores([texts[0] for texts in images[:3]],
                                          [texts[1:] for texts in images[:3]])
    assert not np.allclose(batch, per_batch_idf)


def test_several_hypotheses_per_image_and_edge_cases():
    references = [[["a", "dog", "runs"], ["the", "dog", "runs", "fast"]], []]
    scorer = cider_d.CiderD(references[:1] + [[["a", "cat", "sits"]]])
    scores = scorer.scores([[["a", "dog", "runs"], ["the", "dog"], []], [["a", "dog"]] * 3], references)
    assert scores.shape == (2, 3)
    assert scores[0, 0] > scores[0, 1] > 0 and scores[0, 2] == 0.0
    assert np.all(scores[1] == 0.0)  # no references: no reward, not a crash
    # Caption ids score as words do (the reward scores ids).
    ids = scorer.scores([[[5, 6, 7]]], [[[5, 6, 7], [8, 6, 7, 9]]])
    assert ids.shape == (1, 1) and np.isfinite(ids).all()
    with pytest.raises(ValueError, match="at least one image"):
        cider_d.CiderD([])
    with pytest.raises(ValueError, match="2 images of hypotheses for 1"):
        scorer.scores([[["a"]], [["b"]]], references[:1])
