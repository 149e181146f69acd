"""The ResNet50 feature extractor shared by ingestion and the serving graph.

``build_feature_extractor`` turns a batch of RGB images (``float32``, 0..255,
already resized by :func:`resize_for_resnet`) into ``[batch, 49, 2048]`` feature
maps: ResNet50's own ``preprocess_input``, then ``ResNet50(include_top=False)``,
then the 7x7 grid flattened to 49 positions. Both ingestion and the exported
SavedModel use these two functions, so features at training and serving time
come from the same resize, preprocessing and weights.

Weights never come from the network:

* ``random``: seeded Glorot-uniform kernels computed with NumPy, identical on
  every worker and in the serving graph (tests and the demo);
* ``imagenet``: Keras' standard notop weights file, which must already be in the
  Keras cache (``$KERAS_HOME`` or ``~/.keras``, under ``models/``);
* a local path or any URI ``tf.io.gfile`` reads (``gs://``, ``s3://``) of a
  Keras weights file, for air-gapped clusters.
"""

from __future__ import annotations

import os
import tempfile

import keras
import numpy as np
import tensorflow as tf

from components import config as config_lib
from components import example_format, image_graph

IMAGENET_NOTOP_FILE = "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5"


def resize_for_resnet(pixels: tf.Tensor, image_size: int) -> tf.Tensor:
    """``uint8 [h, w, 3]`` → ``float32 [image_size, image_size, 3]`` (bilinear, antialiased)."""
    resized = tf.image.resize(tf.cast(pixels, tf.float32), (image_size, image_size),
                              method="bilinear", antialias=True)
    return tf.clip_by_value(resized, 0.0, 255.0)


def features_from_image_bytes(extractor: keras.Model, images: tf.Tensor,
                              features: config_lib.FeaturesConfig):
    """``string [batch]`` image bytes → (``float32 [batch, 49, 2048]``, ``string [batch]`` errors).

    The one path from bytes to features, for ingestion and every serving signature:
    :func:`components.image_graph.decode_images` (limits, the decoding rule, per-image
    errors), :func:`resize_for_resnet`, then ``extractor``. A failed image's row is
    the extractor's output on zeros; its error says why.
    """
    resized, errors = image_graph.decode_images(
        images, features.image_size, features.max_image_pixels,
        lambda pixels: resize_for_resnet(pixels, features.image_size))
    return extractor(resized, training=False), errors


def imagenet_weights_path() -> str:
    """Where Keras keeps the ImageNet notop weights after a (manual) download."""
    keras_home = os.environ.get("KERAS_HOME", os.path.join(os.path.expanduser("~"), ".keras"))
    return os.path.join(keras_home, "models", IMAGENET_NOTOP_FILE)


def resolve_weights_file(weights: str) -> str:
    """A local path to the weights file that ``weights`` names; never downloads.

    Raises:
      FileNotFoundError: the file is not where the setting says, with the fix.
    """
    if weights == config_lib.RESNET_WEIGHTS_IMAGENET:
        path = imagenet_weights_path()
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"resnet_weights=imagenet needs Keras' weights file at {path}; this project never "
                f"downloads it. Copy {IMAGENET_NOTOP_FILE} there (or set KERAS_HOME), or pass its "
                "path or gs:// URI as RESNET_WEIGHTS= (the setting is features.resnet_weights).")
        return path
    if not tf.io.gfile.exists(weights):
        raise FileNotFoundError(
            f"ResNet50 weights file not found: {weights}; the file is features.resnet_weights "
            "(--resnet_weights, RESNET_WEIGHTS= for make; or imagenet, or random for smoke runs).")
    if "://" not in weights:
        return weights
    local_path = os.path.join(tempfile.mkdtemp(prefix="resnet50_weights_"), os.path.basename(weights))
    tf.io.gfile.copy(weights, local_path, overwrite=True)
    return local_path


def build_feature_extractor(features: config_lib.FeaturesConfig) -> keras.Model:
    """``float32 [batch, size, size, 3]`` RGB 0..255 → ``[batch, 49, 2048]`` float32 features."""
    images = keras.Input((features.image_size, features.image_size, 3), name="images")
    backbone = keras.applications.ResNet50(
        include_top=False, weights=None,
        input_shape=(features.image_size, features.image_size, 3))
    if features.resnet_weights == config_lib.RESNET_WEIGHTS_RANDOM:
        _set_seeded_random_weights(backbone, features.random_weights_seed)
    else:
        backbone.load_weights(resolve_weights_file(features.resnet_weights))
    preprocessed = keras.applications.resnet50.preprocess_input(images)
    feature_map = backbone(preprocessed)
    grid = feature_map.shape[1] * feature_map.shape[2]
    image_features = keras.layers.Reshape((grid, example_format.FEATURE_DEPTH),
                                          name=example_format.IMAGE_FEATURES)(feature_map)
    return keras.Model(images, image_features, name="resnet50_features")


def _set_seeded_random_weights(model: keras.Model, seed: int) -> None:
    """Glorot-uniform kernels, zero biases, identity batch norm: reproducible anywhere.

    Keras' own initialisers draw from global RNG state, so two workers (or the
    ingestion job and the serving export) would get different "random" networks.
    """
    rng = np.random.RandomState(seed)
    for variable in model.weights:
        name = variable.path.rsplit("/", 1)[-1]
        shape = tuple(variable.shape)
        if name == "kernel":
            receptive_field = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
            fan_in, fan_out = shape[-2] * receptive_field, shape[-1] * receptive_field
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            value = rng.uniform(-limit, limit, size=shape)
        elif name in ("gamma", "moving_variance"):
            value = np.ones(shape)
        else:  # bias, beta, moving_mean
            value = np.zeros(shape)
        variable.assign(value.astype(np.float32))
