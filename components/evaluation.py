"""Captions of a whole split from the exported SavedModel, the input of caption metrics.

``decode_split`` reads ingested examples (``image_id``, float16 feature maps,
raw reference captions), runs the exported ``caption_features`` /
``caption_features_beam`` signatures in batches and returns one row per image:
the generated caption, its summed log-probability and the references. It uses
only the SavedModel, as a serving client would.
"""

import dataclasses
import glob
import os
from typing import List

import numpy as np
import tensorflow as tf

from components import resnet_features


@dataclasses.dataclass(frozen=True)
class DecodedImage:
    image_id: str
    caption: str
    log_probability: float
    references: List[str]
    tokens: List[int]  # the generated ids, 0-padded after <end>


def split_records(examples_dir: str, split: str):
    paths = sorted(glob.glob(os.path.join(examples_dir, f"Split-{split}", "*")))
    if not paths:
        raise FileNotFoundError(f"No examples of split {split!r} under {examples_dir}.")
    for path in paths:
        compression = "GZIP" if path.endswith(".gz") else ""
        for serialized in tf.data.TFRecordDataset(path, compression_type=compression):
            feature = tf.train.Example.FromString(serialized.numpy()).features.feature
            features = np.frombuffer(feature["image_features"].bytes_list.value[0], "<f2").reshape(
                resnet_features.FEATURE_POSITIONS, resnet_features.FEATURE_DEPTH)
            yield (feature["image_id"].bytes_list.value[0].decode("utf-8"), features,
                   [caption.decode("utf-8") for caption in feature["captions"].bytes_list.value])


def decode_split(saved_model, examples_dir: str, split: str, beam_width: int = 0,
                 batch_size: int = 32, zero_features: bool = False) -> List[DecodedImage]:
    """Greedy (``beam_width`` 0) or beam-search captions of every image of a split.

    ``zero_features`` feeds all-zero feature maps instead: the image-blind baseline.
    """
    records = list(split_records(examples_dir, split))
    rows = []
    for start in range(0, len(records), batch_size):
        batch = records[start:start + batch_size]
        features = np.stack([features for _, features, _ in batch]).astype(np.float32)
        features = tf.constant(np.zeros_like(features) if zero_features else features)
        if beam_width:
            outputs = saved_model.signatures["caption_features_beam"](
                image_features=features, beam_width=tf.constant(beam_width, tf.int32))
        else:
            outputs = saved_model.signatures["caption_features"](image_features=features)
        for (image_id, _, references), caption, score, tokens in zip(
                batch, outputs["caption"].numpy(), outputs["score"].numpy(),
                outputs["tokens"].numpy(), strict=True):
            rows.append(DecodedImage(image_id, caption.decode("utf-8"), float(score), references,
                                     [int(token) for token in tokens]))
    return rows


def mean_log_probability(rows: List[DecodedImage]) -> float:
    return float(np.mean([row.log_probability for row in rows])) if rows else float("nan")
