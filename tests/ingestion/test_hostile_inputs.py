"""The standalone ingestion job on a folder built to hurt it: a FIFO, symlinks out of the folder
and to /dev/zero, a sparse 3 GiB file, an EPS file with a Ghostscript on PATH that must never
run, compressed-looking names, formats the serving graph cannot decode, a caption index past
int64, a reused index, seven captions for one image and byte-order marks. The job must finish
(under a timeout), with every (image, caption) pair accepted or rejected with its reason."""

import json
import os
import stat
import subprocess
import sys

import pytest

from components.ingestion import demo_data
from tests import image_fixtures
from tests.paths import REPO_ROOT

pytestmark = pytest.mark.slow

EPS = (b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\n"
       b"newpath 0 0 moveto 16 0 lineto 16 16 lineto closepath fill\nshowpage\n%%EOF\n")


def _hostile_files(image_dir, outside_dir):
    """name -> the reason each file must be rejected with (None: accepted)."""
    good = image_fixtures.picture()
    os.mkfifo(image_dir / "fifo.jpg")
    (outside_dir / "secret.jpg").write_bytes(good)
    os.symlink(str(outside_dir / "secret.jpg"), image_dir / "escape.jpg")
    os.symlink("/dev/zero", image_dir / "zero.jpg")
    with open(image_dir / "sparse.jpg", "wb") as stream:
        stream.truncate(3 * 1024 ** 3)
    (image_dir / "vector.jpg").write_bytes(EPS)
    (image_dir / "photo.jpg.gz").write_bytes(good)  # a JPEG, whatever the name says
    (image_dir / "photo.jpg.bz2").write_bytes(good)
    (image_dir / "folder.jpg").mkdir()
    (image_dir / "seven.jpg").write_bytes(good)
    return {
        "fifo.jpg": "not_a_regular_file",
        "escape.jpg": "outside_image_folder",
        "zero.jpg": "outside_image_folder",
        "sparse.jpg": "file_too_large",
        "vector.jpg": "unsupported_format",
        "photo.jpg.gz": None,
        "photo.jpg.bz2": None,
        "folder.jpg": "not_a_regular_file",
        "tiff.jpg": "unsupported_format",
        "webp.jpg": "unsupported_format",
    }


def test_standalone_job_finishes_on_hostile_files_and_counts_every_pair(tmp_path):
    root = tmp_path / "data"
    demo = demo_data.generate(str(root), num_images=3, seed=5, split_fractions=(1.0, 0.0, 0.0))
    image_dir = root / "Flicker8k_Dataset"
    outside = tmp_path / "outside"
    outside.mkdir()
    expected = _hostile_files(image_dir, outside)
    for name in ("tiff.jpg", "webp.jpg"):
        (image_dir / name).write_bytes(image_fixtures.bad_files()[name][0])

    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    ghostscript_called = tmp_path / "ghostscript_was_called"
    (fake_bin / "gs").write_text(f"#!/bin/sh\ntouch {ghostscript_called}\nexit 1\n")
    (fake_bin / "gs").chmod(stat.S_IRWXU)

    token_path = root / "Flickr8k_text" / "Flickr8k.token.txt"
    train_path = root / "Flickr8k_text" / "Flickr_8k.trainImages.txt"
    first_image = demo.splits["train"][0]
    lines = [f"{name}#{n}\tA picture of a thing number {n} ." for name in expected for n in range(2)]
    lines += [f"seven.jpg#{n}\tA picture with caption {n} ." for n in range(7)]
    lines += [f"{first_image}#99999999999999999999999\tA caption whose index overflows .",
              f"{first_image}#0\tA second caption with index 0 ."]
    # A byte-order mark at the start of both files, as Windows editors write them.
    token_path.write_bytes(b"\xef\xbb\xbf" + token_path.read_bytes()
                           + "".join(line + "\n" for line in lines).encode("utf-8"))
    train_path.write_bytes(b"\xef\xbb\xbf" + train_path.read_bytes() + "".join(
        f"{name}\n" for name in [*expected, "seven.jpg"]).encode("utf-8"))

    output_dir = tmp_path / "examples"
    environment = dict(os.environ, PATH=f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    job = subprocess.run(
        [sys.executable, "-m", "pipeline.ingest", f"--data_dir={root}",
         f"--output_dir={output_dir}", "--runner=DirectRunner"],
        cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=420)
    assert job.returncode == 0, job.stderr[-3000:]

    summary = json.loads((output_dir / "ingestion_summary.json").read_text())
    assert summary["pairs_accepted"] + summary["pairs_rejected"] == summary["pairs_read"]
    assert summary["pairs_read"] == 3 * 5 + 2 * len(expected) + 7 + 2
    by_reason = summary["rejected_pairs_by_reason"]
    for reason in set(filter(None, expected.values())):
        assert by_reason.pop(reason) == 2 * list(expected.values()).count(reason), reason
    assert by_reason == {"caption_index_out_of_range": 1, "duplicate_caption_index": 1}
    assert not ghostscript_called.exists(), "ingestion ran Ghostscript on an EPS file"

    with open(next((output_dir / "rejects").glob("*.jsonl")), encoding="utf-8") as stream:
        rows = [json.loads(line) for line in stream]
    details = {row["image_id"]: row["detail"] for row in rows}
    assert "FIFO" in details["fifo.jpg"] and "/dev/zero" in details["zero.jpg"]
    assert "features.max_image_bytes" in details["sparse.jpg"]

    demo_train = len(demo.splits["train"])
    # The demo's train images (the first under its BOM-prefixed split line), seven.jpg with all
    # seven captions, and the two compressed-looking names; the reader passes every hostile
    # file on (its text is fine), and the job rejects each for what the file is.
    assert summary["images_per_split"]["train"] == demo_train + 1 + 2, summary
    assert summary["reader"]["images_per_split"]["train"] == demo_train + 1 + len(expected)
    assert summary["reader"]["captions_per_split"]["train"] == demo_train * 5 + 2 * len(expected) + 7
