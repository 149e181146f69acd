"""Image bytes for tests: good pictures in every mode ingestion must convert, and bad files."""

import io

import numpy as np
from PIL import Image


def picture(mode="RGB", size=(240, 260), image_format="JPEG", seed=0) -> bytes:
    rng = np.random.RandomState(seed)
    pixels = rng.randint(0, 255, size=(size[1], size[0], 3), dtype=np.uint8)
    image = Image.fromarray(pixels, "RGB")
    if mode != "RGB":
        image = image.convert(mode)
    stream = io.BytesIO()
    image.save(stream, format=image_format)
    return stream.getvalue()


def bad_files() -> dict:
    """file name -> (bytes, expected reason) for every decode-stage reject."""
    good = picture()
    return {
        "empty.jpg": (b"", "empty_file"),
        "text.jpg": (b"this is not a picture\n" * 20, "not_an_image"),
        "truncated.jpg": (good[: len(good) // 2], "truncated_image"),
        "huge.jpg": (picture(size=(700, 600)), "too_many_pixels"),  # with a 400,000-pixel limit
    }


def convertible_files() -> dict:
    """file name -> bytes that must be converted to RGB, not rejected."""
    return {
        "gray.jpg": picture("L"),
        "cmyk.jpg": picture("CMYK"),
        "png_named_jpg.jpg": picture(image_format="PNG"),
        "rgba.jpg": picture("RGBA", image_format="PNG"),
        "palette.jpg": picture("P", image_format="PNG"),
    }


def header_bomb_jpeg(width=12000, height=12000) -> bytes:
    """A 16x16 JPEG whose SOF0 header claims ``width`` x ``height``: a few hundred bytes that a
    decoder trusting the header would expand to width x height x 3 bytes (of corrupt data)."""
    stream = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 10, 10)).save(stream, format="JPEG")
    data = bytearray(stream.getvalue())
    start_of_frame = data.index(b"\xff\xc0")
    data[start_of_frame + 5:start_of_frame + 7] = height.to_bytes(2, "big")
    data[start_of_frame + 7:start_of_frame + 9] = width.to_bytes(2, "big")
    return bytes(data)


def pixel_bomb_png(width=8000, height=8000) -> bytes:
    """A real, valid ``width`` x ``height`` PNG of one colour: tens of KB on disk."""
    stream = io.BytesIO()
    Image.new("L", (width, height)).save(stream, format="PNG", optimize=True)
    return stream.getvalue()
