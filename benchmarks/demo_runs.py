"""What the seed benchmarks (``scst_seeds``, ``selection_seeds``) share: the artifacts of a
finished ``make pipeline-local`` they train on, and a trained model's dev and test scores."""

from typing import NamedTuple

# The keys of model_scores, in its order.
SCORES = ("dev_BLEU-4", "dev_CIDEr", "test_BLEU-4", "test_CIDEr")


class DemoRun(NamedTuple):
    examples: str  # the ingested examples (the evaluator reads their captions)
    transform_graph: str
    transformed_examples: str


def demo_run(output_dir: str) -> DemoRun:
    """The latest ingestion and Transform outputs under a ``make pipeline-local`` OUTPUT_DIR."""
    from pipeline import run_outputs

    run = DemoRun(run_outputs.latest_artifact_uri(output_dir, "Examples", "Flickr8kExampleGen"),
                  run_outputs.latest_artifact_uri(output_dir, "TransformGraph", "Transform"),
                  run_outputs.latest_artifact_uri(output_dir, "Examples", "Transform"))
    if not all(run):
        raise SystemExit(f"No finished make pipeline-local under {output_dir}.")
    return run


def model_scores(serving_dir: str, examples: str, evaluation) -> dict:
    """Dev and test BLEU-4 and CIDEr of a serving SavedModel, by the evaluator's
    ``evaluate_model`` (its beam search; METEOR off)."""
    import dataclasses

    import tensorflow as tf

    from components.evaluation import evaluator

    settings = dataclasses.replace(evaluation, with_meteor=False, splits=("dev", "test"))
    splits = evaluator.evaluate_model(tf.saved_model.load(serving_dir), examples, settings)
    return {f"{split}_{metric}": round(splits[split]["metrics"][evaluator.MODEL_ROW][metric], 4)
            for split in ("dev", "test") for metric in ("BLEU-4", "CIDEr")}


def argument_parser(prog: str, description: str, results_file: str):
    """The options every seed benchmark takes: the demo run, the seeds, where results go."""
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", required=True, help="a finished make pipeline-local's OUTPUT_DIR")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    parser.add_argument("--results", default=f"outputs/bench/{results_file}")
    return parser


def write_results(path: str, document: dict) -> None:
    import json
    import os

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(document, stream, indent=1)
