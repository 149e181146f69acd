"""Transform: ``preprocessing_fn`` builds the caption vocabulary and the GloVe matrix.

Input (one example per image, from ingestion): ``image_id``, ``image_features``
(float16 bytes), ``captions`` (raw strings), ``caption_indices``.

Output (one example per image):

* ``image_id``: passed through;
* ``image_features``: the same bytes, passed through (never copied into floats);
* ``caption_ids``: int64, the image's captions as ``<start> words <end>``,
  each truncated or padded with 0 to ``max_caption_length`` ids and
  concatenated (length = number of captions × ``max_caption_length``).

Analyzers run on the ``train`` split only (TFX Transform's default
``splits_config``), so dev and test words never enter the vocabulary:

1. ``tft.vocabulary`` over normalised caption tokens, with counts, frequency
   threshold and optional top-k from the config;
2. ``tft.experimental.ptransform_analyzer`` (:class:`MaxCaptionLengthAnalyzer`):
   the maximum caption length, unless the config fixes it;
3. ``tft.experimental.ptransform_analyzer`` (:class:`CaptionAssetsAnalyzer`)
   reads the counts file and writes three assets of the transform graph from
   it: the plain vocabulary the ids are looked up in, the GloVe matrix sliced
   to it (``[4 + words, dim]``, rows in id order) and ``caption_facts.json``
   (vocabulary size, max caption length, truncation counts, GloVe coverage).
   Vocabulary and matrix are written by the same step from the same file, so
   they cannot drift. The Trainer reads them with :func:`read_transform_assets`.
"""

import json
import os
import uuid
from typing import Dict, Optional

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from absl import logging
from tensorflow_transform import analyzers as tft_analyzers

from components import caption_text, example_format
from components import config as config_lib
from components.transform import glove

VOCABULARY_COUNTS_NAME = "caption_vocabulary_counts"
VOCABULARY_ASSET = "caption_vocabulary.txt"
EMPTY_VOCABULARY_PLACEHOLDER = tft_analyzers.get_empy_vocabulary_dummy_value(tf.string)[1].decode("utf-8")
MATRIX_ASSET = "caption_embedding_matrix.npy"


# The ingested features (``schemas/schema.pbtxt``) as in-memory rows carry them: one
# value per image for the id and the feature bytes, lists for the captions.
RAW_FEATURE_SPEC = {
    example_format.IMAGE_ID: tf.io.FixedLenFeature([], tf.string),
    example_format.IMAGE_FEATURES: tf.io.FixedLenFeature([], tf.string),
    example_format.CAPTIONS: tf.io.VarLenFeature(tf.string),
    example_format.CAPTION_INDICES: tf.io.VarLenFeature(tf.int64),
}


class _UnnamedTextFileInitializer(tf.lookup.TextFileInitializer):
    """A ``TextFileInitializer`` that does not name its table after the file.

    TensorFlow names a ``StaticHashTable`` after its initializer's file path, and
    tf.Transform builds the table while the vocabulary is still a temporary file
    of the analysis: that machine's absolute path would be in the transform graph
    and in every SavedModel exported from it. Given no name by its initializer,
    ``StaticHashTable`` draws a random one.
    """

    @property
    def _shared_name(self):
        return ""


def _lookup_words(tokens: tf.RaggedTensor, vocabulary_path):
    """Word → line number in the vocabulary file, -1 when absent (``tft.apply_vocabulary``'s
    default lookup, with an unnamed table)."""
    table = tf.lookup.StaticHashTable(_UnnamedTextFileInitializer(
        vocabulary_path, tf.string, tf.lookup.TextFileIndex.WHOLE_LINE,
        tf.int64, tf.lookup.TextFileIndex.LINE_NUMBER), default_value=-1)
    return tf.ragged.map_flat_values(table.lookup, tokens), table.size()


def raw_metadata():
    """``DatasetMetadata`` of :data:`RAW_FEATURE_SPEC`, for running ``preprocessing_fn`` on
    in-memory rows with tf.Transform's Beam API (tests, benchmarks, notebooks)."""
    from tensorflow_transform.tf_metadata import dataset_metadata, schema_utils

    return dataset_metadata.DatasetMetadata(schema_utils.schema_from_feature_spec(RAW_FEATURE_SPEC))


def preprocessing_fn(inputs: Dict[str, tf.Tensor], custom_config: Optional[dict] = None
                     ) -> Dict[str, tf.Tensor]:
    """TFX Transform entry point; ``custom_config["pipeline_config"]`` is the config JSON."""
    transform = _transform_config(custom_config)
    captions = _as_ragged(inputs[example_format.CAPTIONS])  # [images, (captions)]
    tokens = caption_text.tokenize(captions.flat_values)  # [captions, (words)]

    counts_path = tft.vocabulary(
        tokens.flat_values,
        top_k=transform.vocab_top_k or None,
        frequency_threshold=transform.vocab_frequency_threshold,
        store_frequency=True,
        vocab_filename=VOCABULARY_COUNTS_NAME,
    )
    (max_caption_length,) = tft.experimental.ptransform_analyzer(
        inputs=[tokens.row_lengths()],
        ptransform=MaxCaptionLengthAnalyzer(transform),
        output_dtypes=[tf.int64],
        output_shapes=[[]],
        name="max_caption_length",
    )
    vocabulary_path, _, _ = tft.experimental.ptransform_analyzer(
        inputs=[tf.reshape(counts_path, [1]), tokens.row_lengths(),
                tf.reshape(max_caption_length, [1])],
        ptransform=CaptionAssetsAnalyzer(transform),
        output_dtypes=[tf.string, tf.string, tf.string],
        output_shapes=[[], [], []],
        output_asset_default_values=[b"<dummy>\n", b"", b"{}"],
        name="caption_assets",
    )
    for asset in (VOCABULARY_ASSET, MATRIX_ASSET, example_format.FACTS_FILE):
        tft.annotate_asset(asset, asset)

    word_ids = tft.apply_vocabulary(tokens, vocabulary_path, lookup_fn=_lookup_words)
    word_ids = tf.ragged.map_flat_values(
        lambda ids: tf.where(ids < 0, tf.constant(caption_text.UNK_ID, tf.int64),
                             ids + caption_text.NUM_RESERVED_IDS), word_ids)
    num_captions = tf.shape(tokens.row_lengths(), out_type=tf.int64)[0]
    with_markers = tf.concat([
        tf.fill([num_captions, 1], tf.constant(caption_text.START_ID, tf.int64)),
        word_ids[:, :max_caption_length - 2],
        tf.fill([num_captions, 1], tf.constant(caption_text.END_ID, tf.int64)),
    ], axis=1)
    padded = with_markers.to_tensor(default_value=caption_text.PAD_ID,
                                    shape=tf.stack([num_captions, max_caption_length]))
    caption_ids = tf.RaggedTensor.from_row_lengths(
        tf.reshape(padded, [-1]), captions.row_lengths() * max_caption_length)
    return {
        example_format.IMAGE_ID: inputs[example_format.IMAGE_ID],
        example_format.IMAGE_FEATURES: inputs[example_format.IMAGE_FEATURES],
        example_format.CAPTION_IDS: caption_ids.to_sparse(),  # a VarLen int64 feature, not "$ragged_values"
    }


def _transform_config(custom_config: Optional[dict]) -> config_lib.TransformConfig:
    if not custom_config or "pipeline_config" not in custom_config:
        return config_lib.TransformConfig()
    return config_lib.PipelineConfig.from_json(custom_config["pipeline_config"]).transform


def _as_ragged(values) -> tf.RaggedTensor:
    if isinstance(values, tf.RaggedTensor):
        return values
    if isinstance(values, tf.SparseTensor):
        return tf.RaggedTensor.from_sparse(values)
    return tf.RaggedTensor.from_tensor(tf.reshape(values, [tf.shape(values)[0], -1]))


def derive_max_caption_length(word_counts: np.ndarray, transform: config_lib.TransformConfig) -> int:
    """Ids per caption: the configured length, or the train captions' word-count quantile + 2."""
    if transform.max_caption_length:
        return transform.max_caption_length
    return int(np.ceil(np.quantile(word_counts, transform.max_caption_length_quantile))) + 2


class MaxCaptionLengthAnalyzer(tft_beam.experimental.PTransformAnalyzer):
    """Words per caption over the analysis data → ``max_caption_length`` (int64 scalar)."""

    def __init__(self, transform: config_lib.TransformConfig):
        super().__init__()
        self._transform = transform

    def expand(self, batches: beam.PCollection):
        return (
            batches
            | "CollectLengths" >> beam.CombineGlobally(_CollectColumns())
            | "Derive" >> beam.Map(lambda columns: np.int64(derive_max_caption_length(
                np.asarray(columns[0], dtype=np.int64), self._transform))))


class CaptionAssetsAnalyzer(tft_beam.experimental.PTransformAnalyzer):
    """Counts file, caption lengths and max length → vocabulary, GloVe matrix and facts files.

    Beam hands it batches of ``(counts file path [1], words per caption [n],
    max caption length [1])``; it returns the three asset paths.
    """

    def __init__(self, transform: config_lib.TransformConfig):
        super().__init__()
        self._transform = transform

    def expand(self, batches: beam.PCollection):
        outputs = (
            batches
            | "Collect" >> beam.CombineGlobally(_CollectColumns())
            | "BuildAssets" >> beam.Map(self._build_assets))
        return tuple(
            outputs | f"Output{index}" >> beam.Map(lambda values, index=index: values[index])
            for index in range(3))

    def _build_assets(self, columns):
        counts_path, lengths, max_caption_length = columns
        counts_path = counts_path[0].decode("utf-8") if isinstance(counts_path[0], bytes) else str(
            counts_path[0])
        max_caption_length = int(max_caption_length[0])
        words, word_counts = read_counts_file(counts_path)
        transform = self._transform
        if words == [EMPTY_VOCABULARY_PLACEHOLDER]:
            # tf.Transform writes one placeholder word for an empty vocabulary; the model could
            # then learn and emit it as a word.
            raise ValueError(
                "The caption vocabulary is empty: no word of the train captions is seen "
                f"transform.vocab_frequency_threshold = {transform.vocab_frequency_threshold} times "
                f"or more ({int(np.asarray(lengths).size)} train captions). Lower the threshold "
                "or train on more captions.")
        lengths = np.asarray(lengths, dtype=np.int64)
        matrix, coverage = glove.build_embedding_matrix(
            caption_text.RESERVED_TOKENS, words, word_counts, transform.glove_path,
            transform.glove_zip_member, transform.embedding_dim)
        facts = {
            "vocabulary_size": len(caption_text.RESERVED_TOKENS) + len(words),
            "words_in_vocabulary": len(words),
            "reserved_tokens": list(caption_text.RESERVED_TOKENS),
            "max_caption_length": max_caption_length,
            "train_captions": int(lengths.size),
            "train_captions_truncated": int(np.sum(lengths > max_caption_length - 2)),
            "caption_words_percentiles": {
                str(q): float(np.percentile(lengths, q)) if lengths.size else 0.0
                for q in (50, 90, 95, 99, 100)},
            "embedding": coverage.to_dict(),
            "embedding_trainable_by_default": not transform.glove_path,
        }
        asset_dir = os.path.join(self.base_temp_dir, f"caption_assets_{uuid.uuid4().hex}")
        tf.io.gfile.makedirs(asset_dir)
        paths = [os.path.join(asset_dir, name)
                 for name in (VOCABULARY_ASSET, MATRIX_ASSET, example_format.FACTS_FILE)]
        with tf.io.gfile.GFile(paths[0], "w") as stream:
            stream.write("".join(word + "\n" for word in words))
        with tf.io.gfile.GFile(paths[1], "wb") as stream:
            np.save(stream, matrix)
        with tf.io.gfile.GFile(paths[2], "w") as stream:
            json.dump(facts, stream, indent=2, sort_keys=True)
        if transform.glove_path:
            logging.info("GloVe %s covers %d of %d vocabulary words (%.1f%% of training tokens).",
                         transform.glove_path, coverage.words_found, coverage.vocabulary_size,
                         100 * coverage.token_weighted_coverage)
        else:
            logging.warning("No GloVe file configured: the %d-word embedding is randomly "
                            "initialised and will be trained.", len(words))
        logging.info("Caption facts: %s", json.dumps(facts, sort_keys=True))
        return [path.encode("utf-8") for path in paths]


class _CollectColumns(beam.CombineFn):
    """Concatenates each input column over all batches (flattened)."""

    def create_accumulator(self):
        return None

    def add_input(self, accumulator, batch):
        columns = [list(np.asarray(column).reshape(-1)) for column in batch]
        return columns if accumulator is None else [
            kept + new for kept, new in zip(accumulator, columns, strict=False)]

    def merge_accumulators(self, accumulators):
        merged = None
        for accumulator in accumulators:
            if accumulator is not None:
                merged = accumulator if merged is None else [
                    kept + new for kept, new in zip(merged, accumulator, strict=False)]
        return merged

    def extract_output(self, accumulator):
        return accumulator if accumulator is not None else [[], [], []]


def read_counts_file(path: str):
    """A ``tft.vocabulary(store_frequency=True)`` file → (words, counts), in file order."""
    words, counts = [], []
    with tf.io.gfile.GFile(path, "rb") as stream:
        for line in stream:
            count, _, word = line.rstrip(b"\n").partition(b" ")
            words.append(word.decode("utf-8"))
            counts.append(int(count))
    return words, counts


def read_transform_assets(transform_output: tft.TFTransformOutput):
    """(vocabulary words, embedding matrix, facts) from a Transform output."""
    vocabulary = transform_output.vocabulary_by_name(VOCABULARY_ASSET)
    with tf.io.gfile.GFile(transform_output.vocabulary_file_by_name(MATRIX_ASSET), "rb") as stream:
        matrix = np.load(stream)
    with tf.io.gfile.GFile(transform_output.vocabulary_file_by_name(example_format.FACTS_FILE)) as stream:
        facts = json.load(stream)
    words = [word.decode("utf-8") if isinstance(word, bytes) else word for word in vocabulary]
    return words, matrix, facts
