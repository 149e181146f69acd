"""Tests of ``create_pipeline``: each component's exec properties (its cache key) hold only the
config sections its stage reads, and each stage's code digest comes from its import graph."""

import json
import shutil

import pytest

from components import config as config_lib
from pipeline import fingerprints
from pipeline.pipeline import create_pipeline
from tests.paths import REPO_ROOT, SCHEMA_PATH

FINGERPRINTS = dict.fromkeys(fingerprints.STAGE_ENTRY_MODULES, "code")


def _components(pipeline_config: config_lib.PipelineConfig, code_fingerprints=None) -> dict:
    pipeline = create_pipeline(pipeline_config, pipeline_root="/tmp/root", data_fingerprint="data",
                               schema_path=SCHEMA_PATH, code_fingerprints=code_fingerprints or FINGERPRINTS,
                               serving_model_dir="/tmp/serving")
    return {component.id: component for component in pipeline.components}


def _exec_properties(pipeline_config: config_lib.PipelineConfig, code_fingerprints=None) -> dict:
    return {name: {key: str(value) for key, value in component.exec_properties.items()}
            for name, component in _components(pipeline_config, code_fingerprints).items()}


def _changed_components(overrides: dict, code_fingerprints=None) -> set:
    before = _exec_properties(config_lib.PipelineConfig())
    after = _exec_properties(config_lib.PipelineConfig().with_overrides(overrides), code_fingerprints)
    return {name for name in before if before[name] != after[name]}


# A changed exec property re-runs its component; TFX then re-runs everything downstream of it,
# because its outputs are new artifacts (shown in ML Metadata by the e2e test).
@pytest.mark.parametrize("overrides, changed", [
    ({"evaluation.beam_width": "2"}, {"CaptionEvaluator"}),
    ({"evaluation.bless_threshold": "0.3"}, {"CaptionEvaluator"}),
    ({"trainer.epochs": "3"}, {"Trainer"}),
    ({"export.beam_length_alpha": "0.7"}, {"Trainer"}),
    ({"transform.vocab_frequency_threshold": "2"}, {"Transform"}),
    ({"features.image_size": "200"}, {"Flickr8kExampleGen", "Trainer"}),
    ({"data.image_dir_name": "images"}, {"Flickr8kExampleGen", "CaptionEvaluator"}),
    ({"runtime.direct_num_workers": "2", "runtime.output_dir": "/elsewhere"}, set()),
    ({"cloud.project": "other", "cloud.trainer_accelerator_count": "4"}, set()),
])
def test_a_config_field_changes_only_the_exec_properties_of_the_stages_that_read_it(overrides, changed):
    assert _changed_components(overrides) == changed


def test_stages_rebuild_their_slice_and_fail_loudly_on_a_section_they_were_not_given():
    custom_config = _components(config_lib.PipelineConfig())["Transform"].exec_properties["custom_config"]
    transform_slice = config_lib.PipelineConfig.from_json(json.loads(custom_config)["pipeline_config"])
    assert transform_slice.transform == config_lib.TransformConfig()
    assert transform_slice.trainer is None and transform_slice.runtime is None
    with pytest.raises(AttributeError):
        _ = transform_slice.trainer.epochs
    assert transform_slice.validate() is transform_slice


def _edited_copy(tmp_path, relative_path: str) -> str:
    root = tmp_path / "repo"
    shutil.copytree(f"{REPO_ROOT}/components", root / "components",
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(root / relative_path, "a", encoding="utf-8") as stream:
        stream.write("\n# edited\n")
    return str(root)


@pytest.mark.parametrize("edited, changed_stages", [
    ("components/ingestion/beam_job.py", {"ingestion"}),
    ("components/ingestion/formats/flickr8k.py", {"ingestion"}),
    ("components/transform/validation_gate.py", {"validation_gate"}),
    ("components/transform/preprocessing.py", {"transform", "trainer", "evaluator"}),
    ("components/trainer/model.py", {"trainer", "evaluator"}),
    ("components/evaluation/caption_metrics.py", {"evaluator"}),
    # Shared bottom modules: every stage that imports them, and only those.
    ("components/resnet_features.py", {"ingestion", "trainer", "evaluator"}),
    ("components/config.py", {"ingestion", "transform", "trainer", "evaluator"}),
])
def test_editing_a_module_changes_the_digest_of_exactly_the_stages_that_import_it(
        tmp_path, edited, changed_stages):
    original = fingerprints.pipeline_code_fingerprints(REPO_ROOT)
    edited_root = _edited_copy(tmp_path, edited)
    after = fingerprints.pipeline_code_fingerprints(edited_root)
    assert {stage for stage in original if original[stage] != after[stage]} == changed_stages
    # And the changed digests reach the exec properties of those stages' components only.
    components = {"ingestion": "Flickr8kExampleGen", "validation_gate": "ExampleValidationGate",
                  "transform": "Transform", "trainer": "Trainer", "evaluator": "CaptionEvaluator"}
    before_properties = _exec_properties(config_lib.PipelineConfig(), original)
    after_properties = _exec_properties(config_lib.PipelineConfig(), after)
    assert {name for name in before_properties if before_properties[name] != after_properties[name]} == {
        components[stage] for stage in changed_stages}


def test_the_import_graph_includes_function_level_imports_and_packages():
    closure = fingerprints.module_closure(fingerprints.STAGE_ENTRY_MODULES["evaluator"])
    # report imports the Trainer's run_fn inside a function.
    assert "components.trainer.run_fn" in closure and "components.evaluation.report" in closure
    assert "components" in closure and "components.evaluation" in closure
    assert not any(name.startswith("pipeline") for name in closure)
