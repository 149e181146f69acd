"""Ingestion's live progress, across Beam's worker processes: counts in files a parent polls.

Beam reports a job's counters to the launching process only when the job ends,
and DirectRunner's worker processes log to their own standard error, so while
ResNet50 runs over thousands of photos the launching process sees nothing. When
``PROGRESS_DIR_ENV`` names a folder (the local runner sets it; worker
processes inherit the environment), every DoFn instance that finishes images
rewrites its own ``<pid>-<instance>.count`` there, at most once a second and at
the end of each bundle, and the job writes the number of images it will handle
to ``total``. :func:`read` sums them. Unset (Dataflow, tests, the TFDS builder),
nothing is written.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Optional, Tuple

PROGRESS_DIR_ENV = "CAPTIONING_PROGRESS_DIR"
TOTAL_FILE = "total"
COUNT_SUFFIX = ".count"
WRITE_EVERY_S = 1.0


def _write(path: str, value: int) -> None:
    temporary = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(temporary, "w", encoding="ascii") as stream:
        stream.write(str(value))
    os.replace(temporary, path)  # a reader never sees a half-written number


def progress_dir() -> Optional[str]:
    return os.environ.get(PROGRESS_DIR_ENV) or None


def write_total(total: int) -> None:
    """The number of images the job will finish (read, rejected or turned into examples)."""
    directory = progress_dir()
    if directory:
        os.makedirs(directory, exist_ok=True)
        _write(os.path.join(directory, TOTAL_FILE), total)


class ImageCounter:
    """Counts the images one DoFn instance finished; create it in ``setup``."""

    def __init__(self):
        self._directory = progress_dir()
        self._path = (os.path.join(self._directory, f"{os.getpid()}-{uuid.uuid4().hex}{COUNT_SUFFIX}")
                      if self._directory else None)
        self._count = 0
        self._written_at = 0.0

    def add(self, images: int = 1) -> None:
        self._count += images
        if self._path and time.monotonic() - self._written_at >= WRITE_EVERY_S:
            self.flush()

    def flush(self) -> None:
        if self._path:
            try:
                os.makedirs(self._directory, exist_ok=True)
                _write(self._path, self._count)
            except OSError:  # progress is a display, never a reason to fail the job
                pass
            self._written_at = time.monotonic()


def read(directory: str) -> Tuple[int, Optional[int]]:
    """``(images finished so far, total or None before the job wrote it)``."""
    done, total = 0, None
    try:
        names = os.listdir(directory)
    except OSError:
        return 0, None
    for name in names:
        if not (name.endswith(COUNT_SUFFIX) or name == TOTAL_FILE):
            continue
        try:
            with open(os.path.join(directory, name), encoding="ascii") as stream:
                value = int(stream.read() or 0)
        except (OSError, ValueError):
            continue
        if name == TOTAL_FILE:
            total = value
        else:
            done += value
    return done, total
