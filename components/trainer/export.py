"""Export: a self-contained SavedModel that turns image bytes into captions.

Signatures (inputs → outputs; see README "Serving"):

* ``serving_default``: ``images`` (string ``[batch]``, JPEG/PNG bytes) →
  ``caption`` (string), ``tokens`` (int32 ``[batch, max_length - 1]``, 0-padded),
  ``score`` (float32, summed log-probability), ``error`` (string, empty when
  the image was captioned), greedy decoding. Decoding (``components.image_graph``:
  the header's pixel count checked against ``features.max_image_pixels`` first,
  one bad image fails only its own row), resizing, ResNet50 preprocessing and
  the ResNet50 feature extractor (the weights ingestion used) are in the graph.
* ``beam_search``: ``images`` and ``beam_width`` (int32 scalar, 1 to
  ``export.max_beam_width``, else ``InvalidArgumentError``) → the same outputs.
* ``caption_features``: ``image_features`` (float32 ``[batch, 49, 2048]``) → the
  same outputs, greedy; ``caption_features_beam`` adds ``beam_width``.
* ``image_features``: ``images`` → ``image_features`` (float32 ``[batch, 49, 2048]``),
  the ResNet50 feature maps alone, as ingestion computes them, and ``error``.
* ``serving_examples``: serialized ``tf.Example`` (``image_features`` bytes as
  ingestion writes them) → the same outputs, greedy.
* ``transform_features``: serialized raw ``tf.Example`` → the Transform
  output, dense (``caption_ids`` 0-padded); the tf.Transform layer, with the
  vocabulary, is tracked by the model.

Only TensorFlow is needed to load and call it, through ``tf.saved_model.load``
or the TF1 session loader that TensorFlow Serving and ``saved_model_cli run``
use. The Keras models are not tracked on the saved root: a tracked Keras 3
layer is checkpointed as its ``KerasVariable`` wrappers (keys
``.../_kernel/...``, each a copy), while the traced functions read the wrapped
``tf.Variable`` objects, which then have no checkpoint key:
``tf.saved_model.load`` copes, but the TF1 loader restores by key, leaves those
uninitialised and fails with ``Could not find variable``. The root tracks the
variables the signatures capture instead, as Keras' ``ExportArchive`` does.
``ExportArchive`` itself does not serve: it tracks lookup tables but not the
tf.Transform layer's other assets, so the vocabulary-counts file that the
Transform graph reads was inlined as a constant holding the training
machine's absolute path (measured; see ``write_saved_model``).
"""

import os

import keras
import tensorflow as tf
import tensorflow_transform as tft

from components import config as config_lib
from components import example_format, resnet_features
from components.trainer import decoding
from components.trainer import model as model_lib
from components.transform import preprocessing

ASSETS_EXTRA_DIR = "assets.extra"  # beside the SavedModel; TF Serving ignores it
CAPTION = "caption"
TOKENS = "tokens"
SCORE = "score"
ERROR = "error"  # per image: empty, or why the image was not captioned

IMAGES = tf.TensorSpec([None], tf.string, name="images")
BEAM_WIDTH = tf.TensorSpec([], tf.int32, name="beam_width")
FEATURES = tf.TensorSpec([None, example_format.FEATURE_POSITIONS, example_format.FEATURE_DEPTH],
                         tf.float32, name=example_format.IMAGE_FEATURES)
EXAMPLES = tf.TensorSpec([None], tf.string, name="examples")


class CaptionModule:
    """The computations behind the signatures (``endpoints``)."""

    def __init__(self, decoder: keras.Model, feature_extractor: keras.Model,
                 transform_output: tft.TFTransformOutput, vocabulary, max_length: int,
                 features: config_lib.FeaturesConfig, export: config_lib.ExportConfig):
        # The image is projected once; each decoding step runs the text decoder on one token.
        self.image_encoder, self.text_decoder = model_lib.split_model(decoder)
        self._incremental = model_lib.IncrementalDecoder(decoder)
        self.feature_extractor = feature_extractor
        self.tft_layer = transform_output.transform_features_layer()
        self._raw_feature_spec = transform_output.raw_feature_spec()
        self.vocabulary = tf.constant(vocabulary, tf.string)
        self._vocabulary_size = len(vocabulary)
        self._max_length = max_length
        self._features = features
        self._length_alpha = export.beam_length_alpha
        self._max_beam_width = export.max_beam_width
        # Shared by several signatures: as tf.functions with fixed signatures, ResNet50 and
        # each decoding loop are traced once, not once per signature that calls them
        # (measured: export 1.7x faster, saved_model.pb half the size).
        self.image_features = tf.function(self._image_features, input_signature=[IMAGES])
        self.caption_features = tf.function(self._caption_features, input_signature=[FEATURES])
        self.caption_features_beam = tf.function(self._caption_features_beam,
                                                 input_signature=[FEATURES, BEAM_WIDTH])

    def _project(self, image_features):
        return self.image_encoder(image_features, training=False)

    def _outputs(self, ids, scores):
        return {CAPTION: decoding.ids_to_captions(ids, self.vocabulary), TOKENS: ids, SCORE: scores}

    def _checked_beam_width(self, beam_width):
        message = f"beam_width must be in 1..{self._max_beam_width} (export.max_beam_width)"
        with tf.control_dependencies([
                tf.debugging.assert_greater_equal(beam_width, 1, message=message),
                tf.debugging.assert_less_equal(beam_width, self._max_beam_width, message=message)]):
            return tf.identity(beam_width)

    def _image_features(self, images):
        """(``float32 [batch, 49, 2048]``, ``string [batch]`` errors); zeros where an image failed."""
        return resnet_features.features_from_image_bytes(self.feature_extractor, images, self._features)

    def image_feature_maps(self, images):
        image_features, errors = self.image_features(images)
        return {example_format.IMAGE_FEATURES: image_features, ERROR: errors}

    def _caption_features(self, image_features):
        projection = self._project(image_features)
        return self._outputs(*decoding.greedy_decode(
            self._incremental.step, projection, self._incremental.initial_state(projection),
            self._max_length, self._vocabulary_size))

    def _caption_features_beam(self, image_features, beam_width):
        beam_width = self._checked_beam_width(beam_width)
        projection = self._project(image_features)
        return self._outputs(*decoding.beam_search_decode(
            self._incremental.step, projection, self._incremental.initial_state(projection),
            self._max_length, self._vocabulary_size, beam_width, self._length_alpha))

    @staticmethod
    def _with_errors(outputs, errors):
        """An image that failed gets an empty caption, zero tokens and score, and its error."""
        failed = tf.not_equal(errors, "")
        return {CAPTION: tf.where(failed, "", outputs[CAPTION]),
                TOKENS: tf.where(failed[:, tf.newaxis], tf.zeros_like(outputs[TOKENS]), outputs[TOKENS]),
                SCORE: tf.where(failed, tf.zeros_like(outputs[SCORE]), outputs[SCORE]),
                ERROR: errors}

    def caption_images(self, images):
        image_features, errors = self.image_features(images)
        return self._with_errors(self.caption_features(image_features), errors)

    def caption_images_beam(self, images, beam_width):
        image_features, errors = self.image_features(images)
        return self._with_errors(self.caption_features_beam(image_features, beam_width), errors)

    def caption_examples(self, examples):
        parsed = tf.io.parse_example(examples, {
            example_format.IMAGE_FEATURES: tf.io.FixedLenFeature([1], tf.string)})
        raw = tf.io.decode_raw(parsed[example_format.IMAGE_FEATURES][:, 0], tf.float16, little_endian=True)
        image_features = tf.cast(tf.reshape(
            raw, [-1, example_format.FEATURE_POSITIONS, example_format.FEATURE_DEPTH]), tf.float32)
        return self.caption_features(image_features)

    def transform_features(self, examples):
        # The layer runs a loaded TF graph: nothing for autograph to convert, and converting
        # its tf_keras code (not on autograph's do-not-convert list) took seconds per export.
        transform_layer = tf.autograph.experimental.do_not_convert(self.tft_layer)
        transformed = transform_layer(tf.io.parse_example(examples, self._raw_feature_spec))
        # Dense: a signature output that is a SparseTensor has no tensor name in the
        # SignatureDef, and the TF1 loader (TF Serving, saved_model_cli run) cannot fetch it.
        return {name: tf.sparse.to_dense(value) if isinstance(value, tf.SparseTensor) else value
                for name, value in transformed.items()}


def endpoints(module: CaptionModule) -> dict:
    """Signature name → (method, input specs)."""
    return {
        "serving_default": (module.caption_images, [IMAGES]),
        "beam_search": (module.caption_images_beam, [IMAGES, BEAM_WIDTH]),
        example_format.IMAGE_FEATURES: (module.image_feature_maps, [IMAGES]),
        "caption_features": (module.caption_features, [FEATURES]),
        "caption_features_beam": (module.caption_features_beam, [FEATURES, BEAM_WIDTH]),
        "serving_examples": (module.caption_examples, [EXAMPLES]),
        "transform_features": (module.transform_features, [EXAMPLES]),
    }


def write_saved_model(module: CaptionModule, export_dir: str) -> str:
    root = tf.Module()
    # The transform graph's tables and asset files (saved under assets/, referred to by relative
    # paths), tracked through what tf.Transform's layer itself tracks of its loaded graph, not
    # through the layer: the layer is a tf_keras Model, and saving one traces its legacy Keras
    # signatures (measured: 6 s of a 25 s export, for functions no caller uses).
    root.transform_graph = tf.Module()
    root.transform_graph.loaded = module.tft_layer._saved_model_loader_tracked_dict
    signatures, captured = {}, {}
    for name, (method, input_specs) in endpoints(module).items():
        # Bound methods, not lambdas: autograph cannot find a lambda's source among several
        # per line.
        function = tf.function(method, input_signature=input_specs)
        signatures[name] = function.get_concrete_function()
        # Signatures only: a tf.function also kept as an attribute of the root is traced again
        # inside the export graph (measured: 7 s of that export).
        captured.update((id(variable), variable) for variable in signatures[name].variables)
    root.captured_variables = list(captured.values())
    tf.saved_model.save(root, export_dir, signatures=signatures)
    return export_dir


def export_saved_model(decoder: keras.Model, transform_output_dir: str,
                       pipeline_config: config_lib.PipelineConfig, export_dir: str) -> str:
    """Writes the SavedModel to ``export_dir`` and returns it."""
    transform_output = tft.TFTransformOutput(transform_output_dir)
    words, _, facts = preprocessing.read_transform_assets(transform_output)
    vocabulary = list(facts["reserved_tokens"]) + words
    max_length = pipeline_config.export.max_decode_length or facts["max_caption_length"]
    module = CaptionModule(decoder, resnet_features.build_feature_extractor(pipeline_config.features),
                           transform_output, vocabulary, max_length, pipeline_config.features,
                           pipeline_config.export)
    return write_saved_model(module, export_dir)


def is_saved_model_dir(path: str) -> bool:
    return tf.io.gfile.exists(os.path.join(path, "saved_model.pb"))
