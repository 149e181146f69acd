"""Which epoch should the Trainer keep? ``trainer.select_on`` rules side by side over seeds.

Runs on the outputs of a finished ``make pipeline-local`` (its ingested examples and Transform
output, found in ML Metadata), the Trainer's own ``run_fn.train`` per seed and rule, the rest of
the config as shipped (early stopping's patience and start, no SCST):

- ``dev_loss``: early stopping watches dev loss and keeps its best epoch (the default);
- ``dev_bleu4`` / ``dev_cider``: the dev images are captioned greedily after every epoch and
  early stopping watches their BLEU-4 / CIDEr-D instead;

and scores each kept model with the evaluator's ``evaluate_model`` (beam search as the pipeline;
no METEOR), dev and test, with the training's seconds::

    make pipeline-local OUTPUT_DIR=/tmp/demo
    .venv/bin/python -m benchmarks.selection_seeds --output_dir /tmp/demo --seeds 1 2 3 4
"""

import dataclasses
import json
import os
import sys
import tempfile
import time

import numpy as np

from benchmarks import demo_runs

RULES = ("dev_loss", "dev_bleu4", "dev_cider")


def measure(output_dir: str, seed: int, rule: str, work_dir: str) -> dict:
    from components import config as config_lib
    from components.trainer import run_fn

    examples, transform_graph, transformed = demo_runs.demo_run(output_dir)
    base = config_lib.PipelineConfig()
    config = dataclasses.replace(base, trainer=dataclasses.replace(
        base.trainer, seed=seed, select_on=rule))
    started = time.monotonic()
    history = run_fn.train(config, [os.path.join(transformed, "Split-train", "*")],
                           [os.path.join(transformed, "Split-dev", "*")], transform_graph,
                           os.path.join(work_dir, "run"), os.path.join(work_dir, "serving"),
                           os.path.join(work_dir, "backup"))
    train_s = time.monotonic() - started
    return {"seed": seed, "rule": rule, "epochs": len(history["loss"]),
            "kept_epoch": history["exported_weights"]["epoch"],
            "train_s": round(train_s, 1),
            **demo_runs.model_scores(os.path.join(work_dir, "serving"), examples, base.evaluation)}


def main(argv=None) -> int:
    parser = demo_runs.argument_parser("python -m benchmarks.selection_seeds", __doc__,
                                       "selection_seeds.json")
    parser.add_argument("--rules", nargs="+", choices=RULES, default=list(RULES))
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    results = []
    for seed in args.seeds:
        for rule in args.rules:  # the rules of one seed next to each other in time
            with tempfile.TemporaryDirectory() as work_dir:
                results.append(measure(args.output_dir, seed, rule, work_dir))
            print(json.dumps(results[-1]), flush=True)
    summary = {rule: {key: round(float(np.mean([result[key] for result in results
                                                 if result["rule"] == rule])), 4)
                      for key in (*demo_runs.SCORES, "epochs", "kept_epoch", "train_s")}
               for rule in args.rules}
    print(json.dumps({"mean_over_seeds": summary, "seeds": args.seeds}, indent=1))
    demo_runs.write_results(args.results, {"runs": results, "mean_over_seeds": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
