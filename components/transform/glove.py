"""GloVe vectors sliced to a vocabulary: streaming reader and embedding-matrix builder.

The full GloVe 6B file is 400,000 lines (about 1 GB at 300d); the caption
vocabulary is a few thousand words. :func:`read_vectors` streams the file and
keeps only the wanted words, so memory is O(vocabulary × dim), not O(file).
Accepted inputs: a ``.txt`` file (``word v1 ... vN``, no header), the same
gzipped (``.txt.gz``), or Stanford's ``.zip`` (one member chosen by name).
Local paths and any URI ``tf.io.gfile`` reads.

Rows of the matrix (documented in README "Transform"):

* row 0 (``<pad>``): zeros; padding is masked and never trained;
* words found in GloVe: their GloVe vector;
* ``<unk>``, ``<start>``, ``<end>`` and words missing from GloVe: a vector
  drawn from N(0, σ²) with σ the standard deviation of the found vectors
  (0.4 without GloVe), with the random direction seeded by the word itself:
  reruns, machines and vocabulary order give the same row.
"""

import dataclasses
import gzip
import hashlib
import os
import zipfile
import zlib
from typing import BinaryIO, Dict, Iterable, Iterator, Optional, Sequence, Set, Tuple

import numpy as np

from components import config as config_lib

DEFAULT_STDDEV = 0.4


class GloveFileNotFoundError(FileNotFoundError):
    """The GloVe file the config names does not exist; the message names the setting."""


class GloveFormatError(ValueError):
    """The GloVe file is not in the ``word v1 ... vN`` text format."""


@dataclasses.dataclass(frozen=True)
class EmbeddingCoverage:
    """How much of a vocabulary the GloVe file covers."""

    vocabulary_size: int  # words, reserved tokens excluded
    words_found: int
    token_weighted_coverage: float  # share of training-caption tokens whose word was found
    dim: int
    # The file by name and content, never by path: the facts travel inside the pushed model.
    glove_file: str  # base name; empty without GloVe
    glove_sha256: str
    lines_read: int

    @property
    def word_coverage(self) -> float:
        return self.words_found / self.vocabulary_size if self.vocabulary_size else 0.0

    def to_dict(self) -> dict:
        values = dataclasses.asdict(self)
        values["word_coverage"] = self.word_coverage
        return values


def _open_binary(path: str) -> BinaryIO:
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        raise GloveFileNotFoundError(
            f"GloVe file not found: {path}; the file is transform.glove_path (--glove, GLOVE= for "
            "make; empty: no GloVe, a trained embedding).")
    if "://" not in path:
        return open(path, "rb")
    return tf.io.gfile.GFile(path, "rb")


def iter_lines(path: str, zip_member: str = config_lib.TransformConfig.glove_zip_member) -> Iterator[bytes]:
    """Raw lines of a GloVe file, ``.txt``, ``.txt.gz`` or ``.zip``, streamed."""
    with _open_binary(path) as raw:
        if path.endswith(".zip"):
            # zipfile needs a seekable file; GFile is seekable for local and GCS paths.
            with zipfile.ZipFile(raw) as archive:
                names = archive.namelist()
                if zip_member not in names:
                    raise GloveFormatError(f"{path} has no member {zip_member!r}; it holds {names}.")
                with archive.open(zip_member) as member:
                    yield from member
        elif path.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw) as unzipped:
                yield from unzipped
        else:
            yield from raw


def read_vectors(path: str, wanted_words: Iterable[str],
                 zip_member: str = config_lib.TransformConfig.glove_zip_member,
                 ) -> Tuple[Dict[str, np.ndarray], int, int]:
    """Streams a GloVe file keeping only ``wanted_words``.

    Returns:
      (word → float32 vector, dimension, lines read).

    Raises:
      GloveFormatError: a first line that is not a word and numbers, or a wanted word's line
        with a different dimension or a non-number.
    """
    wanted: Set[str] = set(wanted_words)
    vectors: Dict[str, np.ndarray] = {}
    dim: Optional[int] = None
    lines_read = 0
    for line_number, raw_line in enumerate(iter_lines(path, zip_member), start=1):
        lines_read = line_number
        line = raw_line.rstrip(b"\r\n")
        word_bytes, _, values = line.partition(b" ")
        if dim is None:
            dim = values.count(b" ") + 1
            try:  # the first line fixes the format: a file that is not GloVe stops here
                np.array(values.split(b" "), dtype=np.float32)
            except ValueError as error:
                raise GloveFormatError(
                    f"{path}:1 is not '<word> <number> <number> ...', so this is not a GloVe "
                    f"text file ({error})") from error
        word = word_bytes.decode("utf-8", errors="replace")
        if word not in wanted or word in vectors:
            continue
        try:
            vector = np.array(values.split(b" "), dtype=np.float32)
        except ValueError as error:
            raise GloveFormatError(f"{path}:{line_number}: not a number in the vector of "
                                   f"{word!r} ({error})") from error
        if vector.shape != (dim,):
            raise GloveFormatError(f"{path}:{line_number}: {word!r} has {vector.size} values, "
                                   f"the file's first line has {dim}.")
        vectors[word] = vector
    if dim is None:
        raise GloveFormatError(f"{path} is empty.")
    return vectors, dim, lines_read


def word_seeded_vector(word: str, dim: int, stddev: float) -> np.ndarray:
    seed = zlib.crc32(word.encode("utf-8"))
    return (np.random.RandomState(seed).normal(0.0, stddev, size=dim)).astype(np.float32)


def build_embedding_matrix(
    reserved_tokens: Sequence[str],
    words: Sequence[str],
    word_counts: Optional[Sequence[int]],
    glove_path: str,
    zip_member: str = config_lib.TransformConfig.glove_zip_member,
    default_dim: int = config_lib.TransformConfig.embedding_dim,
) -> Tuple[np.ndarray, EmbeddingCoverage]:
    """``[len(reserved) + len(words), dim]`` matrix; row order = reserved tokens, then words.

    Without ``glove_path`` every row but padding is word-seeded random
    (dimension ``default_dim``); the Trainer then makes the embedding trainable.
    """
    if glove_path:
        vectors, dim, lines_read = read_vectors(glove_path, words, zip_member)
    else:
        vectors, dim, lines_read = {}, default_dim, 0
    stddev = float(np.std(np.stack(list(vectors.values())))) if vectors else DEFAULT_STDDEV
    matrix = np.zeros((len(reserved_tokens) + len(words), dim), dtype=np.float32)
    for row, token in enumerate(reserved_tokens[1:], start=1):
        matrix[row] = word_seeded_vector(token, dim, stddev)
    offset = len(reserved_tokens)
    for row, word in enumerate(words, start=offset):
        found = vectors.get(word)
        matrix[row] = found if found is not None else word_seeded_vector(word, dim, stddev)
    counts = np.asarray(word_counts if word_counts is not None else [1] * len(words), dtype=np.float64)
    found_mask = np.array([word in vectors for word in words], dtype=bool)
    coverage = EmbeddingCoverage(
        vocabulary_size=len(words),
        words_found=int(found_mask.sum()),
        token_weighted_coverage=float(counts[found_mask].sum() / counts.sum()) if counts.sum() else 0.0,
        dim=dim,
        glove_file=os.path.basename(glove_path.rstrip("/")) if glove_path else "",
        glove_sha256=file_sha256(glove_path) if glove_path else "",
        lines_read=lines_read,
    )
    return matrix, coverage


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with _open_binary(path) as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
