"""Tests of the local runner's config building, demo-data resolution and reader report."""

import json
import os

import pytest

from pipeline import local_runner


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


def test_run_generates_demo_once_and_writes_accounting(tmp_path):
    argv = ["run", f"--output_dir={tmp_path}", "--set", "data.demo_num_images=12"]
    assert local_runner.main(argv) == 0
    demo_dir = tmp_path / "demo_data" / "seed8_n12"
    first_mtime = os.path.getmtime(demo_dir / "Flickr8k_text" / "Flickr8k.token.txt")
    summary = json.loads((tmp_path / "reader" / "summary.json").read_text())
    assert summary["caption_lines_read"] == 60 == summary["captions_accepted"]
    assert (tmp_path / "reader" / "rejects.jsonl").read_text() == ""
    # A second run reuses the generated data instead of rewriting it.
    assert local_runner.main(argv) == 0
    assert os.path.getmtime(demo_dir / "Flickr8k_text" / "Flickr8k.token.txt") == first_mtime
