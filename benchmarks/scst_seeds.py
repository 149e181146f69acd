"""Does the self-critical phase pay on the demo? Test BLEU-4 and CIDEr over seeds, side by side.

Runs on the outputs of a finished ``make pipeline-local`` (its ingested examples and Transform
output, found in ML Metadata), the Trainer's own ``run_fn.train`` per seed:

1. the default training with ``trainer.scst_epochs`` SCST epochs and the greedy baseline; the
   cross-entropy weights it starts from are kept (a callback after early stopping's restore);
2. the same SCST phase with the ``sample_mean`` baseline, from the same cross-entropy weights
   (placed where a killed Trainer's finished cross-entropy phase sits, so ``run_fn`` resumes
   from them instead of training again);

and scores the three models (cross-entropy only, + SCST greedy, + SCST sample mean) with the
evaluator's ``evaluate_model`` (beam search as the pipeline; no METEOR), dev and test::

    make pipeline-local OUTPUT_DIR=/tmp/demo
    .venv/bin/python -m benchmarks.scst_seeds --output_dir /tmp/demo --seeds 1 2 3 4
"""

import dataclasses
import json
import os
import sys
import tempfile
import time

import numpy as np

from benchmarks import demo_runs


def _cross_entropy_history(history: dict) -> dict:
    scst_keys = {"scst_loss", "scst_reward", "dev_cider", "dev_cider_before", "best_epoch",
                 "exported_weights"}
    return {**{key: value for key, value in history.items() if key not in scst_keys}, "best_epoch": 0}


def measure_seed(output_dir: str, seed: int, scst_epochs: int, work_dir: str) -> dict:
    import keras
    import tensorflow as tf

    from components import config as config_lib
    from components.trainer import export, run_fn
    from components.trainer import model as model_lib

    examples, transform_graph, transformed = demo_runs.demo_run(output_dir)
    base = config_lib.PipelineConfig()

    class KeepCrossEntropyWeights(keras.callbacks.Callback):
        weights = None

        def on_train_end(self, logs=None):
            KeepCrossEntropyWeights.weights = [
                self.model.get_layer(name).get_weights()
                for name in (model_lib.IMAGE_ENCODER, model_lib.TEXT_DECODER)]

    def train(baseline: str, name: str, callbacks=()) -> tuple:
        config = dataclasses.replace(base, trainer=dataclasses.replace(
            base.trainer, seed=seed, scst_epochs=scst_epochs, scst_baseline=baseline))
        out = os.path.join(work_dir, name)
        started = time.monotonic()
        history = run_fn.train(config, [os.path.join(transformed, "Split-train", "*")],
                               [os.path.join(transformed, "Split-dev", "*")], transform_graph,
                               os.path.join(out, "run"), os.path.join(out, "serving"),
                               os.path.join(out, "backup"), callbacks)
        return out, history, time.monotonic() - started

    def scores(serving_dir: str) -> dict:
        return demo_runs.model_scores(serving_dir, examples, base.evaluation)

    greedy_dir, greedy_history, greedy_s = train("greedy", "greedy", [KeepCrossEntropyWeights()])
    cross_entropy = keras.saving.load_model(os.path.join(greedy_dir, "run", run_fn.DECODER_FILE))
    for name, weights in zip((model_lib.IMAGE_ENCODER, model_lib.TEXT_DECODER),
                             KeepCrossEntropyWeights.weights, strict=True):
        cross_entropy.get_layer(name).set_weights(weights)
    cross_entropy_serving = os.path.join(work_dir, "cross_entropy_serving")
    export.export_saved_model(cross_entropy, transform_graph, base, cross_entropy_serving)

    sample_mean_backup = os.path.join(work_dir, "sample_mean", "backup")
    finished = sample_mean_backup + run_fn.SELF_CRITICAL_BACKUP_SUFFIX
    tf.io.gfile.makedirs(finished)
    cross_entropy.save_weights(os.path.join(finished, run_fn.CROSS_ENTROPY_WEIGHTS))
    with open(os.path.join(finished, run_fn.CROSS_ENTROPY_HISTORY), "w", encoding="utf-8") as stream:
        json.dump(_cross_entropy_history(greedy_history), stream)
    sample_mean_dir, sample_mean_history, sample_mean_s = train("sample_mean", "sample_mean")

    epochs = len(greedy_history["loss"])
    return {
        "seed": seed, "cross_entropy_epochs": epochs,
        "cross_entropy": scores(cross_entropy_serving),
        "scst_greedy": {**scores(os.path.join(greedy_dir, "serving")),
                        "kept_scst_epoch": greedy_history["best_epoch"],
                        "dev_cider_d_greedy": [greedy_history["dev_cider_before"],
                                               *greedy_history["dev_cider"]]},
        "scst_sample_mean": {**scores(os.path.join(sample_mean_dir, "serving")),
                             "kept_scst_epoch": sample_mean_history["best_epoch"],
                             "dev_cider_d_greedy": [sample_mean_history["dev_cider_before"],
                                                    *sample_mean_history["dev_cider"]]},
        "trainer_s_cross_entropy_plus_scst": round(greedy_s, 1),
        "scst_phase_s": round(sample_mean_s, 1),
    }


def main(argv=None) -> int:
    parser = demo_runs.argument_parser("python -m benchmarks.scst_seeds", __doc__, "scst_seeds.json")
    parser.add_argument("--scst_epochs", type=int, default=5)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    results = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as work_dir:
            results.append(measure_seed(args.output_dir, seed, args.scst_epochs, work_dir))
        print(json.dumps(results[-1]), flush=True)
    summary = {row: {metric: round(float(np.mean([result[row][metric] for result in results])), 4)
                     for metric in demo_runs.SCORES}
               for row in ("cross_entropy", "scst_greedy", "scst_sample_mean")}
    print(json.dumps({"mean_over_seeds": summary, "seeds": args.seeds}, indent=1))
    demo_runs.write_results(args.results, {"runs": results, "mean_over_seeds": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
