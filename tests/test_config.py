"""Tests of the typed configuration tree: round trips, overrides, loud failures."""

import json

import pytest

from components import config as config_lib
from pipeline import config_flags


def test_round_trip_through_json_keeps_types():
    original = config_lib.PipelineConfig().with_overrides({"trainer.epochs": "3"})
    rebuilt = config_lib.PipelineConfig.from_json(json.dumps(original.to_dict()))
    assert rebuilt == original
    assert isinstance(rebuilt.trainer.image_dense_units, tuple)


def test_overrides_parse_by_field_type():
    pipeline_config = config_lib.PipelineConfig().with_overrides(config_flags.parse_override_args([
        "trainer.learning_rate=5e-4", "trainer.fine_tune_embedding=true", "trainer.epochs=7",
        "trainer.image_dense_units=256,128", "data.data_dir=/data/flickr8k",
    ]))
    assert pipeline_config.trainer.learning_rate == 5e-4
    assert pipeline_config.trainer.fine_tune_embedding is True
    assert pipeline_config.trainer.epochs == 7
    assert pipeline_config.trainer.image_dense_units == (256, 128)
    assert pipeline_config.data.data_dir == "/data/flickr8k"
    # Untouched sections keep their defaults.
    assert pipeline_config.export == config_lib.ExportConfig()


@pytest.mark.parametrize("override, message", [
    ({"trainer.epoch": "3"}, "Unknown config key 'trainer.epoch'"),
    ({"training.epochs": "3"}, "Unknown config key 'training.epochs'"),
    ({"trainer.epochs": "three"}, "not a valid int"),
    ({"trainer.fine_tune_embedding": "maybe"}, "not a valid bool"),
    ({"trainer.image_dense_units": "wide,narrow"}, "'trainer.image_dense_units' must be a list of int"),
])
def test_bad_overrides_fail_loudly(override, message):
    with pytest.raises(ValueError, match=message):
        config_lib.PipelineConfig().with_overrides(override)


def test_from_dict_rejects_unknown_keys_and_wrong_types():
    values = config_lib.PipelineConfig().to_dict()
    values["trainer"]["learning_rte"] = 0.1
    with pytest.raises(ValueError, match="learning_rte"):
        config_lib.PipelineConfig.from_dict(values)
    values = config_lib.PipelineConfig().to_dict()
    values["trainer"]["epochs"] = "3"
    with pytest.raises(TypeError, match="trainer.epochs"):
        config_lib.PipelineConfig.from_dict(values)


def test_override_argument_must_have_equals_sign():
    with pytest.raises(ValueError, match="section.field=value"):
        config_flags.parse_override_args(["trainer.epochs"])


@pytest.mark.parametrize("key, value, allowed", [
    ("trainer.epochs", "0", "must be >= 1"),
    ("trainer.per_replica_batch_size", "0", "must be >= 1"),
    ("trainer.dropout_rate", "1.5", "must be in [0, 1)"),
    ("trainer.dropout_rate", "-0.1", "must be in [0, 1)"),
    ("trainer.early_stopping_start_fraction", "1.5", "must be in [0, 1]"),
    ("trainer.early_stopping_start_fraction", "nan", "must be in [0, 1]"),
    ("trainer.learning_rate", "nan", "must be finite and > 0"),
    ("trainer.learning_rate", "inf", "must be finite and > 0"),
    ("trainer.learning_rate", "0", "must be finite and > 0"),
    ("trainer.clipnorm", "-1", "must be finite and > 0"),
    ("trainer.lstm_units", "0", "must be >= 1"),
    ("trainer.image_dense_units", "512,0", "non-empty list of layer sizes"),
    ("trainer.warmup_steps", "-5", "must be >= 0"),
    ("trainer.gpu_per_replica_batch_size", "0", "must be >= 1"),
    ("trainer.learning_rate_batch_size", "0", "must be >= 1"),
    ("trainer.scst_samples", "0", "must be in 1..64"),
    ("trainer.scst_learning_rate", "nan", "must be finite and > 0"),
    ("trainer.scst_baseline", "mean", "must be one of ['greedy', 'sample_mean']"),
    ("trainer.select_on", "dev_bleu", "must be one of ['dev_loss', 'dev_bleu4', 'dev_cider']"),
    ("trainer.steps_per_execution", "0", "must be >= 1"),
    ("trainer.mixed_precision", "fp16", "must be one of ['auto', 'on', 'off']"),
    ("evaluation.beam_width", "-1", "must be >= 0"),
    ("evaluation.bless_metric", "BLEU-5", "must be one of ['BLEU-1'"),
    ("evaluation.bless_split", "train", "must be one of evaluation.splits"),
    ("evaluation.bless_split", "validation", "must be one of evaluation.splits"),
    ("evaluation.splits", "dev,holdout", "must be distinct splits among"),
    ("evaluation.bless_threshold", "nan", "must be finite and >= 0"),
    ("evaluation.max_regression", "-inf", "must be finite and >= 0"),
    ("features.image_size", "0", "must be in 193..224"),
    ("features.image_size", "256", "must be in 193..224"),
    ("features.max_image_pixels", "0", "must be > 0"),
    ("features.inference_batch_size", "0", "must be >= 1"),
    ("transform.vocab_frequency_threshold", "0", "must be >= 1"),
    ("transform.max_caption_length", "2", "must be 0 (derived"),
    ("transform.max_caption_length_quantile", "1.5", "must be in (0, 1]"),
    ("data.demo_num_images", "2", "must be >= 3"),
    ("data.demo_split_fractions", "0.5,0.5,0.5", "sum to 1"),
    ("export.beam_length_alpha", "nan", "must be finite and >= 0"),
    ("export.max_beam_width", "0", "must be in 1..1024"),
    ("export.max_beam_width", "100000", "must be in 1..1024"),
    ("evaluation.beam_width", "17", "must be <= export.max_beam_width (16)"),
    ("runtime.pipeline_name", "My Pipeline", "lower-case letters"),
    ("runtime.direct_num_workers", "-1", "must be >= 0"),
    ("cloud.dataflow_max_workers", "0", "must be >= 1"),
])
def test_out_of_range_values_are_refused_naming_key_value_and_what_is_allowed(key, value, allowed):
    overridden = config_lib.PipelineConfig().with_overrides({key: value})
    with pytest.raises(config_lib.ConfigError) as raised:
        overridden.validate()
    message = str(raised.value)
    assert f"{key}=" in message and allowed in message, message


def test_meteor_blessing_needs_meteor_and_every_problem_is_listed_at_once():
    overridden = config_lib.PipelineConfig().with_overrides({
        "evaluation.bless_metric": "METEOR", "evaluation.with_meteor": "false", "trainer.epochs": "0"})
    with pytest.raises(config_lib.ConfigError, match="needs evaluation.with_meteor=true") as raised:
        overridden.validate()
    assert "trainer.epochs=0" in str(raised.value)


def test_a_sample_mean_baseline_needs_two_samples_only_when_the_phase_runs():
    single = {"trainer.scst_baseline": "sample_mean", "trainer.scst_samples": "1"}
    config_lib.PipelineConfig().with_overrides(single).validate()  # scst_epochs 0: no phase
    with pytest.raises(config_lib.ConfigError, match=r"trainer.scst_samples=1: must be at least 2 "
                                                     r"with trainer.scst_baseline='sample_mean'"):
        config_lib.PipelineConfig().with_overrides({**single, "trainer.scst_epochs": "2"}).validate()


def test_defaults_and_flags_give_a_valid_config():
    import argparse

    parser = config_flags.add_config_flags(argparse.ArgumentParser(), ("data_dir", "glove"))
    args = parser.parse_args(["--data_dir=/data", "--set", "data.data_dir=/other",
                              "--set", "trainer.epochs=3"])
    pipeline_config = config_flags.config_from_flags(args)
    assert pipeline_config.data.data_dir == "/data"  # the named flag wins over --set
    assert pipeline_config.trainer.epochs == 3 and pipeline_config.validate() is pipeline_config
    with pytest.raises(config_lib.ConfigError, match="trainer.epochs=0"):
        config_flags.config_from_flags(parser.parse_args(["--set", "trainer.epochs=0"]))


def test_every_bad_override_is_named_at_once_unknown_keys_types_and_ranges():
    with pytest.raises(config_lib.ConfigError) as raised:
        config_lib.PipelineConfig().with_overrides({
            "trainer.epoch": "5", "trainer.dropout_rate": "1.5", "evaluation.beam_width": "abc"})
    message = str(raised.value)
    assert "Unknown config key 'trainer.epoch'" in message
    assert "evaluation.beam_width='abc' is not a valid int" in message
    assert "trainer.dropout_rate=1.5" in message
    assert raised.value.__cause__ is None and raised.value.__context__ is None


@pytest.mark.parametrize("spelling, value", [("true", True), ("False", False), ("TRUE", True)])
def test_booleans_are_true_or_false(spelling, value):
    assert config_lib.PipelineConfig().with_overrides(
        {"trainer.deterministic": spelling}).trainer.deterministic is value


@pytest.mark.parametrize("spelling", ["yes", "no", "1", "0", "on"])
def test_other_boolean_spellings_are_refused(spelling):
    with pytest.raises(config_lib.ConfigError, match=r"not a valid bool \(true or false\)"):
        config_lib.PipelineConfig().with_overrides({"trainer.deterministic": spelling})


def test_settings_list_every_key_once_with_its_default_and_rule():
    from pipeline import settings

    rows = config_lib.describe_settings()
    keys = [key for key, _, _, _ in rows]
    defaults = config_lib.PipelineConfig().to_dict()
    assert sorted(keys) == sorted(f"{section}.{name}" for section, fields in defaults.items()
                                  for name in fields)
    by_key = {key: (default, type_name, allowed) for key, default, type_name, allowed in rows}
    assert by_key["trainer.epochs"] == (40, "int", "must be >= 1")
    assert by_key["trainer.deterministic"][1] == "bool (true/false)"
    text = settings.render(rows)
    assert len(text.splitlines()) == len(rows) + 1 and "trainer.dropout_rate" in text
    markdown = settings.render(rows, markdown=True)
    assert markdown.count("\n| `") == len(rows)
