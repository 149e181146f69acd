"""The schema gate stops the pipeline before Transform, naming the anomaly."""

import glob
import os

import apache_beam as beam
import pytest
import tensorflow as tf
from tfx import v1 as tfx

from components import caption_text
from components import config as config_lib
from components.ingestion import beam_job, demo_data
from pipeline import fingerprints
from pipeline.pipeline import validated_transform
from tests.paths import SCHEMA_PATH

pytestmark = pytest.mark.slow

GOOD_FEATURES = b"\x00\x3c" * (49 * 2048)


def _example(image_id, captions, features=GOOD_FEATURES):
    feature = {
        "image_id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image_id])),
        "image_features": tf.train.Feature(bytes_list=tf.train.BytesList(value=[features])),
        "captions": tf.train.Feature(bytes_list=tf.train.BytesList(value=captions)),
        "caption_indices": tf.train.Feature(int64_list=tf.train.Int64List(
            value=list(range(len(captions))))),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _write_splits(root, bad_train=None, bad_dev=None):
    for split in ("train", "dev", "test"):
        os.makedirs(root / split)
        with tf.io.TFRecordWriter(str(root / split / "data.tfrecord")) as writer:
            for number in range(6):
                writer.write(_example(f"{split}{number}.jpg".encode(), [b"A red circle .", b"A circle ."]))
            if split == "train" and bad_train:
                writer.write(bad_train)
            if split == "dev" and bad_dev:
                writer.write(bad_dev)


def _run(tmp_path, input_base, split_pattern="{split}/*"):
    example_gen = tfx.components.ImportExampleGen(
        input_base=str(input_base),
        input_config=tfx.proto.Input(splits=[
            tfx.proto.Input.Split(name=split, pattern=split_pattern.format(split=split))
            for split in ("train", "dev", "test")]))
    components = [example_gen] + validated_transform(
        example_gen.outputs["examples"], config_lib.PipelineConfig(), SCHEMA_PATH,
        dict.fromkeys(fingerprints.STAGE_ENTRY_MODULES, "test"))
    metadata = tmp_path / "metadata.sqlite"
    tfx.orchestration.LocalDagRunner().run(tfx.dsl.Pipeline(
        pipeline_name="gate-test", pipeline_root=str(tmp_path / "root"), components=components,
        enable_cache=False,
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            str(metadata))))
    return tmp_path / "root"


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory):
    """(run folder, the error) of a pipeline whose train split has an empty caption list and
    whose dev split has a wrong feature length."""
    tmp_path = tmp_path_factory.mktemp("stopped_run")
    input_base = tmp_path / "bad_examples"
    _write_splits(input_base, bad_train=_example(b"empty.jpg", []),
                  bad_dev=_example(b"short.jpg", [b"A cat ."], features=b"\x00" * 1000))
    with pytest.raises(RuntimeError) as raised:
        _run(tmp_path, input_base)
    return tmp_path, str(raised.value)


def test_empty_caption_list_and_wrong_feature_shape_stop_before_transform(stopped_run):
    tmp_path, message = stopped_run
    assert "Examples are not blessed" in message
    assert "split train: feature 'captions'" in message
    assert "split dev: feature 'image_features': average length" in message
    assert not (tmp_path / "root" / "Transform").exists()


def test_images_with_1_to_7_captions_are_ingested_and_pass_the_gate_into_transform(tmp_path):
    """The ingestion job's records of images with 1 to 7 captions (COCO has up to 7) pass the
    gate and are transformed; the schema's old maximum of 5 stopped the run here."""
    demo = demo_data.generate(str(tmp_path / "data"), num_images=9, seed=3,
                              split_fractions=(0.8, 0.1, 0.1))
    train_images = demo.splits["train"][:7]
    with open(tmp_path / "data" / "Flickr8k_text" / "Flickr8k.token.txt", "w", encoding="utf-8") as stream:
        for count, image_id in enumerate(train_images, start=1):
            stream.writelines(f"{image_id}#{n}\tA red circle number {n} .\n" for n in range(count))
        for image_id in demo.splits["dev"] + demo.splits["test"]:
            stream.write(f"{image_id}#0\tA blue square .\n")
    input_base = tmp_path / "examples"
    summary = beam_job.run_ingestion(
        beam.Pipeline(runner="DirectRunner"),
        config_lib.PipelineConfig(data=config_lib.DataConfig(data_dir=str(tmp_path / "data"))),
        str(input_base))
    other_images = len(demo.splits["dev"] + demo.splits["test"])
    assert summary["pairs_accepted"] == summary["pairs_read"] == 28 + other_images

    root = _run(tmp_path, input_base, split_pattern="Split-{split}/*")
    transformed = glob.glob(str(root / "Transform" / "transformed_examples" / "*" / "Split-train" / "*"))
    caption_counts = sorted(
        list(tf.train.Example.FromString(record.numpy()).features.feature["caption_ids"].int64_list.value)
        .count(caption_text.START_ID) for record in tf.data.TFRecordDataset(transformed, "GZIP"))
    assert caption_counts == list(range(1, 8))


def test_the_gate_reads_its_artifacts_on_a_filesystem_that_is_not_the_local_disk(stopped_run):
    """StatisticsGen's and ExampleValidator's outputs of the stopped run, copied under ram://
    (gs:// on Vertex), and the gate's executor run in-process on them: the same anomalies."""
    from tfx.components.example_validator import executor as example_validator_executor
    from tfx.types import artifact_utils, standard_artifacts

    from components.transform import validation_gate
    from tests import ram_filesystem

    tmp_path, _ = stopped_run
    root = ram_filesystem.new_root("gate")
    statistics, anomalies = standard_artifacts.ExampleStatistics(), standard_artifacts.ExampleAnomalies()
    (statistics_dir,) = glob.glob(str(tmp_path / "root" / "StatisticsGen" / "statistics" / "*"))
    (anomalies_dir,) = glob.glob(str(tmp_path / "root" / "ExampleValidator" / "anomalies" / "*"))
    statistics.uri = ram_filesystem.copy_tree(statistics_dir, f"{root}/statistics")
    anomalies.uri = ram_filesystem.copy_tree(anomalies_dir, f"{root}/anomalies")
    statistics.split_names = artifact_utils.encode_split_names(["train", "dev", "test"])
    # ExampleValidator keeps its per-split verdict in ML Metadata, not in the folder: set here.
    anomalies.set_json_value_custom_property(
        example_validator_executor.ARTIFACT_PROPERTY_BLESSED_KEY,
        {"train": example_validator_executor.NOT_BLESSED_VALUE,
         "dev": example_validator_executor.BLESSED_VALUE,
         "test": example_validator_executor.BLESSED_VALUE})
    executor = validation_gate.ExampleValidationGate.EXECUTOR_SPEC.executor_class()
    with pytest.raises(validation_gate.ExamplesNotBlessedError) as raised:
        executor.Do({"statistics": [statistics], "anomalies": [anomalies]}, {},
                    {"expected_feature_bytes": 49 * 2048 * 2, "code_fingerprint": ""})
    # The anomaly read from ram://anomalies and the feature length read from ram://statistics.
    assert "split train: feature 'captions'" in str(raised.value)
    assert "split dev: feature 'image_features': average length" in str(raised.value)
