"""Tests of the caption metrics: hand-computable cases, and BLEU against an independent
implementation (NLTK's corpus_bleu) on a small fixed set."""

import math

import pytest
from nltk.translate.bleu_score import corpus_bleu

from components.evaluation import caption_metrics

pytestmark = pytest.mark.slow  # the PTB tokenizer and METEOR start a JVM

REFERENCES = {
    "1.jpg": ["A dog runs across the grass.", "a brown dog is running on a lawn",
              "The dog runs outside"],
    "2.jpg": ["Two children play in the water .", "kids splash in a lake",
              "two kids are playing in the water"],
    "3.jpg": ["A man rides a bike down the street", "a cyclist on a city road"],
    "4.jpg": ["a red circle in the top left corner", "one red circle , top left"],
}
CANDIDATES = {"1.jpg": "a dog runs on the grass", "2.jpg": "two kids play in water",
              "3.jpg": "a man riding a bike on a road", "4.jpg": "a red circle top left"}


def test_identical_captions_score_one_and_disjoint_captions_zero():
    identical = caption_metrics.score_captions(
        {"a": ["a red circle on the left side"], "b": ["two blue squares at the bottom"]},
        {"a": "a red circle on the left side", "b": "two blue squares at the bottom"})
    for n in range(1, 5):
        assert identical[f"BLEU-{n}"] == pytest.approx(1.0, abs=1e-6)
    assert identical["ROUGE-L"] == pytest.approx(1.0)
    assert identical["METEOR"] > 0.99

    disjoint = caption_metrics.score_captions(
        {"a": ["a red circle on the left side"], "b": ["two blue squares at the bottom"]},
        {"a": "green triangles everywhere now", "b": "yellow stars fly high"})
    for name in caption_metrics.METRIC_NAMES:
        assert disjoint[name] == pytest.approx(0.0, abs=1e-6), name


def test_hand_computed_bleu():
    # Candidate "a b c d" against "a b c e": 1-grams 3/4, 2-grams 2/3, 3-grams 1/2, 4-grams 0/1;
    # equal lengths, so no brevity penalty.
    scores = caption_metrics.score_tokenized({"x": ["a b c e"]}, {"x": ["a b c d"]}, with_meteor=False)
    assert scores["BLEU-1"] == pytest.approx(3 / 4, abs=1e-6)
    assert scores["BLEU-2"] == pytest.approx(math.sqrt(3 / 4 * 2 / 3), abs=1e-6)
    assert scores["BLEU-3"] == pytest.approx((3 / 4 * 2 / 3 * 1 / 2) ** (1 / 3), abs=1e-6)
    # No 4-gram matches: pycocoevalcap counts 1e-15 of one, so BLEU-4 is ~1e-4, not exactly 0.
    assert scores["BLEU-4"] == pytest.approx(0.0, abs=1e-3)
    # Shorter than its reference: brevity penalty exp(1 - 6/3) on a perfect 1-gram precision.
    short = caption_metrics.score_tokenized({"x": ["a b c d e f"]}, {"x": ["a b c"]}, with_meteor=False)
    assert short["BLEU-1"] == pytest.approx(math.exp(1 - 6 / 3), abs=1e-6)


def test_corpus_bleu_matches_nltk_on_the_same_tokens():
    tokenized = caption_metrics.tokenize(
        {**{f"ref/{key}": refs for key, refs in REFERENCES.items()},
         **{f"cand/{key}": [caption] for key, caption in CANDIDATES.items()}})
    references = {key: tokenized[f"ref/{key}"] for key in REFERENCES}
    candidates = {key: tokenized[f"cand/{key}"] for key in CANDIDATES}
    ours = caption_metrics.score_tokenized(references, candidates, with_meteor=False)
    keys = sorted(REFERENCES)
    nltk_references = [[reference.split() for reference in references[key]] for key in keys]
    nltk_candidates = [candidates[key][0].split() for key in keys]
    for n in range(1, 5):
        expected = corpus_bleu(nltk_references, nltk_candidates, weights=tuple([1 / n] * n))
        assert ours[f"BLEU-{n}"] == pytest.approx(expected, abs=1e-4), n
    assert 0 < ours["CIDEr"] < 10 and 0 < ours["ROUGE-L"] < 1


def test_all_metrics_on_the_fixed_set_and_the_input_checks():
    scores = caption_metrics.score_captions(REFERENCES, CANDIDATES)
    assert set(scores) == set(caption_metrics.METRIC_NAMES)
    assert scores["BLEU-1"] > scores["BLEU-2"] > scores["BLEU-3"] > scores["BLEU-4"] > 0
    assert 0 < scores["METEOR"] < 1
    with pytest.raises(ValueError, match="different ids"):
        caption_metrics.score_captions(REFERENCES, {"1.jpg": "a dog"})


def test_missing_java_is_explained(monkeypatch):
    monkeypatch.setattr(caption_metrics.shutil, "which", lambda name: None)
    with pytest.raises(caption_metrics.JavaMissingError, match="apt-get install default-jre-headless"):
        caption_metrics.check_java()


def test_all_metrics_equal_pycocoevalcaps_own_coco_evaluation(monkeypatch):
    """The reference numbers: pycocoevalcap's COCOEvalCap over pycocotools COCO objects (the way
    COCO results are computed), SPICE stubbed out since it downloads models."""
    import contextlib
    import io

    from pycocoevalcap import eval as coco_eval
    from pycocotools.coco import COCO

    class NoSpice:
        def compute_score(self, gts, res):
            return 0.0, [0.0] * len(gts)

        def method(self):
            return "SPICE"

    monkeypatch.setattr(coco_eval, "Spice", NoSpice)
    keys = sorted(REFERENCES)
    coco = COCO()
    coco.dataset = {"images": [{"id": number} for number in range(len(keys))],
                    "annotations": [{"image_id": number, "id": 100 * number + index, "caption": caption}
                                    for number, key in enumerate(keys)
                                    for index, caption in enumerate(REFERENCES[key])]}
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
        results = coco.loadRes([{"image_id": number, "caption": CANDIDATES[key]}
                                for number, key in enumerate(keys)])
        evaluation = coco_eval.COCOEvalCap(coco, results)
        evaluation.evaluate()
    reference = evaluation.eval
    ours = caption_metrics.score_captions(REFERENCES, CANDIDATES)
    names = {"BLEU-1": "Bleu_1", "BLEU-2": "Bleu_2", "BLEU-3": "Bleu_3", "BLEU-4": "Bleu_4",
             "METEOR": "METEOR", "ROUGE-L": "ROUGE_L", "CIDEr": "CIDEr"}
    for name, reference_name in names.items():
        assert ours[name] == pytest.approx(reference[reference_name], abs=1e-9), name
