"""Dev caption metrics during training: greedy captions of the dev images, filler images skipped,
BLEU-4 and CIDEr-D as pycocoevalcap computes them on the same captions."""

import numpy as np
import pytest
import tensorflow as tf

from components import caption_text
from components import config as config_lib
from components.trainer import dev_scores
from components.trainer import model as model_lib
from tests import model_fixtures

END, PAD = caption_text.END_ID, caption_text.PAD_ID


def test_words_stop_at_end_and_drop_reserved_ids():
    assert dev_scores.words(np.array([7, 8, END, 9, PAD])) == (7, 8)
    assert dev_scores.words(np.array([caption_text.UNK_ID, 7, 8])) == (7, 8)


def test_scores_are_pycocoevalcaps_on_the_greedy_captions_of_the_images_with_references():
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider

    tf.keras.utils.set_random_seed(0)
    trainer = config_lib.TrainerConfig(**model_fixtures.SMALL_TRAINER)
    model = model_lib.build_captioning_model(trainer, vocabulary_size=12, embedding_dim=8)
    rng = np.random.default_rng(0)
    targets = np.array([[[5, 6, 7, END, PAD, PAD], [5, 6, 8, 9, END, PAD]],
                        [[10, 11, END, PAD, PAD, PAD], [10, 6, 11, END, PAD, PAD]],
                        [[PAD] * 6, [PAD] * 6],  # a filler image: no references
                        [[7, 7, 8, END, PAD, PAD], [9, 8, 7, 6, END, PAD]]], np.int32)
    batches = tf.data.Dataset.from_tensor_slices((
        {"image_features": rng.normal(size=(4, 49, 2048)).astype(np.float32),
         "input_ids": np.zeros((4, 2, 6), np.int32)}, targets)).batch(2)
    scorer = dev_scores.DevCaptionScorer(model, max_caption_length=7, dev_dataset=batches, dev_steps=2)
    assert [len(refs) for refs in scorer.references] == [2, 2, 0, 2]
    captions = scorer.captions()
    assert len(captions) == 4
    scores = scorer.scores()

    kept = [0, 1, 3]
    text = {index: [" ".join(map(str, captions[image])) or "<empty>"] for index, image in enumerate(kept)}
    references = {index: [" ".join(map(str, ref)) for ref in scorer.references[image]]
                  for index, image in enumerate(kept)}
    assert scores["cider"] == pytest.approx(Cider().compute_score(references, text)[0], rel=1e-9)
    assert scores["bleu4"] == pytest.approx(Bleu(4).compute_score(references, text, verbose=0)[0][3],
                                            rel=1e-9)
