"""``create_pipeline``: the one factory that wires the TFX pipeline from the config.

Pure: it builds components and returns a ``tfx.dsl.Pipeline``; runners decide
the pipeline root, the metadata store and the Beam arguments, and run it.
Stages are added in pipeline order as they land (see README, "Status").
"""

import os
from typing import List, Mapping, Optional

from tfx import v1 as tfx

from components import config as config_lib
from components import example_format
from components.evaluation.evaluator import CaptionEvaluator
from components.ingestion.example_gen import Flickr8kExampleGen
from components.serving.pusher import AtomicPusher
from components.transform import preprocessing
from components.transform.validation_gate import ExampleValidationGate

# The data schema ImportSchemaGen reads, relative to the repository (and the image's workdir).
SCHEMA_FILE = os.path.join("schemas", "schema.pbtxt")

# The config sections each stage reads. The Pusher reads none: its destination is a path.
STAGE_SECTIONS = {
    "ingestion": ("data", "features"),
    "transform": ("transform",),
    # export builds the serving graph's ResNet50 from the features section.
    "trainer": ("trainer", "export", "features"),
    # data: where the report finds the pictures.
    "evaluator": ("evaluation", "data"),
}


def validated_transform(examples, pipeline_config: config_lib.PipelineConfig, schema_path: str,
                        code_fingerprints: Mapping[str, str]) -> list:
    """StatisticsGen → ImportSchemaGen → ExampleValidator → gate → Transform over ``examples``.

    Transform runs only after the gate passed: an anomaly stops the pipeline
    there, naming the anomaly, before any preprocessing or training.
    """
    statistics_gen = tfx.components.StatisticsGen(examples=examples)
    schema_importer = tfx.components.ImportSchemaGen(schema_file=schema_path)
    example_validator = tfx.components.ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_importer.outputs["schema"])
    validation_gate = ExampleValidationGate(
        statistics=statistics_gen.outputs["statistics"],
        anomalies=example_validator.outputs["anomalies"],
        expected_feature_bytes=example_format.FEATURE_BYTES,
        code_fingerprint=code_fingerprints["validation_gate"])
    transform = tfx.components.Transform(
        examples=examples,
        schema=schema_importer.outputs["schema"],
        preprocessing_fn=f"{preprocessing.__name__}.preprocessing_fn",
        splits_config=tfx.proto.SplitsConfig(analyze=["train"], transform=["train", "dev", "test"]),
        custom_config={"pipeline_config": pipeline_config.slice_json(*STAGE_SECTIONS["transform"]),
                       "code_fingerprint": code_fingerprints["transform"]},
    )
    transform.add_upstream_node(validation_gate)
    return [statistics_gen, schema_importer, example_validator, validation_gate, transform]


def create_pipeline(
    pipeline_config: config_lib.PipelineConfig,
    pipeline_root: str,
    data_fingerprint: str,
    schema_path: str,
    code_fingerprints: Mapping[str, str],
    serving_model_dir: str,
    metadata_connection_config=None,
    beam_pipeline_args: Optional[List[str]] = None,
    enable_cache: bool = True,
    vertex_training: Optional[Mapping[str, object]] = None,
) -> tfx.dsl.Pipeline:
    """Ingestion → statistics → schema → validation gate → Transform → Trainer → evaluator → Pusher.

    Each component is handed only the config sections it reads (``STAGE_SECTIONS``), never
    ``runtime`` or ``cloud``: its exec properties are its cache key, so a changed field
    re-runs the stage that reads it and what follows, nothing before.
    ``data_fingerprint`` (``components.ingestion.example_gen.data_fingerprint``) and
    ``code_fingerprints`` (``{stage: digest}`` of each stage's import graph, see
    ``pipeline.fingerprints``) enter TFX's cache keys, which see neither the input
    files nor the code behind a module path by themselves.
    ``vertex_training`` (the Trainer extension's ``custom_config`` keys, built by
    ``pipeline.kubeflow_v2_runner``) runs the Trainer as a Vertex AI training job.
    """
    example_gen = Flickr8kExampleGen(
        pipeline_config=pipeline_config.slice_json(*STAGE_SECTIONS["ingestion"]),
        data_fingerprint=data_fingerprint, code_fingerprint=code_fingerprints["ingestion"])
    validation_and_transform = validated_transform(
        example_gen.outputs["examples"], pipeline_config, schema_path, code_fingerprints)
    trainer = trained_model(validation_and_transform[-1], pipeline_config, pipeline_root,
                            code_fingerprints, vertex_training)
    evaluation_and_push = evaluated_and_pushed(example_gen.outputs["examples"], trainer,
                                               pipeline_config, code_fingerprints, serving_model_dir)
    components = [example_gen, *validation_and_transform, trainer, *evaluation_and_push]
    return tfx.dsl.Pipeline(
        pipeline_name=pipeline_config.runtime.pipeline_name,
        pipeline_root=pipeline_root,
        components=components,
        enable_cache=enable_cache,
        metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=beam_pipeline_args or [],
    )


def trained_model(transform, pipeline_config: config_lib.PipelineConfig, pipeline_root: str,
                  code_fingerprints: Mapping[str, str],
                  vertex_training: Optional[Mapping[str, object]] = None):
    """The Trainer over Transform's outputs; with ``vertex_training``, TFX's Vertex AI Trainer,
    which only submits a custom training job (GPU worker pool) that runs the same ``run_fn``."""
    trainer_class = (tfx.extensions.google_cloud_ai_platform.Trainer if vertex_training
                     else tfx.components.Trainer)
    return trainer_class(
        run_fn="components.trainer.run_fn.run_fn",
        examples=transform.outputs["transformed_examples"],
        transform_graph=transform.outputs["transform_graph"],
        train_args=tfx.proto.TrainArgs(splits=["train"]),
        eval_args=tfx.proto.EvalArgs(splits=["dev"]),
        custom_config={
            "pipeline_config": pipeline_config.slice_json(*STAGE_SECTIONS["trainer"]),
            "code_fingerprint": code_fingerprints["trainer"],
            # Outside every execution's directory, so a re-run resumes a killed training.
            "backup_root": os.path.join(pipeline_root, "_trainer_backup"),
            **(vertex_training or {}),
        },
    )


def evaluated_and_pushed(examples, trainer, pipeline_config: config_lib.PipelineConfig,
                         code_fingerprints: Mapping[str, str], serving_model_dir: str) -> list:
    """Latest-blessed-model resolver → evaluator → Pusher for the Trainer's model.

    The evaluator scores the model on ``examples`` against image-blind baselines and the
    latest blessed model and blesses it or not; the Pusher copies a blessed model into a new
    numbered version directory under ``serving_model_dir`` (TF Serving's layout).
    """
    latest_blessed_model = tfx.dsl.Resolver(
        strategy_class=tfx.dsl.experimental.LatestBlessedModelStrategy,
        model=tfx.dsl.Channel(type=tfx.types.standard_artifacts.Model),
        model_blessing=tfx.dsl.Channel(type=tfx.types.standard_artifacts.ModelBlessing),
    ).with_id("latest_blessed_model_resolver")
    evaluator = CaptionEvaluator(
        examples=examples,
        model=trainer.outputs["model"],
        model_run=trainer.outputs["model_run"],
        baseline_model=latest_blessed_model.outputs["model"],
        pipeline_config=pipeline_config.slice_json(*STAGE_SECTIONS["evaluator"]),
        code_fingerprint=code_fingerprints["evaluator"],
    )
    model_pusher = AtomicPusher(
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(base_directory=serving_model_dir)),
    ).with_id("Pusher")
    return [latest_blessed_model, evaluator, model_pusher]
