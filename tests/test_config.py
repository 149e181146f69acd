"""Tests of the typed configuration tree: round trips, overrides, loud failures."""

import json

import pytest

from components import config as config_lib


def test_round_trip_through_json_keeps_types():
    original = config_lib.PipelineConfig().with_overrides({"trainer.epochs": "3"})
    rebuilt = config_lib.PipelineConfig.from_json(json.dumps(original.to_dict()))
    assert rebuilt == original
    assert isinstance(rebuilt.trainer.image_dense_units, tuple)


def test_overrides_parse_by_field_type():
    pipeline_config = config_lib.PipelineConfig().with_overrides(config_lib.parse_override_args([
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
        config_lib.parse_override_args(["trainer.epochs"])
