"""Every command-line entry point answers ``--help`` at once and quietly: usage on stdout, nothing
on stderr, and TensorFlow never imported to parse flags (its import alone takes 5-10 s here and
prints start-up lines). Each entry point's real invocation is asserted on its whole stderr beside
its own tests (captioner, standalone ingestion, compile, bench; the local runner's console)."""

import subprocess
import sys

import pytest

from tests.paths import REPO_ROOT

ENTRY_POINTS = ["components.serving.captioner", "pipeline.local_runner", "pipeline.kubeflow_v2_runner",
                "pipeline.rehearsal", "pipeline.ingest", "pipeline.settings", "benchmarks.run"]

# `python -m <module> --help`, then whether TensorFlow got imported on the way (to stderr's end).
HELP_THEN_REPORT = """
import runpy, sys
module = sys.argv[1]
sys.argv = [module, "--help"]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
except SystemExit as exit:
    status = exit.code
print("tensorflow imported" if "tensorflow" in sys.modules else "", end="", file=sys.stderr)
sys.exit(status)
"""


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_help_is_quiet_and_does_not_load_tensorflow(module):
    completed = subprocess.run([sys.executable, "-c", HELP_THEN_REPORT, module], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=120, check=False)
    assert completed.returncode == 0 and completed.stderr == "", completed.stderr[-2000:]
    assert completed.stdout.startswith("usage: "), completed.stdout[:300]
