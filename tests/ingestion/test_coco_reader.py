"""Tests of the COCO annotation-file reader: the same index as the Karpathy file over the same
layout, the split rule without one, every bad entry a counted reject, and the ingestion job."""

import json

import apache_beam as beam
import pytest

from components import config as config_lib
from components.ingestion import beam_job, demo_data
from components.ingestion.formats import coco, karpathy
from components.ingestion.formats.index import RejectReason

ANNOTATION_FILES = ("annotations/captions_train2014.json", "annotations/captions_val2014.json")


def _assert_accounted(index):
    summary = index.summary()
    assert summary["caption_lines_read"] == summary["captions_accepted"] + summary["caption_lines_rejected"]
    assert summary["split_lines_read"] == sum(summary["images_per_split"].values()) + summary[
        "split_lines_rejected"]
    return summary


def _contents(index):
    return {record.image_id: (record.split, [(c.index, c.text) for c in record.captions])
            for record in index.records()}


@pytest.fixture(scope="module")
def coco_demo(tmp_path_factory):
    return demo_data.generate_coco(str(tmp_path_factory.mktemp("coco")), num_images=40, seed=3)


def test_annotation_files_with_the_karpathy_split_read_like_the_karpathy_file(coco_demo):
    image_dir = f"{coco_demo.data_dir}/{demo_data.COCO_IMAGE_DIR}"
    from_karpathy = karpathy.read_karpathy(coco_demo.data_dir, demo_data.COCO_KARPATHY_FILE,
                                           image_dir=image_dir)
    from_coco = coco.read_coco(coco_demo.data_dir, ANNOTATION_FILES,
                               karpathy_split_file=demo_data.COCO_KARPATHY_FILE, image_dir=image_dir)
    summary = _assert_accounted(from_coco)
    assert summary["caption_lines_rejected"] == summary["split_lines_rejected"] == 0
    assert _contents(from_coco) == _contents(from_karpathy)
    assert {split: tuple(r.image_id for r in records) for split, records in from_coco.images.items()
            } == coco_demo.splits
    caption_counts = {len(captions) for _, captions in _contents(from_coco).values()}
    assert caption_counts == {5, 6, 7}
    # restval (a quarter of train, in val2014) is train by default and moves with restval_split.
    restval = [r.image_id for r in from_coco.images["train"] if r.image_id.startswith("val2014/")]
    assert restval
    to_dev = coco.read_coco(coco_demo.data_dir, ANNOTATION_FILES, restval_split="dev",
                            karpathy_split_file=demo_data.COCO_KARPATHY_FILE)
    assert set(restval) <= {r.image_id for r in to_dev.images["dev"]}


def test_without_a_split_file_train2014_is_train_and_val2014_is_halved_into_dev_and_test(coco_demo):
    index = coco.read_coco(coco_demo.data_dir, ANNOTATION_FILES)
    summary = _assert_accounted(index)
    assert summary["caption_lines_rejected"] == summary["split_lines_rejected"] == 0
    contents = _contents(index)
    assert {image_id for image_id, (split, _) in contents.items() if split == "train"} == {
        image_id for image_id in contents if image_id.startswith("train2014/")}
    val_splits = [split for image_id, (split, _) in contents.items() if image_id.startswith("val2014/")]
    assert set(val_splits) == {"dev", "test"}
    # The rule is a hash of the name: the same on every run and machine.
    assert coco.default_split("val2014", "COCO_val2014_000000391895.jpg") == coco.default_split(
        "val2014", "COCO_val2014_000000391895.jpg")
    names = [f"COCO_val2014_{number:012d}.jpg" for number in range(1000)]
    assert 400 < sum(coco.default_split("val2014", name) == "dev" for name in names) < 600


def _write_annotations(tmp_path, folder, images, annotations):
    path = tmp_path / "annotations" / f"captions_{folder}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"info": {}, "images": images, "licenses": [],
                                "annotations": annotations}), encoding="utf-8")
    return f"annotations/{path.name}"


def test_bad_entries_are_counted_rejects_with_the_file_they_came_from(tmp_path):
    (tmp_path / "images" / "train2014").mkdir(parents=True)
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        (tmp_path / "images" / "train2014" / name).write_bytes(b"")
    train = _write_annotations(tmp_path, "train2014", [
        {"id": 1, "file_name": "a.jpg"},
        {"id": 2, "file_name": "b.jpg"},
        {"id": 2, "file_name": "c.jpg"},  # a repeated id
        {"file_name": "d.jpg"},  # no id
        {"id": 5, "file_name": "../../etc/passwd"},
        {"id": 6, "file_name": "missing.jpg"},
        "not an object",
    ], [
        *[{"image_id": 1, "id": n, "caption": f"A dog number {n} ."} for n in range(8)],  # 8 > 7
        {"image_id": 2, "id": 20, "caption": "A cat ."},
        {"image_id": 2, "id": 21, "caption": "A cat ."},  # the same caption twice
        {"image_id": 2, "id": 22, "caption": ""},
        {"image_id": 2, "id": 23, "caption": ["not", "a", "string"]},
        {"image_id": 99, "id": 24, "caption": "An image the file does not have ."},
        {"image_id": [1], "id": 25, "caption": "An id that is a list ."},
        {"image_id": 5, "id": 26, "caption": "A secret ."},
        {"image_id": 6, "id": 27, "caption": "No file for this one ."},
    ])
    val = _write_annotations(tmp_path, "val2014", [{"id": 1, "file_name": "v.jpg"}], [
        {"image_id": 1, "id": 30, "caption": "A val picture whose file is missing ."}])
    index = coco.read_coco(str(tmp_path), [train, val], image_dir=str(tmp_path / "images"),
                           max_captions_per_image=7)
    summary = _assert_accounted(index)
    assert summary["caption_rejects_by_reason"] == {
        "too_many_captions": 1, "duplicate_caption": 1, "empty_caption": 1, "malformed_line": 3,
        "unsafe_image_name": 1, "missing_image_file": 2}
    assert summary["split_rejects_by_reason"] == {
        "malformed_line": 3, "unsafe_image_name": 1, "unknown_image": 2}
    assert _contents(index) == {
        "train2014/a.jpg": ("train", [(n, f"A dog number {n} .") for n in range(7)]),
        "train2014/b.jpg": ("train", [(0, "A cat .")])}
    repeated = next(r for r in index.rejects if "already names" in r.detail)
    assert (repeated.source, repeated.line_number, repeated.image_id) == (
        "captions_train2014.json", 3, "train2014/c.jpg")
    val_reject = next(r for r in index.rejects if r.image_id == "val2014/v.jpg" and r.kind == "caption_line")
    assert (val_reject.source, val_reject.reason) == (
        "captions_val2014.json", RejectReason.MISSING_IMAGE_FILE)
    unknown_id = next(r for r in index.rejects if "image_id 99" in r.detail)
    assert unknown_id.line_number == 13 and unknown_id.source == "captions_train2014.json"


def test_layout_errors_name_the_file_and_the_rule(tmp_path):
    good = _write_annotations(tmp_path, "train2014", [], [])
    (tmp_path / "annotations" / "train_captions.json").write_text("{}", encoding="utf-8")
    with pytest.raises(coco.CocoLayoutError, match="captions_<image folder>.json"):
        coco.read_coco(str(tmp_path), ["annotations/train_captions.json"])
    test_file = _write_annotations(tmp_path, "test2014", [], [])
    with pytest.raises(coco.CocoLayoutError, match="no split without data.karpathy_split_file"):
        coco.read_coco(str(tmp_path), [good, test_file])
    truncated = tmp_path / "annotations" / "captions_val2014.json"
    truncated.write_text('{"images": [{"id": 1, ', encoding="utf-8")
    with pytest.raises(coco.CocoLayoutError, match="not a COCO caption annotation file"):
        coco.read_coco(str(tmp_path), [good, "annotations/captions_val2014.json"])
    with pytest.raises(coco.CocoLayoutError,
                       match=r"not readable: .*captions_train2017\.json .*; the file is "
                             r"data\.coco_annotation_files, relative to data\.data_dir"):
        coco.read_coco(str(tmp_path), ["annotations/captions_train2017.json"])
    with pytest.raises(coco.karpathy.KarpathyLayoutError,
                       match=r"not readable: .*dataset_coco\.json .*; the file is "
                             r"data\.karpathy_split_file, relative to data\.data_dir"):
        coco.read_coco(str(tmp_path), [good], karpathy_split_file="dataset_coco.json")
    with pytest.raises(config_lib.ConfigError, match="data.coco_annotation_files="):
        config_lib.PipelineConfig().with_overrides(
            {"data.coco_annotation_files": "annotations/train_captions.json"}).validate()


@pytest.mark.slow
def test_ingestion_job_reads_coco_annotation_files_through_data_format_coco(tmp_path):
    demo = demo_data.generate_coco(str(tmp_path / "coco"), num_images=8, seed=4)
    pipeline_config = config_lib.PipelineConfig(data=config_lib.DataConfig(
        data_dir=demo.data_dir, format="coco", karpathy_split_file=demo_data.COCO_KARPATHY_FILE,
        image_dir_name=demo_data.COCO_IMAGE_DIR)).validate()
    summary = beam_job.run_ingestion(beam.Pipeline(runner="DirectRunner"), pipeline_config,
                                     str(tmp_path / "examples"))
    captions = sum(5 + number % 3 for number in range(8))
    assert summary["pairs_read"] == summary["pairs_accepted"] == captions
    assert summary["images_per_split"] == {split: len(ids) for split, ids in demo.splits.items()}
