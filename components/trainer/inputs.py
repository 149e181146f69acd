"""tf.data input for the Trainer: transformed examples → image-major batches.

Each transformed example is one image: ``image_features`` (float16 bytes,
parsed once per image) and ``caption_ids`` (its captions, each
``max_caption_length`` ids, concatenated). The pipeline parses images in
parallel, caches the parsed images (float16, ~200 KB each) when asked, and
batches them **image-major**: a batch holds ``images_per_batch`` images, each
with its captions padded to ``captions_per_image`` rows by all-padding
captions, so the model's image encoder runs once per image and its output is
repeated to the captions after it (``model.image_major_model``). Per caption:
``input_ids`` = the caption without its last id, ``target_ids`` = without its
first; padding (target id 0) is excluded by the loss and the accuracy. An
all-padding caption row's input is ``<start>`` then padding
(:func:`start_padding_rows`: never a fully masked sequence, which cuDNN rejects).

Every batch has exactly ``images_per_batch`` images: the last, short batch of
an epoch is filled up with zero features and all-padding captions. Nothing is
dropped, and MirroredStrategy splits every batch evenly over its replicas when
``images_per_batch`` is a multiple of them (``images_per_batch``; an odd eval
batch of 5 captions over 2 replicas failed in Keras' first symbolic step).
"""

from typing import List, Tuple

import numpy as np
import tensorflow as tf

from components import caption_text, example_format
from components.trainer import model as model_lib

FEATURE_SPEC = {
    example_format.IMAGE_FEATURES: tf.io.FixedLenFeature([1], tf.string),
    example_format.CAPTION_IDS: tf.io.VarLenFeature(tf.int64),
}


def _files(file_patterns: List[str]) -> List[str]:
    files = sorted(path for pattern in file_patterns for path in tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"No transformed examples match {file_patterns}.")
    return files


def parse_image_example(serialized: tf.Tensor, max_caption_length: int):
    """One serialized example → (float16 [49, 2048] features, int32 [captions, length] ids)."""
    parsed = tf.io.parse_single_example(serialized, FEATURE_SPEC)
    image_features = tf.reshape(
        tf.io.decode_raw(parsed[example_format.IMAGE_FEATURES][0], tf.float16, little_endian=True),
        [example_format.FEATURE_POSITIONS, example_format.FEATURE_DEPTH])
    caption_ids = tf.reshape(tf.cast(tf.sparse.to_dense(parsed[example_format.CAPTION_IDS]), tf.int32),
                             [-1, max_caption_length])
    return image_features, caption_ids


# Channels (nearly) constant over the train split get their variance raised to this
# fraction of the mean variance: a ReLU channel that was always 0 in training and is
# non-zero on a new image is then scaled by ~10 / RMS std, not by 1 / epsilon.
VARIANCE_FLOOR_FRACTION = 1e-2


def feature_statistics(file_patterns: List[str], max_caption_length: int,
                       batch_size: int = 64) -> Tuple[np.ndarray, np.ndarray]:
    """Per-channel ``(mean, variance)`` of the image features over every position of every
    image (each image once, not once per caption), variances floored; float32 ``[2048]`` each."""
    files = _files(file_patterns)
    compression = "GZIP" if all(path.endswith(".gz") for path in files) else ""
    image_features = (
        tf.data.TFRecordDataset(files, compression_type=compression,
                                num_parallel_reads=tf.data.AUTOTUNE)
        .map(lambda serialized: tf.cast(parse_image_example(serialized, max_caption_length)[0],
                                        tf.float64), num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size))
    # Sums in float64 in one graph-side reduce (Keras' Normalization.adapt iterates eagerly,
    # and every eager pass to the end logs an end-of-sequence rendezvous warning).
    zeros = tf.zeros([example_format.FEATURE_DEPTH], tf.float64)
    count, total, total_squares = image_features.reduce(
        (tf.constant(0.0, tf.float64), zeros, zeros),
        lambda state, batch: (
            state[0] + tf.cast(tf.shape(batch)[0] * tf.shape(batch)[1], tf.float64),
            state[1] + tf.reduce_sum(batch, axis=[0, 1]),
            state[2] + tf.reduce_sum(tf.square(batch), axis=[0, 1])))
    count = max(float(count), 1.0)
    mean64 = total.numpy() / count
    variance = np.maximum(total_squares.numpy() / count - np.square(mean64), 0.0)
    mean = mean64.astype(np.float32)
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(variance))):
        raise ValueError(f"Non-finite image features in {file_patterns}: cannot standardise them.")
    floor = max(VARIANCE_FLOOR_FRACTION * float(variance.mean()), 1e-6)
    return mean, np.maximum(variance, floor).astype(np.float32)


def caption_counts(file_patterns: List[str], max_caption_length: int) -> Tuple[int, int]:
    """``(images, most captions of one image)`` over the files (their caption ids only)."""
    files = _files(file_patterns)
    compression = "GZIP" if all(path.endswith(".gz") for path in files) else ""
    spec = {example_format.CAPTION_IDS: FEATURE_SPEC[example_format.CAPTION_IDS]}
    id_counts = (tf.data.TFRecordDataset(files, compression_type=compression,
                                         num_parallel_reads=tf.data.AUTOTUNE)
                 .map(lambda serialized: tf.shape(tf.io.parse_single_example(serialized, spec)[
                     example_format.CAPTION_IDS].values, out_type=tf.int64)[0],
                      num_parallel_calls=tf.data.AUTOTUNE))
    images, most_ids = id_counts.reduce(
        (tf.constant(0, tf.int64), tf.constant(0, tf.int64)),
        lambda state, ids: (state[0] + 1, tf.maximum(state[1], ids)))
    return int(images), int(most_ids) // max_caption_length


def caption_id_rows(file_patterns: List[str], max_caption_length: int):
    """Each image's caption ids, ``[captions, max_caption_length]`` int32 numpy (``<start>``
    first), in file order, without parsing the image features."""
    files = _files(file_patterns)
    compression = "GZIP" if all(path.endswith(".gz") for path in files) else ""
    spec = {example_format.CAPTION_IDS: FEATURE_SPEC[example_format.CAPTION_IDS]}
    captions = (tf.data.TFRecordDataset(files, compression_type=compression)
                .map(lambda serialized: tf.reshape(tf.cast(tf.io.parse_single_example(
                    serialized, spec)[example_format.CAPTION_IDS].values, tf.int32),
                    [-1, max_caption_length]), num_parallel_calls=tf.data.AUTOTUNE))
    return captions.as_numpy_iterator()


def images_per_batch(per_replica_captions: int, captions_per_image: int, replicas: int) -> int:
    """Images per global batch: ``per_replica_captions`` caption rows per replica at most (one
    image per replica at least), a multiple of ``replicas`` so every replica gets as many."""
    return max(1, per_replica_captions // captions_per_image) * replicas


def _pad_captions(captions_per_image: int):
    def pad(image_features: tf.Tensor, caption_ids: tf.Tensor):
        missing = captions_per_image - tf.shape(caption_ids)[0]
        tf.debugging.assert_non_negative(
            missing, message=f"an image has more than captions_per_image={captions_per_image} captions")
        caption_ids = tf.pad(caption_ids, [[0, missing], [0, 0]])  # PAD_ID rows: no real tokens
        return image_features, tf.ensure_shape(caption_ids, [captions_per_image, caption_ids.shape[1]])
    return pad


def _fill_batch(images_per_batch: int):
    def fill(image_features: tf.Tensor, caption_ids: tf.Tensor):
        missing = images_per_batch - tf.shape(caption_ids)[0]
        image_features = tf.pad(image_features, [[0, missing], [0, 0], [0, 0]])
        caption_ids = tf.pad(caption_ids, [[0, missing], [0, 0], [0, 0]])
        return (tf.ensure_shape(image_features, [images_per_batch, *image_features.shape[1:]]),
                tf.ensure_shape(caption_ids, [images_per_batch, *caption_ids.shape[1:]]))
    return fill


def start_padding_rows(caption_ids: tf.Tensor) -> tf.Tensor:
    """Caption rows that are all padding (captions padded up to ``captions_per_image``, filler
    images of a short batch) get ``<start>`` as their first id, so their input ids are not a
    fully masked sequence: Keras' cuDNN LSTM path (any GPU) asserts that no sequence in a batch
    is fully masked and that every mask is right-padded, at run time, as an error. Their
    targets stay all padding, so they keep zero loss weight and change no gradient."""
    empty = tf.reduce_all(tf.equal(caption_ids, caption_text.PAD_ID), axis=-1, keepdims=True)
    first = tf.equal(tf.range(tf.shape(caption_ids)[-1]), 0)
    return tf.where(tf.logical_and(empty, first), tf.constant(caption_text.START_ID, caption_ids.dtype),
                    caption_ids)


def _to_model_inputs(image_features: tf.Tensor, caption_ids: tf.Tensor):
    caption_ids = start_padding_rows(caption_ids)
    return ({example_format.IMAGE_FEATURES: tf.cast(image_features, tf.float32),
             model_lib.INPUT_IDS: caption_ids[:, :, :-1]},
            caption_ids[:, :, 1:])


def make_dataset(file_patterns: List[str], max_caption_length: int, images_per_batch: int,
                 captions_per_image: int, shuffle: bool, seed: int = 0, cache: bool = True,
                 repeat: bool = False) -> tf.data.Dataset:
    """Batches of ``({"image_features" [images, 49, 2048], "input_ids" [images, captions,
    length - 1]}, target_ids [images, captions, length - 1])``.

    ``captions_per_image``: at least the most captions any image has (``caption_counts``).
    ``repeat``: pass after pass without end, each pass ending in its own filled batch, for a
    ``fit`` told the exact steps of one pass (``ceil(images / images_per_batch)``).
    """
    files = _files(file_patterns)
    compression = "GZIP" if all(path.endswith(".gz") for path in files) else ""
    images = tf.data.TFRecordDataset(files, compression_type=compression,
                                     num_parallel_reads=tf.data.AUTOTUNE)
    # In file order even when shuffled: the seeded shuffle (and the cache the later epochs read)
    # then sees the same order each run, so trainer.seed alone fixes the batches.
    images = images.map(lambda serialized: parse_image_example(serialized, max_caption_length),
                        num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if cache:
        images = images.cache()
    if shuffle:
        images = images.shuffle(2048, seed=seed, reshuffle_each_iteration=True)
    batches = (images.map(_pad_captions(captions_per_image), num_parallel_calls=tf.data.AUTOTUNE,
                          deterministic=True)
               .batch(images_per_batch)
               .map(_fill_batch(images_per_batch), num_parallel_calls=tf.data.AUTOTUNE)
               .map(_to_model_inputs, num_parallel_calls=tf.data.AUTOTUNE))
    return (batches.repeat() if repeat else batches).prefetch(tf.data.AUTOTUNE)
