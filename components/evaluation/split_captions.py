"""Captions of a whole split from the exported SavedModel, the input of caption metrics.

``split_records`` reads ingested examples (``image_id``, float16 feature maps,
raw reference captions); ``decode_records`` runs the exported
``caption_features`` / ``caption_features_beam`` signatures on them in batches
and returns one row per image: the generated caption, its summed
log-probability and the references; ``decode_image_blind`` gives every image
the caption of an all-zero feature map. They use only the SavedModel, as a
serving client would.
"""

import dataclasses
import os
from typing import Iterator, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

from components import example_format

# (image id, float16 [49, 2048] feature map, reference captions)
Record = Tuple[str, np.ndarray, List[str]]


@dataclasses.dataclass(frozen=True)
class DecodedImage:
    image_id: str
    caption: str
    log_probability: float
    references: List[str]
    tokens: List[int]  # the generated ids, 0-padded after <end>


def _quietly(dataset: tf.data.Dataset) -> Iterator[tf.Tensor]:
    """The dataset's elements; an eager ``for`` loop over it ends in an end-of-sequence error
    that TensorFlow logs as a rendezvous warning each time, this does not."""
    iterator = iter(dataset)
    while True:
        element = iterator.get_next_as_optional()
        if not element.has_value():
            return
        yield element.get_value()


def split_records(examples_dir: str, split: str) -> Iterator[Record]:
    # tf.io.gfile, not Python's glob: on Vertex / Kubeflow the examples are under gs://.
    paths = sorted(tf.io.gfile.glob(os.path.join(example_format.split_dir(examples_dir, split), "*")))
    if not paths:
        raise FileNotFoundError(f"No examples of split {split!r} under {examples_dir}.")
    for path in paths:
        compression = "GZIP" if path.endswith(".gz") else ""
        for serialized in _quietly(tf.data.TFRecordDataset(path, compression_type=compression)):
            feature = tf.train.Example.FromString(serialized.numpy()).features.feature
            features = np.frombuffer(
                feature[example_format.IMAGE_FEATURES].bytes_list.value[0], "<f2").reshape(
                example_format.FEATURE_POSITIONS, example_format.FEATURE_DEPTH)
            captions = feature[example_format.CAPTIONS].bytes_list.value
            yield (feature[example_format.IMAGE_ID].bytes_list.value[0].decode("utf-8"), features,
                   [caption.decode("utf-8") for caption in captions])


def _decode_features(saved_model, features: np.ndarray, beam_width: int):
    """(captions, scores, tokens) of a float32 ``[batch, 49, 2048]`` batch."""
    if beam_width:
        outputs = saved_model.signatures["caption_features_beam"](
            image_features=tf.constant(features), beam_width=tf.constant(beam_width, tf.int32))
    else:
        outputs = saved_model.signatures["caption_features"](image_features=tf.constant(features))
    return outputs["caption"].numpy(), outputs["score"].numpy(), outputs["tokens"].numpy()


def decode_records(saved_model, records: Sequence[Record], beam_width: int = 0,
                   batch_size: int = 32) -> List[DecodedImage]:
    """Greedy (``beam_width`` 0) or beam-search captions of every record, in order."""
    rows = []
    for start in range(0, len(records), batch_size):
        batch = records[start:start + batch_size]
        features = np.stack([features for _, features, _ in batch]).astype(np.float32)
        for (image_id, _, references), caption, score, tokens in zip(
                batch, *_decode_features(saved_model, features, beam_width), strict=True):
            rows.append(DecodedImage(image_id, caption.decode("utf-8"), float(score), references,
                                     [int(token) for token in tokens]))
    return rows


def decode_image_blind(saved_model, records: Sequence[Record], beam_width: int = 0
                       ) -> List[DecodedImage]:
    """The zero-feature baseline: one all-zero feature map decoded once, its caption given to
    every record (the model cannot tell the images apart without their features)."""
    zeros = np.zeros((1, example_format.FEATURE_POSITIONS, example_format.FEATURE_DEPTH),
                     np.float32)
    (caption,), (score,), (tokens,) = _decode_features(saved_model, zeros, beam_width)
    return [DecodedImage(image_id, caption.decode("utf-8"), float(score), references,
                         [int(token) for token in tokens])
            for image_id, _, references in records]


def mean_log_probability(rows: List[DecodedImage]) -> float:
    return float(np.mean([row.log_probability for row in rows])) if rows else float("nan")
