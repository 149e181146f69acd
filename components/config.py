"""The one configuration tree every stage reads: the sections composed, sliced and serialised.

Each section is declared beside the code that reads it, with its limits at its fields
(:mod:`components.config_fields`): ``data`` in ``components/ingestion/config.py``, ``features``
in ``components/features_config.py`` (ingestion and the serving graph), ``transform``,
``trainer`` and ``export``, ``evaluation`` in their stages' ``config.py``, ``cloud`` and
``runtime`` in ``components/orchestration_config.py``. This module composes them into
:class:`PipelineConfig`, holds the rules that span sections, hands each stage the slice it
reads (TFX ``custom_config`` / exec properties, as JSON) and rebuilds it there, so a typo in a
key or a value of the wrong type fails loudly instead of being ignored.

Runners build a config, apply the user's overrides (:meth:`PipelineConfig.with_overrides`) and
validate it before any component runs. Defaults work on the generated demo dataset; README
"Running on real Flickr8k" lists the overrides for real data.

It imports the section modules and :mod:`components.config_fields` only, and no TensorFlow, so
every layer can depend on it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping

from components import config_fields
from components.evaluation.config import CAPTION_METRIC_NAMES, EvaluationConfig
from components.features_config import RESNET_WEIGHTS_IMAGENET, RESNET_WEIGHTS_RANDOM, FeaturesConfig
from components.ingestion.config import (
    COCO_ANNOTATION_FILE,
    DATA_FORMATS,
    FLICKR8K_SPLIT_FILES,
    FLICKR8K_TEXT_DIR,
    FLICKR8K_TOKEN_FILE,
    DataConfig,
)
from components.orchestration_config import CloudConfig, RuntimeConfig
from components.trainer.config import MIXED_PRECISION_MODES, ExportConfig, TrainerConfig
from components.transform.config import TransformConfig


class ConfigError(ValueError):
    """A configuration value out of its range; the message names every bad key and value."""


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
        """Checks every field of every section present against its limits, the rules between a
        section's fields and those between sections; returns ``self``.

        Raises :class:`ConfigError` naming each bad key, its value and what is allowed. Runners
        call it when they build the config, before any component runs.
        """
        problems = []
        for name in _section_types():
            section = getattr(self, name)
            if section is None:
                continue
            problems += config_fields.limit_problems(name, section)
            if hasattr(section, "field_rule_problems"):
                problems += section.field_rule_problems()
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
        raise ValueError, values of the wrong type TypeError. A section absent from ``values``
        (a stage's slice) is None, so a stage reading a section it was not given fails at once
        instead of reading defaults."""
        if not isinstance(values, Mapping):
            raise TypeError(f"A config must be a mapping, got {values!r}.")
        unknown = sorted(set(values) - set(_section_types()))
        if unknown:
            raise ValueError(f"Unknown config keys {unknown} in section '<root>'; "
                             f"known: {sorted(_section_types())}.")
        return cls(**{name: None if values.get(name) is None else
                      config_fields.build_section(section_type, values[name], name)
                      for name, section_type in _section_types().items()})

    def slice_json(self, *sections: str) -> str:
        """The JSON of only ``sections``: what one stage reads, and so all its cache key holds."""
        unknown = sorted(set(sections) - set(_section_types()))
        if unknown:
            raise ValueError(f"Unknown config sections {unknown}.")
        return json.dumps({name: dataclasses.asdict(getattr(self, name)) for name in sections},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PipelineConfig:
        return cls.from_dict(json.loads(text))

    def with_overrides(self, overrides: Mapping[str, str]) -> PipelineConfig:
        """Applies ``{"trainer.epochs": "3", ...}``, each value read as its field's type
        (:func:`components.config_fields.parse_text`).

        Raises one :class:`ConfigError` naming every unknown key and every value that does not
        parse, together with the range problems of the overrides that did (``validate``)."""
        values = self.to_dict()
        problems = []
        sections = _section_types()
        for dotted_key, raw_value in overrides.items():
            section_name, _, field_name = dotted_key.partition(".")
            if section_name not in sections or not field_name:
                problems.append(
                    f"Unknown config key {dotted_key!r}: expected <section>.<field> with "
                    f"section one of {sorted(sections)}.")
                continue
            field_types = config_fields.field_types(sections[section_name])
            if field_name not in field_types:
                problems.append(
                    f"Unknown config key {dotted_key!r}: {section_name} has fields "
                    f"{sorted(field_types)}.")
                continue
            try:
                value = config_fields.parse_text(dotted_key, raw_value, field_types[field_name])
            except ValueError as error:
                problems.append(str(error))
                continue
            wrong_type = config_fields.type_problem(dotted_key, field_types[field_name], value)
            if wrong_type:  # a list of words where numbers are declared, say
                problems.append(f"Config override {dotted_key}={raw_value!r}: {wrong_type}")
                continue
            values[section_name][field_name] = value
        pipeline_config = PipelineConfig.from_dict(values)
        if problems:
            try:
                pipeline_config.validate()
            except ConfigError as error:
                problems += str(error).splitlines()[1:]
            raise ConfigError("Invalid configuration:\n  " + "\n  ".join(
                problem.strip() for problem in problems))
        return pipeline_config


def _section_types() -> dict:
    """``{section name: its dataclass}``, in the root's field order."""
    return config_fields.field_types(PipelineConfig)


def _cross_section_problems(pipeline_config: PipelineConfig) -> list:
    """The rules that span sections."""
    problems = []
    evaluation, export = pipeline_config.evaluation, pipeline_config.export
    if evaluation is not None and export is not None and evaluation.beam_width > export.max_beam_width:
        problems.append(f"evaluation.beam_width={evaluation.beam_width!r}: must be <= "
                        f"export.max_beam_width ({export.max_beam_width}): the evaluator decodes "
                        "through the serving signatures")
    return problems


def describe_settings() -> list:
    """``(key, default, type, allowed)`` for every setting, from the sections' declarations
    (``allowed`` is empty where nothing limits the field beyond its type)."""
    rows = []
    defaults = PipelineConfig()
    for section, section_type in _section_types().items():
        for name, hint in config_fields.field_types(section_type).items():
            base = config_fields.base_type(hint)
            type_name = "bool (true/false)" if base is bool else \
                "list (a,b or JSON)" if base is tuple else base.__name__
            rows.append((f"{section}.{name}", getattr(getattr(defaults, section), name), type_name,
                         config_fields.allowed_text(hint)))
    return rows


__all__ = [
    "DataConfig", "FeaturesConfig", "TransformConfig", "TrainerConfig", "ExportConfig",
    "EvaluationConfig", "CloudConfig", "RuntimeConfig", "PipelineConfig", "ConfigError",
    "CAPTION_METRIC_NAMES", "COCO_ANNOTATION_FILE", "DATA_FORMATS", "FLICKR8K_SPLIT_FILES",
    "FLICKR8K_TEXT_DIR", "FLICKR8K_TOKEN_FILE", "MIXED_PRECISION_MODES", "RESNET_WEIGHTS_IMAGENET",
    "RESNET_WEIGHTS_RANDOM",
]
