"""Tests of the Karpathy split-file reader: the same splits and captions as the official
Flickr8k text files, restval, COCO's folders, and every bad entry a counted reject."""

import json
import os

import apache_beam as beam
import pytest

from components import config as config_lib
from components.ingestion import beam_job
from components.ingestion.formats import flickr8k, karpathy
from components.ingestion.formats.index import RejectReason
from tests import image_fixtures
from tests.paths import SHARED_DATA_DIR

SAMPLE_DIR = os.path.join(SHARED_DATA_DIR, "flickr8k_sample")
KARPATHY_SPLIT_NAMES = {"train": "train", "dev": "val", "test": "test"}


def _assert_accounted(index):
    summary = index.summary()
    assert summary["caption_lines_read"] == summary["captions_accepted"] + summary["caption_lines_rejected"]
    assert summary["split_lines_read"] == sum(summary["images_per_split"].values()) + summary[
        "split_lines_rejected"]
    return summary


def _write(tmp_path, images, name="dataset_test.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"dataset": "test", "images": images}), encoding="utf-8")
    return name


def _entry(filename, split, *captions, filepath=None):
    entry = {"filename": filename, "split": split,
             "sentences": [{"raw": raw, "tokens": []} for raw in captions]}
    if filepath is not None:
        entry["filepath"] = filepath
    return entry


def test_karpathy_flickr8k_file_gives_the_splits_and_captions_of_the_official_text_files(tmp_path):
    """A dataset_flickr8k.json built from the real token file and split lists for the sample's
    20 photos (as Karpathy built his from the same files) reads like the official files."""
    if not os.path.isdir(SAMPLE_DIR):
        pytest.skip(f"shared real-data sample not found at {SAMPLE_DIR}")
    photos = sorted(os.listdir(os.path.join(SAMPLE_DIR, "Flicker8k_Dataset")))
    split_of = {}
    for split, file_name in config_lib.FLICKR8K_SPLIT_FILES.items():
        path = os.path.join(SAMPLE_DIR, config_lib.FLICKR8K_TEXT_DIR, file_name)
        with open(path, encoding="utf-8") as stream:
            split_of.update({line.strip(): split for line in stream if line.strip()})
    raw_captions = {photo: [] for photo in photos}
    with open(os.path.join(SAMPLE_DIR, config_lib.FLICKR8K_TEXT_DIR, "Flickr8k.token.txt"),
              encoding="utf-8") as stream:
        for line in stream:
            key, _, caption = line.rstrip("\n").partition("\t")
            image_id = key.rsplit("#", 1)[0]
            if image_id in raw_captions:
                raw_captions[image_id].append(caption)
    (tmp_path / "Flicker8k_Dataset").symlink_to(os.path.join(SAMPLE_DIR, "Flicker8k_Dataset"))
    captions_file = _write(tmp_path, [_entry(photo, KARPATHY_SPLIT_NAMES[split_of[photo]],
                                             *raw_captions[photo]) for photo in photos],
                           name="dataset_flickr8k.json")

    from_karpathy = karpathy.read_karpathy(str(tmp_path), captions_file)
    official = flickr8k.read_flickr8k(SAMPLE_DIR, image_dir=os.path.join(SAMPLE_DIR, "Flicker8k_Dataset"))
    _assert_accounted(from_karpathy)

    def splits_and_captions(index):
        return {record.image_id: (record.split, [caption.text for caption in record.captions])
                for record in index.records()}

    assert splits_and_captions(from_karpathy) == splits_and_captions(official)
    assert len(splits_and_captions(from_karpathy)) == len(photos)


def test_val_is_dev_and_restval_goes_where_configured(tmp_path):
    captions_file = _write(tmp_path, [
        _entry("a.jpg", "train", "A dog ."), _entry("b.jpg", "val", "A cat ."),
        _entry("c.jpg", "test", "A cow ."), _entry("d.jpg", "restval", "A pig .")])
    by_default = karpathy.read_karpathy(str(tmp_path), captions_file)
    assert {split: [r.image_id for r in records] for split, records in by_default.images.items()} == {
        "train": ["a.jpg", "d.jpg"], "dev": ["b.jpg"], "test": ["c.jpg"]}
    to_dev = karpathy.read_karpathy(str(tmp_path), captions_file, restval_split="dev")
    assert [r.image_id for r in to_dev.images["dev"]] == ["b.jpg", "d.jpg"]


def test_coco_folders_are_part_of_the_image_path_and_cannot_escape(tmp_path):
    captions_file = _write(tmp_path, [
        _entry("COCO_train2014_1.jpg", "train", *[f"A bus number {n} ." for n in range(7)],
               filepath="train2014"),
        _entry("COCO_val2014_2.jpg", "val", "A train .", filepath="val2014"),
        _entry("passwd", "train", "A secret .", filepath="../../etc"),
        _entry("x.jpg", "train", "A thing .", filepath="a/b"),
    ])
    index = karpathy.read_karpathy(str(tmp_path), captions_file)
    summary = _assert_accounted(index)
    records = {record.image_id: record for record in index.records()}
    assert sorted(records) == ["train2014/COCO_train2014_1.jpg", "val2014/COCO_val2014_2.jpg"]
    assert len(records["train2014/COCO_train2014_1.jpg"].captions) == 7  # COCO has up to 7
    assert summary["caption_rejects_by_reason"] == {"unsafe_image_name": 2}
    assert summary["split_rejects_by_reason"] == {"unsafe_image_name": 2}


def test_bad_entries_are_counted_rejects(tmp_path):
    captions_file = _write(tmp_path, [
        _entry("a.jpg", "train", "A dog .", "", "A dog ."),  # empty and duplicate captions
        _entry("b.jpg", "holdout", "A cat ."),  # no such split
        {"split": "train", "sentences": [{"raw": "No file name ."}]},
        {"filename": "c.jpg", "split": "train", "sentences": "not a list"},
        {"filename": "d.jpg", "split": "train", "sentences": [{"tokens": ["no", "raw"]}, {"raw": "A cow ."}]},
        _entry("a.jpg", "train", "A dog again ."),  # the same image twice: its sentence 0 again
        "not an object",
    ])
    index = karpathy.read_karpathy(str(tmp_path), captions_file)
    summary = _assert_accounted(index)
    assert summary["caption_rejects_by_reason"] == {
        "empty_caption": 1, "duplicate_caption": 1, "image_not_in_split": 1, "malformed_line": 4,
        "duplicate_caption_index": 1}
    assert summary["split_rejects_by_reason"] == {
        "unknown_split": 1, "malformed_line": 2, "duplicate_split_entry": 1, "unknown_image": 1}
    unknown = next(r for r in index.rejects if r.reason is RejectReason.UNKNOWN_SPLIT)
    assert unknown.line_number == 2 and "'holdout'" in unknown.detail
    records = {record.image_id: [c.text for c in record.captions] for record in index.records()}
    assert records == {"a.jpg": ["A dog ."], "d.jpg": ["A cow ."]}


def test_a_file_that_is_not_json_is_a_layout_error(tmp_path):
    (tmp_path / "dataset.json").write_text('{"images": [{"filename": "a.jpg", "split": ', encoding="utf-8")
    with pytest.raises(karpathy.KarpathyLayoutError, match="not a Karpathy split file"):
        karpathy.read_karpathy(str(tmp_path), "dataset.json")
    with pytest.raises(karpathy.KarpathyLayoutError,
                       match=r"not readable: .*missing\.json .*; the file is data\.captions_file, "
                             r"relative to data\.data_dir \(--data_dir\)"):
        karpathy.read_karpathy(str(tmp_path), "missing.json")


@pytest.mark.slow
def test_ingestion_job_reads_a_coco_layout_through_data_format_karpathy(tmp_path):
    image_dir = tmp_path / "images"
    for folder in ("train2014", "val2014"):
        (image_dir / folder).mkdir(parents=True)
    entries = []
    for number, (folder, split) in enumerate([("train2014", "train"), ("train2014", "restval"),
                                              ("val2014", "val"), ("val2014", "test")]):
        name = f"COCO_{folder}_{number:012d}.jpg"
        (image_dir / folder / name).write_bytes(image_fixtures.picture(seed=number))
        captions = [f"A picture {number} caption {n} ." for n in range(5 + number % 3)]
        entries.append(_entry(name, split, *captions, filepath=folder))
    captions_file = _write(tmp_path, entries, name="dataset_coco.json")
    pipeline_config = config_lib.PipelineConfig(data=config_lib.DataConfig(
        data_dir=str(tmp_path), format="karpathy", captions_file=captions_file, image_dir_name="images"))
    summary = beam_job.run_ingestion(beam.Pipeline(runner="DirectRunner"), pipeline_config,
                                     str(tmp_path / "examples"))
    assert summary["pairs_read"] == summary["pairs_accepted"] == 5 + 6 + 7 + 5
    assert summary["images_per_split"] == {"train": 2, "dev": 1, "test": 1}
