"""Tests of the Flickr8k text-layout reader: real files, damaged files, bad lines."""

import os
import shutil

import pytest

from components.ingestion.formats import flickr8k
from components.ingestion.formats.index import CAPTION_LINE, SPLIT_LINE, RejectReason, is_plain_file_name
from tests.paths import SHARED_DATA_DIR

SAMPLE_DIR = os.path.join(SHARED_DATA_DIR, "flickr8k_sample")


def _require_sample():
    if not os.path.isdir(SAMPLE_DIR):
        pytest.skip(f"shared real-data sample not found at {SAMPLE_DIR}")


def _assert_accounted(index):
    summary = index.summary()
    assert summary["caption_lines_read"] == summary["captions_accepted"] + summary["caption_lines_rejected"]
    accepted_split_entries = sum(summary["images_per_split"].values())
    assert summary["split_lines_read"] == accepted_split_entries + summary["split_lines_rejected"]
    assert sum(summary["caption_rejects_by_reason"].values()) == summary["caption_lines_rejected"]
    return summary


def _layout(tmp_path, token_lines, train=(), dev=(), test=(), images=None, token_bytes=None):
    text_dir = tmp_path / "Flickr8k_text"
    image_dir = tmp_path / "Flicker8k_Dataset"
    text_dir.mkdir()
    image_dir.mkdir()
    if token_bytes is None:
        token_bytes = "".join(line + "\n" for line in token_lines).encode("utf-8")
    (text_dir / "Flickr8k.token.txt").write_bytes(token_bytes)
    for name, ids in (("train", train), ("dev", dev), ("test", test)):
        (text_dir / f"Flickr_8k.{name}Images.txt").write_text("".join(i + "\n" for i in ids))
    for image_id in images if images is not None else set(train) | set(dev) | set(test):
        (image_dir / image_id).write_bytes(b"\xff\xd8\xff")
    return str(tmp_path)


def _read(data_dir, check_images=False):
    return flickr8k.read_flickr8k(
        data_dir, image_dir=os.path.join(data_dir, "Flicker8k_Dataset") if check_images else None)


def _reasons(index, kind=CAPTION_LINE):
    return [reject.reason for reject in index.rejects if reject.kind == kind]


# --- The real Flickr8k text files ------------------------------------------------------------


def test_real_token_file_counts_and_accounting():
    _require_sample()
    index = flickr8k.read_flickr8k(SAMPLE_DIR)
    summary = _assert_accounted(index)
    assert summary["caption_lines_read"] == 40460
    assert summary["images_per_split"] == {"train": 6000, "dev": 1000, "test": 1000}
    # 92 captioned ids are in no split (91 real images + the image-less '.jpg.1' id), 5 lines each.
    assert summary["caption_rejects_by_reason"] == {"image_not_in_split": 460, "duplicate_caption": 10}
    assert summary["captions_accepted"] == 40460 - 470
    assert summary["split_lines_read"] == 8000 and summary["split_lines_rejected"] == 0
    bogus = [r for r in index.rejects if r.image_id == "2258277193_586949ec62.jpg.1"]
    assert len(bogus) == 5 and {r.reason for r in bogus} == {RejectReason.IMAGE_NOT_IN_SPLIT}
    # Every accepted image keeps all its captions in one split; no image is in two.
    seen = {}
    for record in index.records():
        assert seen.setdefault(record.image_id, record.split) == record.split
        assert 1 <= len(record.captions) <= 5


def test_real_kaggle_captions_csv_with_image_folder():
    _require_sample()
    index = flickr8k.read_flickr8k(
        SAMPLE_DIR, captions_file="captions.txt",
        image_dir=os.path.join(SAMPLE_DIR, "Flicker8k_Dataset"))
    summary = _assert_accounted(index)
    assert summary["caption_lines_read"] == 40455  # header not counted
    assert summary["images_per_split"] == {"train": 20, "dev": 0, "test": 0}
    assert summary["captions_accepted"] == 100
    assert summary["caption_rejects_by_reason"]["missing_image_file"] == 40455 - 100 - 455
    # Split entries whose images have no file are accounted for, not dropped.
    assert summary["split_rejects_by_reason"] == {"unknown_image": 7980}


def test_real_files_damaged_like_circulating_copies(tmp_path):
    """CRLF endings, a TAB turned into a space, a garbage block, a split line missing."""
    _require_sample()
    text_dir = tmp_path / "Flickr8k_text"
    shutil.copytree(os.path.join(SAMPLE_DIR, "Flickr8k_text"), text_dir)
    token_path = text_dir / "Flickr8k.token.txt"
    lines = token_path.read_bytes().split(b"\n")[:-1]
    lines[0] = lines[0].replace(b"\t", b" ")
    damaged = b"\r\n".join(lines[:100]) + b"\r\n\x89\xfe\x00garbage\xff\r\n" + b"\n".join(lines[100:]) + b"\n"
    token_path.write_bytes(damaged)
    train_path = text_dir / "Flickr_8k.trainImages.txt"
    train_ids = train_path.read_text().splitlines()
    removed = train_ids[-1]
    assert not lines[0].startswith(removed.encode())
    train_path.write_text("\n".join(train_ids[:-1]) + "\n")

    index = flickr8k.read_flickr8k(str(tmp_path))
    summary = _assert_accounted(index)
    assert summary["caption_lines_read"] == 40461
    reasons = summary["caption_rejects_by_reason"]
    assert reasons["malformed_line"] == 1
    assert reasons["non_utf8"] == 1
    lines_of_removed = sum(1 for line in lines if line.startswith(removed.encode() + b"#"))
    assert reasons["image_not_in_split"] == 460 + lines_of_removed
    assert summary["images_per_split"]["train"] == 5999
    # CRLF did not leak into captions.
    assert not any(c.text.endswith("\r") for record in index.records() for c in record.captions)


# --- Each bad input has its reason ------------------------------------------------------------


def test_malformed_lines(tmp_path):
    data_dir = _layout(tmp_path, [
        "a.jpg#0\tA dog runs .",
        "a.jpg#1 A TAB became a space .",
        "a.jpg\tno caption index",
        "a.jpg#x\tbad index",
    ], train=["a.jpg"])
    index = _read(data_dir)
    _assert_accounted(index)
    assert _reasons(index) == [RejectReason.MALFORMED_LINE] * 3
    assert [r.line_number for r in index.rejects] == [2, 3, 4]


def test_non_utf8_and_control_characters(tmp_path):
    token_bytes = (b"a.jpg#0\tA dog .\n"
                   b"a.jpg#1\tA caf\xe9 latin-1 caption .\n"
                   b"a.jpg#2\tA bell \x07 inside .\n")
    data_dir = _layout(tmp_path, None, train=["a.jpg"], token_bytes=token_bytes)
    index = _read(data_dir)
    _assert_accounted(index)
    assert _reasons(index) == [RejectReason.NON_UTF8, RejectReason.CONTROL_CHARACTERS]
    assert "byte" in index.rejects[0].detail


def test_empty_caption(tmp_path):
    data_dir = _layout(tmp_path, ["a.jpg#0\tA dog .", "a.jpg#1\t   ", "a.jpg#2\t"], train=["a.jpg"])
    index = _read(data_dir)
    _assert_accounted(index)
    assert _reasons(index) == [RejectReason.EMPTY_CAPTION] * 2
    assert index.captions_accepted == 1


def test_caption_index_out_of_int64_or_reused_for_one_image(tmp_path):
    # The first line crashed the whole Beam job in ToExample (ValueError: Value out of range).
    data_dir = _layout(tmp_path, [
        "a.jpg#99999999999999999999999\tA dog runs .",
        f"a.jpg#{2 ** 63}\tA dog sits .",
        f"a.jpg#{2 ** 63 - 1}\tA dog stands .",
        "a.jpg#0\tA dog .",
        "a.jpg#0\tA dog barks .",
        "b.jpg#0\tA cat .",
    ], train=["a.jpg", "b.jpg"])
    index = _read(data_dir)
    _assert_accounted(index)
    assert _reasons(index) == [RejectReason.CAPTION_INDEX_OUT_OF_RANGE] * 2 + [
        RejectReason.DUPLICATE_CAPTION_INDEX]
    assert "64-bit" in index.rejects[0].detail and "already used" in index.rejects[2].detail
    assert [c.index for c in next(index.records()).captions] == [2 ** 63 - 1, 0]


def test_overlong_caption_and_caption_empty_after_normalisation(tmp_path):
    long_caption = "a dog " * 1_000_000  # 6 MB on one line
    data_dir = _layout(tmp_path, [
        f"a.jpg#0\t{long_caption}",
        f"a.jpg#1\t{'x' * 30}",
        "a.jpg#2\t... ?!",
        "a.jpg#3\t\u4e00\u53ea\u72d7",  # characters the normaliser drops
        "a.jpg#4\tA dog .",
    ], train=["a.jpg"])
    index = flickr8k.read_flickr8k(data_dir, max_caption_chars=20)
    _assert_accounted(index)
    assert _reasons(index) == [RejectReason.CAPTION_TOO_LONG] * 2 + [
        RejectReason.CAPTION_EMPTY_AFTER_NORMALIZATION] * 2
    assert "max_caption_chars = 20" in index.rejects[1].detail
    assert [c.index for c in next(index.records()).captions] == [4]


def test_too_many_captions_for_one_image_rejected_past_the_limit(tmp_path):
    data_dir = _layout(tmp_path, [f"a.jpg#{n}\tA dog number {n} ." for n in range(7)]
                       + ["b.jpg#0\tA cat ."], train=["a.jpg", "b.jpg"])
    assert [len(r.captions) for r in _read(data_dir).records()] == [7, 1]  # COCO has up to 7
    index = flickr8k.read_flickr8k(data_dir, max_captions_per_image=5)
    summary = _assert_accounted(index)
    assert summary["caption_rejects_by_reason"] == {"too_many_captions": 2}
    assert [c.index for c in next(index.records()).captions] == [0, 1, 2, 3, 4]


def test_byte_order_marks_dropped_and_names_compared_in_nfc(tmp_path):
    nfc, nfd = "caf\u00e9.jpg", "cafe\u0301.jpg"
    data_dir = _layout(tmp_path, None, images=[nfd], token_bytes=(
        "\ufeff" + f"{nfd}#0\tA cafe .\n{nfc}#1\tA cafe at night .\n").encode("utf-8"))
    # The split list is NFC (typed elsewhere) and starts with a byte-order mark, as Windows writes it.
    (tmp_path / "Flickr8k_text" / "Flickr_8k.trainImages.txt").write_bytes(
        ("\ufeff" + nfc + "\n").encode("utf-8"))
    index = _read(data_dir, check_images=True)
    summary = _assert_accounted(index)
    assert summary["caption_lines_rejected"] == 0 and summary["split_lines_rejected"] == 0
    (record,) = index.records()
    assert record.image_id == nfd  # the captions file's spelling opens the file
    assert [c.index for c in record.captions] == [0, 1]


def test_non_utf8_split_line(tmp_path):
    data_dir = _layout(tmp_path, ["a.jpg#0\tA dog ."], train=["a.jpg"])
    (tmp_path / "Flickr8k_text" / "Flickr_8k.trainImages.txt").write_bytes(b"a.jpg\ncaf\xe9.jpg\n")
    summary = _assert_accounted(_read(data_dir))
    assert summary["split_rejects_by_reason"] == {"non_utf8": 1}


def test_overlong_split_line_rejected_without_reading_it_whole(tmp_path):
    data_dir = _layout(tmp_path, ["a.jpg#0\tA dog ."], train=["a.jpg", "b" * 100_000 + ".jpg"],
                       images=["a.jpg"])
    index = _read(data_dir)
    summary = _assert_accounted(index)
    assert summary["split_rejects_by_reason"] == {"line_too_long": 1}
    assert summary["images_per_split"]["train"] == 1


@pytest.mark.parametrize("bad_name", ["../secret.jpg", "/etc/passwd", "sub/a.jpg", "..\\a.jpg",
                                      "C:evil.jpg", ".."])
def test_unsafe_image_names_rejected_in_captions_and_splits(tmp_path, bad_name):
    data_dir = _layout(tmp_path, ["a.jpg#0\tA dog .", f"{bad_name}#0\tA cat ."], images=["a.jpg"])
    (tmp_path / "Flickr8k_text" / "Flickr_8k.trainImages.txt").write_text(f"a.jpg\n{bad_name}\n")
    index = _read(data_dir)
    _assert_accounted(index)
    assert _reasons(index) == [RejectReason.UNSAFE_IMAGE_NAME]
    assert _reasons(index, SPLIT_LINE) == [RejectReason.UNSAFE_IMAGE_NAME]
    assert [record.image_id for record in index.records()] == ["a.jpg"]


def test_image_in_no_split_and_in_two_splits(tmp_path):
    data_dir = _layout(tmp_path, [
        "a.jpg#0\tA dog .", "b.jpg#0\tA cat .", "c.jpg#0\tA cow .", "c.jpg#1\tA brown cow .",
    ], train=["a.jpg", "c.jpg"], test=["c.jpg"])
    index = _read(data_dir)
    summary = _assert_accounted(index)
    assert summary["caption_rejects_by_reason"] == {"image_not_in_split": 1, "image_in_multiple_splits": 2}
    assert summary["split_rejects_by_reason"] == {"image_in_multiple_splits": 2}
    assert summary["images_per_split"] == {"train": 1, "dev": 0, "test": 0}
    multi = [r for r in index.rejects if r.kind == SPLIT_LINE]
    assert {r.source for r in multi} == {"Flickr_8k.trainImages.txt", "Flickr_8k.testImages.txt"}


def test_duplicate_caption_pair_rejected_once(tmp_path):
    data_dir = _layout(tmp_path, ["a.jpg#0\tA dog .", "a.jpg#1\tA dog .", "a.jpg#2\tA dog runs ."],
                       train=["a.jpg"])
    index = _read(data_dir)
    _assert_accounted(index)
    assert _reasons(index) == [RejectReason.DUPLICATE_CAPTION]
    assert [c.index for c in next(index.records()).captions] == [0, 2]


def test_missing_image_file_and_unknown_split_entry(tmp_path):
    data_dir = _layout(tmp_path, ["a.jpg#0\tA dog .", "b.jpg#0\tA cat ."],
                       train=["a.jpg", "b.jpg", "z.jpg"], images=["a.jpg"])
    index = _read(data_dir, check_images=True)
    summary = _assert_accounted(index)
    assert summary["caption_rejects_by_reason"] == {"missing_image_file": 1}
    assert summary["split_rejects_by_reason"] == {"unknown_image": 2}  # b (no file) and z (no caption)


def test_duplicate_split_entry(tmp_path):
    data_dir = _layout(tmp_path, ["a.jpg#0\tA dog ."], train=["a.jpg", "a.jpg"])
    index = _read(data_dir)
    summary = _assert_accounted(index)
    assert summary["split_rejects_by_reason"] == {"duplicate_split_entry": 1}
    assert summary["images_per_split"]["train"] == 1


def test_kaggle_csv_malformed_rows_and_quoted_commas(tmp_path):
    data_dir = _layout(tmp_path, [], train=["a.jpg"])
    (tmp_path / "captions.txt").write_text(
        'image,caption\n'
        'a.jpg,"A dog, brown, runs ."\n'
        'a.jpg,A dog runs .\n'
        'a.jpg\n'
        'a.jpg,too,many,fields\n'
        '\n')
    index = flickr8k.read_flickr8k(data_dir, captions_file="captions.txt")
    summary = _assert_accounted(index)
    assert summary["caption_lines_read"] == 4 and summary["blank_lines"] == 1
    assert summary["caption_rejects_by_reason"] == {"malformed_line": 2}
    assert [c.text for c in next(index.records()).captions] == ["A dog, brown, runs .", "A dog runs ."]
    assert [c.index for c in next(index.records()).captions] == [0, 1]


def test_missing_required_file_is_a_clear_error(tmp_path):
    data_dir = _layout(tmp_path, ["a.jpg#0\tA dog ."], train=["a.jpg"])
    os.remove(os.path.join(data_dir, "Flickr8k_text", "Flickr_8k.devImages.txt"))
    with pytest.raises(flickr8k.Flickr8kLayoutError, match="Flickr_8k.devImages.txt") as raised:
        _read(data_dir)
    assert "the file is data.dev_split_file" in str(raised.value)  # the setting to fix
    os.remove(os.path.join(data_dir, "Flickr8k_text", "Flickr8k.token.txt"))
    with pytest.raises(flickr8k.Flickr8kLayoutError, match="the file is data.captions_file"):
        flickr8k.read_flickr8k(data_dir, split_files={"train": "Flickr8k_text/Flickr_8k.trainImages.txt"})


def test_is_plain_file_name():
    assert is_plain_file_name("1000268201_693b08cb0e.jpg")
    assert is_plain_file_name("2258277193_586949ec62.jpg.1")
    for bad in ("", ".", "..", "../x.jpg", "a/b.jpg", "a\\b.jpg", "/x.jpg", "x\x00.jpg", "C:x.jpg"):
        assert not is_plain_file_name(bad), bad


def test_the_readmes_kaggle_recipe_reads_a_kaggle_layout_whole(tmp_path):
    """Kaggle's Flickr8k: Images/ and a captions.txt CSV, no split lists. With the official split
    lists copied into Flickr8k_text/ and the README's two settings, every caption is accepted."""
    import csv
    import re
    import shutil

    from components import config as config_lib
    from components.ingestion import beam_job, demo_data

    demo = demo_data.generate(str(tmp_path / "demo"), num_images=9, seed=2)
    kaggle = tmp_path / "kaggle"
    shutil.copytree(tmp_path / "demo" / "Flicker8k_Dataset", kaggle / "Images")
    with open(tmp_path / "demo" / "Flickr8k_text" / "Flickr8k.token.txt", encoding="utf-8") as stream:
        rows = [line.rstrip("\n").split("\t") for line in stream if line.strip()]
    with open(kaggle / "captions.txt", "w", encoding="utf-8", newline="") as stream:
        writer = csv.writer(stream)
        writer.writerow(["image", "caption"])
        writer.writerows([key.split("#")[0], caption] for key, caption in rows)
    (kaggle / "Flickr8k_text").mkdir()
    for name in ("Flickr_8k.trainImages.txt", "Flickr_8k.devImages.txt", "Flickr_8k.testImages.txt"):
        shutil.copy(tmp_path / "demo" / "Flickr8k_text" / name, kaggle / "Flickr8k_text" / name)

    with open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md"), encoding="utf-8") as stream:
        (setting,) = re.findall(r'SET="(data\.captions_file=captions\.txt [^"]*)"', stream.read())
    data = config_lib.PipelineConfig().with_overrides(
        dict(item.split("=", 1) for item in setting.split())).data
    summary = beam_job.read_index(str(kaggle), data).summary()
    assert summary["captions_accepted"] == len(rows) == 45
    assert summary["caption_lines_rejected"] == summary["split_lines_rejected"] == 0
    assert sum(summary["images_per_split"].values()) == len(demo.images)
