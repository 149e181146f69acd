"""The captioning model: ResNet50 feature maps + caption prefix → next-token logits.

The architecture family of the original report (``../shared/seed/``), fixed
where it was wrong:

    image_encoder:  image_features [49, 2048] → per-channel standardisation
      → Dense(1024, relu) → Dense(512, relu)
    text_decoder:   caption ids → Embedding (GloVe matrix; frozen unless fine-tuning; mask_zero)
      → LSTM(512, return_sequences)
      → MultiHeadAttention(query = text, key/value = image) → Add → LayerNorm → Dropout
      → LSTM(256, return_sequences) → Dropout → Dense(vocabulary) logits

* The output is raw **logits** (float32 even under mixed precision), never
  clipped: the loss (``losses.MaskedCaptionLoss``) works from logits.
* Padding is masked by one mechanism, the Embedding's ``mask_zero``, which
  the LSTMs and the attention consume; the output carries no Keras mask, so
  the loss masks padding exactly once, from the targets.
* The vocabulary is the Transform's (thousands of words), not all of GloVe.
* ResNet feature maps are standardised per channel with the train split's
  statistics (``inputs.feature_statistics``), stored in the model: the image
  content is a small variation on a large common activation (demo features:
  mean 2.8, across-image std 0.37), and without it the Dense layers learn
  little from it (demo dev loss 0.30 after 40 epochs, against 0.21 after 11).

Use :func:`build_captioning_model` directly to build the model without running
the pipeline (README "Trainer").
"""

import math
from typing import Optional, Tuple

import keras
import numpy as np

from components import config as config_lib
from components import example_format

INPUT_IDS = "input_ids"
IMAGE_PROJECTION = "image_projection"
IMAGE_ENCODER = "image_encoder"
FEATURE_STANDARDIZATION = "feature_standardization"
TEXT_DECODER = "text_decoder"


@keras.saving.register_keras_serializable(package="flickr8k_captioning")
class DropMask(keras.layers.Layer):
    """Identity that drops the Keras mask, so the loss alone decides what is padding."""

    def call(self, inputs):
        # A new tensor: returning ``inputs`` itself would keep the mask attached to it.
        return keras.ops.multiply(inputs, 1.0)

    def compute_mask(self, inputs, mask=None):
        return None


def build_captioning_model(
    trainer: config_lib.TrainerConfig,
    vocabulary_size: int,
    embedding_matrix: Optional[np.ndarray] = None,
    embedding_dim: int = config_lib.TransformConfig.embedding_dim,
    fine_tune_embedding: Optional[bool] = None,
    feature_statistics: Optional[Tuple[np.ndarray, np.ndarray]] = None,
) -> keras.Model:
    """The decoder as a functional Keras model: inputs ``image_features``
    ``[batch, 49, 2048]`` and ``input_ids`` ``[batch, time]``; output logits
    ``[batch, time, vocabulary_size]``.

    Args:
      trainer: layer sizes, dropout, precision.
      vocabulary_size: ids including the 4 reserved ones.
      embedding_matrix: ``[vocabulary_size, dim]`` initial embedding (the
        Transform's GloVe matrix); random when None.
      embedding_dim: used only without a matrix.
      fine_tune_embedding: overrides ``trainer.fine_tune_embedding`` (the Trainer
        fine-tunes when Transform had no GloVe file).
      feature_statistics: per-channel ``(mean, variance)`` of the image features,
        each ``[2048]`` (``inputs.feature_statistics``); None standardises with
        mean 0 and variance 1, i.e. not at all.

    The model is two nested models, ``image_encoder`` (the Dense projection of
    the feature map) and ``text_decoder`` (the rest); :func:`split_model`
    returns them.
    """
    if embedding_matrix is not None and embedding_matrix.shape[0] != vocabulary_size:
        raise ValueError(f"Embedding matrix has {embedding_matrix.shape[0]} rows for a vocabulary of "
                         f"{vocabulary_size} ids.")
    trainable = trainer.fine_tune_embedding if fine_tune_embedding is None else fine_tune_embedding
    policy = "mixed_float16" if mixed_precision_enabled(trainer.mixed_precision) else "float32"
    dim = embedding_matrix.shape[1] if embedding_matrix is not None else embedding_dim

    image_features = keras.Input((example_format.FEATURE_POSITIONS, example_format.FEATURE_DEPTH),
                                 name=example_format.IMAGE_FEATURES)
    input_ids = keras.Input((None,), dtype="int32", name=INPUT_IDS)
    image_encoder = _build_image_encoder(trainer, policy, feature_statistics)
    text_decoder = _build_text_decoder(trainer, vocabulary_size, embedding_matrix, dim, trainable,
                                       policy)
    logits = text_decoder({IMAGE_PROJECTION: image_encoder(image_features), INPUT_IDS: input_ids})
    return keras.Model({example_format.IMAGE_FEATURES: image_features, INPUT_IDS: input_ids}, logits,
                       name="caption_model")


def _build_image_encoder(trainer: config_lib.TrainerConfig, policy: str,
                         feature_statistics: Optional[Tuple[np.ndarray, np.ndarray]]) -> keras.Model:
    image_features = keras.Input((example_format.FEATURE_POSITIONS, example_format.FEATURE_DEPTH),
                                 name=example_format.IMAGE_FEATURES)
    if feature_statistics is None:
        feature_statistics = (np.zeros(example_format.FEATURE_DEPTH, np.float32),
                              np.ones(example_format.FEATURE_DEPTH, np.float32))
    mean, variance = (np.asarray(values, np.float32) for values in feature_statistics)
    if mean.shape != (example_format.FEATURE_DEPTH,) or variance.shape != mean.shape:
        raise ValueError(f"feature_statistics must be two [{example_format.FEATURE_DEPTH}] vectors, "
                         f"got {mean.shape} and {variance.shape}.")
    if not (np.all(np.isfinite(mean)) and np.all(np.isfinite(variance)) and np.all(variance > 0)):
        raise ValueError("feature_statistics must be finite with positive variances.")
    image = keras.layers.Normalization(axis=-1, mean=mean, variance=variance,
                                       name=FEATURE_STANDARDIZATION)(image_features)
    for index, units in enumerate(trainer.image_dense_units):
        image = keras.layers.Dense(units, activation="relu", dtype=policy,
                                   name=f"image_dense_{index}")(image)
    return keras.Model(image_features, image, name=IMAGE_ENCODER)


def _build_text_decoder(trainer: config_lib.TrainerConfig, vocabulary_size: int,
                        embedding_matrix: Optional[np.ndarray], dim: int, trainable: bool,
                        policy: str) -> keras.Model:
    image = keras.Input((example_format.FEATURE_POSITIONS, trainer.image_dense_units[-1]),
                        name=IMAGE_PROJECTION)
    input_ids = keras.Input((None,), dtype="int32", name=INPUT_IDS)
    embedding = keras.layers.Embedding(
        vocabulary_size, dim, mask_zero=True, trainable=trainable, dtype=policy,
        embeddings_initializer=(keras.initializers.Constant(embedding_matrix)
                                if embedding_matrix is not None else "uniform"),
        name="caption_embedding")
    text = embedding(input_ids)
    text = keras.layers.LSTM(trainer.lstm_units, return_sequences=True, dtype=policy,
                             name="caption_lstm")(text)
    attended = keras.layers.MultiHeadAttention(
        num_heads=trainer.attention_heads, key_dim=trainer.attention_key_dim,
        output_shape=trainer.lstm_units, dtype=policy, name="image_attention")(
            query=text, value=image, key=image)
    merged = keras.layers.Add(dtype=policy, name="attention_residual")([text, attended])
    merged = keras.layers.LayerNormalization(epsilon=1e-6, dtype=policy, name="attention_norm")(merged)
    merged = keras.layers.Dropout(trainer.dropout_rate, name="attention_dropout")(merged)
    decoded = keras.layers.LSTM(trainer.second_lstm_units, return_sequences=True, dtype=policy,
                                name="decoder_lstm")(merged)
    decoded = keras.layers.Dropout(trainer.dropout_rate, name="decoder_dropout")(decoded)
    logits = keras.layers.Dense(vocabulary_size, dtype="float32", name="logits")(decoded)
    logits = DropMask(dtype="float32", name="unmasked_logits")(logits)
    return keras.Model({IMAGE_PROJECTION: image, INPUT_IDS: input_ids}, logits, name=TEXT_DECODER)


def split_model(model: keras.Model):
    """``(image_encoder, text_decoder)`` of a model from :func:`build_captioning_model`:
    decoding projects each image once and runs only the text decoder per step."""
    return model.get_layer(IMAGE_ENCODER), model.get_layer(TEXT_DECODER)


@keras.saving.register_keras_serializable(package="flickr8k_captioning")
class RepeatForCaptions(keras.layers.Layer):
    """``[images, 49, units]`` projections and ``[images, captions, time]`` ids →
    ``[images × captions, 49, units]`` (each image's projection once per caption) and
    ``[images × captions, time]``: the image encoder's output is repeated after it, not its input."""

    def __init__(self, captions_per_image: int, **kwargs):
        super().__init__(**kwargs)
        self.captions_per_image = captions_per_image

    def call(self, image_projection, caption_ids):
        repeated = keras.ops.repeat(image_projection, self.captions_per_image, axis=0)
        flat_ids = keras.ops.reshape(caption_ids, (-1, keras.ops.shape(caption_ids)[2]))
        return repeated, flat_ids

    def compute_output_shape(self, image_projection_shape, caption_ids_shape):
        images = image_projection_shape[0]
        rows = None if images is None else images * self.captions_per_image
        return (rows, *image_projection_shape[1:]), (rows, caption_ids_shape[2])

    def get_config(self):
        return {**super().get_config(), "captions_per_image": self.captions_per_image}


@keras.saving.register_keras_serializable(package="flickr8k_captioning")
class GroupByImage(keras.layers.Layer):
    """``[images × captions, time, vocabulary]`` logits → ``[images, captions, time, vocabulary]``."""

    def __init__(self, captions_per_image: int, **kwargs):
        super().__init__(**kwargs)
        self.captions_per_image = captions_per_image

    def call(self, logits):
        shape = keras.ops.shape(logits)
        return keras.ops.reshape(logits, (-1, self.captions_per_image, shape[1], shape[2]))

    def compute_output_shape(self, logits_shape):
        images = None if logits_shape[0] is None else logits_shape[0] // self.captions_per_image
        return (images, self.captions_per_image, *logits_shape[1:])

    def get_config(self):
        return {**super().get_config(), "captions_per_image": self.captions_per_image}


def image_major_model(model: keras.Model, captions_per_image: int) -> keras.Model:
    """The model of :func:`build_captioning_model` (its layers and weights, shared) on
    image-major batches: ``image_features [images, 49, 2048]`` and ``input_ids [images,
    captions_per_image, time]`` → logits ``[images, captions_per_image, time, vocabulary]``.

    The image encoder (most of a caption-major step's FLOPs: Dense 2048→1024→512 at 49
    positions) runs once per image instead of once per caption; the text decoder, the loss
    per caption and its gradients are the caption-major model's on the same captions.
    """
    image_encoder, text_decoder = split_model(model)
    image_features = keras.Input((example_format.FEATURE_POSITIONS, example_format.FEATURE_DEPTH),
                                 name=example_format.IMAGE_FEATURES)
    caption_input_ids = keras.Input((captions_per_image, None), dtype="int32", name=INPUT_IDS)
    repeated, flat_ids = RepeatForCaptions(captions_per_image, name="repeat_for_captions")(
        image_encoder(image_features), caption_input_ids)
    logits = text_decoder({IMAGE_PROJECTION: repeated, INPUT_IDS: flat_ids})
    logits = GroupByImage(captions_per_image, dtype="float32", name="group_by_image")(logits)
    return keras.Model({example_format.IMAGE_FEATURES: image_features, INPUT_IDS: caption_input_ids},
                       logits, name="image_major_caption_model")


class IncrementalDecoder:
    """The text decoder one token at a time, carrying the two LSTMs' states.

    Exactly the trained model's computation for real (non-padding) tokens: the
    attention's query at position *t* is the first LSTM's output at *t* alone,
    so position *t* depends on earlier tokens only through the LSTM states.
    Decoding a caption of *L* tokens costs *L* single-token steps instead of
    *L* passes over the whole prefix.
    """

    def __init__(self, model: keras.Model):
        _, text_decoder = split_model(model)
        self.embedding = text_decoder.get_layer("caption_embedding")
        self.caption_lstm = text_decoder.get_layer("caption_lstm")
        self.attention = text_decoder.get_layer("image_attention")
        self.residual = text_decoder.get_layer("attention_residual")
        self.norm = text_decoder.get_layer("attention_norm")
        self.decoder_lstm = text_decoder.get_layer("decoder_lstm")
        self.logits = text_decoder.get_layer("logits")

    def initial_state(self, image_projection):
        """Zero LSTM states ``(h1, c1, h2, c2)`` for a batch of projected images."""
        batch = keras.ops.shape(image_projection)[0]
        first, second = self.caption_lstm.cell.units, self.decoder_lstm.cell.units
        return tuple(keras.ops.zeros((batch, units), "float32")
                     for units in (first, first, second, second))

    def step(self, image_projection, token_ids, state):
        """``token_ids [batch]`` → (float32 logits ``[batch, vocabulary]``, new state)."""
        logits, state, _ = self._step(image_projection, token_ids, state, return_attention=False)
        return logits, state

    def attention_weights(self, image_projection, token_ids) -> np.ndarray:
        """Where the decoder looks while reading each token (``<start>`` first).

        Returns ``[batch, tokens, 49]`` attention over the 7x7 grid, averaged over
        heads: row *t* is the attention when reading token *t* to predict *t + 1*.
        """
        state = self.initial_state(image_projection)
        weights = []
        for position in range(token_ids.shape[1]):
            _, state, scores = self._step(image_projection, token_ids[:, position], state,
                                          return_attention=True)
            weights.append(keras.ops.convert_to_numpy(keras.ops.mean(scores, axis=1)[:, 0]))
        return np.stack(weights, axis=1)

    def _step(self, image_projection, token_ids, state, return_attention: bool):
        first_h, first_c, second_h, second_c = state
        # The embedding table directly: calling the layer would attach a mask the cells drop.
        embedded = keras.ops.cast(keras.ops.take(self.embedding.embeddings, token_ids, axis=0),
                                  self.embedding.compute_dtype)
        text, (first_h, first_c) = self.caption_lstm.cell(embedded, [first_h, first_c])
        attention_outputs = self.attention(
            query=text[:, None], value=image_projection, key=image_projection,
            return_attention_scores=return_attention, training=False)
        attended, scores = attention_outputs if return_attention else (attention_outputs, None)
        merged = self.norm(self.residual([text, attended[:, 0]]))
        decoded, (second_h, second_c) = self.decoder_lstm.cell(merged, [second_h, second_c])
        logits = keras.ops.cast(self.logits(decoded), "float32")
        return logits, tuple(keras.ops.cast(tensor, "float32")
                             for tensor in (first_h, first_c, second_h, second_c)), scores


# float16 tensor cores (Volta and later): where mixed precision is faster than float32.
MIN_FLOAT16_COMPUTE_CAPABILITY = (7, 0)


def mixed_precision_enabled(mode: str, gpu_compute_capabilities=None) -> bool:
    """``trainer.mixed_precision`` resolved: "auto" is on only where GPUs are visible and every
    one has float16 tensor cores (``gpu_compute_capabilities``: (major, minor) per GPU; default:
    the visible GPUs')."""
    if mode != "auto":
        return mode == "on"
    if gpu_compute_capabilities is None:
        import tensorflow as tf

        gpu_compute_capabilities = [
            tf.config.experimental.get_device_details(gpu).get("compute_capability")
            for gpu in tf.config.list_physical_devices("GPU")]
    return bool(gpu_compute_capabilities) and all(
        capability is not None and tuple(capability) >= MIN_FLOAT16_COMPUTE_CAPABILITY
        for capability in gpu_compute_capabilities)


def scaled_learning_rate(trainer: config_lib.TrainerConfig, global_batch_size: int) -> Tuple[float, int]:
    """(peak learning rate, warm-up steps) for ``global_batch_size`` caption rows per step:
    ``trainer.learning_rate`` times the square root of the batch ratio to
    ``trainer.learning_rate_batch_size`` (the rule for Adam), ``trainer.warmup_steps`` divided
    by the ratio (the same number of captions seen during warm-up)."""
    ratio = global_batch_size / trainer.learning_rate_batch_size
    return trainer.learning_rate * math.sqrt(ratio), math.ceil(trainer.warmup_steps / ratio)


def learning_rate_schedule(trainer: config_lib.TrainerConfig, total_steps: int,
                           global_batch_size: Optional[int] = None):
    """Linear warm-up to the scaled learning rate (:func:`scaled_learning_rate`), then cosine
    decay to 10% of it; ``global_batch_size`` defaults to ``trainer.learning_rate_batch_size``."""
    peak, warmup_steps = scaled_learning_rate(
        trainer, global_batch_size or trainer.learning_rate_batch_size)
    warmup_steps = min(warmup_steps, max(total_steps // 2, 1))
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0, decay_steps=max(total_steps - warmup_steps, 1), alpha=0.1,
        warmup_target=peak, warmup_steps=warmup_steps)


def make_optimizer(trainer: config_lib.TrainerConfig, learning_rate):
    """Adam with ``trainer.clipnorm``, wrapped for loss scaling under mixed precision; both clip
    and skip overflowed steps on the gradient of all replicas (``optimizers`` module)."""
    from components.trainer import optimizers

    optimizer = optimizers.ReducedGradientClipAdam(learning_rate=learning_rate,
                                                   clipnorm=trainer.clipnorm)
    if mixed_precision_enabled(trainer.mixed_precision):
        optimizer = optimizers.ReplicaAgreedLossScaleOptimizer(optimizer)
    return optimizer


def compile_model(model: keras.Model, trainer: config_lib.TrainerConfig, total_steps: int,
                  learning_rate=None, global_batch_size: Optional[int] = None) -> keras.Model:
    """Adam with gradient-norm clipping, the masked loss from logits and masked accuracy;
    ``trainer.steps_per_execution`` steps per graph call."""
    from components.trainer import losses

    optimizer = make_optimizer(trainer, learning_rate if learning_rate is not None else
                               learning_rate_schedule(trainer, total_steps, global_batch_size))
    model.compile(optimizer=optimizer, loss=losses.MaskedCaptionLoss(),
                  metrics=[losses.MaskedTokenAccuracy()],
                  steps_per_execution=trainer.steps_per_execution)
    return model
