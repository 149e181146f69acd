"""Safe decoding of untrusted image bytes into RGB pixel arrays (Pillow, no TensorFlow).

Ingestion reads files users bring, so every way a file can be bad ends in an
:class:`ImageRejected` with a reason instead of an exception from deep inside a
codec: empty files, bytes that are no image, truncated files, and decompression
bombs (the pixel count is checked from the header, before any pixel is decoded).
Grayscale, CMYK, palette and alpha images, PNG bytes behind a ``.jpg`` name and
EXIF-rotated photos are converted to upright RGB, not rejected.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
from PIL import Image, ImageOps

EMPTY_FILE = "empty_file"
NOT_AN_IMAGE = "not_an_image"
TRUNCATED_IMAGE = "truncated_image"
TOO_MANY_PIXELS = "too_many_pixels"


class ImageRejected(ValueError):
    """Raised for image bytes that cannot be turned into a picture, with a reason code."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def decode_rgb(image_bytes: bytes, max_pixels: int) -> np.ndarray:
    """Decodes image bytes to an upright ``uint8 [height, width, 3]`` RGB array.

    Raises:
      ImageRejected: with reason ``empty_file``, ``not_an_image``,
        ``truncated_image`` or ``too_many_pixels``.
    """
    if not image_bytes:
        raise ImageRejected(EMPTY_FILE, "file has zero bytes")
    with warnings.catch_warnings():
        # Our own pixel limit applies; Pillow's global bomb warning would only add noise.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            picture = Image.open(io.BytesIO(image_bytes))
        except Image.DecompressionBombError as error:
            raise ImageRejected(TOO_MANY_PIXELS, str(error)) from error
        except Exception as error:  # Pillow raises UnidentifiedImageError, SyntaxError, ...
            raise ImageRejected(NOT_AN_IMAGE, f"not a readable image ({error})") from error
        width, height = picture.size
        if width <= 0 or height <= 0:
            raise ImageRejected(NOT_AN_IMAGE, f"image has size {width}x{height}")
        if width * height > max_pixels:
            raise ImageRejected(TOO_MANY_PIXELS,
                                f"{width}x{height} = {width * height} pixels > limit {max_pixels}")
        try:
            picture.load()
            picture = ImageOps.exif_transpose(picture)
        except Exception as error:  # OSError "image file is truncated", decoder errors
            raise ImageRejected(TRUNCATED_IMAGE, f"cannot decode all pixels ({error})") from error
    if picture.mode in ("RGBA", "LA", "PA") or (picture.mode == "P" and "transparency" in picture.info):
        # Transparent pixels become white rather than whatever colour they hide.
        picture = picture.convert("RGBA")
        background = Image.new("RGBA", picture.size, (255, 255, 255, 255))
        picture = Image.alpha_composite(background, picture)
    return np.asarray(picture.convert("RGB"), dtype=np.uint8)
