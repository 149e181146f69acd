"""tf.Transform tests of ``preprocessing_fn``: normalisation, reserved ids, OOV, truncation,
padding, the train-only vocabulary, and the GloVe matrix written beside it."""

import functools

import tensorflow as tf
from tensorflow_transform.beam import tft_unit

from components import caption_text
from components import config as config_lib
from components.transform import preprocessing
from tests.paths import SCHEMA_PATH

FEATURES = b"\x00\x3c" * 4  # any bytes: passed through untouched

RAW_METADATA = preprocessing.raw_metadata()

TRAIN = [
    {"image_id": b"a.jpg", "image_features": FEATURES, "captions": [b"A DOG runs.", b'The  "dog" sleeps !'],
     "caption_indices": [0, 1]},
    {"image_id": b"b.jpg", "image_features": FEATURES, "captions": [b"a cat; at&t"], "caption_indices": [0]},
]
# Words of the test split ("zebra") must not enter the vocabulary.
TEST = [{"image_id": b"z.jpg", "image_features": FEATURES, "captions": [b"A zebra runs ."],
         "caption_indices": [4]}]


def _fn(**transform):
    transform.setdefault("vocab_frequency_threshold", 1)
    pipeline_config = config_lib.PipelineConfig(transform=config_lib.TransformConfig(**transform))
    return functools.partial(preprocessing.preprocessing_fn,
                             custom_config={"pipeline_config": pipeline_config.to_json()})


class PreprocessingFnTest(tft_unit.TransformTestCase):

    def _word_id(self, word, vocabulary):
        return caption_text.NUM_RESERVED_IDS + vocabulary.index(word)

    def test_reserved_ids_normalisation_padding_and_train_only_vocabulary(self):
        # Token counts on train: a 2, dog 2, at 1, cat 1, runs 1, sleeps 1, t 1, the 1.
        vocabulary = ["dog", "a", "the", "t", "sleeps", "runs", "cat", "at"]
        ids = functools.partial(self._word_id, vocabulary=vocabulary)
        start, end = caption_text.START_ID, caption_text.END_ID
        expected_test = [{
            "image_id": b"z.jpg", "image_features": FEATURES,
            # max length 6 set in config: <start> a <unk> runs <end> <pad>
            "caption_ids": [start, ids("a"), caption_text.UNK_ID, ids("runs"), end, 0],
        }]
        self.assertAnalyzeAndTransformResults(
            TRAIN, RAW_METADATA, _fn(max_caption_length=6),
            expected_data=expected_test, test_data=TEST,
            expected_vocab_file_contents={
                preprocessing.VOCABULARY_ASSET: [word.encode() for word in vocabulary],
                preprocessing.VOCABULARY_COUNTS_NAME: [
                    (b"dog", 2), (b"a", 2), (b"the", 1), (b"t", 1), (b"sleeps", 1), (b"runs", 1),
                    (b"cat", 1), (b"at", 1)],
            })

    def test_truncation_keeps_end_marker_and_concatenates_captions(self):
        vocabulary = ["dog", "a", "the", "t", "sleeps", "runs", "cat", "at"]
        ids = functools.partial(self._word_id, vocabulary=vocabulary)
        start, end = caption_text.START_ID, caption_text.END_ID
        expected = [
            {"image_id": b"a.jpg", "image_features": FEATURES,
             "caption_ids": [start, ids("a"), ids("dog"), end, start, ids("the"), ids("dog"), end]},
            {"image_id": b"b.jpg", "image_features": FEATURES,
             "caption_ids": [start, ids("a"), ids("cat"), end]},
        ]
        self.assertAnalyzeAndTransformResults(
            TRAIN, RAW_METADATA, _fn(max_caption_length=4), expected_data=expected)

    def test_frequency_threshold_sends_rare_words_to_unk_and_default_length_from_train(self):
        # Only "a" and "dog" occur twice; caption word counts [3, 3, 4] → 99% quantile 4 → length 6.
        ids = {"dog": 4, "a": 5}
        start, end, unk = caption_text.START_ID, caption_text.END_ID, caption_text.UNK_ID
        expected = [
            {"image_id": b"a.jpg", "image_features": FEATURES,
             "caption_ids": [start, ids["a"], ids["dog"], unk, end, 0,
                             start, unk, ids["dog"], unk, end, 0]},
            {"image_id": b"b.jpg", "image_features": FEATURES,
             "caption_ids": [start, ids["a"], unk, unk, unk, end]},
        ]
        self.assertAnalyzeAndTransformResults(
            TRAIN, RAW_METADATA, _fn(vocab_frequency_threshold=2), expected_data=expected,
            expected_vocab_file_contents={preprocessing.VOCABULARY_ASSET: [b"dog", b"a"]})


    def test_threshold_no_word_reaches_is_a_clear_error_not_a_placeholder_word(self):
        # Without the check tf.Transform's placeholder became word id 4, which the model could emit.
        with self.assertRaisesRegex(Exception, "vocab_frequency_threshold = 100 times"):
            self.assertAnalyzeAndTransformResults(
                TRAIN, RAW_METADATA, _fn(vocab_frequency_threshold=100), expected_data=[])


def test_normalisation_rule_matches_python_twin():
    captions = ['A man in a "Sooners # 28" shirt .', "at&t  (phone)", "Don't STOP!", "  "]
    normalised = [value.decode() for value in caption_text.normalize(tf.constant(captions)).numpy()]
    assert normalised == [caption_text.normalize_python(caption) for caption in captions]
    assert normalised[0] == "a man in a sooners 28 shirt"
    assert caption_text.tokenize(tf.constant(["  "])).row_lengths().numpy().tolist() == [0]


def test_raw_feature_spec_has_the_features_and_types_of_the_curated_schema():
    """The in-memory spec the tests and benchmarks run preprocessing_fn on is the schema's."""

    from tensorflow_metadata.proto.v0 import schema_pb2
    from tensorflow_transform.tf_metadata import schema_utils
    from tfx.utils import io_utils

    schema_path = SCHEMA_PATH
    schema = io_utils.parse_pbtxt_file(schema_path, schema_pb2.Schema())
    from_schema = schema_utils.schema_as_feature_spec(schema).feature_spec
    assert set(from_schema) == set(preprocessing.RAW_FEATURE_SPEC)
    for name, spec in preprocessing.RAW_FEATURE_SPEC.items():
        assert from_schema[name].dtype == spec.dtype, name
        assert type(from_schema[name]) is type(spec), name
