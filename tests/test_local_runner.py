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


COMPONENTS = ["Flickr8kExampleGen", "StatisticsGen", "ImportSchemaGen", "ExampleValidator",
              "ExampleValidationGate", "Transform", "Trainer", "Pusher"]


def _executions(output_dir):
    """(node id, state) of every execution, oldest first; the node id is TFX's component id."""
    from ml_metadata.proto import metadata_store_pb2

    store = local_runner.read_metadata_store(str(output_dir))
    node_type = store.get_context_type("node").id
    rows = []
    for execution in sorted(store.get_executions(), key=lambda execution: execution.id):
        node = [context for context in store.get_contexts_by_execution(execution.id)
                if context.type_id == node_type][0]
        rows.append((node.name.rsplit(".", 1)[-1],
                     metadata_store_pb2.Execution.State.Name(execution.last_known_state)))
    return rows


@pytest.mark.e2e
def test_local_pipeline_runs_caches_and_matches_the_standalone_job(tmp_path, capsys, monkeypatch):
    from components import flickr8k_gen
    from pipeline import fingerprints

    argv = ["run", f"--output_dir={tmp_path}", "--set", "data.demo_num_images=20",
            "--set", "runtime.direct_num_workers=1", "--set", "trainer.epochs=2",
            "--set", "trainer.per_replica_batch_size=16"]
    assert local_runner.main(argv) == 0
    printed = capsys.readouterr().out
    assert "pairs read 100 = accepted 100 + rejected 0" in printed
    assert "Transform graph: " in printed and "vocabulary: " in printed
    assert "Trained model: " in printed and "dev loss" in printed
    assert "mean caption log-probability greedy" in printed
    pushed = local_runner.latest_pushed_model(str(tmp_path))
    assert pushed and os.path.dirname(pushed) == str(tmp_path / "serving_model")
    assert f"Pushed SavedModel: {pushed}" in printed
    assert os.path.exists(os.path.join(pushed, "saved_model.pb"))
    first = _executions(tmp_path)
    assert [state for _, state in first] == ["COMPLETE"] * len(COMPONENTS)
    examples_uri = local_runner.latest_artifact_uri(str(tmp_path), "Examples", "Flickr8kExampleGen")

    # Nothing changed: every component is a cache hit.
    assert local_runner.main(argv) == 0
    second = _executions(tmp_path)[len(first):]
    assert [state for _, state in second] == ["CACHED"] * len(COMPONENTS)

    # Changed preprocessing code: Transform re-runs, everything before it is cached.
    real_fingerprint = fingerprints.code_fingerprint
    monkeypatch.setattr(fingerprints, "code_fingerprint",
                        lambda modules: "edited-" + real_fingerprint(modules))
    assert local_runner.main(argv) == 0
    third = dict(_executions(tmp_path)[2 * len(first):])
    assert third.pop("Transform") == "COMPLETE" and third.pop("Trainer") == "COMPLETE"
    assert third.pop("Pusher") == "COMPLETE"
    assert set(third.values()) == {"CACHED"}
    monkeypatch.undo()

    # The standalone Beam job writes the same records as the component.
    standalone_dir = tmp_path / "standalone"
    data_dir = tmp_path / "demo_data" / "seed8_n20"
    assert flickr8k_gen.main([f"--data_dir={data_dir}", f"--output_dir={standalone_dir}",
                              "--runner=DirectRunner"]) == 0
    assert records_digest(str(standalone_dir)) == records_digest(examples_uri)

    # Changed input data re-runs ingestion instead of hitting the cache: the first
    # caption line duplicated over the second is now rejected as a duplicate.
    token_path = data_dir / "Flickr8k_text" / "Flickr8k.token.txt"
    lines = token_path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[1] = lines[1].split("\t")[0] + "\t" + lines[0].split("\t")[1]
    token_path.write_text("".join(lines), encoding="utf-8")
    capsys.readouterr()
    assert local_runner.main(argv) == 0
    fourth = dict(_executions(tmp_path)[3 * len(first):])
    assert fourth["Flickr8kExampleGen"] == "COMPLETE" and fourth["Transform"] == "COMPLETE"
    assert "pairs read 100 = accepted 99 + rejected 1 {'duplicate_caption': 1}" in capsys.readouterr().out


def test_code_fingerprint_changes_with_the_source(tmp_path, monkeypatch):
    from pipeline import fingerprints

    module = tmp_path / "user_code_probe.py"
    module.write_text("def preprocessing_fn(inputs):\n    return inputs\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = fingerprints.code_fingerprint(["user_code_probe"])
    assert before == fingerprints.code_fingerprint(["user_code_probe"])
    import importlib
    import sys

    module.write_text("def preprocessing_fn(inputs):\n    return dict(inputs)\n")
    sys.modules.pop("user_code_probe")
    importlib.invalidate_caches()
    assert fingerprints.code_fingerprint(["user_code_probe"]) != before
