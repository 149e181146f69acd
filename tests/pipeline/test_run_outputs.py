"""A finished run's summary finds each stage's output in ML Metadata by the component that
produced it, whatever the artifact's path says."""

from ml_metadata import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipeline import run_outputs

PIPELINE = "flickr8k-captioning"


def _store(output_dir):
    path = run_outputs.metadata_path(str(output_dir))
    (output_dir / "metadata").mkdir(parents=True)
    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = path
    connection.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    return metadata_store.MetadataStore(connection)


def _record(store, node, type_name, uri, state=metadata_store_pb2.Artifact.LIVE):
    """One execution of component ``node`` that output one artifact at ``uri``."""
    node_type = store.put_context_type(metadata_store_pb2.ContextType(name="node"))
    execution_type = store.put_execution_type(metadata_store_pb2.ExecutionType(name=node))
    artifact_type = store.put_artifact_type(metadata_store_pb2.ArtifactType(name=type_name))
    contexts = store.get_contexts_by_type("node")
    context = next((context for context in contexts if context.name == f"{PIPELINE}.{node}"), None)
    if context is None:
        context = metadata_store_pb2.Context(type_id=node_type, name=f"{PIPELINE}.{node}")
        context.id = store.put_contexts([context])[0]
    execution = metadata_store_pb2.Execution(type_id=execution_type)
    artifact = metadata_store_pb2.Artifact(type_id=artifact_type, uri=uri, state=state)
    event = metadata_store_pb2.Event(type=metadata_store_pb2.Event.OUTPUT)
    store.put_execution(execution, [(artifact, event)], [context])


def test_the_newest_live_output_of_the_named_component_whatever_its_path(tmp_path):
    store = _store(tmp_path)
    # Paths that name no component (a custom pipeline root, a gs:// bucket) or the wrong one.
    _record(store, "Trainer", "Model", "/models/first")
    _record(store, "Trainer", "Model", "/models/second")
    _record(store, "Trainer", "Model", "/models/failed", state=metadata_store_pb2.Artifact.PENDING)
    _record(store, "Tuner", "Model", "/pipeline_root/Trainer/Model/99")  # another producer
    assert run_outputs.latest_artifact_uri(str(tmp_path), "Model", "Trainer") == "/models/second"
    tuner_model = run_outputs.latest_artifact_uri(str(tmp_path), "Model", "Tuner")
    assert tuner_model == "/pipeline_root/Trainer/Model/99"
    assert run_outputs.latest_artifact_uri(str(tmp_path), "Model", "Pusher") is None
    assert run_outputs.latest_artifact_uri(str(tmp_path), "Examples", "Trainer") is None
    assert run_outputs.latest_artifact_uri(str(tmp_path), "Model", "Trainer", "other-pipeline") is None
