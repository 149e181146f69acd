"""Caption metrics of the dev split during training: greedy captions scored by BLEU-4 and CIDEr-D.

What the Trainer selects weights on when ``trainer.select_on`` is ``dev_bleu4`` or ``dev_cider``
(``DevCaptionMetrics``, a Keras callback writing ``val_bleu4`` and ``val_cider`` into each epoch's
logs, where ``EarlyStopping`` and the history read them), and what the self-critical phase judges
its epochs by. Captions are the model's greedy ones, compared with the dev references as
words-as-ids up to ``<end>`` (the evaluator's captions without the detokenising): BLEU-4 by
pycocoevalcap (closest reference length, as the evaluator), CIDEr-D by ``cider_d.CiderD`` with
document frequencies from the dev references (as pycocoevalcap takes them from the scored split).
The evaluator's numbers come from beam search over words after the PTB tokenizer, so these are
close to them, not equal.
"""

from typing import Dict, List, Tuple

import keras
import numpy as np
import tensorflow as tf

from components import caption_text, example_format
from components.trainer import cider_d, decoding
from components.trainer import model as model_lib


def words(ids: np.ndarray) -> Tuple[int, ...]:
    """A row of ids without ``<start>`` → its word ids, up to the first ``<end>``."""
    kept = []
    for token in ids.tolist():
        if token == caption_text.END_ID:
            break
        if token >= caption_text.NUM_RESERVED_IDS:
            kept.append(token)
    return tuple(kept)


class DevCaptionScorer:
    """Greedy-decodes the dev images (``dev_steps`` batches of an image-major dataset) and scores
    the captions; the references and their document frequencies are read once."""

    def __init__(self, model: keras.Model, max_caption_length: int, dev_dataset: tf.data.Dataset,
                 dev_steps: int):
        self.image_encoder, _ = model_lib.split_model(model)
        self.incremental = model_lib.IncrementalDecoder(model)
        self.max_length = max_caption_length
        self.vocabulary_size = model.output_shape[-1]
        self.dataset, self.steps = dev_dataset, dev_steps
        self.references: List[List[Tuple[int, ...]]] = []
        for _, target_ids in dev_dataset.take(dev_steps):
            for rows in target_ids.numpy():
                self.references.append([caption for caption in map(words, rows) if caption])
        if not any(self.references):
            raise ValueError("The dev split has no captions to score.")
        self.cider = cider_d.CiderD([refs for refs in self.references if refs])
        self._greedy = tf.function(self._greedy_ids)

    def _greedy_ids(self, image_features):
        projection = self.image_encoder(image_features, training=False)
        ids, _ = decoding.greedy_decode(self.incremental.step, projection,
                                        self.incremental.initial_state(projection),
                                        self.max_length, self.vocabulary_size)
        return ids

    def captions(self) -> List[Tuple[int, ...]]:
        """The greedy caption of each dev image, in the order of ``references``."""
        captions = []
        for model_inputs, _ in self.dataset.take(self.steps):
            captions.extend(words(row) for row in
                            self._greedy(model_inputs[example_format.IMAGE_FEATURES]).numpy())
        return captions

    def scores(self) -> Dict[str, float]:
        """``{"bleu4": ..., "cider": ...}`` over the dev images with references (filler images
        of a short last batch have none)."""
        from pycocoevalcap.bleu.bleu import Bleu

        pairs = [(caption, refs) for caption, refs in zip(self.captions(), self.references, strict=True)
                 if refs]
        cider = float(self.cider.scores([[caption] for caption, _ in pairs],
                                        [refs for _, refs in pairs]).mean())
        text = {index: [" ".join(map(str, caption)) or "<empty>"] for index, (caption, _) in enumerate(pairs)}
        references = {index: [" ".join(map(str, ref)) for ref in refs]
                      for index, (_, refs) in enumerate(pairs)}
        bleu, _ = Bleu(4).compute_score(references, text, verbose=0)
        return {"bleu4": float(bleu[3]), "cider": cider}


class DevCaptionMetrics(keras.callbacks.Callback):
    """Adds ``val_bleu4`` and ``val_cider`` (``DevCaptionScorer``) to each epoch's logs; listed
    before ``EarlyStopping`` so it can select on them."""

    def __init__(self, scorer: DevCaptionScorer):
        super().__init__()
        self.scorer = scorer

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        scores = self.scorer.scores()
        logs["val_bleu4"], logs["val_cider"] = scores["bleu4"], scores["cider"]
