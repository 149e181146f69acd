"""Tests of the captioning model and its loss: the original failure, masking, causality,
initial loss, learning, and stability under a 10x learning rate."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from components import config as config_lib
from components import example_format
from components.trainer import losses, run_fn
from components.trainer import model as model_lib

SMALL = config_lib.TrainerConfig(image_dense_units=(64, 32), lstm_units=32, second_lstm_units=16,
                                 attention_key_dim=16, dropout_rate=0.0)


def _numpy_cross_entropy(logits, targets):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    mask = targets != 0
    return -(picked * mask).sum() / max(mask.sum(), 1)


def _batch(rng, batch=4, length=9, vocabulary=50, real_tokens=6):
    features = rng.normal(size=(batch, 49, 2048)).astype(np.float32)
    ids = rng.randint(4, vocabulary, size=(batch, length + 1)).astype(np.int32)
    ids[:, real_tokens + 1:] = 0
    return features, ids[:, :-1], ids[:, 1:]


def test_original_loss_setup_is_not_cross_entropy_and_ours_is():
    rng = np.random.RandomState(0)
    logits = np.clip(rng.normal(0, 4, size=(4, 7, 30)), -10, 10).astype(np.float32)
    targets = rng.randint(1, 30, size=(4, 7))
    targets[:, 5:] = 0
    reference = _numpy_cross_entropy(logits, targets)

    logits_tensor = tf.constant(logits)
    original_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=False, ignore_class=0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits_tensor)
        original = original_loss(targets, logits_tensor)
        ours = losses.MaskedCaptionLoss()(targets, logits_tensor)
    original_gradient = tape.gradient(original, logits_tensor).numpy()
    our_gradient = tape.gradient(ours, logits_tensor).numpy()

    # The original: not cross-entropy, and blind to every output <= 0.
    assert abs(float(original) - reference) > 1.0
    real = targets != 0
    assert np.all(original_gradient[real][logits[real] <= 0] == 0)
    # Ours: the reference value, and a gradient for every logit of every real position.
    assert float(ours) == pytest.approx(reference, rel=1e-5)
    assert np.all(our_gradient[real] != 0)
    assert np.all(our_gradient[~real] == 0)


def test_all_padding_batch_gives_finite_zero_loss_and_gradients():
    logits = tf.Variable(tf.random.normal((3, 5, 20)))
    with tf.GradientTape() as tape:
        loss = losses.MaskedCaptionLoss()(np.zeros((3, 5), np.int32), logits)
    gradient = tape.gradient(loss, logits)
    assert float(loss) == 0.0 and np.all(np.isfinite(gradient.numpy()))


def test_masked_accuracy_ignores_padding():
    metric = losses.MaskedTokenAccuracy()
    logits = np.full((1, 4, 6), -5.0, np.float32)
    logits[0, 0, 2] = logits[0, 1, 3] = logits[0, 2, 1] = logits[0, 3, 1] = 5.0
    metric.update_state(np.array([[2, 4, 0, 0]]), logits)  # one right, one wrong, two padding
    assert float(metric.result()) == pytest.approx(0.5)


def test_padding_and_future_tokens_do_not_change_earlier_logits():
    keras.utils.set_random_seed(1)
    rng = np.random.RandomState(1)
    model = model_lib.build_captioning_model(SMALL, 50, embedding_dim=16)
    features, input_ids, _ = _batch(rng, real_tokens=6)
    logits = model({"image_features": features, "input_ids": input_ids}).numpy()

    # The same captions padded further: identical logits at every real position.
    longer = np.pad(input_ids, ((0, 0), (0, 5)))
    longer_logits = model({"image_features": features, "input_ids": longer}).numpy()
    np.testing.assert_allclose(longer_logits[:, :6], logits[:, :6], atol=1e-5)

    # Changing tokens after position t (padding or not) leaves positions <= t unchanged.
    t = 3
    changed = input_ids.copy()
    changed[:, t + 1:] = rng.randint(4, 50, size=changed[:, t + 1:].shape)
    changed_logits = model({"image_features": features, "input_ids": changed}).numpy()
    np.testing.assert_allclose(changed_logits[:, :t + 1], logits[:, :t + 1], atol=1e-5)
    assert not np.allclose(changed_logits[:, t + 1:6], logits[:, t + 1:6])

    # The image matters: other features, other logits.
    other = model({"image_features": features[::-1], "input_ids": input_ids}).numpy()
    assert not np.allclose(other, logits)


def test_loss_changes_only_with_real_target_positions():
    rng = np.random.RandomState(2)
    logits = rng.normal(size=(2, 6, 12)).astype(np.float32)
    targets = np.array([[5, 6, 7, 0, 0, 0], [4, 4, 0, 0, 0, 0]])
    base = float(losses.MaskedCaptionLoss()(targets, logits))
    logits_changed = logits.copy()
    logits_changed[0, 3:] += 100.0
    logits_changed[1, 2:] -= 50.0
    assert float(losses.MaskedCaptionLoss()(targets, logits_changed)) == pytest.approx(base, rel=1e-6)


def test_initial_loss_is_close_to_log_vocabulary():
    """A fresh model's logits are small (Glorot output layer on LayerNorm-ed, dropout-free
    activations), so its softmax is near uniform: loss = ln V + O(logit variance)."""
    keras.utils.set_random_seed(3)
    vocabulary = 2000
    model = model_lib.build_captioning_model(config_lib.TrainerConfig(), vocabulary, embedding_dim=50)
    features, input_ids, targets = _batch(np.random.RandomState(3), batch=8, vocabulary=vocabulary)
    loss = float(losses.MaskedCaptionLoss()(targets, model({"image_features": features,
                                                             "input_ids": input_ids})))
    assert loss == pytest.approx(math.log(vocabulary), rel=0.05)


def overfit_small_batch(seed: int) -> dict:
    """400 Adam steps on one batch of 8 random captions (48 target tokens, vocabulary 40)."""
    keras.utils.set_random_seed(seed)
    model = model_lib.build_captioning_model(SMALL, 40, embedding_dim=16, fine_tune_embedding=True)
    model_lib.compile_model(model, SMALL, total_steps=400, learning_rate=5e-3)
    features, input_ids, targets = _batch(np.random.RandomState(seed), batch=8, vocabulary=40)
    history = model.fit({"image_features": features, "input_ids": input_ids}, targets,
                        epochs=400, batch_size=8, verbose=0)
    return {"initial_loss": history.history["loss"][0], "final_loss": history.history["loss"][-1],
            "final_accuracy": history.history["masked_accuracy"][-1]}


@pytest.mark.slow
def test_overfits_a_small_batch():
    """Measured (``python -m tests.seed_spread overfit``, seeds 0-9, oneDNN on and off, 2 logical
    CPUs): initial loss 3.65-3.75 (ln 40 = 3.69), final loss 0.022-0.101, final accuracy
    0.979-1.0. The former absolute bound (final loss < 0.1) failed for seed 4 with oneDNN off
    (0.1008) and on one machine's kernels (0.128); final loss < 0.1 x the initial one holds with a
    3.6x margin over the worst run, accuracy > 0.85 allows 7 wrong tokens of 48 (worst run: 1)."""
    result = overfit_small_batch(4)
    assert result["initial_loss"] == pytest.approx(math.log(40), rel=0.05)
    assert result["final_loss"] < 0.1 * result["initial_loss"]
    assert result["final_accuracy"] > 0.85


@pytest.mark.slow
def test_ten_times_the_default_learning_rate_stays_finite():
    keras.utils.set_random_seed(5)
    trainer = config_lib.TrainerConfig()
    model = model_lib.build_captioning_model(trainer, 500, embedding_dim=50, fine_tune_embedding=True)
    model_lib.compile_model(model, trainer, total_steps=200, learning_rate=10 * trainer.learning_rate)
    rng = np.random.RandomState(5)
    step_losses = []
    for _ in range(200):
        features, input_ids, targets = _batch(rng, batch=8, vocabulary=500)
        step_losses.append(model.train_on_batch(
            {"image_features": features * 10, "input_ids": input_ids}, targets, return_dict=True)["loss"])
    assert np.all(np.isfinite(step_losses))


def test_incremental_decoder_steps_equal_the_full_model():
    keras.utils.set_random_seed(6)
    model = model_lib.build_captioning_model(SMALL, 50, embedding_dim=16)
    rng = np.random.RandomState(6)
    features, input_ids, _ = _batch(rng, batch=3, length=7, real_tokens=7)
    full_logits = model({"image_features": features, "input_ids": input_ids}).numpy()

    image_encoder, _ = model_lib.split_model(model)
    decoder = model_lib.IncrementalDecoder(model)
    projection = image_encoder(features)
    state = decoder.initial_state(projection)
    for position in range(input_ids.shape[1]):
        logits, state = decoder.step(projection, tf.constant(input_ids[:, position]), state)
        np.testing.assert_allclose(logits.numpy(), full_logits[:, position], atol=2e-5)


def test_attention_weights_are_distributions_over_the_grid():
    keras.utils.set_random_seed(7)
    model = model_lib.build_captioning_model(SMALL, 50, embedding_dim=16)
    features, input_ids, _ = _batch(np.random.RandomState(7), batch=2, length=5, real_tokens=5)
    projection = model_lib.split_model(model)[0](features)
    weights = model_lib.IncrementalDecoder(model).attention_weights(projection, input_ids)
    assert weights.shape == (2, 5, 49)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
    assert np.all(weights >= 0) and not np.allclose(weights[0, 0], weights[0, 1])


def test_loss_under_two_replicas_is_the_single_device_loss():
    """Keras divides a replica's loss by the replica count only for sum_over_batch_size
    losses; with reduction="sum" the 2-replica loss came out twice the true value."""
    keras.utils.set_random_seed(8)
    rng = np.random.RandomState(8)
    features, input_ids, targets = _batch(rng, batch=8, vocabulary=50, real_tokens=5)
    single = model_lib.build_captioning_model(SMALL, 50, embedding_dim=16)
    model_lib.compile_model(single, SMALL, total_steps=10)
    inputs = {"image_features": features, "input_ids": input_ids}
    expected = single.evaluate(inputs, targets, batch_size=8, verbose=0, return_dict=True)["loss"]
    strategy = run_fn.make_strategy()  # the Trainer's: the tests' 2 logical CPU devices
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        mirrored = model_lib.build_captioning_model(SMALL, 50, embedding_dim=16)
        model_lib.compile_model(mirrored, SMALL, total_steps=10)
    mirrored.set_weights(single.get_weights())
    measured = mirrored.evaluate(inputs, targets, batch_size=8, verbose=0, return_dict=True)["loss"]
    assert measured == pytest.approx(expected, rel=1e-4)


def test_image_encoder_standardises_each_channel_with_the_given_statistics():
    """Shifting and scaling every channel, with statistics shifted and scaled alike, leaves the
    encoder output unchanged: the layer standardises per channel, before the Dense layers."""
    rng = np.random.RandomState(4)
    features = rng.normal(size=(2, 49, 2048)).astype(np.float32)
    mean = rng.normal(size=2048).astype(np.float32)
    variance = rng.uniform(0.5, 2.0, size=2048).astype(np.float32)
    scale = rng.uniform(0.1, 10.0, size=2048).astype(np.float32)
    offset = rng.normal(0, 30.0, size=2048).astype(np.float32)
    keras.utils.set_random_seed(5)
    plain = model_lib.build_captioning_model(SMALL, 50, embedding_dim=8,
                                             feature_statistics=(mean, variance))
    keras.utils.set_random_seed(5)
    shifted = model_lib.build_captioning_model(
        SMALL, 50, embedding_dim=8, feature_statistics=(mean * scale + offset, variance * scale ** 2))
    encode_plain, _ = model_lib.split_model(plain)
    encode_shifted, _ = model_lib.split_model(shifted)
    np.testing.assert_allclose(encode_shifted(features * scale + offset).numpy(),
                               encode_plain(features).numpy(), rtol=1e-3, atol=1e-3)
    # Not the identity: the same features through an unstandardised encoder differ.
    keras.utils.set_random_seed(5)
    encode_raw, _ = model_lib.split_model(model_lib.build_captioning_model(SMALL, 50, embedding_dim=8))
    assert not np.allclose(encode_raw(features).numpy(), encode_plain(features).numpy(), atol=1e-2)
    with pytest.raises(ValueError, match="positive variances"):
        model_lib.build_captioning_model(SMALL, 50, embedding_dim=8,
                                         feature_statistics=(mean, np.zeros(2048, np.float32)))


def test_feature_statistics_cover_every_image_once_and_floor_dead_channels(tmp_path):
    from components.trainer import inputs

    rng = np.random.RandomState(6)
    max_caption_length = 5
    images = rng.gamma(2.0, 1.5, size=(7, 49, 2048)).astype(np.float16)
    images[:, :, 9] = 0.0  # a ReLU channel that never fires in training
    path = tmp_path / "transformed.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for number, image in enumerate(images):
            captions = number + 1  # 1..7 captions: statistics must not weight images by them
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                example_format.IMAGE_FEATURES: tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[image.astype("<f2").tobytes()])),
                example_format.CAPTION_IDS: tf.train.Feature(int64_list=tf.train.Int64List(
                    value=[1, 5, 6, 2, 0] * captions)),
            })).SerializeToString())
    mean, variance = inputs.feature_statistics([str(path)], max_caption_length, batch_size=3)
    flat = images.astype(np.float64).reshape(-1, 2048)
    expected_variance = flat.var(axis=0)
    floor = inputs.VARIANCE_FLOOR_FRACTION * expected_variance.mean()
    live = np.arange(2048) != 9
    np.testing.assert_allclose(mean, flat.mean(axis=0), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(variance[live], np.maximum(expected_variance, floor)[live], rtol=1e-3)
    assert variance[9] == pytest.approx(floor, rel=1e-3)
    # A value in the dead channel at serving time is scaled by 1 / sqrt(floor), not 1 / epsilon.
    encoder, _ = model_lib.split_model(model_lib.build_captioning_model(
        SMALL, 50, embedding_dim=8, feature_statistics=(mean, variance)))
    standardise = encoder.get_layer(model_lib.FEATURE_STANDARDIZATION)
    novel = images[:1].astype(np.float32)
    novel[:, :, 9] = 5.0
    assert float(np.abs(standardise(novel).numpy()[..., 9]).max()) == pytest.approx(
        5.0 / np.sqrt(floor), rel=1e-3)


def _image_major_batch(rng, images=4, captions=3, length=8, vocabulary=50):
    """Captions of several lengths per image; each image's last caption row is all padding."""
    features = rng.normal(size=(images, 49, 2048)).astype(np.float32)
    ids = rng.randint(4, vocabulary, size=(images, captions, length + 1)).astype(np.int32)
    for image in range(images):
        for caption in range(captions):
            ids[image, caption, 2 + (image + caption) % (length - 1):] = 0
    ids[:, -1] = 0
    return features, ids[..., :-1], ids[..., 1:]


def test_image_major_loss_and_gradients_equal_the_caption_major_ones():
    """The same captions, once with each image's features repeated to its captions before the
    model (caption-major) and once with the encoder's output repeated after it (image-major)."""
    keras.utils.set_random_seed(5)
    features, input_ids, targets = _image_major_batch(np.random.RandomState(5))
    images, captions, time = input_ids.shape
    model = model_lib.build_captioning_model(SMALL, 50, embedding_dim=16, fine_tune_embedding=True)
    image_major = model_lib.image_major_model(model, captions)
    loss = losses.MaskedCaptionLoss()

    def loss_and_gradients(compute_loss):
        with tf.GradientTape() as tape:
            value = compute_loss()
        return float(value), tape.gradient(value, model.trainable_variables)

    caption_major_loss, caption_major_gradients = loss_and_gradients(lambda: loss(
        targets.reshape(images * captions, time),
        model({"image_features": np.repeat(features, captions, axis=0),
               "input_ids": input_ids.reshape(images * captions, time)})))
    image_major_loss, image_major_gradients = loss_and_gradients(lambda: loss(
        targets, image_major({"image_features": features, "input_ids": input_ids})))
    assert image_major_loss == pytest.approx(caption_major_loss, rel=1e-6)
    assert len(image_major_gradients) == len(model.trainable_variables) > 10
    for variable, expected, measured in zip(model.trainable_variables, caption_major_gradients,
                                            image_major_gradients, strict=True):
        expected = tf.convert_to_tensor(expected).numpy()
        measured = tf.convert_to_tensor(measured).numpy()
        assert np.abs(expected).max() > 0, variable.path
        np.testing.assert_allclose(measured, expected, rtol=1e-4, atol=1e-6 * np.abs(expected).max(),
                                   err_msg=variable.path)


def test_image_major_batches_split_evenly_over_two_replicas():
    """Batches of a multiple of the replica count in images: on 2 replicas (2 images each) the
    image-major model gives the single-device loss and accuracy."""
    rng = np.random.RandomState(9)
    features, input_ids, targets = _image_major_batch(rng, images=4, captions=3)
    from components.trainer import inputs

    assert inputs.images_per_batch(16, 5, 2) == 6 and inputs.images_per_batch(3, 5, 2) == 2
    keras.utils.set_random_seed(9)
    single = model_lib.build_captioning_model(SMALL, 50, embedding_dim=16)
    single_training = model_lib.image_major_model(single, 3)
    model_lib.compile_model(single_training, SMALL, total_steps=10, learning_rate=1e-2)
    batch = {"image_features": features, "input_ids": input_ids}
    expected = single_training.evaluate(batch, targets, batch_size=4, verbose=0, return_dict=True)
    strategy = run_fn.make_strategy()  # the Trainer's: the tests' 2 logical CPU devices
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        mirrored = model_lib.build_captioning_model(SMALL, 50, embedding_dim=16)
        mirrored_training = model_lib.image_major_model(mirrored, 3)
        model_lib.compile_model(mirrored_training, SMALL, total_steps=10, learning_rate=1e-2)
    mirrored.set_weights(single.get_weights())
    measured = mirrored_training.evaluate(batch, targets, batch_size=4, verbose=0, return_dict=True)
    assert measured["loss"] == pytest.approx(expected["loss"], rel=1e-4)
    assert measured["masked_accuracy"] == pytest.approx(expected["masked_accuracy"], abs=1e-6)
