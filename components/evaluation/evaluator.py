"""CaptionEvaluator: caption metrics of the exported model, image-blind baselines, the blessing
that gates the Pusher, and the HTML report.

TFX's Evaluator (TFMA) computes metrics from a model's predictions of labels;
turning generated captions into corpus BLEU/METEOR/CIDEr over five references
per image is not something TFMA's metric interface expresses, so this is a
custom component. It reads only what serving has: the SavedModel's
signatures (``caption_features_beam``), plus the ingested examples (features
and raw reference captions) and the Trainer's run (history, Keras model for
attention maps).

For each split in ``evaluation.splits``, the model's captions (beam search,
``evaluation.beam_width``; greedy as well, for the log-probability
comparison) are scored with pycocoevalcap, next to two image-blind baselines:
the model fed all-zero feature maps, and the most frequent train caption for
every image. The model is **blessed** when, on ``evaluation.bless_split``:

* ``bless_metric`` ≥ ``bless_threshold``;
* it beats both image-blind baselines;
* it is not worse than the latest blessed model (``baseline_model``, from a
  ``LatestBlessedModelStrategy`` resolver) by more than ``max_regression``.

Outputs: ``evaluation/metrics.json`` and ``evaluation/report.html``; the
``ModelBlessing`` with TFX's ``blessed`` / ``current_model_id`` properties and a
``BLESSED`` or ``NOT_BLESSED`` file.
"""

import collections
import contextlib
import json
import math
import os
from typing import Optional

import tensorflow as tf
from absl import logging
from tfx import v1 as tfx
from tfx.components.evaluator import executor as evaluator_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import artifact_utils, component_spec, standard_artifacts
from tfx.utils import path_utils

from components import caption_text
from components import config as config_lib
from components.evaluation import caption_metrics, split_captions

METRICS_FILE = "metrics.json"
REPORT_FILE = "report.html"
MODEL_ROW, ZERO_FEATURES_ROW, FREQUENT_CAPTION_ROW, BASELINE_MODEL_ROW = (
    "model", "image-blind: zero features", "image-blind: most frequent train caption",
    "latest blessed model")


def most_frequent_caption(examples_dir: str) -> str:
    """The most frequent normalised train caption (ties: alphabetically first)."""
    counts = collections.Counter(
        caption_text.normalize_python(reference)
        for _, _, references in split_captions.split_records(examples_dir, "train")
        for reference in references)
    if not counts:
        raise ValueError(f"No train captions under {examples_dir}.")
    return min(counts.items(), key=lambda item: (-item[1], item[0]))[0]


def evaluate_model(saved_model, examples_dir: str, settings: config_lib.EvaluationConfig,
                   baseline_saved_model=None, meteor=None) -> dict:
    """Metrics per split for the model, the baselines and (bless split) the latest blessed model.
    ``meteor``: a running METEOR scorer (``caption_metrics.running_meteor``) for every split, or
    one is started here, before the splits decode, so its JVM loads meanwhile."""
    with contextlib.ExitStack() as stack:
        if settings.with_meteor and meteor is None:
            meteor = stack.enter_context(caption_metrics.running_meteor())
        return _evaluate_splits(saved_model, examples_dir, settings, baseline_saved_model, meteor)


def _evaluate_splits(saved_model, examples_dir, settings, baseline_saved_model, meteor) -> dict:
    frequent = most_frequent_caption(examples_dir)
    splits = {}
    for split in settings.splits:
        records = list(split_captions.split_records(examples_dir, split))
        beam = split_captions.decode_records(saved_model, records, settings.beam_width)
        greedy = split_captions.decode_records(saved_model, records, 0)
        blind = split_captions.decode_image_blind(saved_model, records, settings.beam_width)
        candidate_sets = {
            MODEL_ROW: {row.image_id: row.caption for row in beam},
            ZERO_FEATURES_ROW: {row.image_id: row.caption for row in blind},
            FREQUENT_CAPTION_ROW: {row.image_id: frequent for row in beam},
        }
        if baseline_saved_model is not None and split == settings.bless_split:
            baseline_rows = split_captions.decode_records(baseline_saved_model, records,
                                                      settings.beam_width)
            candidate_sets[BASELINE_MODEL_ROW] = {row.image_id: row.caption for row in baseline_rows}
        del records  # the split's feature maps; only captions are kept
        metrics = caption_metrics.score_many({row.image_id: row.references for row in beam},
                                             candidate_sets, settings.with_meteor, meteor)
        splits[split] = {
            "images": len(beam),
            "metrics": metrics,
            "mean_log_probability": {
                "greedy": split_captions.mean_log_probability(greedy),
                f"beam_{settings.beam_width}": split_captions.mean_log_probability(beam)},
            "image_blind_captions": {"zero_features": blind[0].caption if blind else "",
                                     "most_frequent_train_caption": frequent},
            "captions": [{"image_id": row.image_id, "caption": row.caption,
                          "greedy_caption": greedy_row.caption,
                          "log_probability": row.log_probability, "references": row.references,
                          "tokens": row.tokens}
                         for row, greedy_row in zip(beam, greedy, strict=True)],
        }
    return splits


def blessing_decision(splits: dict, settings: config_lib.EvaluationConfig,
                      evaluated_again: bool = False):
    """(blessed, reasons): the rules of the module docstring, each reason a sentence.
    ``evaluated_again``: the latest blessed model is this very model (a rerun of the evaluator),
    so there is no other blessed model to compare with, and the reason says so."""
    if settings.bless_split not in splits:
        raise ValueError(f"evaluation.bless_split {settings.bless_split!r} is not among the "
                         f"evaluated splits {list(splits)}.")
    metrics = splits[settings.bless_split]["metrics"]
    name = settings.bless_metric
    if name not in metrics[MODEL_ROW]:
        raise ValueError(f"evaluation.bless_metric {name!r} is not one of {sorted(metrics[MODEL_ROW])}.")
    value = metrics[MODEL_ROW][name]
    # Every comparison with NaN is false, so without this a NaN metric or bound would bless.
    not_finite = [f"{label} is {number}" for label, number in (
        [(f"{name} of the model", value), ("evaluation.bless_threshold", settings.bless_threshold),
         ("evaluation.max_regression", settings.max_regression)]
        + [(f"{name} of the {row} baseline", metrics[row][name])
           for row in (ZERO_FEATURES_ROW, FREQUENT_CAPTION_ROW, BASELINE_MODEL_ROW) if row in metrics])
        if not math.isfinite(number)]
    if not_finite:
        return False, [f"not blessed: {problem}, not a finite number" for problem in not_finite]
    reasons, blessed = [], True
    if value < settings.bless_threshold:
        blessed = False
        reasons.append(f"{name} {value:.4f} is below the threshold {settings.bless_threshold:.4f}")
    for row in (ZERO_FEATURES_ROW, FREQUENT_CAPTION_ROW):
        if value <= metrics[row][name]:
            blessed = False
            reasons.append(f"{name} {value:.4f} does not beat the {row} baseline "
                           f"({metrics[row][name]:.4f})")
    if BASELINE_MODEL_ROW in metrics:
        baseline = metrics[BASELINE_MODEL_ROW][name]
        if value < baseline - settings.max_regression:
            blessed = False
            reasons.append(f"{name} {value:.4f} is more than {settings.max_regression:.4f} below the "
                           f"latest blessed model's {baseline:.4f}")
    if blessed:
        reasons.append(f"{name} {value:.4f} on {settings.bless_split}: at or above the threshold "
                       f"{settings.bless_threshold:.4f}, above both image-blind baselines"
                       + (", not worse than the latest blessed model" if BASELINE_MODEL_ROW in metrics
                          else "; this model is already the latest blessed model (evaluated again)"
                          if evaluated_again else "; no earlier blessed model to compare with"))
    return blessed, reasons


def metrics_table(splits: dict) -> str:
    """A plain-text table of every split's metrics, for the logs."""
    lines = []
    for split, result in splits.items():
        lines.append(f"{split} ({result['images']} images)")
        header = f"  {'':42}" + "".join(f"{name:>9}" for name in caption_metrics.METRIC_NAMES)
        lines.append(header)
        for row, values in result["metrics"].items():
            lines.append(f"  {row:42}" + "".join(f"{values.get(name, float('nan')):9.4f}"
                                                  for name in caption_metrics.METRIC_NAMES))
    return "\n".join(lines)


def run_evaluation(examples_uri: str, model_uri: str, model_run_uri: str, evaluation_uri: str,
                   pipeline_config: config_lib.PipelineConfig,
                   baseline_model_uri: Optional[str] = None, evaluated_again: bool = False) -> dict:
    """Evaluates, decides, writes metrics.json and report.html; returns the metrics document."""
    from components.evaluation import report

    settings = pipeline_config.evaluation
    caption_metrics.check_java()
    with contextlib.ExitStack() as stack:
        # Started first: METEOR's JVM loads (~10 s) while the models load and the splits decode.
        meteor = stack.enter_context(caption_metrics.running_meteor()) if settings.with_meteor else None
        saved_model = tf.saved_model.load(model_uri)
        baseline = tf.saved_model.load(baseline_model_uri) if baseline_model_uri else None
        splits = evaluate_model(saved_model, examples_uri, settings, baseline, meteor)
    blessed, reasons = blessing_decision(splits, settings, evaluated_again)
    history = report.training_history(model_run_uri)
    document = {"blessed": blessed, "reasons": reasons, "bless_split": settings.bless_split,
                "bless_metric": settings.bless_metric, "beam_width": settings.beam_width,
                "baseline_model": baseline_model_uri or None, "splits": splits,
                # Which training phase and epoch produced the evaluated weights.
                "exported_weights": history.get("exported_weights")}
    tf.io.gfile.makedirs(evaluation_uri)
    with tf.io.gfile.GFile(os.path.join(evaluation_uri, METRICS_FILE), "w") as stream:
        json.dump(document, stream, indent=2)
    report_path = report.write_report(document, history, model_run_uri, examples_uri, pipeline_config,
                                      os.path.join(evaluation_uri, REPORT_FILE))
    logging.info("Caption metrics (beam width %d):\n%s", settings.beam_width, metrics_table(splits))
    logging.info("Model %s: %s", "BLESSED" if blessed else "NOT BLESSED", "; ".join(reasons))
    logging.info("Report: %s", report_path)
    return document


class CaptionEvaluatorSpec(component_spec.ComponentSpec):
    """The evaluator's inputs, outputs and parameters (``baseline_model`` from the resolver)."""

    PARAMETERS = {
        "pipeline_config": component_spec.ExecutionParameter(type=str),
        # Only part of the cache key.
        "code_fingerprint": component_spec.ExecutionParameter(type=str),
    }
    INPUTS = {
        "examples": component_spec.ChannelParameter(type=standard_artifacts.Examples),
        "model": component_spec.ChannelParameter(type=standard_artifacts.Model),
        "model_run": component_spec.ChannelParameter(type=standard_artifacts.ModelRun),
        "baseline_model": component_spec.ChannelParameter(type=standard_artifacts.Model,
                                                          optional=True),
    }
    OUTPUTS = {
        "evaluation": component_spec.ChannelParameter(type=standard_artifacts.ModelEvaluation),
        "blessing": component_spec.ChannelParameter(type=standard_artifacts.ModelBlessing),
    }


class Executor(evaluator_executor.Executor):
    """Scores the model's captions, blesses it or not, and writes the report.

    It subclasses TFX's Evaluator executor for one reason: TFX's Kubeflow v2 / Vertex entrypoint
    (``kubeflow_v2_run_executor``) rewrites a blessing's ``current_model_id`` and
    ``baseline_model_id`` from the numeric ids it hands executors to the artifacts' resource
    names only for Evaluator executors, and the compiled latest-blessed-model resolver looks the
    Model up by ``name == current_model_id``. Without it, on Vertex, no baseline model is ever
    found. Nothing of TFX's Evaluator (TFMA) runs: :meth:`Do` is this component's own.
    """

    def Do(self, input_dict, output_dict, exec_properties) -> None:  # noqa: N802 (TFX's name)
        config = config_lib.PipelineConfig.from_json(exec_properties["pipeline_config"])
        examples = artifact_utils.get_single_instance(input_dict["examples"])
        model = artifact_utils.get_single_instance(input_dict["model"])
        model_run = artifact_utils.get_single_instance(input_dict["model_run"])
        baseline_models = input_dict.get("baseline_model") or []
        baseline_model = baseline_models[0] if baseline_models else None
        evaluation = artifact_utils.get_single_instance(output_dict["evaluation"])
        blessing = artifact_utils.get_single_instance(output_dict["blessing"])
        baseline_uri = None
        if baseline_model is not None and baseline_model.id != model.id:
            baseline_uri = path_utils.serving_model_path(baseline_model.uri)
        document = run_evaluation(examples.uri, path_utils.serving_model_path(model.uri),
                                  model_run.uri, evaluation.uri, config, baseline_uri,
                                  evaluated_again=baseline_model is not None and baseline_uri is None)
        mark_blessing(blessing, document, model, baseline_model)


class CaptionEvaluator(base_component.BaseComponent):
    """Caption metrics, image-blind baselines, the blessing and the report (module docstring)."""

    SPEC_CLASS = CaptionEvaluatorSpec
    # A Beam executor spec because TFX's Evaluator executor is a Beam executor; no Beam job runs.
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(self, examples, model, model_run, pipeline_config: str, code_fingerprint: str,
                 baseline_model=None):
        super().__init__(spec=CaptionEvaluatorSpec(
            examples=examples, model=model, model_run=model_run, baseline_model=baseline_model,
            pipeline_config=pipeline_config, code_fingerprint=code_fingerprint,
            evaluation=tfx.dsl.Channel(type=standard_artifacts.ModelEvaluation),
            blessing=tfx.dsl.Channel(type=standard_artifacts.ModelBlessing)))


def mark_blessing(blessing, document: dict, model, baseline_model=None) -> None:
    """Sets the properties TFX's Pusher (``model_utils.is_model_blessed``) and
    ``LatestBlessedModelStrategy`` read, and writes a BLESSED / NOT_BLESSED file."""
    blessing.set_int_custom_property("blessed", int(document["blessed"]))
    blessing.set_int_custom_property("current_model_id", model.id)
    blessing.set_string_custom_property("current_model", model.uri)
    if baseline_model is not None:
        blessing.set_int_custom_property("baseline_model_id", baseline_model.id)
    tf.io.gfile.makedirs(blessing.uri)
    marker = "BLESSED" if document["blessed"] else "NOT_BLESSED"
    with tf.io.gfile.GFile(os.path.join(blessing.uri, marker), "w") as stream:
        stream.write("\n".join(document["reasons"]) + "\n")
