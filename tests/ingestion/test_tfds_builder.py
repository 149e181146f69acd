"""Tests of the flickr8k TFDS builder on the demo layout (plus a bad image)."""

import json
import os

import pytest
import tensorflow_datasets as tfds

from components import example_format
from components.ingestion import (
    demo_data,
    tfds_builder,  # noqa: F401  (registers "flickr8k")
)
from components.ingestion.formats import flickr8k

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


def test_tfds_builder_applies_the_data_format_and_limits_of_the_config(tmp_path):
    """The same config slices as the Beam job: a COCO-layout Karpathy file (sub-folders,
    restval -> train, val -> dev), ``data.max_caption_chars`` and ``features.max_image_pixels``
    turned into rejects with their reasons; before, the builder read only Flickr8k's text files
    with default limits whatever the pipeline was configured with."""
    from components import config as config_lib
    from tests import image_fixtures

    manual = tmp_path / "manual"
    entries, expected = [], {"train": {}, "dev": {}, "test": {}}
    for number, (folder, split, tfds_split) in enumerate([
            ("train2014", "train", "train"), ("train2014", "restval", "train"),
            ("val2014", "val", "dev"), ("val2014", "test", "test"), ("val2014", "test", None)]):
        (manual / "images" / folder).mkdir(parents=True, exist_ok=True)
        name = f"COCO_{folder}_{number:012d}.jpg"
        size = (300, 260) if tfds_split else (900, 800)  # the last one is over the pixel limit
        (manual / "images" / folder / name).write_bytes(image_fixtures.picture(seed=number, size=size))
        captions = [f"A picture {number} caption {n} ." for n in range(5 + number % 3)]
        entries.append({"filename": name, "filepath": folder, "split": split,
                        "sentences": [{"raw": raw} for raw in captions + ["x" * 200]]})
        if tfds_split:
            expected[tfds_split][f"{folder}/{name}"] = captions
    (manual / "dataset_coco.json").write_text(json.dumps({"images": entries}), encoding="utf-8")
    data = config_lib.DataConfig(format="karpathy", captions_file="dataset_coco.json",
                                 image_dir_name="images", max_caption_chars=100)
    features = config_lib.FeaturesConfig(max_image_pixels=400_000)

    datasets = tfds.load("flickr8k", data_dir=str(tmp_path / "tfds"),
                         builder_kwargs={"data": data, "features": features},
                         download_and_prepare_kwargs={"download_config": tfds.download.DownloadConfig(
                             manual_dir=str(manual))})
    loaded = {split: {example["image_id"].numpy().decode(): [
        caption.decode() for caption in example["captions"].numpy()] for example in datasets[split]}
        for split in example_format.SPLITS}
    assert loaded == expected
    builder = tfds.builder("flickr8k", data_dir=str(tmp_path / "tfds"), data=data, features=features)
    with open(os.path.join(builder.data_dir, tfds_builder.REJECTS_FILE), encoding="utf-8") as stream:
        reasons = [reject["reason"] for reject in json.load(stream)]
    assert sorted(set(reasons)) == ["caption_too_long", "too_many_pixels"]
    assert reasons.count("caption_too_long") == len(entries) and reasons.count("too_many_pixels") == 1


def test_an_invalid_config_slice_is_refused_before_anything_is_read(tmp_path):
    from components import config as config_lib

    with pytest.raises(ValueError, match="max_image_pixels"):
        tfds.builder("flickr8k", data_dir=str(tmp_path / "tfds"),
                     features=config_lib.FeaturesConfig(max_image_pixels=0))
