"""In-graph decoding of untrusted image bytes for the serving signatures.

A serving request is a batch of byte strings nobody checked. ``decode_images``
turns it into resized pixels for ResNet50 and an ``error`` string per image
(empty when the image is fine), so one bad image never fails the batch:

* the size is read from the header before anything is decoded (PNG ``IHDR``,
  GIF's logical screen, BMP's info header, JPEG's ``SOF`` marker through
  ``tf.io.extract_jpeg_shape``), and an image over ``max_pixels`` is refused
  without its pixels ever being allocated;
* bytes that are empty, no JPEG/PNG/GIF/BMP, a corrupt header or corrupt or
  truncated pixel data get their reason; the image's row is zeros.

Decoded pixels follow one rule, which ingestion uses too (it runs this module
on the files it reads), so the model is trained on the pixels serving computes:
a JPEG's EXIF orientation is applied (the photo comes out upright), grayscale
becomes three equal channels, CMYK and palette images become RGB, 16-bit PNGs
are scaled to 8 bits, and transparent pixels are composited over white. Only
the first frame of a GIF is used. Other formats (TIFF, WebP, EPS, ...) are
``unsupported_format``.

TensorFlow ops raise instead of returning a status, so the two steps that can
fail on bad bytes (reading a JPEG header, decoding) run as ``tf.data`` maps
with ``ignore_errors``: an image whose index does not come out failed.
"""

import tensorflow as tf

EMPTY = "empty_image"
UNSUPPORTED_FORMAT = "unsupported_format"
CORRUPT_HEADER = "corrupt_header"
TOO_MANY_PIXELS = "too_many_pixels"
CORRUPT_IMAGE = "corrupt_image"

_JPEG, _PNG, _GIF, _BMP = 1, 2, 3, 4
_HEADER_BYTES = 32  # the fixed-offset headers (PNG, GIF, BMP) lie in the first 26 bytes
# EXIF lives in an APP1 segment of at most 64 KiB near the start of a JPEG.
_EXIF_SCAN_BYTES = 2 ** 16 + 64
_EXIF_MAX_SEGMENTS = 16  # APPn / COM segments skipped looking for APP1 "Exif"
_EXIF_MAX_ENTRIES = 64  # IFD0 entries searched for the orientation tag
_ORIENTATION_TAG = 0x0112


def _header_bytes(image_bytes):
    """The first ``_HEADER_BYTES`` bytes as int64, zero-padded: ``[batch, _HEADER_BYTES]``."""
    padded = tf.strings.substr(image_bytes + b"\0" * _HEADER_BYTES, 0, _HEADER_BYTES)
    return tf.reshape(tf.cast(tf.io.decode_raw(padded, tf.uint8), tf.int64), [-1, _HEADER_BYTES])


def _format_codes(header):
    """One of _JPEG, _PNG, _GIF, _BMP per image by its magic bytes; 0 for anything else."""
    def starts_with(*magic):
        return tf.reduce_all(tf.equal(header[:, :len(magic)], tf.constant(magic, tf.int64)), axis=1)

    codes = tf.zeros_like(header[:, 0])
    for code, magic in ((_JPEG, (0xFF, 0xD8, 0xFF)), (_PNG, (0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A)),
                        (_GIF, (0x47, 0x49, 0x46, 0x38)), (_BMP, (0x42, 0x4D))):
        codes = tf.where(starts_with(*magic), tf.constant(code, tf.int64), codes)
    return codes


def _big_endian(header, start, count):
    return tf.add_n([header[:, start + i] * 256 ** (count - 1 - i) for i in range(count)])


def _little_endian(header, start, count):
    return tf.add_n([header[:, start + i] * 256 ** i for i in range(count)])


def _signed_32(value):
    return tf.where(value >= 2 ** 31, value - 2 ** 32, value)


def _fixed_header_sizes(header, codes):
    """(height, width) from the PNG/GIF/BMP headers; -1 where the format is another."""
    png = (_big_endian(header, 20, 4), _big_endian(header, 16, 4))
    gif = (_little_endian(header, 8, 2), _little_endian(header, 6, 2))
    bmp = (tf.abs(_signed_32(_little_endian(header, 22, 4))),  # negative: rows stored top-down
           tf.abs(_signed_32(_little_endian(header, 18, 4))))
    height = tf.fill(tf.shape(codes), tf.constant(-1, tf.int64))
    width = height
    for code, (code_height, code_width) in ((_PNG, png), (_GIF, gif), (_BMP, bmp)):
        height = tf.where(codes == code, code_height, height)
        width = tf.where(codes == code, code_width, width)
    return height, width


def _surviving(indices, values, function, output_signature, parallel=False):
    """``function(value)`` for each value, as (indices it succeeded on, outputs)."""
    sentinel_index = tf.constant([-1], tf.int32)
    dataset = tf.data.Dataset.from_tensor_slices((indices, values))
    if parallel:
        mapped = dataset.map(lambda index, value: (index, function(value)),
                             num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    else:
        mapped = dataset.map(lambda index, value: (index, function(value)))
    mapped = mapped.ignore_errors()
    sentinel = tf.data.Dataset.from_tensor_slices(
        (sentinel_index, tf.zeros([1] + output_signature.shape.as_list(), output_signature.dtype)))
    batch = mapped.concatenate(sentinel).batch(2 ** 31 - 1).get_single_element()
    keep = batch[0] >= 0
    return tf.boolean_mask(batch[0], keep), tf.boolean_mask(batch[1], keep)


def _exif_orientation(image_bytes):
    """A JPEG's EXIF orientation, 1..8; 1 (upright) when absent, unreadable or out of range.

    Every read is a gather at a clipped index of a fixed-size prefix, so no bytes can make
    this raise; a corrupt EXIF block reads as some orientation or as 1, never as an error.
    """
    prefix = tf.strings.substr(image_bytes, 0, _EXIF_SCAN_BYTES)
    padded = tf.strings.substr(prefix + b"\0" * _EXIF_SCAN_BYTES, 0, _EXIF_SCAN_BYTES)
    data = tf.cast(tf.io.decode_raw(padded, tf.uint8), tf.int32)

    def byte(offset):
        return tf.gather(data, tf.clip_by_value(offset, 0, _EXIF_SCAN_BYTES - 1))

    def segment_step(position, tiff_start, _):
        marker = byte(position + 1)
        exif = tf.reduce_all(tf.equal(
            tf.stack([byte(position + 4 + i) for i in range(6)]), tf.constant(list(b"Exif\0\0"))))
        found = tf.equal(byte(position), 0xFF) & tf.equal(marker, 0xE1) & exif
        skippable = tf.equal(byte(position), 0xFF) & (
            ((marker >= 0xE0) & (marker <= 0xEF)) | tf.equal(marker, 0xFE))
        next_position = position + 2 + byte(position + 2) * 256 + byte(position + 3)
        return (next_position, tf.where(found, position + 10, tiff_start), skippable & ~found)

    _, tiff, _ = tf.while_loop(
        lambda position, tiff_start, keep_going: keep_going,
        segment_step, (tf.constant(2), tf.constant(-1), tf.constant(True)),
        maximum_iterations=_EXIF_MAX_SEGMENTS)
    little_endian = tf.equal(byte(tiff), 0x49)  # "II"; "MM" is big-endian

    def unsigned(offset, count):
        values = [byte(offset + i) for i in range(count)]
        little = sum(value * 256 ** i for i, value in enumerate(values))
        big = sum(value * 256 ** (count - 1 - i) for i, value in enumerate(values))
        return tf.where(little_endian, little, big)

    ifd = tiff + tf.clip_by_value(unsigned(tiff + 4, 4), 0, _EXIF_SCAN_BYTES)
    entry_count = unsigned(ifd, 2)
    entries = tf.range(_EXIF_MAX_ENTRIES)
    entry_offsets = ifd + 2 + 12 * entries
    tags = tf.map_fn(lambda offset: unsigned(offset, 2), entry_offsets)
    values = tf.map_fn(lambda offset: unsigned(offset + 8, 2), entry_offsets)
    matches = tf.equal(tags, _ORIENTATION_TAG) & (entries < entry_count)
    orientation = tf.reduce_max(tf.where(matches, values, 0))
    valid = (tiff >= 0) & (orientation >= 1) & (orientation <= 8)
    return tf.where(valid, orientation, 1)


def _orient(pixels, orientation):
    """Applies EXIF orientation 1..8 (the transforms of Pillow's ``ImageOps.exif_transpose``)."""
    branches = [
        lambda: pixels,
        lambda: tf.reverse(pixels, [1]),
        lambda: tf.reverse(pixels, [0, 1]),
        lambda: tf.reverse(pixels, [0]),
        lambda: tf.transpose(pixels, [1, 0, 2]),
        lambda: tf.reverse(tf.transpose(pixels, [1, 0, 2]), [1]),
        lambda: tf.reverse(tf.transpose(pixels, [1, 0, 2]), [0, 1]),
        lambda: tf.reverse(tf.transpose(pixels, [1, 0, 2]), [0]),
    ]
    return tf.switch_case(orientation - 1, branches)


def decode_upright_rgb(image_bytes):
    """One image's bytes → ``uint8 [height, width, 3]`` by the module's rule (raises on
    corrupt data: run it where errors are caught, as :func:`decode_images` does)."""
    decoded = tf.io.decode_image(image_bytes, channels=0, expand_animations=False)
    decoded.set_shape([None, None, None])
    channels = tf.shape(decoded)[-1]
    pixels = tf.cast(decoded, tf.float32)
    has_alpha = tf.equal(channels % 2, 0)  # gray + alpha (2) or RGBA (4)
    colour = tf.cond(channels - tf.cast(has_alpha, tf.int32) >= 3,
                     lambda: pixels[..., :3], lambda: tf.tile(pixels[..., :1], [1, 1, 3]))
    alpha = tf.cond(has_alpha, lambda: pixels[..., -1:] / 255.0, lambda: tf.ones_like(pixels[..., :1]))
    composed = tf.cast(tf.round(colour * alpha + 255.0 * (1.0 - alpha)), tf.uint8)
    is_jpeg = tf.equal(tf.strings.substr(image_bytes, 0, 3), b"\xff\xd8\xff")
    orientation = tf.cond(is_jpeg, lambda: _exif_orientation(image_bytes), lambda: tf.constant(1))
    return _orient(composed, orientation)


def header_errors(images, max_pixels: int):
    """``string [batch]`` → ``string [batch]``: why each image cannot be decoded, judged from
    its length and header alone (empty when nothing there is wrong)."""
    batch = tf.shape(images)[0]
    indices = tf.range(batch)
    lengths = tf.cast(tf.strings.length(images), tf.int64)
    header = _header_bytes(images)
    codes = _format_codes(header)
    height, width = _fixed_header_sizes(header, codes)

    jpeg_indices, jpeg_shapes = _surviving(
        tf.boolean_mask(indices, codes == _JPEG), tf.boolean_mask(images, codes == _JPEG),
        lambda image_bytes: tf.cast(tf.io.extract_jpeg_shape(image_bytes), tf.int64),
        tf.TensorSpec([3], tf.int64))
    height = tf.tensor_scatter_nd_update(height, jpeg_indices[:, tf.newaxis], jpeg_shapes[:, 0])
    width = tf.tensor_scatter_nd_update(width, jpeg_indices[:, tf.newaxis], jpeg_shapes[:, 1])

    pixels = height * width
    errors = tf.fill([batch], "")
    too_many = tf.strings.join([
        TOO_MANY_PIXELS, ": header says ", tf.strings.as_string(width), "x", tf.strings.as_string(height),
        " = ", tf.strings.as_string(pixels), f" pixels, over features.max_image_pixels = {max_pixels}"])
    checks = [  # the first failing check names the error
        (lengths == 0, tf.constant(f"{EMPTY}: zero bytes")),
        (codes == 0, tf.constant(f"{UNSUPPORTED_FORMAT}: not a JPEG, PNG, GIF or BMP image")),
        ((height <= 0) | (width <= 0), tf.constant(f"{CORRUPT_HEADER}: no image size in the header")),
        (pixels > max_pixels, too_many)]
    for failed, message in reversed(checks):
        errors = tf.where(failed, message, errors)
    return errors


CORRUPT_IMAGE_ERROR = f"{CORRUPT_IMAGE}: corrupt or truncated image data"


def decode_images(images, image_size: int, max_pixels: int, resize):
    """``string [batch]`` → (``float32 [batch, image_size, image_size, 3]``, ``string [batch]``).

    ``resize`` maps ``uint8 [h, w, 3]`` to ``float32 [image_size, image_size, 3]``.
    """
    batch = tf.shape(images)[0]
    indices = tf.range(batch)
    errors = header_errors(images, max_pixels)
    decodable = tf.equal(errors, "")
    decoded_indices, resized = _surviving(
        tf.boolean_mask(indices, decodable), tf.boolean_mask(images, decodable),
        lambda image_bytes: resize(decode_upright_rgb(image_bytes)),
        tf.TensorSpec([image_size, image_size, 3], tf.float32), parallel=True)
    decoded = tf.scatter_nd(decoded_indices[:, tf.newaxis], tf.ones_like(decoded_indices, tf.bool), [batch])
    errors = tf.where(decodable & ~decoded, CORRUPT_IMAGE_ERROR, errors)
    resized_batch = tf.scatter_nd(decoded_indices[:, tf.newaxis], resized,
                                  tf.stack([batch, image_size, image_size, 3]))
    return resized_batch, errors
