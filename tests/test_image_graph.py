"""Tests of the serving graph's image decoding: per-image errors with reasons, the pixel limit
read from each format's header before decoding, and the pixels of good images unchanged."""

import io

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from components import image_graph, resnet_features
from tests import image_fixtures

IMAGE_SIZE = 224


def _decode(images, max_pixels=40_000_000):
    function = tf.function(lambda batch: image_graph.decode_images(
        batch, IMAGE_SIZE, max_pixels, lambda pixels: resnet_features.resize_for_resnet(pixels, IMAGE_SIZE)))
    resized, errors = function(tf.constant(images, tf.string))
    return resized.numpy(), [error.decode() for error in errors.numpy()]


def _reference(image_bytes):
    pixels = tf.io.decode_image(image_bytes, channels=3, expand_animations=False)
    return resnet_features.resize_for_resnet(pixels, IMAGE_SIZE).numpy()


def _encoded(image_format, size=(300, 200), mode="RGB"):
    return image_fixtures.picture(mode=mode, size=size, image_format=image_format)


GOOD = {"jpeg": _encoded("JPEG"), "png": _encoded("PNG"), "gif": _encoded("GIF", mode="P"),
        "bmp": _encoded("BMP"), "gray_jpeg": _encoded("JPEG", mode="L"),
        "rgba_png": _encoded("PNG", mode="RGBA")}


def test_one_bad_image_fails_only_its_own_row_with_a_reason():
    good = GOOD["jpeg"]
    bad = {"garbage": (b"not an image at all", image_graph.UNSUPPORTED_FORMAT),
           "empty": (b"", image_graph.EMPTY),
           "truncated": (good[:len(good) // 3], image_graph.CORRUPT_IMAGE),
           "header_only": (good[:30], image_graph.CORRUPT_HEADER),
           "header_bomb_jpeg": (image_fixtures.header_bomb_jpeg(), image_graph.TOO_MANY_PIXELS),
           "pixel_bomb_png": (image_fixtures.pixel_bomb_png(), image_graph.TOO_MANY_PIXELS)}
    names = ["good_first", *bad, "good_last"]
    images = [good] + [image_bytes for image_bytes, _ in bad.values()] + [good]
    resized, errors = _decode(images)
    assert errors[0] == errors[-1] == ""
    np.testing.assert_allclose(resized[0], _reference(good), atol=1e-4)
    np.testing.assert_allclose(resized[-1], _reference(good), atol=1e-4)
    for row, (name, (_, reason)) in enumerate(bad.items(), start=1):
        assert errors[row].startswith(reason + ": "), (name, errors[row])
        assert not resized[row].any(), name
    assert len(errors) == len(names)


def test_every_format_is_decoded_as_tensorflow_decodes_it():
    names = list(GOOD)
    resized, errors = _decode([GOOD[name] for name in names])
    assert errors == [""] * len(names)
    for row, name in enumerate(names):
        np.testing.assert_allclose(resized[row], _reference(GOOD[name]), atol=1e-4, err_msg=name)


@pytest.mark.parametrize("name", ["jpeg", "png", "gif", "bmp"])
def test_pixel_limit_is_read_from_each_formats_header(name):
    """300x200 = 60,000 pixels against a limit of 59,999 and 60,000: a header read at the wrong
    offset (or width and height swapped) would say another size."""
    _, errors = _decode([GOOD[name]], max_pixels=59_999)
    assert errors == [f"{image_graph.TOO_MANY_PIXELS}: header says 300x200 = 60000 pixels, over "
                      "features.max_image_pixels = 59999"]
    assert _decode([GOOD[name]], max_pixels=60_000)[1] == [""]


def test_bottom_up_bmp_height_is_its_absolute_value():
    picture = Image.new("RGB", (30, 20))
    stream = io.BytesIO()
    picture.save(stream, format="BMP")
    data = bytearray(stream.getvalue())
    data[22:26] = (-20).to_bytes(4, "little", signed=True)  # top-down rows: negative height
    assert _decode([bytes(data)], max_pixels=599)[1][0].endswith("30x20 = 600 pixels, over "
                                                                  "features.max_image_pixels = 599")


def test_header_bombs_are_refused_by_their_header_size():
    _, errors = _decode([image_fixtures.header_bomb_jpeg(), image_fixtures.pixel_bomb_png()])
    assert errors == [
        f"{image_graph.TOO_MANY_PIXELS}: header says 12000x12000 = 144000000 pixels, over "
        "features.max_image_pixels = 40000000",
        f"{image_graph.TOO_MANY_PIXELS}: header says 8000x8000 = 64000000 pixels, over "
        "features.max_image_pixels = 40000000"]


def test_an_empty_batch_gives_empty_outputs():
    resized, errors = _decode([])
    assert resized.shape == (0, IMAGE_SIZE, IMAGE_SIZE, 3) and errors == []


def test_missing_resnet_weights_name_the_setting_that_points_at_them(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match=r"ResNet50 weights file not found: .*resnet\.h5; "
                                                r"the file is features\.resnet_weights \(--resnet_weights"):
        resnet_features.resolve_weights_file(str(tmp_path / "resnet.h5"))
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras"))
    with pytest.raises(FileNotFoundError, match=r"the setting is features\.resnet_weights"):
        resnet_features.resolve_weights_file("imagenet")
