"""Tests of safe image decoding: every bad file has its reason, odd modes are converted."""

import io

import numpy as np
import pytest
from PIL import Image

from components.ingestion import image_decoding
from tests import image_fixtures

LIMIT = 400_000


@pytest.mark.parametrize("name", sorted(image_fixtures.bad_files()))
def test_bad_bytes_rejected_with_reason(name):
    image_bytes, reason = image_fixtures.bad_files()[name]
    with pytest.raises(image_decoding.ImageRejected) as raised:
        image_decoding.decode_rgb(image_bytes, LIMIT)
    assert raised.value.reason == reason


@pytest.mark.parametrize("name", sorted(image_fixtures.convertible_files()))
def test_other_modes_and_formats_become_rgb(name):
    pixels = image_decoding.decode_rgb(image_fixtures.convertible_files()[name], LIMIT)
    assert pixels.dtype == np.uint8 and pixels.shape == (260, 240, 3)


def test_pixel_limit_checked_from_header_before_decoding():
    # A PNG that declares 12000x12000 pixels but is tiny on disk; decoding it would need 432 MB.
    stream = io.BytesIO()
    Image.new("L", (12000, 12000)).save(stream, format="PNG")
    with pytest.raises(image_decoding.ImageRejected) as raised:
        image_decoding.decode_rgb(stream.getvalue(), 40_000_000)
    assert raised.value.reason == "too_many_pixels"


def test_transparent_pixels_become_white():
    stream = io.BytesIO()
    Image.new("RGBA", (8, 8), (255, 0, 0, 0)).save(stream, format="PNG")
    pixels = image_decoding.decode_rgb(stream.getvalue(), LIMIT)
    assert (pixels == 255).all()


def test_exif_rotation_is_applied():
    stream = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    Image.new("RGB", (40, 20), (0, 128, 0)).save(stream, format="JPEG", exif=exif)
    assert image_decoding.decode_rgb(stream.getvalue(), LIMIT).shape == (40, 20, 3)
