"""Reading untrusted image files: bounded, inside the image folder, never decompressed by name.

Ingestion opens files named by text files it did not write, in folders other
people filled. :func:`read_image_file` returns a file's bytes only when it is a
regular file whose real path lies inside the image folder and whose size is at
most ``features.max_image_bytes``; anything else raises :class:`FileRejected`
with a reason, before a byte is read:

* ``missing_image_file``: no such file;
* ``outside_image_folder``: a symlink (or a chain of them) that resolves outside
  the folder, for example to ``/etc/passwd`` or ``/dev/zero``;
* ``not_a_regular_file``: a FIFO, a socket, a device or a directory (a FIFO
  would block the job forever waiting for a writer);
* ``file_too_large``: over ``features.max_image_bytes`` (checked from the size
  the file system reports, and again while reading, for a file that grows);
* ``image_read_error``: the file system failed otherwise.

Bytes are read as they are: a name ending in ``.gz`` or ``.bz2`` is not
decompressed (Beam's file systems would guess compression from it). What the
bytes hold is the decoder's question (``components.image_graph``).
"""

from __future__ import annotations

import os
import stat

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

MISSING_IMAGE_FILE = "missing_image_file"
OUTSIDE_IMAGE_FOLDER = "outside_image_folder"
NOT_A_REGULAR_FILE = "not_a_regular_file"
FILE_TOO_LARGE = "file_too_large"
IMAGE_READ_ERROR = "image_read_error"

_READ_CHUNK_BYTES = 1 << 20


class FileRejected(ValueError):
    """An image file that is not read, with a reason code."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def read_image_file(image_dir: str, name: str, max_bytes: int) -> bytes:
    """The bytes of ``image_dir/name`` (``name`` a plain file name), or :class:`FileRejected`."""
    if "://" in image_dir:
        return _read_remote(image_dir, name, max_bytes)
    return _read_local(image_dir, name, max_bytes)


def _too_large(name: str, size: int, max_bytes: int) -> FileRejected:
    return FileRejected(FILE_TOO_LARGE, f"{name} has {size} bytes, over features.max_image_bytes = "
                                        f"{max_bytes}")


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return kind
    return "special file"


def _read_local(image_dir: str, name: str, max_bytes: int) -> bytes:
    folder = os.path.realpath(image_dir)
    real_path = os.path.realpath(os.path.join(image_dir, name))
    if os.path.commonpath([folder, real_path]) != folder:
        raise FileRejected(OUTSIDE_IMAGE_FOLDER, f"{name} resolves to {real_path}, outside the image "
                                                 f"folder {folder}")
    try:
        info = os.stat(real_path)
    except FileNotFoundError as error:
        raise FileRejected(MISSING_IMAGE_FILE, f"no file {name} in {image_dir}") from error
    except OSError as error:
        raise FileRejected(IMAGE_READ_ERROR, f"{name}: {error}") from error
    if not stat.S_ISREG(info.st_mode):  # before opening: opening a device can act on it
        raise FileRejected(NOT_A_REGULAR_FILE, f"{name} is a {_kind(info.st_mode)}, not a regular file")
    if info.st_size > max_bytes:
        raise _too_large(name, info.st_size, max_bytes)
    try:
        # O_NONBLOCK: a file swapped for a FIFO after the check must not block the open;
        # O_NOFOLLOW: nor may one swapped for a symlink be followed.
        descriptor = os.open(real_path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY)
    except OSError as error:
        raise FileRejected(IMAGE_READ_ERROR, f"{name}: {error}") from error
    try:
        opened = os.fstat(descriptor)
        if not stat.S_ISREG(opened.st_mode):
            raise FileRejected(NOT_A_REGULAR_FILE, f"{name} is a {_kind(opened.st_mode)}, not a regular "
                                                   "file")
        os.set_blocking(descriptor, True)
        with os.fdopen(descriptor, "rb", closefd=False) as stream:
            return _read_bounded(stream, name, max_bytes)
    except OSError as error:
        raise FileRejected(IMAGE_READ_ERROR, f"{name}: {error}") from error
    finally:
        os.close(descriptor)


def _read_remote(image_dir: str, name: str, max_bytes: int) -> bytes:
    path = FileSystems.join(image_dir, name)
    try:
        matches = FileSystems.match([path])[0].metadata_list
    except Exception as error:  # BeamIOError and the file systems' own errors
        raise FileRejected(IMAGE_READ_ERROR, f"{path}: {error}") from error
    if not matches:
        raise FileRejected(MISSING_IMAGE_FILE, f"no file {name} in {image_dir}")
    if matches[0].size_in_bytes > max_bytes:
        raise _too_large(name, matches[0].size_in_bytes, max_bytes)
    try:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
            return _read_bounded(stream, name, max_bytes)
    except FileRejected:
        raise
    except Exception as error:
        raise FileRejected(IMAGE_READ_ERROR, f"{path}: {error}") from error


def _read_bounded(stream, name: str, max_bytes: int) -> bytes:
    chunks, size = [], 0
    while True:
        chunk = stream.read(min(_READ_CHUNK_BYTES, max_bytes + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            raise _too_large(name, size, max_bytes)
