"""The one typed configuration tree every stage of the pipeline reads.

Runners build a :class:`PipelineConfig`, apply user overrides, and hand it to
the components as JSON (TFX ``custom_config`` / exec properties). Stages turn
it back into dataclasses with :meth:`PipelineConfig.from_dict`, so a typo in a
key or a value of the wrong type fails loudly instead of being ignored.

Defaults work on the embedded demo dataset; README "Real Flickr8k" lists the
overrides for the real data (``DATA_DIR=``, ``GLOVE=``, ``RESNET_WEIGHTS=``,
``OUTPUT_DIR=`` on the make command line, or ``--set section.field=value``).

This module sits at the bottom of the house: it imports only
``components.example_format`` (which imports nothing of ours) and no TensorFlow,
so every layer can depend on it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import typing
from typing import Any, Mapping

from components import cpu_bfloat16, example_format

# Where the Keras application weights are looked up; "random" never touches disk.
RESNET_WEIGHTS_RANDOM = "random"
RESNET_WEIGHTS_IMAGENET = "imagenet"
# The dataset's splits, in pipeline order, and the caption metrics the evaluator computes.
CAPTION_METRIC_NAMES = ("BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr")
# The feature layout the schema, the validation gate and the Trainer read: ResNet50's 7x7 grid
# needs ceil(image_size / 32) == 7.
RESNET_GRID_IMAGE_SIZES = range(193, 225)
BFLOAT16_MODES = cpu_bfloat16.MODES
MIXED_PRECISION_MODES = ("auto", "on", "off")
# Images with more pixels are rejected (decompression bombs): ~2x the largest consumer photos;
# Flickr8k images are ~0.19 MP.
DEFAULT_MAX_IMAGE_PIXELS = 40_000_000
# The official Flickr8k text files, relative to the dataset's folder.
FLICKR8K_TEXT_DIR = "Flickr8k_text"
FLICKR8K_TOKEN_FILE = "Flickr8k.token.txt"
FLICKR8K_SPLIT_FILES = {"train": "Flickr_8k.trainImages.txt", "dev": "Flickr_8k.devImages.txt",
                        "test": "Flickr_8k.testImages.txt"}


# Caption dataset formats the reader knows (README "Other datasets").
DATA_FORMATS = ("flickr8k", "karpathy", "coco")
# COCO's official caption annotation files are named after their image folder.
COCO_ANNOTATION_FILE = re.compile(r"^captions_(?P<folder>[A-Za-z0-9_-]+)\.json$")


class ConfigError(ValueError):
    """A configuration value out of its range; the message names every bad key and value."""


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the Flickr8k-layout dataset lives and how its images are read."""

    # Root of a Flickr8k-layout folder. Empty: the demo dataset is generated
    # under ``RuntimeConfig.output_dir``/demo_data and used.
    data_dir: str = ""
    # "flickr8k": the token file (or Kaggle captions.txt) and the three split lists;
    # "karpathy": one Karpathy split file (dataset_flickr8k/flickr30k/coco.json) as captions_file;
    # "coco": COCO's official annotation files (coco_annotation_files).
    format: str = "flickr8k"
    # data.format=coco: the caption annotation files, relative to data_dir; each file's images are
    # in the folder its name gives (captions_train2014.json -> <image_dir_name>/train2014/).
    coco_annotation_files: tuple = ("annotations/captions_train2014.json",
                                    "annotations/captions_val2014.json")
    # data.format=coco: a Karpathy split file (dataset_coco.json) whose splits to use; empty:
    # train* files are train, val* files' images are dev or test, half each (stable hash).
    karpathy_split_file: str = ""
    # Where a Karpathy file's "restval" images (COCO's rest of val2014) go.
    restval_split: str = "train"
    image_dir_name: str = "Flicker8k_Dataset"  # sic: the official archive's spelling
    # Either the official ``Flickr8k.token.txt`` or a Kaggle-style ``captions.txt``
    # (path relative to ``data_dir``); the reader detects the format.
    captions_file: str = f"{FLICKR8K_TEXT_DIR}/{FLICKR8K_TOKEN_FILE}"
    train_split_file: str = f"{FLICKR8K_TEXT_DIR}/{FLICKR8K_SPLIT_FILES['train']}"
    dev_split_file: str = f"{FLICKR8K_TEXT_DIR}/{FLICKR8K_SPLIT_FILES['dev']}"
    test_split_file: str = f"{FLICKR8K_TEXT_DIR}/{FLICKR8K_SPLIT_FILES['test']}"
    # Demo dataset generation (used only when data_dir is empty).
    # A caption line longer than this is rejected (caption_too_long); COCO's longest is ~1,000
    # characters, Flickr8k's ~200. Lines are never read whole past it, whatever the file holds.
    max_caption_chars: int = 1000
    # Captions beyond this many for one image are rejected (too_many_captions). Flickr8k and
    # Flickr30k have 5 per image, COCO 5 to 7.
    max_captions_per_image: int = 10
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
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
    # Image files larger than this are rejected before they are read (file_too_large).
    max_image_bytes: int = 50_000_000
    inference_batch_size: int = 16
    # oneDNN's bfloat16 rewrite of ResNet50 (components.cpu_bfloat16): "auto" (on where the CPU
    # has native bfloat16), "on", "off". README "Benchmarks" has what it gains and changes.
    onednn_bfloat16: str = "off"
    # GZIP the TFRecords: less disk, less ingestion throughput (README "Benchmarks" has both).
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
    # Words seen fewer times in the train captions map to <unk> (what each threshold keeps of
    # real Flickr8k: README "Real Flickr8k vocabulary facts").
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
    # Why 0.1 and not the original's 0.3: README "Trainer" (measured on the demo data).
    dropout_rate: float = 0.1
    fine_tune_embedding: bool = False
    # Caption rows per replica: on CPU devices, and on each GPU (where a batch of 32 rows leaves
    # the GPU mostly idle). Images per batch = rows // captions per image.
    per_replica_batch_size: int = 32
    gpu_per_replica_batch_size: int = 160
    epochs: int = 40
    # learning_rate and warmup_steps are for a global batch of learning_rate_batch_size caption
    # rows. Another global batch (replicas x rows per replica) scales the learning rate by the
    # square root of the ratio (Adam; Malladi et al. 2022, "On the SDEs and Scaling Rules for
    # Adaptive Gradient Algorithms") and the warm-up steps by its inverse, so the warm-up spans
    # as many captions on 8 GPUs as on one CPU.
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    learning_rate_batch_size: int = 32
    # Train steps per call into the compiled graph: >1 saves the per-step Python overhead that
    # keeps a fast GPU waiting; callbacks then see every steps_per_execution-th step.
    steps_per_execution: int = 1
    clipnorm: float = 1.0
    early_stopping_patience: int = 5
    # Early stopping watches dev loss from this fraction of ``epochs`` on (the best weights are
    # restored from that part only); why half: README "Trainer" (measured on the demo data).
    early_stopping_start_fraction: float = 0.5
    cache_dataset: bool = True  # parsed images in memory: ~200 KB each
    # float16 compute with float32 variables, logits and loss: "auto" (on where every visible
    # GPU has float16 tensor cores, compute capability 7.0+; off on CPUs), "on", "off".
    mixed_precision: str = "auto"
    # oneDNN's bfloat16 rewrite of the train step (components.cpu_bfloat16): "auto" (on where the
    # CPU has native bfloat16), "on", "off". Variables, the loss and the exported model stay float32.
    onednn_bfloat16: str = "auto"
    seed: int = 42
    # Op determinism while training (restored after): same config + same data give bit-identical
    # weights on CPU; slower. On GPU some kernels have no deterministic version (README "Trainer").
    deterministic: bool = False


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """Serving signatures and model pushing."""

    max_decode_length: int = 0  # 0: the Transform's maximum caption length
    # Beam search ranks hypotheses by log-probability / ((5 + length) / 6) ** alpha
    # (GNMT). 0 ranks by the plain sum, which favours short, generic captions.
    beam_length_alpha: float = 0.0
    # The widest beam a serving request may ask for: beam search holds beam_width
    # hypotheses per image, so an unchecked width is a request-sized memory bill.
    max_beam_width: int = 16
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
    # Compile refuses features.resnet_weights=random (features of an untrained ResNet50) unless
    # this says the run is a smoke run (make pipeline-rehearse sets it).
    allow_random_resnet_weights: bool = False


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

    def validate(self) -> PipelineConfig:
        """Checks ranges, enums and cross-field rules of every section present; returns ``self``.

        Raises :class:`ConfigError` naming each bad key, its value and what is allowed. Runners
        call it when they build the config, before any component runs.
        """
        problems = [problem for section in dataclasses.fields(self)
                    if getattr(self, section.name) is not None
                    for problem in _SECTION_RULES[section.name](getattr(self, section.name))]
        problems += _cross_section_problems(self)
        if problems:
            raise ConfigError("Invalid configuration:\n  " + "\n  ".join(problems))
        return self

    def to_dict(self) -> dict:
        """A JSON-serialisable dict (tuples become lists)."""
        return json.loads(self.to_json())

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> PipelineConfig:
        """Rebuilds a config from :meth:`to_dict` or :meth:`slice_json` output; unknown keys
        raise. A section absent from ``values`` (a stage's slice) is None, so a stage reading
        a section it was not given fails at once instead of reading defaults."""
        if not isinstance(values, Mapping):
            raise TypeError(f"A config must be a mapping, got {values!r}.")
        return _build(cls, {section.name: values.get(section.name)
                            for section in dataclasses.fields(cls)}, path="")

    def slice_json(self, *sections: str) -> str:
        """The JSON of only ``sections``: what one stage reads, and so all its cache key holds."""
        unknown = sorted(set(sections) - {section.name for section in dataclasses.fields(self)})
        if unknown:
            raise ValueError(f"Unknown config sections {unknown}.")
        return json.dumps({name: dataclasses.asdict(getattr(self, name)) for name in sections},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PipelineConfig:
        return cls.from_dict(json.loads(text))

    def with_overrides(self, overrides: Mapping[str, str]) -> PipelineConfig:
        """Applies ``{"trainer.epochs": "3", ...}`` with values parsed by field type.

        Raises one :class:`ConfigError` naming every unknown key and every value that does not
        parse, together with the range problems of the overrides that did (``validate``)."""
        values = self.to_dict()
        problems = []
        for dotted_key, raw_value in overrides.items():
            section_name, _, field_name = dotted_key.partition(".")
            section_type = _field_types(PipelineConfig).get(section_name)
            if section_type is None or not field_name:
                problems.append(
                    f"Unknown config key {dotted_key!r}: expected <section>.<field> with "
                    f"section one of {sorted(_field_types(PipelineConfig))}.")
                continue
            field_type = _field_types(section_type).get(field_name)
            if field_type is None:
                problems.append(
                    f"Unknown config key {dotted_key!r}: {section_name} has fields "
                    f"{sorted(_field_types(section_type))}.")
                continue
            try:
                values[section_name][field_name] = _parse_value(dotted_key, raw_value, field_type)
            except ValueError as error:
                problems.append(str(error))
        pipeline_config = PipelineConfig.from_dict(values)
        if problems:
            try:
                pipeline_config.validate()
            except ConfigError as error:
                problems += str(error).splitlines()[1:]
            raise ConfigError("Invalid configuration:\n  " + "\n  ".join(
                problem.strip() for problem in problems))
        return pipeline_config


def _problem(key: str, value: Any, allowed: str) -> str:
    return f"{key}={value!r}: {allowed}"


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _rules(section: str, checks) -> Any:
    """A section's checker from ``(field, predicate, allowed)`` rows."""
    def check(values) -> list:
        return [_problem(f"{section}.{name}", getattr(values, name), allowed)
                for name, predicate, allowed in checks if not predicate(getattr(values, name))]
    check.allowed = {f"{section}.{name}": allowed for name, _, allowed in checks}
    return check


def describe_settings() -> list:
    """``(key, default, type, allowed)`` for every setting, from the dataclasses and the rules
    (``allowed`` is empty where no rule limits the field beyond its type)."""
    rows = []
    defaults = PipelineConfig()
    for section, section_type in _field_types(PipelineConfig).items():
        allowed = getattr(_SECTION_RULES.get(section), "allowed", {})
        for name, field_type in _field_types(section_type).items():
            key = f"{section}.{name}"
            value = getattr(getattr(defaults, section), name)
            type_name = "bool (true/false)" if field_type is bool else \
                "list (a,b or JSON)" if field_type is tuple else field_type.__name__
            rows.append((key, value, type_name, allowed.get(key, "")))
    return rows


def _at_least(minimum):
    return lambda value: _finite(value) and value >= minimum


def _positive(value) -> bool:
    return _finite(value) and value > 0


def _non_empty(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _fractions(values) -> bool:
    return (len(values) == 3 and all(_finite(value) and 0 < value < 1 for value in values)
            and abs(sum(values) - 1.0) < 1e-6)


# Ingestion and the Trainer each have their own oneDNN bfloat16 switch, with the same modes.
_BFLOAT16_RULE = ("onednn_bfloat16", lambda value: value in BFLOAT16_MODES,
                  f"must be one of {list(BFLOAT16_MODES)}")

_SECTION_RULES = {
    "data": _rules("data", [
        ("format", lambda value: value in DATA_FORMATS, f"must be one of {list(DATA_FORMATS)}"),
        ("coco_annotation_files", lambda value: bool(value) and all(
            isinstance(name, str) and COCO_ANNOTATION_FILE.match(os.path.basename(name))
            for name in value), "must name captions_<image folder>.json files"),
        ("restval_split", lambda value: value in example_format.SPLITS,
         f"must be one of {list(example_format.SPLITS)}"),
        ("image_dir_name", _non_empty, "must name the image folder"),
        ("captions_file", _non_empty, "must name the captions file"),
        ("train_split_file", _non_empty, "must name the train split list"),
        ("dev_split_file", _non_empty, "must name the dev split list"),
        ("test_split_file", _non_empty, "must name the test split list"),
        ("max_caption_chars", _at_least(1), "must be >= 1"),
        ("max_captions_per_image", _at_least(1), "must be >= 1"),
        ("demo_num_images", _at_least(3), "must be >= 3 (one image per split at least)"),
        ("demo_seed", _at_least(0), "must be >= 0"),
        ("demo_split_fractions", _fractions, "must be 3 fractions in (0, 1) for train, dev, test "
                                              "that sum to 1"),
    ]),
    "features": _rules("features", [
        ("resnet_weights", _non_empty, f"must be {RESNET_WEIGHTS_RANDOM!r}, "
                                       f"{RESNET_WEIGHTS_IMAGENET!r} or a weights file path"),
        ("random_weights_seed", _at_least(0), "must be >= 0"),
        ("image_size", lambda value: value in RESNET_GRID_IMAGE_SIZES,
         f"must be in {RESNET_GRID_IMAGE_SIZES.start}..{RESNET_GRID_IMAGE_SIZES.stop - 1} "
         "(ResNet50's 7x7 grid: the [49, 2048] feature layout the schema and the Trainer read)"),
        ("max_image_pixels", _positive, "must be > 0"),
        ("max_image_bytes", _at_least(1), "must be >= 1"),
        ("inference_batch_size", _at_least(1), "must be >= 1"),
        _BFLOAT16_RULE,
    ]),
    "transform": _rules("transform", [
        ("glove_zip_member", _non_empty, "must name the GloVe file inside a zip"),
        ("embedding_dim", _at_least(1), "must be >= 1"),
        ("max_caption_length", lambda value: value == 0 or (_finite(value) and value >= 3),
         "must be 0 (derived from the train captions) or >= 3 (start, a word, end)"),
        ("max_caption_length_quantile", lambda value: _finite(value) and 0 < value <= 1,
         "must be in (0, 1]"),
        ("vocab_frequency_threshold", _at_least(1), "must be >= 1"),
        ("vocab_top_k", _at_least(0), "must be >= 0 (0: no limit)"),
    ]),
    "trainer": _rules("trainer", [
        ("image_dense_units", lambda value: len(value) > 0 and all(
            isinstance(units, int) and units >= 1 for units in value),
         "must be a non-empty list of layer sizes >= 1"),
        ("lstm_units", _at_least(1), "must be >= 1"),
        ("second_lstm_units", _at_least(1), "must be >= 1"),
        ("attention_heads", _at_least(1), "must be >= 1"),
        ("attention_key_dim", _at_least(1), "must be >= 1"),
        ("dropout_rate", lambda value: _finite(value) and 0 <= value < 1, "must be in [0, 1)"),
        ("per_replica_batch_size", _at_least(1), "must be >= 1"),
        ("gpu_per_replica_batch_size", _at_least(1), "must be >= 1"),
        ("epochs", _at_least(1), "must be >= 1"),
        ("learning_rate", _positive, "must be finite and > 0"),
        ("warmup_steps", _at_least(0), "must be >= 0"),
        ("learning_rate_batch_size", _at_least(1), "must be >= 1"),
        ("steps_per_execution", _at_least(1), "must be >= 1"),
        ("mixed_precision", lambda value: value in MIXED_PRECISION_MODES,
         f"must be one of {list(MIXED_PRECISION_MODES)}"),
        ("clipnorm", _positive, "must be finite and > 0"),
        ("early_stopping_patience", _at_least(0), "must be >= 0"),
        ("early_stopping_start_fraction", lambda value: _finite(value) and 0 <= value <= 1,
         "must be in [0, 1]"),
        _BFLOAT16_RULE,
        ("seed", _at_least(0), "must be >= 0"),
    ]),
    "export": _rules("export", [
        ("max_decode_length", _at_least(0), "must be >= 0 (0: the Transform's maximum caption length)"),
        ("beam_length_alpha", _at_least(0), "must be finite and >= 0"),
        ("max_beam_width", lambda value: _at_least(1)(value) and value <= 1024, "must be in 1..1024"),
    ]),
    "evaluation": _rules("evaluation", [
        ("splits", lambda value: len(value) > 0 and len(set(value)) == len(value)
         and set(value) <= set(example_format.SPLITS),
         f"must be distinct splits among {list(example_format.SPLITS)}"),
        ("bless_metric", lambda value: value in CAPTION_METRIC_NAMES,
         f"must be one of {list(CAPTION_METRIC_NAMES)}"),
        ("bless_threshold", _at_least(0), "must be finite and >= 0"),
        ("max_regression", _at_least(0), "must be finite and >= 0"),
        ("beam_width", _at_least(0), "must be >= 0 (0: greedy)"),
        ("report_images", _at_least(0), "must be >= 0"),
    ]),
    "cloud": _rules("cloud", [
        ("dataflow_max_workers", _at_least(1), "must be >= 1"),
        ("trainer_accelerator_count", _at_least(0), "must be >= 0"),
    ]),
    "runtime": _rules("runtime", [
        ("pipeline_name", lambda value: isinstance(value, str) and re.fullmatch(
            r"[a-z0-9][a-z0-9-]{0,127}", value) is not None,
         "must be lower-case letters, digits and '-' (a Kubeflow/Vertex pipeline name)"),
        ("output_dir", _non_empty, "must name a directory"),
        ("beam_runner", _non_empty, "must name a Beam runner"),
        ("direct_num_workers", _at_least(0), "must be >= 0 (0: one per CPU core)"),
    ]),
}


def _cross_section_problems(pipeline_config: PipelineConfig) -> list:
    problems = []
    evaluation = pipeline_config.evaluation
    if evaluation is not None:
        if evaluation.bless_split not in evaluation.splits:
            problems.append(_problem("evaluation.bless_split", evaluation.bless_split,
                                     f"must be one of evaluation.splits {list(evaluation.splits)}"))
        if evaluation.bless_split == "train":
            problems.append(_problem("evaluation.bless_split", evaluation.bless_split,
                                     "must not be train: a model is blessed on data it did not fit"))
        if evaluation.bless_metric == "METEOR" and not evaluation.with_meteor:
            problems.append(_problem("evaluation.bless_metric", evaluation.bless_metric,
                                     "needs evaluation.with_meteor=true"))
    export = pipeline_config.export
    if evaluation is not None and export is not None and evaluation.beam_width > export.max_beam_width:
        problems.append(_problem("evaluation.beam_width", evaluation.beam_width,
                                 f"must be <= export.max_beam_width ({export.max_beam_width}): the "
                                 "evaluator decodes through the serving signatures"))
    return problems


def parse_override_args(assignments: typing.Iterable[str]) -> dict:
    """Turns ``["trainer.epochs=3", ...]`` (``--set`` flags) into an override dict."""
    overrides = {}
    for assignment in assignments:
        key, separator, value = assignment.partition("=")
        if not separator:
            raise ValueError(f"Override {assignment!r} is not of the form section.field=value.")
        overrides[key.strip()] = value
    return overrides


# The command-line flags every entry point shares, and the config key each one sets.
CONFIG_FLAGS = {
    "output_dir": ("runtime.output_dir", "where every output goes"),
    "data_dir": ("data.data_dir", "Flickr8k-layout folder, local or gs://"),
    "glove": ("transform.glove_path", "GloVe .txt, .txt.gz or Stanford .zip"),
    "resnet_weights": ("features.resnet_weights",
                       "'random', 'imagenet' (Keras cache) or a weights file path/URI"),
    "project": ("cloud.project", "Google Cloud project"),
    "region": ("cloud.region", "Google Cloud region"),
    "bucket": ("cloud.bucket", "gs://BUCKET for pipeline_root, serving_model, tmp"),
    "image": ("cloud.image", "the pipeline image"),
}


# What an optional flag left out means, said in its help.
OPTIONAL_FLAG_DEFAULTS = {"data_dir": "the generated demo data"}


def add_config_flags(parser: argparse.ArgumentParser, names: typing.Sequence[str],
                     required: typing.Sequence[str] = ()) -> argparse.ArgumentParser:
    """Adds ``--NAME`` for each of ``names`` (keys of :data:`CONFIG_FLAGS`) and ``--set``."""
    for name in names:
        default = "" if name in required or name not in OPTIONAL_FLAG_DEFAULTS else \
            f"; default: {OPTIONAL_FLAG_DEFAULTS[name]}"
        parser.add_argument(f"--{name}", default="", required=name in required,
                            help=f"{CONFIG_FLAGS[name][1]} ({CONFIG_FLAGS[name][0]}{default})")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="any other config override; repeatable")
    return parser


def config_from_flags(args: argparse.Namespace,
                      base: typing.Optional[PipelineConfig] = None) -> PipelineConfig:
    """The validated config that ``--set`` and the named flags of :func:`add_config_flags` ask
    for; a named flag given a value wins over the same key in ``--set``."""
    overrides = parse_override_args(args.set or [])
    overrides.update({key: getattr(args, name) for name, (key, _) in CONFIG_FLAGS.items()
                      if getattr(args, name, "")})
    return (base or PipelineConfig()).with_overrides(overrides).validate()


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
            kwargs[name] = None if value is None and not path else _build(field_type, value, key)
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
            if lowered not in ("true", "false"):
                raise ValueError(raw_value)
            return lowered == "true"
        if field_type is int:
            return int(raw_value)
        if field_type is float:
            return float(raw_value)
        if field_type is tuple:
            parsed = json.loads(raw_value) if raw_value.strip().startswith("[") else [
                item for item in raw_value.split(",") if item]
            return [_coerce_scalar(item) for item in parsed]
        return raw_value
    except ValueError:
        expected = "bool (true or false)" if field_type is bool else \
            getattr(field_type, "__name__", field_type)
        raise ValueError(f"Config override {key}={raw_value!r} is not a valid {expected}.") from None


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
    "EvaluationConfig", "CloudConfig", "RuntimeConfig", "PipelineConfig", "ConfigError",
    "parse_override_args", "add_config_flags", "config_from_flags", "CONFIG_FLAGS",
]
