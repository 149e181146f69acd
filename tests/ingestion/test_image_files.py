"""Tests of reading untrusted image files: FIFOs, devices, symlinks out of the folder, huge
files and compression-looking names each end as a reason, and nothing blocks."""

import gzip
import os
import signal

import pytest

from components.ingestion import image_files
from tests import image_fixtures

LIMIT = 50_000_000


@pytest.fixture(autouse=True)
def _never_hang():
    """A read that blocks (a FIFO opened without O_NONBLOCK) fails the test instead of the suite."""
    def _timeout(signum, frame):
        raise TimeoutError("read_image_file blocked")

    previous = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture()
def image_dir(tmp_path):
    folder = tmp_path / "images"
    folder.mkdir()
    (folder / "good.jpg").write_bytes(image_fixtures.picture())
    return folder


def _rejected(image_dir, name, max_bytes=LIMIT):
    with pytest.raises(image_files.FileRejected) as raised:
        image_files.read_image_file(str(image_dir), name, max_bytes)
    return raised.value


def test_regular_file_and_symlink_inside_the_folder_are_read(image_dir):
    os.symlink("good.jpg", image_dir / "alias.jpg")
    expected = (image_dir / "good.jpg").read_bytes()
    assert image_files.read_image_file(str(image_dir), "good.jpg", LIMIT) == expected
    assert image_files.read_image_file(str(image_dir), "alias.jpg", LIMIT) == expected


def test_fifo_is_rejected_without_blocking(image_dir):
    # Before, ingestion opened it and waited for a writer until the job was killed.
    os.mkfifo(image_dir / "x.jpg")
    rejected = _rejected(image_dir, "x.jpg")
    assert rejected.reason == image_files.NOT_A_REGULAR_FILE and "FIFO" in rejected.detail


def test_directory_is_not_a_regular_file(image_dir):
    (image_dir / "folder.jpg").mkdir()
    assert _rejected(image_dir, "folder.jpg").reason == image_files.NOT_A_REGULAR_FILE


@pytest.mark.parametrize("target", ["secret", "/dev/zero", "/etc/passwd"])
def test_symlink_resolving_outside_the_folder_is_never_followed(image_dir, tmp_path, target):
    if target == "secret":
        (tmp_path / "secret").write_bytes(image_fixtures.picture())
        target = str(tmp_path / "secret")
    os.symlink(target, image_dir / "link.jpg")
    rejected = _rejected(image_dir, "link.jpg")
    assert rejected.reason == image_files.OUTSIDE_IMAGE_FOLDER
    assert os.path.realpath(target) in rejected.detail


def test_chain_of_symlinks_out_of_the_folder(image_dir, tmp_path):
    (tmp_path / "outside.jpg").write_bytes(image_fixtures.picture())
    os.symlink(str(tmp_path / "outside.jpg"), image_dir / "hop2.jpg")
    os.symlink("hop2.jpg", image_dir / "hop1.jpg")
    assert _rejected(image_dir, "hop1.jpg").reason == image_files.OUTSIDE_IMAGE_FOLDER


def test_sparse_multi_gigabyte_file_is_rejected_before_reading(image_dir):
    with open(image_dir / "huge.jpg", "wb") as stream:
        stream.truncate(3 * 1024 ** 3)  # 3 GiB, no blocks on disk
    rejected = _rejected(image_dir, "huge.jpg")
    assert rejected.reason == image_files.FILE_TOO_LARGE
    assert f"{3 * 1024 ** 3} bytes, over features.max_image_bytes = {LIMIT}" in rejected.detail


def test_size_limit_is_exact(image_dir):
    size = (image_dir / "good.jpg").stat().st_size
    assert len(image_files.read_image_file(str(image_dir), "good.jpg", size)) == size
    assert _rejected(image_dir, "good.jpg", max_bytes=size - 1).reason == image_files.FILE_TOO_LARGE


def test_missing_file(image_dir):
    assert _rejected(image_dir, "nothing.jpg").reason == image_files.MISSING_IMAGE_FILE


@pytest.mark.parametrize("read", [image_files.read_image_file, image_files._read_remote],
                         ids=["local", "beam_file_systems"])
def test_compression_is_never_guessed_from_the_name(image_dir, read):
    """Beam's FileSystems.open decompressed ``.gz`` / ``.bz2`` names (and failed with
    ``'<' not supported between instances of 'int' and 'NoneType'``): bytes come back as stored."""
    jpeg = (image_dir / "good.jpg").read_bytes()
    (image_dir / "photo.jpg.gz").write_bytes(jpeg)
    (image_dir / "zipped.jpg.gz").write_bytes(gzip.compress(jpeg))
    (image_dir / "photo.jpg.bz2").write_bytes(jpeg)
    assert read(str(image_dir), "photo.jpg.gz", LIMIT) == jpeg
    assert read(str(image_dir), "photo.jpg.bz2", LIMIT) == jpeg
    assert read(str(image_dir), "zipped.jpg.gz", LIMIT) == gzip.compress(jpeg)


def test_beam_file_systems_path_checks_size_and_existence(image_dir):
    with open(image_dir / "huge.jpg", "wb") as stream:
        stream.truncate(LIMIT + 1)
    with pytest.raises(image_files.FileRejected) as raised:
        image_files._read_remote(str(image_dir), "huge.jpg", LIMIT)
    assert raised.value.reason == image_files.FILE_TOO_LARGE
    with pytest.raises(image_files.FileRejected) as raised:
        image_files._read_remote(str(image_dir), "nothing.jpg", LIMIT)
    assert raised.value.reason == image_files.MISSING_IMAGE_FILE


def test_file_system_failure_is_an_image_read_error(image_dir, monkeypatch):
    def failing_open(*args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(image_files.os, "open", failing_open)
    rejected = _rejected(image_dir, "good.jpg")
    assert rejected.reason == image_files.IMAGE_READ_ERROR and "Input/output error" in rejected.detail
