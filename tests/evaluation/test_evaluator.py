"""Tests of the caption evaluator: the blessing rules, metrics and report on a trained demo
model, blessing → Pusher (an unblessed model is not pushed, a blessed one is), and the HTML
report rendered in headless Chromium."""

import copy
import dataclasses
import html
import json
import os
import re
import shutil
import subprocess

import pytest
from tfx.proto import pusher_pb2
from tfx.types import standard_artifacts
from tfx.utils import proto_utils

from components import config as config_lib
from components.evaluation import caption_metrics, evaluator
from components.serving import pusher
from tests.evaluation import test_report_charts

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ZERO = dict.fromkeys(caption_metrics.METRIC_NAMES, 0.0)


def _document(model_bleu4, zero_features=0.05, frequent=0.1, latest_blessed=None):
    metrics = {evaluator.MODEL_ROW: dict(ZERO, **{"BLEU-4": model_bleu4}),
               evaluator.ZERO_FEATURES_ROW: dict(ZERO, **{"BLEU-4": zero_features}),
               evaluator.FREQUENT_CAPTION_ROW: dict(ZERO, **{"BLEU-4": frequent})}
    if latest_blessed is not None:
        metrics[evaluator.BASELINE_MODEL_ROW] = dict(ZERO, **{"BLEU-4": latest_blessed})
    return {"dev": {"metrics": metrics}}


SETTINGS = config_lib.EvaluationConfig(bless_threshold=0.2, max_regression=0.01)


@pytest.mark.parametrize("splits, blessed, reason", [
    (_document(0.3), True, "no earlier blessed model"),
    (_document(0.15), False, "below the threshold 0.2000"),
    (_document(0.3, frequent=0.3), False, "does not beat the image-blind: most frequent"),
    (_document(0.3, zero_features=0.35), False, "does not beat the image-blind: zero features"),
    (_document(0.3, latest_blessed=0.305), True, "not worse than the latest blessed model"),
    (_document(0.3, latest_blessed=0.32), False, "more than 0.0100 below the latest blessed"),
])
def test_blessing_rules(splits, blessed, reason):
    decision, reasons = evaluator.blessing_decision(splits, SETTINGS)
    assert decision is blessed
    assert any(reason in text for text in reasons), reasons


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("splits, settings, reason", [
    (_document(NAN), SETTINGS, "BLEU-4 of the model is nan"),
    (_document(INF), SETTINGS, "BLEU-4 of the model is inf"),
    (_document(0.3, frequent=NAN), SETTINGS, "most frequent train caption baseline is nan"),
    (_document(0.3, latest_blessed=NAN), SETTINGS, "latest blessed model baseline is nan"),
    (_document(0.3), dataclasses.replace(SETTINGS, bless_threshold=NAN), "bless_threshold is nan"),
    (_document(0.3), dataclasses.replace(SETTINGS, max_regression=NAN), "max_regression is nan"),
    (_document(0.3), dataclasses.replace(SETTINGS, bless_threshold=-INF), "bless_threshold is -inf"),
])
def test_non_finite_metric_or_bound_never_blesses(splits, settings, reason):
    # Each of these blessed before: every comparison with NaN is false.
    decision, reasons = evaluator.blessing_decision(splits, settings)
    assert decision is False
    assert any(reason in text and "not a finite number" in text for text in reasons), reasons


def test_a_model_evaluated_again_is_told_from_a_first_model():
    _, first = evaluator.blessing_decision(_document(0.3), SETTINGS)
    _, again = evaluator.blessing_decision(_document(0.3), SETTINGS, evaluated_again=True)
    assert "no earlier blessed model" in first[0] and "already the latest blessed model" not in first[0]
    assert "already the latest blessed model (evaluated again)" in again[0]
    assert "no earlier blessed model" not in again[0]


def test_unknown_bless_metric_or_split_is_a_clear_error():
    with pytest.raises(ValueError, match="bless_metric 'BLEU-5'"):
        evaluator.blessing_decision(_document(0.3), dataclasses.replace(SETTINGS, bless_metric="BLEU-5"))
    with pytest.raises(ValueError, match="bless_split 'test'"):
        evaluator.blessing_decision(_document(0.3), dataclasses.replace(SETTINGS, bless_split="test"))


@pytest.fixture(scope="module")
def evaluated(trained_demo_model, tmp_path_factory):
    output = tmp_path_factory.mktemp("evaluation")
    document = evaluator.run_evaluation(
        trained_demo_model["examples"], trained_demo_model["serving_model"],
        trained_demo_model["model_run"], str(output), trained_demo_model["config"])
    return document, output


@pytest.mark.slow
def test_metrics_document_has_every_split_row_and_metric(evaluated, trained_demo_model):
    document, output = evaluated
    saved = json.loads((output / evaluator.METRICS_FILE).read_text())
    assert saved == json.loads(json.dumps(document))
    dataset = trained_demo_model["dataset"]
    for split in ("dev", "test"):
        result = document["splits"][split]
        assert result["images"] == len(dataset.splits[split]) == len(result["captions"])
        assert set(result["metrics"]) == {evaluator.MODEL_ROW, evaluator.ZERO_FEATURES_ROW,
                                          evaluator.FREQUENT_CAPTION_ROW}
        for values in result["metrics"].values():
            assert set(values) == set(caption_metrics.METRIC_NAMES)
            assert all(0.0 <= values[name] <= 10.0 for name in values)
        assert all(len(row["references"]) == 5 for row in result["captions"])
        assert set(result["mean_log_probability"]) == {"greedy", "beam_3"}
    assert (document["blessed"], document["reasons"]) == evaluator.blessing_decision(
        document["splits"], trained_demo_model["config"].evaluation)


@pytest.mark.slow
def test_image_blind_baseline_is_the_model_on_zero_feature_maps(evaluated, trained_demo_model):
    """One zero map decoded once stands for every image: the same as decoding zeros per image."""
    import numpy as np
    import tensorflow as tf

    from components.evaluation import split_captions

    document, _ = evaluated
    saved_model = tf.saved_model.load(trained_demo_model["serving_model"])
    records = list(split_captions.split_records(trained_demo_model["examples"], "test"))
    zeroed = [(image_id, np.zeros_like(features), references)
              for image_id, features, references in records]
    for beam_width in (0, 3):
        per_image = split_captions.decode_records(saved_model, zeroed, beam_width)
        blind = split_captions.decode_image_blind(saved_model, records, beam_width)
        assert [(row.image_id, row.caption, row.tokens, row.references) for row in blind] == [
            (row.image_id, row.caption, row.tokens, row.references) for row in per_image]
        np.testing.assert_allclose([row.log_probability for row in blind],
                                   [row.log_probability for row in per_image], rtol=1e-4)
    assert (document["splits"]["test"]["image_blind_captions"]["zero_features"]
            == split_captions.decode_records(saved_model, zeroed[:1], 3)[0].caption)
    model_rows = split_captions.decode_records(saved_model, records, 3)
    assert [row["caption"] for row in document["splits"]["test"]["captions"]] == [
        row.caption for row in model_rows]


def _artifacts(root, blessed_document):
    model = standard_artifacts.Model()
    model.id, model.uri = 7, str(root / "model")
    serving = root / "model" / "Format-Serving"
    serving.mkdir(parents=True, exist_ok=True)
    (serving / "saved_model.pb").write_bytes(b"graph")
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(root / "blessing")
    evaluator.mark_blessing(blessing, blessed_document, model)
    return model, blessing


def _push(root, model, blessing):
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(root / "pushed")
    destination = proto_utils.proto_to_json(pusher_pb2.PushDestination(
        filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=str(root / "serving"))))
    pusher.AtomicPushExecutor().Do({"model": [model], "model_blessing": [blessing]},
                                   {"pushed_model": [pushed]}, {"push_destination": destination})
    return pushed.get_int_custom_property("pushed")


@pytest.mark.slow
def test_unblessed_model_is_not_pushed_and_blessed_one_is(evaluated, tmp_path):
    document, _ = evaluated
    strict = copy.deepcopy(document)
    strict["blessed"] = False  # as the real document says when it does not beat its baselines
    strict["reasons"] = ["BLEU-4 below the threshold"]
    model, blessing = _artifacts(tmp_path / "unblessed", strict)
    assert blessing.get_int_custom_property("blessed") == 0
    assert (tmp_path / "unblessed" / "blessing" / "NOT_BLESSED").exists()
    assert _push(tmp_path / "unblessed", model, blessing) == 0
    assert not (tmp_path / "unblessed" / "serving").exists()

    blessed = dict(document, blessed=True, reasons=["BLEU-4 above everything"])
    model, blessing = _artifacts(tmp_path / "blessed", blessed)
    assert blessing.get_int_custom_property("current_model_id") == 7
    assert _push(tmp_path / "blessed", model, blessing) == 1
    # One version; the Pusher's hidden .version-claims directory is not one.
    assert len([name for name in os.listdir(tmp_path / "blessed" / "serving") if name.isdigit()]) == 1


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs "
                                              "it: apt-get install chromium)")
def test_report_renders_in_headless_chromium(evaluated, tmp_path):
    document, output = evaluated
    report = output / evaluator.REPORT_FILE
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000"]
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", report.as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    loaded = re.search(r'data-images-loaded="(\d+)"', dom)
    total = re.search(r'data-images-total="(\d+)"', dom)
    assert loaded and total, "the page's load script did not run"
    samples = min(len(document["splits"]["test"]["captions"]), 6)
    words = sum(len(row["caption"].split()) for row in document["splits"]["test"]["captions"][:samples])
    assert int(total.group(1)) == samples + words  # one picture and one heatmap per word
    assert int(loaded.group(1)) == int(total.group(1)), "some images did not decode"
    assert dom.count('<table class="metrics">') == 2 and "BLEU-4" in dom and "CIDEr" in dom
    assert dom.count('<svg class="chart"') == 2
    # The legends as Chromium laid them out: inside the chart, crossed by no plotted line.
    for svg in re.findall(r'<svg class="chart".*?</svg>', dom, re.DOTALL):
        width = float(re.search(r'width="(\d+)"', svg).group(1))
        boxes = json.loads(html.unescape(re.search(r'data-legend-boxes="([^"]*)"', svg).group(1)))
        assert len(boxes) == len(test_report_charts.polylines(svg)) >= 2
        assert all(right <= width for _, _, right, _ in boxes), boxes
        assert test_report_charts.overlaps(svg, [tuple(box) for box in boxes]) == [], boxes
    screenshot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *flags, f"--screenshot={screenshot}", "--window-size=1200,2000",
                    report.as_uri()], capture_output=True, timeout=120, check=True)
    assert screenshot.stat().st_size > 20_000  # a rendered page, not a blank one


@pytest.mark.slow
def test_evaluator_reads_and_writes_its_artifacts_on_a_filesystem_that_is_not_the_local_disk(
        trained_demo_model):
    """Every artifact under TensorFlow's ram:// (on Vertex they are gs://): Python's glob found no
    examples there and the evaluator failed after the whole training."""
    from tests import ram_filesystem

    root = ram_filesystem.new_root("evaluator")
    artifacts = {}
    for key, artifact_type, local in (
            ("examples", standard_artifacts.Examples, trained_demo_model["examples"]),
            ("model", standard_artifacts.Model, trained_demo_model["serving_model"]),
            ("model_run", standard_artifacts.ModelRun, trained_demo_model["model_run"])):
        artifact = artifact_type()
        artifact.id = len(artifacts) + 1
        artifact.uri = f"{root}/{key}"
        # The Trainer's Model artifact holds the SavedModel under Format-Serving/.
        ram_filesystem.copy_tree(local, f"{artifact.uri}/Format-Serving" if key == "model"
                                 else artifact.uri)
        artifacts[key] = [artifact]
    evaluation, blessing = standard_artifacts.ModelEvaluation(), standard_artifacts.ModelBlessing()
    evaluation.uri, blessing.uri = f"{root}/evaluation", f"{root}/blessing"
    executor = evaluator.Executor(evaluator.Executor.Context(tmp_dir=f"{root}/tmp"))
    executor.Do(artifacts, {"evaluation": [evaluation], "blessing": [blessing]},
                {"pipeline_config": trained_demo_model["config"].to_json(), "code_fingerprint": ""})
    written = ram_filesystem.files_under(root)
    assert {"evaluation/metrics.json", "evaluation/report.html"} <= set(written)
    marker = "BLESSED" if blessing.get_int_custom_property("blessed") else "NOT_BLESSED"
    assert f"blessing/{marker}" in written
    document = json.loads(ram_filesystem.read_text(f"{root}/evaluation/metrics.json"))
    assert set(document["splits"]) == {"dev", "test"} and document["splits"]["test"]["captions"]
    assert blessing.get_int_custom_property("current_model_id") == artifacts["model"][0].id
