"""Tests of the generated demo dataset: layout, determinism, captions true of the pictures."""

import hashlib
import os

import numpy as np
import pytest
from PIL import Image

from components.ingestion import demo_data
from components.ingestion.formats import flickr8k


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return demo_data.generate(str(tmp_path_factory.mktemp("demo")), num_images=40, seed=3)


def _digest(directory):
    digest = hashlib.sha256()
    for root, _, files in sorted(os.walk(directory)):
        for name in sorted(files):
            digest.update(name.encode())
            with open(os.path.join(root, name), "rb") as stream:
                digest.update(stream.read())
    return digest.hexdigest()


def test_layout_reads_back_with_zero_rejects(demo):
    index = flickr8k.read_flickr8k(demo.data_dir,
                                   image_dir=os.path.join(demo.data_dir, "Flicker8k_Dataset"))
    summary = index.summary()
    assert index.rejects == ()
    assert summary["caption_lines_read"] == 40 * 5 == summary["captions_accepted"]
    assert summary["images_per_split"] == {"train": 32, "dev": 4, "test": 4}
    assert all(len(record.captions) == 5 for record in index.records())
    assert {record.image_id for record in index.records() if record.split == "test"} == set(
        demo.splits["test"])


def test_images_are_real_jpegs_of_at_least_224_pixels(demo):
    for image in demo.images:
        path = os.path.join(demo.data_dir, "Flicker8k_Dataset", image.image_id)
        with open(path, "rb") as stream:
            assert stream.read(3) == b"\xff\xd8\xff"
        with Image.open(path) as picture:
            assert picture.format == "JPEG" and picture.mode == "RGB"
            assert min(picture.size) >= 224
            assert picture.size == (image.width, image.height)


def test_same_seed_same_bytes_other_seed_other_bytes(demo, tmp_path):
    again = demo_data.generate(str(tmp_path / "again"), num_images=40, seed=3)
    other = demo_data.generate(str(tmp_path / "other"), num_images=40, seed=4)
    assert _digest(again.data_dir) == _digest(demo.data_dir)
    assert _digest(other.data_dir) != _digest(demo.data_dir)


def test_five_distinct_captions_name_only_the_drawn_colours_and_shapes(demo):
    for image in demo.images:
        captions = demo_data.captions_for(image.shapes)
        assert len(set(captions)) == 5
        drawn = {spec.colour for spec in image.shapes} | {spec.shape for spec in image.shapes}
        named_words = set(demo_data.COLOURS) | set(demo_data.SHAPES)
        for caption in captions:
            words = set(caption.lower().split())
            assert words & named_words <= drawn, caption
            assert image.shapes[0].colour in words and image.shapes[0].shape in words, caption
        for spec in image.shapes:
            assert sum(spec.colour in caption.split() for caption in captions) >= 4


def test_shape_colour_is_in_the_picture_where_the_caption_says(demo):
    """The named colour dominates the named region: captions are a function of the pixels."""
    checked = 0
    for image in demo.images:
        if len(image.shapes) != 1 or image.shapes[0].size != "large":
            continue
        spec = image.shapes[0]
        path = os.path.join(demo.data_dir, "Flicker8k_Dataset", image.image_id)
        pixels = np.asarray(Image.open(path), dtype=np.float64)
        fraction_x, fraction_y = demo_data.POSITIONS[spec.position]
        row, column = int(fraction_y * image.height), int(fraction_x * image.width)
        patch = pixels[row - 3:row + 4, column - 3:column + 4].reshape(-1, 3).mean(axis=0)
        nearest = min(demo_data.COLOURS, key=lambda name: np.sum(
            (np.asarray(demo_data.COLOURS[name]) - patch) ** 2))
        assert nearest == spec.colour, (image.image_id, spec, patch)
        checked += 1
    assert checked >= 5


def test_synthetic_glove_covers_demo_vocabulary_and_is_named_synthetic(demo):
    assert "synthetic" in os.path.basename(demo.glove_path)
    words = {}
    with open(demo.glove_path, encoding="utf-8") as stream:
        for line in stream:
            parts = line.rstrip("\n").split(" ")
            words[parts[0]] = parts[1:]
    assert set(demo_data.demo_vocabulary()) <= set(words)
    assert set(demo_data.DISTRACTOR_WORDS) <= set(words)
    assert {len(vector) for vector in words.values()} == {demo_data.SYNTHETIC_GLOVE_DIM}


def test_bad_arguments_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="at least 3 images"):
        demo_data.generate(str(tmp_path), num_images=2)
    with pytest.raises(ValueError, match="summing to 1"):
        demo_data.generate(str(tmp_path), num_images=10, split_fractions=(0.5, 0.5, 0.5))
