"""The one typed configuration tree every stage of the pipeline reads.

Runners build a :class:`PipelineConfig`, apply user overrides, and hand it to
the components as JSON (TFX ``custom_config`` / exec properties). Stages turn
it back into dataclasses with :meth:`PipelineConfig.from_dict`, so a typo in a
key or a value of the wrong type fails loudly instead of being ignored.

Defaults work on the embedded demo dataset; README "Real Flickr8k" lists the
overrides for the real data (``DATA_DIR=``, ``GLOVE=``, ``RESNET_WEIGHTS=``,
``OUTPUT_DIR=`` on the make command line, or ``--set section.field=value``).

This module sits at the bottom of the house: it imports nothing of ours and no
TensorFlow, so every layer can depend on it.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from typing import Any, Mapping

# Where the Keras application weights are looked up; "random" never touches disk.
RESNET_WEIGHTS_RANDOM = "random"
RESNET_WEIGHTS_IMAGENET = "imagenet"


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the Flickr8k-layout dataset lives and how its images are read."""

    # Root of a Flickr8k-layout folder. Empty: the demo dataset is generated
    # under ``RuntimeConfig.output_dir``/demo_data and used.
    data_dir: str = ""
    image_dir_name: str = "Flicker8k_Dataset"  # sic: the official archive's spelling
    text_dir_name: str = "Flickr8k_text"
    # Either the official ``Flickr8k.token.txt`` or a Kaggle-style ``captions.txt``
    # (path relative to ``data_dir``); the reader detects the format.
    captions_file: str = "Flickr8k_text/Flickr8k.token.txt"
    train_split_file: str = "Flickr8k_text/Flickr_8k.trainImages.txt"
    dev_split_file: str = "Flickr8k_text/Flickr_8k.devImages.txt"
    test_split_file: str = "Flickr8k_text/Flickr_8k.testImages.txt"
    # Demo dataset generation (used only when data_dir is empty).
    demo_num_images: int = 300
    demo_seed: int = 8
    demo_split_fractions: tuple = (0.8, 0.1, 0.1)


@dataclasses.dataclass(frozen=True)
class FeaturesConfig:
    """ResNet50 feature extraction at ingestion (and inside the serving graph)."""

    # "random" (tests, demo), "imagenet" (Keras cache; never downloaded at test
    # time), or a path / gs:// URI of a Keras ``.h5`` / ``.weights.h5`` file.
    resnet_weights: str = RESNET_WEIGHTS_RANDOM
    random_weights_seed: int = 0
    image_size: int = 224
    # Images with more pixels than this are rejected (decompression bombs).
    # 40 MP is ~2x the largest consumer photos; Flickr8k images are ~0.19 MP.
    max_image_pixels: int = 40_000_000
    inference_batch_size: int = 16
    feature_dtype: str = "float16"
    # GZIP saves ~22% of disk on float16 features but costs ~18 ms of one core per
    # image, about 20% of ingestion throughput on 2 cores (see make bench).
    compress_examples: bool = False


@dataclasses.dataclass(frozen=True)
class TransformConfig:
    """Caption vocabulary and GloVe embedding matrix."""

    # A GloVe text file (``.txt``, ``.txt.gz`` or the Stanford ``.zip``). Empty:
    # the demo's synthetic GloVe file when running on demo data, otherwise a
    # randomly initialised, trainable embedding.
    glove_path: str = ""
    glove_zip_member: str = "glove.6B.300d.txt"
    embedding_dim: int = 300  # only used without a GloVe file
    # 0 derives the maximum caption length from the training captions.
    max_caption_length: int = 0
    max_caption_length_quantile: float = 0.99
    # Words seen fewer times in the train captions map to <unk>. On real Flickr8k,
    # 5 keeps 2,535 words (README "Transform"); 1 keeps 7,370, most of them seen once.
    vocab_frequency_threshold: int = 5
    vocab_top_k: int = 0  # 0: no limit


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """Decoder architecture and optimisation."""

    image_dense_units: tuple = (1024, 512)
    lstm_units: int = 512
    second_lstm_units: int = 256
    attention_heads: int = 1
    attention_key_dim: int = 64
    # 0.3 (the original's) underfit the demo data: test BLEU-4 0.53 where 0.1 gave 0.73 (measured
    # before feature standardisation); early stopping on dev loss guards against overfitting.
    dropout_rate: float = 0.1
    fine_tune_embedding: bool = False
    per_replica_batch_size: int = 32
    epochs: int = 40
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    clipnorm: float = 1.0
    early_stopping_patience: int = 5
    cache_dataset: bool = True  # parsed images in memory: ~200 KB each
    mixed_precision: bool = False
    seed: int = 42


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """Serving signatures and model pushing."""

    max_decode_length: int = 0  # 0: the Transform's maximum caption length
    # Beam search ranks hypotheses by log-probability / ((5 + length) / 6) ** alpha
    # (GNMT). 0 ranks by the plain sum, which favours short, generic captions.
    beam_length_alpha: float = 0.0
    push_destination: str = ""  # empty: <output_dir>/serving_model


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
    """Caption metrics, the blessing that gates the Pusher, and the report."""

    # Splits scored in the pipeline. The test split is reported, never used to decide.
    splits: tuple = ("dev", "test")
    bless_split: str = "dev"
    # One of BLEU-1..4, METEOR, ROUGE-L, CIDEr.
    bless_metric: str = "BLEU-4"
    # Absolute floor. Published Flickr8k BLEU-4 is ~0.2 for this model family; a
    # model below 0.1 has not learned to caption.
    bless_threshold: float = 0.1
    # How much worse than the latest blessed model a new model may score and be blessed.
    max_regression: float = 0.01
    beam_width: int = 3  # 0: greedy
    with_meteor: bool = True  # needs Java, as the tokenizer does
    report_images: int = 6


@dataclasses.dataclass(frozen=True)
class CloudConfig:
    """Kubeflow Pipelines / Vertex AI and Dataflow; read only by ``pipeline.kubeflow_v2_runner``."""

    project: str = ""
    region: str = "us-central1"
    bucket: str = ""  # gs://<bucket>/pipeline_root, /serving_model, /tmp are used
    # The pipeline image (Dockerfile); empty: gcr.io/<project>/flickr8k-captioning:latest.
    image: str = ""
    # Beam components on Dataflow, workers running the pipeline image.
    dataflow: bool = True
    dataflow_machine_type: str = "n1-standard-8"
    dataflow_max_workers: int = 8
    # The Trainer as a Vertex AI custom training job; MirroredStrategy uses every GPU of it.
    vertex_training: bool = True
    trainer_machine_type: str = "n1-standard-16"
    trainer_accelerator_type: str = "NVIDIA_TESLA_T4"
    trainer_accelerator_count: int = 2


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    """Where outputs go and how Beam runs; nothing here changes results."""

    pipeline_name: str = "flickr8k-captioning"
    output_dir: str = "outputs"
    beam_runner: str = "DirectRunner"
    # 0: one worker per CPU core (DirectRunner multi_processing mode).
    direct_num_workers: int = 0
    extra_beam_args: tuple = ()


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """The root of the configuration tree."""

    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    features: FeaturesConfig = dataclasses.field(default_factory=FeaturesConfig)
    transform: TransformConfig = dataclasses.field(default_factory=TransformConfig)
    trainer: TrainerConfig = dataclasses.field(default_factory=TrainerConfig)
    export: ExportConfig = dataclasses.field(default_factory=ExportConfig)
    evaluation: EvaluationConfig = dataclasses.field(default_factory=EvaluationConfig)
    cloud: CloudConfig = dataclasses.field(default_factory=CloudConfig)
    runtime: RuntimeConfig = dataclasses.field(default_factory=RuntimeConfig)

    def to_dict(self) -> dict:
        """A JSON-serialisable dict (tuples become lists)."""
        return json.loads(self.to_json())

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> PipelineConfig:
        """Rebuilds a config from :meth:`to_dict` output; unknown keys raise."""
        return _build(cls, values, path="")

    @classmethod
    def from_json(cls, text: str) -> PipelineConfig:
        return cls.from_dict(json.loads(text))

    def with_overrides(self, overrides: Mapping[str, str]) -> PipelineConfig:
        """Applies ``{"trainer.epochs": "3", ...}`` with values parsed by field type."""
        values = self.to_dict()
        for dotted_key, raw_value in overrides.items():
            section_name, _, field_name = dotted_key.partition(".")
            section_type = _field_types(PipelineConfig).get(section_name)
            if section_type is None or not field_name:
                raise ValueError(
                    f"Unknown config key {dotted_key!r}: expected <section>.<field> with "
                    f"section one of {sorted(_field_types(PipelineConfig))}.")
            field_type = _field_types(section_type).get(field_name)
            if field_type is None:
                raise ValueError(
                    f"Unknown config key {dotted_key!r}: {section_name} has fields "
                    f"{sorted(_field_types(section_type))}.")
            values[section_name][field_name] = _parse_value(dotted_key, raw_value, field_type)
        return PipelineConfig.from_dict(values)


def parse_override_args(assignments: typing.Iterable[str]) -> dict:
    """Turns ``["trainer.epochs=3", ...]`` (``--set`` flags) into an override dict."""
    overrides = {}
    for assignment in assignments:
        key, separator, value = assignment.partition("=")
        if not separator:
            raise ValueError(f"Override {assignment!r} is not of the form section.field=value.")
        overrides[key.strip()] = value
    return overrides


def _field_types(dataclass_type: type) -> dict:
    hints = typing.get_type_hints(dataclass_type)
    return {field.name: hints[field.name] for field in dataclasses.fields(dataclass_type)}


def _build(dataclass_type: type, values: Mapping[str, Any], path: str):
    if not isinstance(values, Mapping):
        raise TypeError(f"Config section {path or '<root>'!r} must be a mapping, got {values!r}.")
    field_types = _field_types(dataclass_type)
    unknown = sorted(set(values) - set(field_types))
    if unknown:
        raise ValueError(
            f"Unknown config keys {unknown} in section {path or '<root>'!r}; "
            f"known: {sorted(field_types)}.")
    kwargs = {}
    for name, value in values.items():
        field_type = field_types[name]
        key = f"{path}.{name}" if path else name
        if dataclasses.is_dataclass(field_type):
            kwargs[name] = _build(field_type, value, key)
        else:
            kwargs[name] = _check_value(key, value, field_type)
    return dataclass_type(**kwargs)


def _check_value(key: str, value: Any, field_type: Any) -> Any:
    if field_type is tuple:
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"Config {key!r} must be a list, got {value!r}.")
        return tuple(value)
    if field_type is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if field_type in (int, float) and isinstance(value, bool):
        raise TypeError(f"Config {key!r} must be {field_type.__name__}, got {value!r}.")
    if not isinstance(value, field_type):
        raise TypeError(f"Config {key!r} must be {field_type.__name__}, got {value!r}.")
    return value


def _parse_value(key: str, raw_value: str, field_type: Any) -> Any:
    try:
        if field_type is bool:
            lowered = raw_value.strip().lower()
            if lowered not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError(raw_value)
            return lowered in ("true", "1", "yes")
        if field_type is int:
            return int(raw_value)
        if field_type is float:
            return float(raw_value)
        if field_type is tuple:
            parsed = json.loads(raw_value) if raw_value.strip().startswith("[") else [
                item for item in raw_value.split(",") if item]
            return [_coerce_scalar(item) for item in parsed]
        return raw_value
    except ValueError as error:
        raise ValueError(
            f"Config override {key}={raw_value!r} is not a valid "
            f"{getattr(field_type, '__name__', field_type)}.") from error


def _coerce_scalar(item: Any) -> Any:
    if not isinstance(item, str):
        return item
    for convert in (int, float):
        try:
            return convert(item)
        except ValueError:
            pass
    return item


__all__ = [
    "DataConfig", "FeaturesConfig", "TransformConfig", "TrainerConfig", "ExportConfig",
    "EvaluationConfig", "CloudConfig", "RuntimeConfig", "PipelineConfig", "parse_override_args",
]
