"""On a GPU, Keras' LSTM takes the cuDNN path, which asserts at run time (an error, not a
fallback) that no sequence in a batch is fully masked and that every mask is right-padded
(``keras/src/backend/tensorflow/rnn.py``, ``_assert_valid_mask``). A CPU never takes that path,
so these tests record every mask the model hands its LSTM layers on real training batches
(Flickr8k-style 5 captions per image, COCO-style 5 to 7, a short last batch, 2 replicas) and
check them with Keras' own two conditions."""

import importlib

import numpy as np
import pytest
import tensorflow as tf
from keras.src.layers.rnn import lstm as keras_lstm

from components import caption_text, example_format
from components import config as config_lib
from components.trainer import inputs, run_fn
from components.trainer import model as model_lib

# The module, not the ``rnn`` function its package exports under the same name.
keras_tf_rnn = importlib.import_module("keras.src.backend.tensorflow.rnn")
MAX_CAPTION_LENGTH = 9
VOCABULARY = 30
SMALL = config_lib.TrainerConfig(image_dense_units=(16,), lstm_units=8, second_lstm_units=8,
                                 attention_key_dim=4)


def _caption_ids(rng, words):
    row = [caption_text.START_ID, *rng.integers(4, VOCABULARY, words), caption_text.END_ID]
    return row + [caption_text.PAD_ID] * (MAX_CAPTION_LENGTH - len(row))


def _write_examples(path, captions_per_image, seed=0):
    """Transformed examples as the Trainer reads them: one image each, its captions' ids."""
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for captions in captions_per_image:
            ids = [token for _ in range(captions)
                   for token in _caption_ids(rng, int(rng.integers(1, MAX_CAPTION_LENGTH - 1)))]
            features = rng.normal(size=(49, 2048)).astype("<f2").tobytes()
            example = tf.train.Example(features=tf.train.Features(feature={
                example_format.IMAGE_FEATURES: tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[features])),
                example_format.CAPTION_IDS: tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
            }))
            writer.write(example.SerializeToString())
    return str(path)


def _masks_given_to_lstms(monkeypatch, dataset, captions_per_image):
    """Every mask the LSTM layers receive while a 2-replica strategy runs the image-major
    model over ``dataset`` in training mode."""
    recorded = []
    original_call = keras_lstm.LSTM.call

    def recording_call(self, sequences, initial_state=None, mask=None, training=False):
        recorded.append(mask)
        return original_call(self, sequences, initial_state=initial_state, mask=mask, training=training)

    monkeypatch.setattr(keras_lstm.LSTM, "call", recording_call)
    strategy = run_fn.make_strategy()
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        model = model_lib.image_major_model(
            model_lib.build_captioning_model(SMALL, VOCABULARY, embedding_dim=8), captions_per_image)
    for features, _ in strategy.experimental_distribute_dataset(dataset):
        strategy.run(lambda batch: model(batch, training=True), args=(features,))
    return recorded


def _cudnn_rejects(mask) -> list:
    problems = []
    if bool(keras_tf_rnn._has_fully_masked_sequence(mask)):
        problems.append("a fully masked sequence")
    if not bool(keras_tf_rnn._is_sequence_right_padded(mask)):
        problems.append("a mask that is not right-padded")
    return problems


@pytest.mark.parametrize("captions_per_image", [
    [5] * 13,                                  # Flickr8k: 5 captions each; 13 images: a short last batch
    [5, 7, 6, 5, 5, 7, 6, 6, 5, 7, 5],         # COCO: 5 to 7 captions, padded up to 7
], ids=["flickr8k_style", "coco_style"])
def test_no_mask_the_cudnn_path_rejects_reaches_an_lstm(tmp_path, monkeypatch, captions_per_image):
    path = _write_examples(tmp_path / "examples.tfrecord", captions_per_image)
    most = max(captions_per_image)
    per_batch = inputs.images_per_batch(12, most, replicas=2)
    assert len(captions_per_image) % per_batch, "no short last batch: the filler images go untested"
    dataset = inputs.make_dataset([path], MAX_CAPTION_LENGTH, per_batch, most, shuffle=False,
                                  cache=False)
    masks = _masks_given_to_lstms(monkeypatch, dataset, most)
    batches = -(-len(captions_per_image) // per_batch)
    assert len(masks) == 2 * 2 * batches  # two LSTMs, two replicas, every batch
    for mask in masks:
        assert mask is not None and mask.shape[0] == per_batch // 2 * most
        assert _cudnn_rejects(mask) == []

    # What reached the LSTMs before: the Embedding's mask of the raw padded input ids.
    raw_ids = np.concatenate([features[model_lib.INPUT_IDS].numpy().reshape(-1, MAX_CAPTION_LENGTH - 1)
                              for features, _ in dataset])
    padding_rows = raw_ids[:, 1:].max(axis=1) == 0
    assert padding_rows.any()
    raw_ids[padding_rows, 0] = caption_text.PAD_ID
    assert _cudnn_rejects(tf.not_equal(raw_ids, caption_text.PAD_ID)) == ["a fully masked sequence"]


def test_padding_rows_keep_zero_loss_weight():
    """A padding row's input starts with <start>, its targets stay padding: the loss and its
    gradients are those of the real captions alone."""
    caption_ids = tf.constant([[_caption_ids(np.random.default_rng(1), 3),
                                [caption_text.PAD_ID] * MAX_CAPTION_LENGTH]])
    started = inputs.start_padding_rows(caption_ids).numpy()
    assert started[0, 1, 0] == caption_text.START_ID and (started[0, 1, 1:] == 0).all()
    np.testing.assert_array_equal(started[0, 0], caption_ids.numpy()[0, 0])
    logits = tf.random.normal([1, 2, MAX_CAPTION_LENGTH - 1, VOCABULARY], seed=3)
    from components.trainer import losses

    loss = losses.MaskedCaptionLoss()
    both = loss(started[:, :, 1:], logits)
    real_only = loss(started[:, :1, 1:], logits[:, :1])
    # sum_over_batch_size divides by every element, so one real row of two weighs the same.
    np.testing.assert_allclose(float(both), float(real_only), rtol=1e-6)
