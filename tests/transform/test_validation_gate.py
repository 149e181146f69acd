"""The schema gate stops the pipeline before Transform, naming the anomaly."""

import glob
import os

import pytest
import tensorflow as tf
from tfx import v1 as tfx

from components import caption_text
from components import config as config_lib
from pipeline import fingerprints, local_runner
from pipeline.pipeline import validated_transform

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
            for number in range(7):  # 1 to 7 captions per image, as COCO has up to 7
                writer.write(_example(f"{split}{number}.jpg".encode(),
                                      [f"A red circle number {n} .".encode() for n in range(number + 1)]))
            if split == "train" and bad_train:
                writer.write(bad_train)
            if split == "dev" and bad_dev:
                writer.write(bad_dev)


def _run(tmp_path, input_base):
    example_gen = tfx.components.ImportExampleGen(
        input_base=str(input_base),
        input_config=tfx.proto.Input(splits=[
            tfx.proto.Input.Split(name=split, pattern=f"{split}/*") for split in ("train", "dev", "test")]))
    components = [example_gen] + validated_transform(
        example_gen.outputs["examples"], config_lib.PipelineConfig(), local_runner.SCHEMA_PATH,
        dict.fromkeys(fingerprints.STAGE_ENTRY_MODULES, "test"))
    metadata = tmp_path / "metadata.sqlite"
    tfx.orchestration.LocalDagRunner().run(tfx.dsl.Pipeline(
        pipeline_name="gate-test", pipeline_root=str(tmp_path / "root"), components=components,
        enable_cache=False,
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            str(metadata))))
    return tmp_path / "root"


def test_empty_caption_list_and_wrong_feature_shape_stop_before_transform(tmp_path):
    input_base = tmp_path / "bad_examples"
    _write_splits(input_base, bad_train=_example(b"empty.jpg", []),
                  bad_dev=_example(b"short.jpg", [b"A cat ."], features=b"\x00" * 1000))
    with pytest.raises(RuntimeError) as raised:
        _run(tmp_path, input_base)
    message = str(raised.value)
    assert "Examples are not blessed" in message
    assert "split train: feature 'captions'" in message
    assert "split dev: feature 'image_features': average length" in message
    assert not (tmp_path / "root" / "Transform").exists()


def test_valid_examples_pass_the_gate_and_reach_transform(tmp_path):
    """Images with 1 to 7 captions pass (the schema's old maximum of 5 stopped the run here)."""
    input_base = tmp_path / "good_examples"
    _write_splits(input_base)
    root = _run(tmp_path, input_base)
    assert (root / "Transform" / "transform_graph").exists()
    transformed = glob.glob(str(root / "Transform" / "transformed_examples" / "*" / "Split-train" / "*"))
    caption_counts = sorted(
        list(tf.train.Example.FromString(record.numpy()).features.feature["caption_ids"].int64_list.value)
        .count(caption_text.START_ID) for record in tf.data.TFRecordDataset(transformed, "GZIP"))
    assert caption_counts == list(range(1, 8))
