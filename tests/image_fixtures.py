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
