"""Opening a dataset's files on any file system: the helpers every format's reader shares."""

from __future__ import annotations

import os
from typing import BinaryIO, Callable, Iterator, Set, Type

from components.ingestion.formats.index import DatasetLayoutError


def open_local(path: str) -> BinaryIO:
    return open(path, "rb")


def resolve(data_dir: str, path: str) -> str:
    """``path`` joined to ``data_dir`` unless it is absolute or a URI."""
    return path if os.path.isabs(path) or "://" in path else os.path.join(data_dir, path)


def open_required(path: str, open_binary: Callable[[str], BinaryIO],
                  error_type: Type[DatasetLayoutError] = DatasetLayoutError) -> BinaryIO:
    """``open_binary(path)``; any failure is an ``error_type`` naming the path."""
    try:
        return open_binary(path)
    except Exception as error:  # FileNotFoundError locally, BeamIOError and others remotely
        raise error_type(f"Required {error_type.dataset} file not readable: {path} ({error})") from error


def setting_hint(setting: str) -> str:
    """What a missing file's error adds: the setting that points at the file."""
    return f"the file is {setting}, relative to data.data_dir (--data_dir)"


def naming_setting(lines: Iterator, setting: str) -> Iterator:
    """``lines``, with a missing or unreadable file's error naming the setting that points at
    it (the error keeps its type)."""
    try:
        yield from lines
    except DatasetLayoutError as error:
        raise type(error)(f"{error}; {setting_hint(setting)}") from error


def list_image_files(image_dir: str) -> Set[str]:
    """Every file under ``image_dir`` as ``folder/name`` (one listing, no file reads).

    Raises:
      DatasetLayoutError: the folder does not exist.
    """
    if not os.path.isdir(image_dir):
        raise DatasetLayoutError(f"Image folder {image_dir!r} does not exist.")
    return {os.path.relpath(os.path.join(folder, name), image_dir).replace(os.sep, "/")
            for folder, _, names in os.walk(image_dir) for name in names}
