"""Tests of the captioning model and its loss: the original failure, masking, causality,
initial loss, learning, and stability under a 10x learning rate."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from components import config as config_lib
from components.trainer import losses
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


@pytest.mark.slow
def test_overfits_a_small_batch():
    keras.utils.set_random_seed(4)
    model = model_lib.build_captioning_model(SMALL, 40, embedding_dim=16, fine_tune_embedding=True)
    model_lib.compile_model(model, SMALL, total_steps=400, learning_rate=5e-3)
    features, input_ids, targets = _batch(np.random.RandomState(4), batch=8, vocabulary=40)
    history = model.fit({"image_features": features, "input_ids": input_ids}, targets,
                        epochs=400, batch_size=8, verbose=0)
    assert history.history["loss"][-1] < 0.1
    assert history.history["masked_accuracy"][-1] > 0.97


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
    strategy = tf.distribute.MirroredStrategy(
        devices=[device.name for device in tf.config.list_logical_devices("CPU")],
        cross_device_ops=tf.distribute.ReductionToOneDevice())
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        mirrored = model_lib.build_captioning_model(SMALL, 50, embedding_dim=16)
        model_lib.compile_model(mirrored, SMALL, total_steps=10)
    mirrored.set_weights(single.get_weights())
    measured = mirrored.evaluate(inputs, targets, batch_size=8, verbose=0, return_dict=True)["loss"]
    assert measured == pytest.approx(expected, rel=1e-4)
