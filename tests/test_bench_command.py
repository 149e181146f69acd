"""``make bench`` (``python -m benchmarks.run``) is as quiet as ``make pipeline-local``: its stderr
holds nothing, with TensorFlow, Beam and tf.Transform loaded by the benchmark it runs."""

import json

import pytest

from components.ingestion import demo_data
from tests.commands import run_module

pytestmark = pytest.mark.slow


def _bench(*arguments):
    return run_module("benchmarks.run", *arguments)


def test_help_and_a_benchmark_that_loads_tensorflow_print_nothing_on_stderr(tmp_path):
    helped = _bench("--help")
    assert helped.returncode == 0 and helped.stderr == "" and "--only" in helped.stdout
    # The vocabulary benchmark runs tf.Transform's analyzers on Beam over a dataset's captions
    # (a 6-image demo here: the real ones take a minute).
    dataset = demo_data.generate(str(tmp_path / "demo"), 6, seed=8)
    ran = _bench("--only", "vocabulary", f"--data_dir={dataset.data_dir}",
                 f"--output_dir={tmp_path / 'bench'}")
    # No TensorFlow start-up lines, no Beam warnings, no AtomicFunction.__del__ traceback at exit.
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr[-3000:]
    assert ran.stdout.startswith("running the vocabulary benchmark\n"), ran.stdout[:500]
    (result,) = json.loads((tmp_path / "bench" / "bench.json").read_text())
    assert result["name"] in ran.stdout
