"""Tests of the local runner: config from the command line, and the pipeline end to end."""

import os
import re

import pytest

from pipeline import beam_workers, local_runner, run_outputs
from tests.ingestion.test_beam_job import records_digest


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


def test_bad_settings_are_one_paragraph_naming_each_with_no_traceback(tmp_path):
    import subprocess
    import sys

    from tests.paths import REPO_ROOT

    completed = subprocess.run(
        [sys.executable, "-m", "pipeline.local_runner", "run", f"--output_dir={tmp_path}",
         "--set", "trainer.epoch=5", "--set", "trainer.dropout_rate=1.5",
         "--set", "evaluation.beam_width=abc", "--set", "trainer.deterministic=yes"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 2 and completed.stdout == ""
    lines = completed.stderr.strip().splitlines()
    assert lines[0] == "Invalid configuration:" and len(lines) == 5, completed.stderr
    for expected in ("Unknown config key 'trainer.epoch'", "evaluation.beam_width='abc' is not a valid int",
                     "trainer.deterministic='yes' is not a valid bool (true or false)",
                     "trainer.dropout_rate=1.5: must be in [0, 1)"):
        assert any(expected in line for line in lines[1:]), (expected, completed.stderr)
    assert not os.path.exists(tmp_path / "logs")  # stopped before any run


def test_demo_data_generated_once(tmp_path):
    argv = ["demo-data", f"--output_dir={tmp_path}", "--set", "data.demo_num_images=5"]
    assert local_runner.main(argv) == 0
    token_path = tmp_path / "demo_data" / "seed8_n5" / "Flickr8k_text" / "Flickr8k.token.txt"
    first_mtime = os.path.getmtime(token_path)
    assert local_runner.main(argv) == 0
    assert os.path.getmtime(token_path) == first_mtime


@pytest.mark.parametrize("overrides", [
    ["data.format=karpathy"], ["data.format=coco"],
    ["data.format=coco", "data.karpathy_split_file=dataset_coco.json"]])
def test_the_demo_follows_data_format_into_the_coco_layout(tmp_path, overrides):
    from components.ingestion import beam_job

    argv = ["run", f"--output_dir={tmp_path}", "--set", "data.demo_num_images=12"]
    for assignment in overrides:
        argv += ["--set", assignment]
    pipeline_config = local_runner.resolve_data(local_runner.build_config(local_runner._parse_args(argv)))
    data = pipeline_config.data
    assert data.data_dir == str(tmp_path / "demo_data" / "coco_seed8_n12")
    assert sorted(os.listdir(os.path.join(data.data_dir, data.image_dir_name))) == ["train2014", "val2014"]
    index = beam_job.read_index(data.data_dir, data)
    summary = index.summary()
    assert summary["caption_lines_rejected"] == summary["split_lines_rejected"] == 0
    assert summary["captions_accepted"] == sum(5 + number % 3 for number in range(12))
    assert all(count > 0 for count in summary["images_per_split"].values())
    assert pipeline_config.transform.glove_path.startswith(data.data_dir)



def test_small_datasets_run_beam_in_process_large_ones_on_every_core(tmp_path, monkeypatch):
    """In-process below the measured break-even (make bench: ~780-2,200 images on 2 cores), one
    worker per core above it, COCO's sub-folders counted; an explicit worker count wins."""
    from components import config as config_lib

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    image_dir = tmp_path / "Flicker8k_Dataset"
    for folder, count in (("train2014", 500), ("val2014", 400)):
        (image_dir / folder).mkdir(parents=True)
        for number in range(count):
            (image_dir / folder / f"{number}.jpg").touch()
    data = config_lib.DataConfig(data_dir=str(tmp_path))
    assert beam_workers.count_image_files(data) >= beam_workers.IN_PROCESS_BELOW_IMAGES
    assert beam_workers.count_image_files(data, stop_at=10**6) == 900
    assert beam_workers.count_image_files(config_lib.DataConfig(data_dir=str(tmp_path / "none"))) is None

    runtime = config_lib.RuntimeConfig()
    large = beam_workers.beam_flag_values(runtime, beam_workers.count_image_files(data))
    assert (large["direct_running_mode"], large["direct_num_workers"]) == ("multi_processing", "4")
    small = beam_workers.beam_flag_values(runtime, 300)
    assert (small["direct_running_mode"], small["direct_num_workers"]) == ("in_memory", "1")
    unknown = beam_workers.beam_flag_values(runtime, None)
    assert unknown["direct_running_mode"] == "multi_processing"
    forced = beam_workers.beam_flag_values(config_lib.RuntimeConfig(direct_num_workers=2), 300)
    assert (forced["direct_running_mode"], forced["direct_num_workers"]) == ("multi_processing", "2")
    # On a GPU machine each worker loads its own ResNet50 on a GPU: at most one per GPU.
    one_gpu = beam_workers.beam_flag_values(runtime, 5000, gpus=1)
    assert (one_gpu["direct_running_mode"], one_gpu["direct_num_workers"]) == ("in_memory", "1")
    assert beam_workers.beam_flag_values(runtime, 5000, gpus=2)["direct_num_workers"] == "2"

COMPONENTS = ["Flickr8kExampleGen", "ImportSchemaGen", "latest_blessed_model_resolver", "StatisticsGen",
              "ExampleValidator", "ExampleValidationGate", "Transform", "Trainer", "CaptionEvaluator",
              "Pusher"]


def _live_models(output_dir):
    """How many Model artifacts ML Metadata holds as LIVE (published by a finished Trainer)."""
    from ml_metadata.proto import metadata_store_pb2

    models = run_outputs.read_metadata_store(str(output_dir)).get_artifacts_by_type("Model")
    return sum(model.state == metadata_store_pb2.Artifact.LIVE for model in models)


def _executions(output_dir):
    """(node id, state) of every execution, oldest first; the node id is TFX's component id."""
    from ml_metadata.proto import metadata_store_pb2

    store = run_outputs.read_metadata_store(str(output_dir))
    node_type = store.get_context_type("node").id
    rows = []
    for execution in sorted(store.get_executions(), key=lambda execution: execution.id):
        node = [context for context in store.get_contexts_by_execution(execution.id)
                if context.type_id == node_type][0]
        rows.append((node.name.rsplit(".", 1)[-1],
                     metadata_store_pb2.Execution.State.Name(execution.last_known_state)))
    return rows


def _node_lines(printed):
    """(node, ran|cached) of the console's per-node lines, in order."""
    return re.findall(r"^  (\w+) +(ran|cached) +[0-9.]+ s$", printed, re.MULTILINE)


def _assert_first_run_console(printed, output_dir):
    """The log's path, a line per node, the summary; TFX's INFO lines only in the log file."""
    log_path = re.search(r"^Log: (\S+\.log)$", printed, re.MULTILINE).group(1)
    assert os.path.dirname(log_path) == str(output_dir / "logs")
    assert _node_lines(printed) == [(name, "ran") for name in COMPONENTS]
    assert len(printed.splitlines()) <= 120 and "INFO:absl" not in printed, printed[:2000]
    with open(log_path, encoding="utf-8") as log:
        assert "Component Trainer is running." in log.read()


def _run(argv, output_dir):
    """Runs the pipeline; returns {component: state} of the executions this run added."""
    before = len(_executions(output_dir)) if (output_dir / "metadata").exists() else 0
    assert local_runner.main(argv) == 0
    return dict(_executions(output_dir)[before:])


@pytest.mark.e2e
def test_pipeline_caches_resumes_after_a_failure_and_matches_the_standalone_job(
        tmp_path, capsys, monkeypatch):
    """20 demo images, 2 epochs. A BLEU-4 threshold of 1.0 (every dev caption perfect) keeps the
    model unblessed whatever the seed and the CPU's kernels make of its training."""
    from components.trainer import inputs
    from pipeline import fingerprints, ingest

    argv = ["run", f"--output_dir={tmp_path}", "--set", "data.demo_num_images=20",
            "--set", "runtime.direct_num_workers=1", "--set", "trainer.epochs=2",
            "--set", "trainer.per_replica_batch_size=16", "--set", "evaluation.bless_threshold=1.0",
            # The evaluator runs 6 times here: no METEOR JVM, no test split, no report pictures
            # (the quality e2e keeps all three).
            "--set", "evaluation.with_meteor=false", "--set", "evaluation.splits=dev",
            "--set", "evaluation.report_images=0"]
    first = _run(argv, tmp_path)
    assert first == dict.fromkeys(COMPONENTS, "COMPLETE")
    printed = capsys.readouterr().out
    _assert_first_run_console(printed, tmp_path)
    assert "pairs read 100 = accepted 100 + rejected 0" in printed
    assert "Transform graph: " in printed and "vocabulary: " in printed
    assert "Trained model: " in printed and "dev loss" in printed
    assert "caption metrics (beam search" in printed and "mean caption log-probability greedy" in printed
    assert "NOT BLESSED: BLEU-4" in printed
    assert "Pushed SavedModel: none (the model was not blessed)" in printed
    assert run_outputs.latest_pushed_model(str(tmp_path)) is None
    assert not (tmp_path / "serving_model").exists()
    examples_uri = run_outputs.latest_artifact_uri(str(tmp_path), "Examples", "Flickr8kExampleGen")

    # Nothing changed: every component is a cache hit (no model was blessed, so the
    # evaluator's baseline input is still empty).
    second = _run(argv, tmp_path)
    assert ("Trainer", "cached") in _node_lines(capsys.readouterr().out)
    assert {name: state for name, state in second.items()
            if name != "latest_blessed_model_resolver"} == {
        name: "CACHED" for name in COMPONENTS if name != "latest_blessed_model_resolver"}

    # How Beam runs changes no result and re-runs nothing (the flags are not in any cache key).
    other_runtime = _run(argv + ["--set", "runtime.direct_num_workers=2"], tmp_path)
    other_runtime.pop("latest_blessed_model_resolver")
    assert set(other_runtime.values()) == {"CACHED"}, other_runtime

    # One field of each section in turn (the others as in the first run): exactly the stages
    # that read it and what follows them execute, counted in ML Metadata
    # (tests/pipeline/test_pipeline.py shows which exec properties each field reaches).
    after_transform = ["Trainer", "CaptionEvaluator", "Pusher"]
    for field, executed in [
            ("evaluation.beam_width=2", ["CaptionEvaluator", "Pusher"]),
            ("trainer.epochs=3", after_transform),
            ("export.beam_length_alpha=0.6", after_transform),
            ("transform.vocab_frequency_threshold=2", ["Transform", *after_transform]),
            ("features.max_image_pixels=30000000",
             [name for name in COMPONENTS
              if name not in ("ImportSchemaGen", "latest_blessed_model_resolver")])]:
        changed = _run(argv + ["--set", field], tmp_path)
        changed.pop("latest_blessed_model_resolver")
        assert {name for name, state in changed.items() if state == "COMPLETE"} == set(executed), field
        assert set(changed.values()) <= {"CACHED", "COMPLETE"} and len(changed) == len(COMPONENTS) - 1

    # Changed evaluator code (its digest) re-runs the evaluator and the Pusher only. The last
    # stage's digest keeps this step short; what follows a re-run stage re-runs (the runs above
    # show it from ML Metadata), and which stage digests an edited module reaches is shown by
    # test_pipeline.py's test_editing_a_module_changes_the_digest_of_exactly_the_stages_that_import_it.
    real_fingerprints = fingerprints.pipeline_code_fingerprints
    monkeypatch.setattr(fingerprints, "pipeline_code_fingerprints", lambda: {
        **real_fingerprints(), "evaluator": "edited-" + real_fingerprints()["evaluator"]})
    third = _run(argv, tmp_path)
    for name in ("CaptionEvaluator", "Pusher"):
        assert third.pop(name) == "COMPLETE", name
    third.pop("latest_blessed_model_resolver")
    assert set(third.values()) == {"CACHED"}
    monkeypatch.undo()

    # The standalone Beam job writes the same records as the component.
    standalone_dir = tmp_path / "standalone"
    data_dir = tmp_path / "demo_data" / "seed8_n20"
    assert ingest.main([f"--data_dir={data_dir}", f"--output_dir={standalone_dir}",
                              "--runner=DirectRunner"]) == 0
    assert records_digest(str(standalone_dir)) == records_digest(examples_uri)

    # Changed input data re-runs ingestion: the first caption line duplicated over the
    # second is now rejected as a duplicate. The Trainer is made to fail on this run.
    token_path = data_dir / "Flickr8k_text" / "Flickr8k.token.txt"
    lines = token_path.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[1] = lines[1].split("\t")[0] + "\t" + lines[0].split("\t")[1]
    token_path.write_text("".join(lines), encoding="utf-8")

    def failing_dataset(*args, **kwargs):
        raise RuntimeError("simulated Trainer crash")

    # Not run_fn itself: TFX reloads the run_fn module before calling it.
    monkeypatch.setattr(inputs, "make_dataset", failing_dataset)
    executions_before = len(_executions(tmp_path))
    live_models_before = _live_models(tmp_path)
    capsys.readouterr()
    assert local_runner.main(argv) == 1
    printed = capsys.readouterr().out
    failure = re.search(r"^FAILED in Trainer: RuntimeError: simulated Trainer crash\n"
                        r"The full log, with the traceback: (\S+)$", printed, re.MULTILINE)
    assert failure and "Traceback" not in printed, printed[-2000:]
    with open(failure.group(1), encoding="utf-8") as log:
        assert "Traceback (most recent call last)" in log.read()
    failed = dict(_executions(tmp_path)[executions_before:])
    assert failed["Flickr8kExampleGen"] == "COMPLETE" and failed["Trainer"] == "FAILED"
    assert "CaptionEvaluator" not in failed and "Pusher" not in failed
    # The failed execution published no model: the LIVE ones are those of the earlier runs.
    assert _live_models(tmp_path) == live_models_before
    assert live_models_before >= 5  # runs 1, trainer, export, transform, features
    monkeypatch.undo()

    # The rerun executes the failed Trainer and what follows; everything before is cached.
    capsys.readouterr()
    resumed = _run(argv, tmp_path)
    assert {name: resumed[name] for name in ("Flickr8kExampleGen", "StatisticsGen", "Transform")} == {
        "Flickr8kExampleGen": "CACHED", "StatisticsGen": "CACHED", "Transform": "CACHED"}
    assert resumed["Trainer"] == "COMPLETE" and resumed["CaptionEvaluator"] == "COMPLETE"
    assert "pairs read 100 = accepted 99 + rejected 1 {'duplicate_caption': 1}" in capsys.readouterr().out

    # A file that is not GloVe: the run stops in Transform with the reader's one-line reason.
    assert local_runner.main(argv + [f"--glove={token_path}"]) == 1
    assert re.search(r"^FAILED in Transform: .*GloveFormatError.*Flickr8k.token.txt:1 is not ",
                     capsys.readouterr().out, re.MULTILINE)


@pytest.mark.slow
def test_a_missing_data_folder_ends_in_one_paragraph_and_a_non_zero_exit(tmp_path, capsys):
    missing = tmp_path / "no_such_folder"
    assert local_runner.main(["run", f"--output_dir={tmp_path}", f"--data_dir={missing}"]) == 1
    printed = capsys.readouterr().out
    assert re.search(r"^FAILED in Flickr8kExampleGen: Flickr8kLayoutError: Required Flickr8k file not "
                     rf"readable: {re.escape(str(missing))}/Flickr8k_text/", printed, re.MULTILINE)
    assert len(printed.splitlines()) == 3 and "Traceback" not in printed, printed


@pytest.mark.e2e
def test_a_coco_layout_runs_end_to_end_through_the_official_annotation_files(tmp_path, capsys):
    """`make pipeline-local SET="data.format=coco data.karpathy_split_file=dataset_coco.json"` on
    the COCO-layout demo: image ids with folders, 5 to 7 captions, restval in train, every node
    runs (one short epoch: quality is the Flickr8k demo test's job)."""
    argv = ["run", f"--output_dir={tmp_path}", "--set", "data.format=coco",
            "--set", "data.karpathy_split_file=dataset_coco.json", "--set", "data.demo_num_images=24",
            "--set", "trainer.epochs=1", "--set", "trainer.per_replica_batch_size=8",
            "--set", "evaluation.with_meteor=false"]
    assert _run(argv, tmp_path) == {**dict.fromkeys(COMPONENTS, "COMPLETE"), "Pusher": "COMPLETE"}
    printed = capsys.readouterr().out
    captions = sum(5 + number % 3 for number in range(24))
    assert f"pairs read {captions} = accepted {captions} + rejected 0" in printed, printed
    assert re.search(r"  val2014/COCO_val2014_\d{12}\.jpg: '", printed), printed


QUALITY_EPOCHS = 10


@pytest.mark.e2e
def test_demo_pipeline_learns_is_blessed_pushed_and_reported(tmp_path, capsys):
    """`make pipeline-local` as shipped: the default demo dataset and configuration."""
    import json

    import tensorflow as tf

    from components.evaluation import evaluator
    from components.serving import captioner

    # The tests split the CPU into 2 replicas; 16 per replica keeps make pipeline-local's global
    # batch of 32 (one CPU replica), so the model trains with the same steps. Exactly
    # QUALITY_EPOCHS epochs (patience as long), so the test's time does not depend on when early
    # stopping fires; the best epoch's weights are still the ones restored.
    argv = ["run", f"--output_dir={tmp_path}", "--set", "trainer.per_replica_batch_size=16",
            "--set", f"trainer.epochs={QUALITY_EPOCHS}",
            "--set", f"trainer.early_stopping_patience={QUALITY_EPOCHS}"]
    first = _run(argv, tmp_path)
    assert first == dict.fromkeys(COMPONENTS, "COMPLETE")
    printed = capsys.readouterr().out
    _assert_first_run_console(printed, tmp_path)
    assert "pairs read 1500 = accepted 1500 + rejected 0" in printed
    evaluation_uri = run_outputs.latest_artifact_uri(str(tmp_path), "ModelEvaluation", "CaptionEvaluator")
    document = json.loads(open(os.path.join(evaluation_uri, evaluator.METRICS_FILE)).read())
    bleu4 = {split: {row: values["BLEU-4"] for row, values in result["metrics"].items()}
             for split, result in document["splits"].items()}
    assert f"{bleu4['test'][evaluator.MODEL_ROW]:9.4f}" in printed  # the table is printed
    # Issue 7's target: test BLEU-4 >= 0.6 and at least twice the image-blind baselines.
    # Measured with standardised features (30 images per split): model dev 0.93-0.96, test
    # 0.86-0.88 (early stopping, 11-22 epochs); with exactly 10 epochs, dev 0.92, test 0.90;
    # zero-feature baseline dev 0.39-0.42, test 0.32-0.33; most frequent caption 0.28-0.32.
    # Dev's zero-feature baseline is the higher one, so there it is held to 1.5x.
    for split, zero_feature_ratio in (("dev", 1.5), ("test", 2.0)):
        model_bleu4 = bleu4[split][evaluator.MODEL_ROW]
        assert model_bleu4 >= 0.6, (split, bleu4[split])
        assert model_bleu4 >= 2.0 * bleu4[split][evaluator.FREQUENT_CAPTION_ROW], (split, bleu4[split])
        assert model_bleu4 >= zero_feature_ratio * bleu4[split][evaluator.ZERO_FEATURES_ROW], (
            split, bleu4[split])
    assert document["blessed"] and "BLESSED: BLEU-4" in printed
    report = os.path.join(evaluation_uri, evaluator.REPORT_FILE)
    assert f"report: {report}" in printed and os.path.getsize(report) > 50_000

    pushed = run_outputs.latest_pushed_model(str(tmp_path))
    assert pushed and os.path.dirname(pushed) == str(tmp_path / "serving_model")
    assert f"Pushed SavedModel: {pushed}" in printed
    test_image = sorted((tmp_path / "demo_data" / "seed8_n300" / "Flicker8k_Dataset").iterdir())[0]
    assert captioner.main(["caption", "--model", str(tmp_path / "serving_model"), str(test_image)]) == 0
    caption = capsys.readouterr().out.strip().split("\t")[1]
    # The command line says what the pushed model's signature says (the captions' quality is
    # the BLEU floors' job: one image's greedy caption lost its colour word in one CI run while
    # test BLEU-4 was 0.896, so no single caption is asserted on).
    served = tf.saved_model.load(pushed).signatures["serving_default"](
        images=tf.constant([test_image.read_bytes()]))
    assert caption and caption == served["caption"].numpy()[0].decode()
    assert served["error"].numpy()[0] == b""

    # The first rerun re-runs the evaluator (its baseline input is now the blessed model) and
    # the Pusher, which does not push the same model again; the next rerun is fully cached.
    second = _run(argv, tmp_path)
    assert ("Trainer", "cached") in _node_lines(capsys.readouterr().out)
    second.pop("latest_blessed_model_resolver")
    assert {name: state for name, state in second.items() if state != "CACHED"} == {
        "CaptionEvaluator": "COMPLETE", "Pusher": "COMPLETE"}
    assert [name for name in os.listdir(tmp_path / "serving_model") if not name.startswith(".")] == [
        os.path.basename(pushed)]  # hidden: the Pusher's claims directory
    third = _run(argv, tmp_path)
    third.pop("latest_blessed_model_resolver")
    assert set(third.values()) == {"CACHED"}
