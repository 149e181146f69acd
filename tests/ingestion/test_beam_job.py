"""Tests of the Beam ingestion job: records, rejects, accounting, determinism, real photos."""

import collections
import glob
import hashlib
import json
import os
import subprocess
import sys
import time

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.testing.util import assert_that, equal_to

from components import config as config_lib
from components import example_format
from components.ingestion import beam_job, demo_data
from tests import image_fixtures
from tests.paths import REPO_ROOT, SHARED_DATA_DIR

SAMPLE_DIR = os.path.join(SHARED_DATA_DIR, "flickr8k_sample")

pytestmark = pytest.mark.slow


def _config(data_dir, **features):
    return config_lib.PipelineConfig(
        data=config_lib.DataConfig(data_dir=data_dir),
        features=config_lib.FeaturesConfig(**features))


def _ingest(pipeline_config, output_dir):
    return beam_job.run_ingestion(beam.Pipeline(runner="DirectRunner"), pipeline_config, output_dir)


def read_split(output_dir, split):
    records = []
    for path in sorted(glob.glob(os.path.join(output_dir, f"Split-{split}", "data_tfrecord-*"))):
        compression = "GZIP" if path.endswith(".gz") else ""
        for serialized in tf.data.TFRecordDataset(path, compression_type=compression):
            example = tf.train.Example.FromString(serialized.numpy())
            features = example.features.feature
            records.append({
                "serialized": serialized.numpy(),
                "image_id": features["image_id"].bytes_list.value[0].decode(),
                "image_features": np.frombuffer(features["image_features"].bytes_list.value[0],
                                                dtype="<f2").reshape(49, 2048),
                "captions": [c.decode() for c in features["captions"].bytes_list.value],
                "caption_indices": list(features["caption_indices"].int64_list.value),
            })
    return records


def read_rejects(output_dir):
    rows = []
    for path in glob.glob(os.path.join(output_dir, "rejects", "*.jsonl")):
        with open(path, encoding="utf-8") as stream:
            rows.extend(json.loads(line) for line in stream)
    return rows


def records_digest(output_dir):
    serialized = sorted(record["serialized"] for split in example_format.SPLITS
                        for record in read_split(output_dir, split))
    return hashlib.sha256(b"".join(hashlib.sha256(s).digest() for s in serialized)).hexdigest()


@pytest.fixture(scope="module")
def bad_input_layout(tmp_path_factory):
    """Three good demo pictures plus every kind of bad or odd file, all in the train split."""
    root = tmp_path_factory.mktemp("bad_inputs")
    demo = demo_data.generate(str(root), num_images=3, seed=5)
    image_dir = root / "Flicker8k_Dataset"
    extra = {name: content for name, (content, _) in image_fixtures.bad_files().items()}
    extra.update(image_fixtures.convertible_files())
    for name, content in extra.items():
        (image_dir / name).write_bytes(content)
    token_path = root / "Flickr8k_text" / "Flickr8k.token.txt"
    names = sorted(extra) + ["missing.jpg"]
    with open(token_path, "a", encoding="utf-8") as stream:
        for name in names + ["../escape.jpg"]:
            stream.write(f"{name}#0\tA picture of {name} .\n{name}#1\tAnother caption .\n")
    train_path = root / "Flickr8k_text" / "Flickr_8k.trainImages.txt"
    with open(train_path, "a", encoding="utf-8") as stream:
        stream.write("".join(f"{name}\n" for name in names + ["../escape.jpg"]))
    return str(root), demo


@pytest.fixture(scope="module")
def bad_input_run(bad_input_layout, tmp_path_factory):
    data_dir, _ = bad_input_layout
    output_dir = str(tmp_path_factory.mktemp("bad_inputs_out"))
    summary = _ingest(_config(data_dir, max_image_pixels=400_000), output_dir)
    return output_dir, summary


def _images_the_job_handles(data_dir):
    return sum(1 for _ in beam_job.read_index(data_dir, config_lib.DataConfig()).records())


@pytest.mark.parametrize("beam_args", [[], ["--direct_running_mode=multi_processing",
                                            "--direct_num_workers=2"]],
                         ids=["in_process", "two_worker_processes"])
def test_progress_files_count_every_image_once_across_workers(bad_input_layout, tmp_path,
                                                              monkeypatch, beam_args):
    """What the console's progress display reads: the job's total, and every image it handles
    (read rejects, decode rejects, examples) counted exactly once, also from worker processes
    (which inherit the folder through the environment)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from components.ingestion import progress

    data_dir, _ = bad_input_layout
    progress_dir = tmp_path / "progress"
    monkeypatch.setenv(progress.PROGRESS_DIR_ENV, str(progress_dir))
    assert progress.read(str(progress_dir)) == (0, None)
    beam_job.run_ingestion(beam.Pipeline(runner="DirectRunner", options=PipelineOptions(beam_args)),
                           _config(data_dir, max_image_pixels=400_000), str(tmp_path / "out"))
    handled = _images_the_job_handles(data_dir)
    assert handled >= 15
    assert progress.read(str(progress_dir)) == (handled, handled)
    if beam_args:
        writers = {name.split("-", 1)[0] for name in os.listdir(progress_dir)
                   if name.endswith(progress.COUNT_SUFFIX)}
        assert str(os.getpid()) not in writers  # counted in the workers, not here


def test_bad_inputs_become_counted_rejects_with_reasons(bad_input_run):
    output_dir, summary = bad_input_run
    pairs_read = (3 * 5) + 2 * (len(image_fixtures.bad_files()) +
                                len(image_fixtures.convertible_files()) + 2)
    assert summary["pairs_read"] == pairs_read
    assert summary["pairs_accepted"] + summary["pairs_rejected"] == pairs_read
    expected_reasons = collections.Counter()
    for _, reason in image_fixtures.bad_files().values():
        expected_reasons[reason] += 2
    expected_reasons.update({"missing_image_file": 2, "unsafe_image_name": 2})
    assert summary["rejected_pairs_by_reason"] == dict(expected_reasons)

    rows = read_rejects(output_dir)
    assert len(rows) == summary["pairs_rejected"]
    by_image = {(row["image_id"], row["caption_index"]): row for row in rows}
    assert by_image[("empty.jpg", 0)]["stage"] == "decode"
    assert by_image[("empty.jpg", 1)]["reason"] == "empty_image"
    assert by_image[("../escape.jpg", 0)]["stage"] == "reader"
    assert by_image[("missing.jpg", 1)]["reason"] == "missing_image_file"
    assert by_image[("huge.jpg", 0)]["reason"] == "too_many_pixels"
    # Converted, not rejected.
    accepted_ids = {record["image_id"] for record in read_split(output_dir, "train")}
    assert set(image_fixtures.convertible_files()) <= accepted_ids


def test_records_match_the_reader(bad_input_run, bad_input_layout):
    output_dir, summary = bad_input_run
    _, demo = bad_input_layout
    index = beam_job.read_index(demo.data_dir, config_lib.DataConfig())
    expected = {record.image_id: record for record in index.records()}
    for split in example_format.SPLITS:
        for record in read_split(output_dir, split):
            source = expected[record["image_id"]]
            assert source.split == split
            assert record["captions"] == [caption.text for caption in source.captions]
            assert record["caption_indices"] == [caption.index for caption in source.captions]
            assert record["image_features"].shape == (49, 2048)
            assert np.isfinite(record["image_features"]).all()
            assert np.abs(record["image_features"]).max() > 0
    per_split = {split: len(read_split(output_dir, split)) for split in example_format.SPLITS}
    assert per_split == summary["images_per_split"]
    size = os.path.getsize(glob.glob(os.path.join(output_dir, "Split-train", "data_tfrecord-*"))[0])
    assert size / per_split["train"] <= 210_000


def test_rerun_gives_identical_records(bad_input_run, bad_input_layout, tmp_path):
    output_dir, _ = bad_input_run
    data_dir, _ = bad_input_layout
    _ingest(_config(data_dir, max_image_pixels=400_000), str(tmp_path))
    assert records_digest(str(tmp_path)) == records_digest(output_dir)


def test_non_finite_features_rejected_not_written():
    meta = beam_job.ImageMeta("nan.jpg", "train", ((0, "a"), (3, "b")))
    finite = beam_job.ImageMeta("ok.jpg", "dev", ((0, "c"),))
    overflow = np.full((49, 2048), 1e6, dtype=np.float32)  # finite in float32, inf in float16
    nan_features = np.zeros((49, 2048), dtype=np.float32)
    nan_features[3, 7] = np.nan
    with beam.Pipeline(runner="DirectRunner") as pipeline:
        outputs = (
            pipeline
            | beam.Create([(meta, (nan_features, "")), (finite, (np.ones((49, 2048), np.float32), "")),
                           (meta._replace(image_id="big.jpg"), (overflow, ""))])
            | beam.ParDo(beam_job.ToExample("float16")).with_outputs("rejects", main="examples"))
        assert_that(outputs.examples | beam.Keys(), equal_to(["dev"]), label="OnlyFinite")
        assert_that(outputs.rejects | beam.Map(lambda row: (row["image_id"], row["caption_index"],
                                                            row["reason"])),
                    equal_to([("nan.jpg", 0, "non_finite_features"), ("nan.jpg", 3, "non_finite_features"),
                              ("big.jpg", 0, "non_finite_features"), ("big.jpg", 3, "non_finite_features")]),
                    label="Rejects")


def test_real_photos_with_real_token_file_every_line_accounted(tmp_path):
    if not os.path.isdir(SAMPLE_DIR):
        pytest.skip(f"shared real-data sample not found at {SAMPLE_DIR}")
    summary = _ingest(_config(os.path.abspath(SAMPLE_DIR)), str(tmp_path))
    assert summary["pairs_read"] == 40460
    assert summary["pairs_accepted"] + summary["pairs_rejected"] == 40460
    reasons = summary["rejected_pairs_by_reason"]
    assert reasons["image_not_in_split"] == 460 and reasons["duplicate_caption"] == 10
    real_images = sorted(os.listdir(os.path.join(SAMPLE_DIR, "Flicker8k_Dataset")))
    assert summary["images_per_split"] == {"train": len(real_images), "dev": 0, "test": 0}
    records = read_split(str(tmp_path), "train")
    assert sorted(record["image_id"] for record in records) == real_images
    assert reasons["missing_image_file"] == 40460 - 470 - summary["pairs_accepted"]
    assert summary["pairs_accepted"] == sum(len(record["captions"]) for record in records)
    assert len(read_rejects(str(tmp_path))) == summary["pairs_rejected"]


def test_killed_job_leaves_no_partial_split_and_rerun_completes(bad_input_layout, bad_input_run, tmp_path):
    data_dir, _ = bad_input_layout
    output_dir = tmp_path / "killed"
    command = [sys.executable, "-m", "pipeline.ingest", f"--data_dir={data_dir}",
               f"--output_dir={output_dir}", "--set=features.max_image_pixels=400000",
               "--runner=DirectRunner"]
    job = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    temp_shards = []
    while time.time() < deadline and job.poll() is None and not temp_shards:
        temp_shards = glob.glob(str(output_dir / "_staging-*" / "Split-*" / "beam-temp-*" / "*"))
        time.sleep(0.02)
    job.kill()  # SIGKILL: no cleanup handlers run
    job.wait()
    assert temp_shards, "the job ended before any split file was being written; nothing was tested"
    assert glob.glob(str(output_dir / "Split-*")) == []
    assert not (output_dir / "rejects").exists()
    assert not (output_dir / beam_job.SUMMARY_FILE).exists()

    _ingest(_config(data_dir, max_image_pixels=400_000), str(output_dir))
    assert records_digest(str(output_dir)) == records_digest(bad_input_run[0])
    # The killed job's staging folder is gone too: nothing a rerun leaves behind.
    assert glob.glob(str(output_dir / "_staging-*")) == []


def test_a_job_that_fails_half_way_through_publishing_leaves_nothing(bad_input_layout, tmp_path,
                                                                     monkeypatch):
    """No space left after the first file was moved into place (inside Beam's sink, which renames
    its temporary shards): every file the job wrote goes, the staging folder included (on gs://
    it would be storage paid for nothing)."""
    from apache_beam.io.filesystems import FileSystems

    data_dir, _ = bad_input_layout
    output_dir = tmp_path / "full_disk"
    real_rename, renames = FileSystems.rename, []

    def rename_then_fail(sources, destinations):
        if renames:
            raise OSError(28, "No space left on device")
        renames.append(sources)
        return real_rename(sources, destinations)

    monkeypatch.setattr(FileSystems, "rename", staticmethod(rename_then_fail))
    with pytest.raises(Exception, match="No space left"):
        _ingest(_config(data_dir, max_image_pixels=400_000), str(output_dir))
    assert renames, "nothing was published before the failure; the half-way case was not tested"
    assert sorted(os.listdir(output_dir)) == []  # a rerun finds an empty folder (the killed test reruns)
