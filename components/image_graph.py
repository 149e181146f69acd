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


def _surviving(indices, values, function, output_signature):
    """``function(value)`` for each value, as (indices it succeeded on, outputs)."""
    sentinel_index = tf.constant([-1], tf.int32)
    mapped = tf.data.Dataset.from_tensor_slices((indices, values)).map(
        lambda index, value: (index, function(value))).ignore_errors()
    sentinel = tf.data.Dataset.from_tensor_slices(
        (sentinel_index, tf.zeros([1] + output_signature.shape.as_list(), output_signature.dtype)))
    batch = mapped.concatenate(sentinel).batch(2 ** 31 - 1).get_single_element()
    keep = batch[0] >= 0
    return tf.boolean_mask(batch[0], keep), tf.boolean_mask(batch[1], keep)


def decode_images(images, image_size: int, max_pixels: int, resize):
    """``string [batch]`` → (``float32 [batch, image_size, image_size, 3]``, ``string [batch]``).

    ``resize`` maps ``uint8 [h, w, 3]`` to ``float32 [image_size, image_size, 3]``.
    """
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

    decodable = tf.equal(errors, "")
    decoded_indices, resized = _surviving(
        tf.boolean_mask(indices, decodable), tf.boolean_mask(images, decodable),
        lambda image_bytes: resize(tf.io.decode_image(image_bytes, channels=3, expand_animations=False)),
        tf.TensorSpec([image_size, image_size, 3], tf.float32))
    decoded = tf.scatter_nd(decoded_indices[:, tf.newaxis], tf.ones_like(decoded_indices, tf.bool), [batch])
    errors = tf.where(decodable & ~decoded, f"{CORRUPT_IMAGE}: corrupt or truncated image data", errors)
    resized_batch = tf.scatter_nd(decoded_indices[:, tf.newaxis], resized,
                                  tf.stack([batch, image_size, image_size, 3]))
    return resized_batch, errors
