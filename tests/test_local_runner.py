"""Tests of the local runner: config from the command line, and the pipeline end to end."""

import os

import pytest

from pipeline import local_runner
from tests.test_ingestion import records_digest


def test_make_style_arguments_become_config_overrides(tmp_path):
    args = local_runner._parse_args([
        "run", f"--output_dir={tmp_path}", "--data_dir=/data/f8k", "--glove=/g/glove.6B.zip",
        "--resnet_weights=imagenet", "--set", "trainer.epochs=4"])
    pipeline_config = local_runner.build_config(args)
    assert pipeline_config.runtime.output_dir == str(tmp_path)
    assert pipeline_config.data.data_dir == "/data/f8k"
    assert pipeline_config.transform.glove_path == "/g/glove.6B.zip"
    assert pipeline_config.features.resnet_weights == "imagenet"
    assert pipeline_config.trainer.epochs == 4


def test_unknown_override_stops_the_run(tmp_path):
    args = local_runner._parse_args(["run", f"--output_dir={tmp_path}", "--set", "trainer.epoks=4"])
    with pytest.raises(ValueError, match="trainer.epoks"):
        local_runner.build_config(args)


def test_demo_data_generated_once(tmp_path):
    argv = ["demo-data", f"--output_dir={tmp_path}", "--set", "data.demo_num_images=5"]
    assert local_runner.main(argv) == 0
    token_path = tmp_path / "demo_data" / "seed8_n5" / "Flickr8k_text" / "Flickr8k.token.txt"
    first_mtime = os.path.getmtime(token_path)
    assert local_runner.main(argv) == 0
    assert os.path.getmtime(token_path) == first_mtime


def _execution_states(output_dir):
    from ml_metadata import metadata_store
    from ml_metadata.proto import metadata_store_pb2

    connection = metadata_store_pb2.ConnectionConfig()
    connection.sqlite.filename_uri = local_runner.metadata_path(str(output_dir))
    store = metadata_store.MetadataStore(connection)
    return [metadata_store_pb2.Execution.State.Name(execution.last_known_state)
            for execution in sorted(store.get_executions(), key=lambda execution: execution.id)]


@pytest.mark.e2e
def test_local_pipeline_runs_caches_and_matches_the_standalone_job(tmp_path, capsys):
    from components import flickr8k_gen

    argv = ["run", f"--output_dir={tmp_path}", "--set", "data.demo_num_images=12",
            "--set", "runtime.direct_num_workers=1"]
    assert local_runner.main(argv) == 0
    printed = capsys.readouterr().out
    assert "pairs read 60 = accepted 60 + rejected 0" in printed
    assert _execution_states(tmp_path) == ["COMPLETE", "COMPLETE"]
    examples_uri = local_runner.latest_artifact_uri(str(tmp_path), "Examples")

    # Nothing changed: every component is a cache hit.
    assert local_runner.main(argv) == 0
    assert _execution_states(tmp_path)[2:] == ["CACHED", "CACHED"]

    # The standalone Beam job writes the same records as the component.
    standalone_dir = tmp_path / "standalone"
    data_dir = tmp_path / "demo_data" / "seed8_n12"
    assert flickr8k_gen.main([f"--data_dir={data_dir}", f"--output_dir={standalone_dir}",
                              "--runner=DirectRunner"]) == 0
    assert records_digest(str(standalone_dir)) == records_digest(examples_uri)

    # Changed input data re-runs ingestion instead of hitting the cache.
    with open(data_dir / "Flickr8k_text" / "Flickr8k.token.txt", "a", encoding="utf-8") as stream:
        stream.write("demo8_00000.jpg#5\tA sixth caption .\n")
    assert local_runner.main(argv) == 0
    assert _execution_states(tmp_path)[4:] == ["COMPLETE", "COMPLETE"]
    assert "pairs read 61 = accepted 61" in capsys.readouterr().out
