"""The standalone ingestion job is as quiet as ``make pipeline-local``: its stderr holds nothing on
success and one line naming the file on a missing dataset file."""

import json

import pytest

from components.ingestion import demo_data
from tests.commands import run_module

pytestmark = pytest.mark.slow


def _ingest(*arguments):
    return run_module("pipeline.ingest", *arguments)


def test_help_is_instant_and_a_job_prints_only_its_summary(tmp_path):
    helped = _ingest("--help")
    assert helped.returncode == 0 and helped.stderr == "" and "--data_dir" in helped.stdout

    dataset = demo_data.generate(str(tmp_path / "demo"), 6, seed=8)
    ran = _ingest(f"--data_dir={dataset.data_dir}", f"--output_dir={tmp_path / 'examples'}")
    # No TensorFlow start-up lines, no Beam warnings, no AtomicFunction.__del__ traceback at exit.
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr[-3000:]
    summary = json.loads(ran.stdout)
    assert summary["pairs_read"] == summary["pairs_accepted"] + summary["pairs_rejected"] == 30


def test_a_missing_dataset_file_is_one_line_naming_it(tmp_path):
    missing = tmp_path / "no_such_folder"
    failed = _ingest(f"--data_dir={missing}", f"--output_dir={tmp_path / 'examples'}")
    assert failed.returncode == 1 and failed.stdout == ""
    assert failed.stderr.startswith("Flickr8kLayoutError: Required Flickr8k file not readable: "
                                    f"{missing}/Flickr8k_text/"), failed.stderr
    assert "the file is data.train_split_file, relative to data.data_dir" in failed.stderr
    assert len(failed.stderr.strip().splitlines()) == 1 and "Traceback" not in failed.stderr
