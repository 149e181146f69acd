"""Tests of the flickr8k TFDS builder on the demo layout (plus a bad image)."""

import json
import os

import pytest
import tensorflow_datasets as tfds

from components import example_format
from components.ingestion import (
    demo_data,
    flickr8k,
    tfds_builder,  # noqa: F401  (registers "flickr8k")
)

pytestmark = pytest.mark.slow


def test_tfds_load_gives_official_splits_with_all_captions(tmp_path):
    demo = demo_data.generate(str(tmp_path / "manual"), num_images=20, seed=2)
    broken = demo.splits["train"][0]
    (tmp_path / "manual" / "Flicker8k_Dataset" / broken).write_bytes(b"")
    index = flickr8k.read_flickr8k(demo.data_dir)

    datasets = tfds.load(
        "flickr8k", data_dir=str(tmp_path / "tfds"),
        download_and_prepare_kwargs={"download_config": tfds.download.DownloadConfig(
            manual_dir=demo.data_dir)})
    assert set(datasets) == set(example_format.SPLITS)
    for split in example_format.SPLITS:
        expected = {record.image_id: [c.text for c in record.captions]
                    for record in index.images[split] if record.image_id != broken}
        loaded = {}
        for example in datasets[split]:
            image_id = example["image_id"].numpy().decode()
            loaded[image_id] = [caption.decode() for caption in example["captions"].numpy()]
            assert example["image"].shape[-1] == 3 and min(example["image"].shape[:2]) >= 224
        assert loaded == expected

    builder = tfds.builder("flickr8k", data_dir=str(tmp_path / "tfds"))
    with open(os.path.join(builder.data_dir, tfds_builder.REJECTS_FILE), encoding="utf-8") as stream:
        rejects = json.load(stream)
    assert rejects == [{"image_id": broken, "reason": "empty_image", "detail": "zero bytes",
                        "captions": 5}]


def test_missing_manual_dir_explains_what_to_do(tmp_path):
    with pytest.raises(Exception, match="Flicker8k_Dataset"):
        tfds.load("flickr8k", data_dir=str(tmp_path / "tfds"), download_and_prepare_kwargs={
            "download_config": tfds.download.DownloadConfig(manual_dir=str(tmp_path / "nothing"))})
