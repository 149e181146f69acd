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
    """file name -> (bytes, expected reason) for every decode-stage reject (reasons of
    ``components.image_graph``)."""
    good = picture()
    return {
        "empty.jpg": (b"", "empty_image"),
        "text.jpg": (b"this is not a picture\n" * 20, "unsupported_format"),
        "truncated.jpg": (good[: len(good) // 2], "corrupt_image"),
        "header_only.jpg": (good[:30], "corrupt_header"),  # JPEG magic, no frame header yet
        "huge.jpg": (picture(size=(700, 600)), "too_many_pixels"),  # with a 400,000-pixel limit
        # Formats Pillow reads and the serving graph does not: never trained on.
        "tiff.jpg": (picture(image_format="TIFF"), "unsupported_format"),
        "webp.jpg": (picture(image_format="WEBP"), "unsupported_format"),
    }


def sixteen_bit_png(size=(240, 260), seed=0) -> bytes:
    rng = np.random.RandomState(seed)
    stream = io.BytesIO()
    Image.fromarray(rng.randint(0, 65535, size=(size[1], size[0]), dtype=np.uint16)).save(
        stream, format="PNG")
    return stream.getvalue()


def exif_rotated_jpeg(orientation=6, size=(240, 200), seed=0) -> bytes:
    """A JPEG stored ``size`` wide whose EXIF orientation says how to turn it upright."""
    rng = np.random.RandomState(seed)
    image = Image.fromarray(rng.randint(0, 255, size=(size[1], size[0], 3), dtype=np.uint8), "RGB")
    exif = image.getexif()
    exif[0x0112] = orientation
    stream = io.BytesIO()
    image.save(stream, format="JPEG", exif=exif.tobytes())
    return stream.getvalue()


def convertible_files() -> dict:
    """file name -> bytes that must be converted to upright RGB, not rejected."""
    progressive = io.BytesIO()
    Image.open(io.BytesIO(picture())).save(progressive, format="JPEG", progressive=True)
    return {
        "gray.jpg": picture("L"),
        "cmyk.jpg": picture("CMYK"),
        "png_named_jpg.jpg": picture(image_format="PNG"),
        "rgba.jpg": picture("RGBA", image_format="PNG"),
        "gray_alpha.jpg": picture("LA", image_format="PNG"),
        "palette.jpg": picture("P", image_format="PNG"),
        "sixteen_bit.png": sixteen_bit_png(),
        "progressive.jpg": progressive.getvalue(),
        "exif_rotated.jpg": exif_rotated_jpeg(),
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
