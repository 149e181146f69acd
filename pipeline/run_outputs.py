"""What a finished local run prints: each stage's own summary of its newest output.

The artifacts are found in the run's ML Metadata store by the component id that produced them
(the ``node`` context TFX records for every execution), never by where their files lie; each
stage's ``summary.describe`` reads its own artifact.
"""

from __future__ import annotations

import os
from typing import Optional

from components import config as config_lib


def metadata_path(output_dir: str) -> str:
    return os.path.join(output_dir, "metadata", "metadata.sqlite")


def read_metadata_store(output_dir: str):
    """The run's ML Metadata store, read-only."""
    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = metadata_path(output_dir)
    connection.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READONLY
    return metadata_store.MetadataStore(connection)


def latest_artifact_uri(output_dir: str, type_name: str, producer: str,
                        pipeline_name: str = config_lib.RuntimeConfig.pipeline_name) -> Optional[str]:
    """The URI of the newest LIVE ``type_name`` artifact that component ``producer`` output."""
    from ml_metadata import errors
    from ml_metadata.proto import metadata_store_pb2

    store = read_metadata_store(output_dir)
    try:
        node = store.get_context_by_type_and_name("node", f"{pipeline_name}.{producer}")
        artifact_type = store.get_artifact_type(type_name)
    except errors.NotFoundError:  # no run has recorded such a node or type yet
        return None
    if node is None:
        return None
    executions = [execution.id for execution in store.get_executions_by_context(node.id)]
    output_ids = {event.artifact_id for event in store.get_events_by_execution_ids(executions)
                  if event.type == metadata_store_pb2.Event.OUTPUT}
    live = [artifact for artifact in store.get_artifacts_by_id(sorted(output_ids))
            if artifact.type_id == artifact_type.id
            and artifact.state == metadata_store_pb2.Artifact.LIVE]
    return max(live, key=lambda artifact: artifact.id).uri if live else None


def latest_pushed_model(output_dir: str) -> Optional[str]:
    """The version directory of the newest LIVE pushed model, or None when nothing was pushed."""
    store = read_metadata_store(output_dir)
    pushed = [artifact for artifact in store.get_artifacts_by_type("PushedModel")
              if artifact.custom_properties["pushed"].int_value == 1]
    if not pushed:
        return None
    return max(pushed, key=lambda artifact: artifact.id).custom_properties[
        "pushed_destination"].string_value


def _print_indented(lines) -> None:
    for line in lines:
        print(f"  {line}")


def print_outputs(pipeline_config: config_lib.PipelineConfig) -> None:
    """Where each stage's newest output is, with what the stage says about it."""
    from components.evaluation import summary as evaluation_summary
    from components.ingestion import summary as ingestion_summary
    from components.serving import summary as serving_summary
    from components.trainer import summary as trainer_summary
    from components.transform import summary as transform_summary

    output_dir = os.path.abspath(pipeline_config.runtime.output_dir)

    def latest(type_name: str, producer: str) -> Optional[str]:
        return latest_artifact_uri(output_dir, type_name, producer, pipeline_config.runtime.pipeline_name)

    print(f"Data: {pipeline_config.data.data_dir}")
    examples_uri = latest("Examples", "Flickr8kExampleGen")
    print(f"Examples: {examples_uri}")
    if examples_uri:
        _print_indented(ingestion_summary.describe(examples_uri))
    print(f"Statistics: {latest('ExampleStatistics', 'StatisticsGen')}")
    transform_uri = latest("TransformGraph", "Transform")
    print(f"Transform graph: {transform_uri}")
    if transform_uri:
        _print_indented(transform_summary.describe(transform_uri))
    print(f"Trained model: {latest('Model', 'Trainer')}")
    run_uri = latest("ModelRun", "Trainer")
    if run_uri:
        _print_indented(trainer_summary.describe(run_uri))
    evaluation_uri = latest("ModelEvaluation", "CaptionEvaluator")
    print(f"Evaluation: {evaluation_uri}")
    if evaluation_uri:
        _print_indented(evaluation_summary.describe(evaluation_uri))
    pushed = latest_pushed_model(output_dir)
    print(f"Pushed SavedModel: {pushed or 'none (the model was not blessed)'}")
    if pushed:
        _print_indented(serving_summary.describe(pushed))
    print(f"ML Metadata: {metadata_path(output_dir)}")
