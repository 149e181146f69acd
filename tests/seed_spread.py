"""Measures a training test's outcome over seeds and CPU kernels, for the margins its asserts use.

A test that trains asserts on numbers that move with the seed and with the floating-point kernels
of the machine (oneDNN picks kernels by ISA; ``TF_ENABLE_ONEDNN_OPTS=0`` falls back to Eigen). Each
scenario below is the function a test calls with its one fixed seed; this script calls it with
many seeds, in a fresh process per kernel setting, under the tests' 2-logical-CPU set-up, and
prints every run and the spread of each metric. The spreads are written beside the asserts::

    .venv/bin/python -m tests.seed_spread overfit --seeds 10
    .venv/bin/python -m tests.seed_spread two_replica_training --seeds 10
"""

import argparse
import json
import os
import subprocess
import sys

from tests.paths import REPO_ROOT

SCENARIOS = {
    "overfit": "tests.trainer.test_model:overfit_small_batch",
    "two_replica_training": "tests.trainer.test_run_fn:two_replica_training",
}

_WORKER = """
import json, sys
from tests import conftest
conftest.pytest_configure(None)
import importlib
module_name, function_name = sys.argv[1].split(":")
scenario = getattr(importlib.import_module(module_name), function_name)
for seed in json.loads(sys.argv[2]):
    print("RESULT " + json.dumps({"seed": seed, **scenario(seed)}), flush=True)
"""


def run(scenario: str, seeds: list, onednn: str) -> list:
    environment = dict(os.environ, TF_ENABLE_ONEDNN_OPTS=onednn, TF_CPP_MIN_LOG_LEVEL="2")
    completed = subprocess.run([sys.executable, "-c", _WORKER, SCENARIOS[scenario], json.dumps(seeds)],
                               cwd=REPO_ROOT, env=environment, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise RuntimeError(f"{scenario} with TF_ENABLE_ONEDNN_OPTS={onednn} failed:\n"
                           f"{completed.stderr[-3000:]}")
    return [dict(json.loads(line[len("RESULT "):]), onednn=onednn)
            for line in completed.stdout.splitlines() if line.startswith("RESULT ")]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.seed_spread", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args(argv)
    results = []
    for onednn in ("1", "0"):
        for result in run(args.scenario, list(range(args.seeds)), onednn):
            print(json.dumps(result), flush=True)
            results.append(result)
    metrics = [name for name in results[0] if name not in ("seed", "onednn")]
    for name in metrics:
        values = [result[name] for result in results]
        print(f"{name}: min {min(values):.6g}  max {max(values):.6g}  over {len(values)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
