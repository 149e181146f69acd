"""Tests of GloVe reading and the embedding matrix: real format, .gz/.zip, bounded memory,
and the matrix, vocabulary and facts written into the Transform output."""

import functools
import gzip
import os
import shutil
import tempfile
import tracemalloc
import zipfile

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam

from components import caption_text, example_format
from components import config as config_lib
from components.transform import glove, preprocessing
from tests.paths import SHARED_DATA_DIR
from tests.transform.test_preprocessing import TRAIN

GLOVE_DIR = os.path.join(SHARED_DATA_DIR, "glove")
SAMPLE = os.path.join(GLOVE_DIR, "glove.6B.300d.sample.txt")


def _require_sample():
    if not os.path.isfile(SAMPLE):
        pytest.skip(f"shared GloVe sample not found at {SAMPLE}")


def test_real_glove_format_known_vectors():
    _require_sample()
    vectors, dim, lines = glove.read_vectors(SAMPLE, ["the", "of", "zebra", "'s"])
    assert dim == 300 and lines == 100
    assert set(vectors) == {"the", "of", "'s"}
    np.testing.assert_allclose(vectors["the"][:4], [0.04656, 0.21318, -0.0074364, -0.45854], rtol=1e-6)
    assert all(vector.dtype == np.float32 and vector.shape == (300,) for vector in vectors.values())


@pytest.mark.parametrize("packing", ["txt", "gz", "zip"])
def test_matrix_rows_follow_vocabulary_order_in_every_packing(tmp_path, packing):
    _require_sample()
    path = str(tmp_path / "glove.6B.300d.txt")
    shutil.copy(SAMPLE, path)
    if packing == "gz":
        with open(SAMPLE, "rb") as source, gzip.open(path + ".gz", "wb") as target:
            shutil.copyfileobj(source, target)
        path += ".gz"
    elif packing == "zip":
        with zipfile.ZipFile(str(tmp_path / "glove.6B.zip"), "w") as archive:
            archive.write(SAMPLE, "glove.6B.300d.txt")
            archive.writestr("glove.6B.50d.txt", "the 1 2\n")
        path = str(tmp_path / "glove.6B.zip")
    words = ["a", "zebraish", "the", "of"]
    matrix, coverage = glove.build_embedding_matrix(
        caption_text.RESERVED_TOKENS, words, [10, 5, 80, 5], path)
    reference, _, _ = glove.read_vectors(SAMPLE, words)
    assert matrix.shape == (4 + 4, 300) and matrix.dtype == np.float32
    assert not matrix[caption_text.PAD_ID].any()
    np.testing.assert_array_equal(matrix[4], reference["a"])
    np.testing.assert_array_equal(matrix[6], reference["the"])
    np.testing.assert_array_equal(matrix[7], reference["of"])
    # Missing word: direction seeded by the word, scaled like the found vectors.
    found_stddev = float(np.std(np.stack(list(reference.values()))))
    np.testing.assert_allclose(matrix[5], glove.word_seeded_vector("zebraish", 300, found_stddev),
                               rtol=1e-6)
    assert coverage.words_found == 3 and coverage.vocabulary_size == 4
    assert coverage.word_coverage == pytest.approx(0.75)
    assert coverage.token_weighted_coverage == pytest.approx(95 / 100)


def test_zip_without_the_member_is_a_clear_error(tmp_path):
    with zipfile.ZipFile(str(tmp_path / "g.zip"), "w") as archive:
        archive.writestr("glove.6B.50d.txt", "the 1 2\n")
    with pytest.raises(glove.GloveFormatError, match="glove.6B.300d.txt"):
        glove.read_vectors(str(tmp_path / "g.zip"), ["the"])


def test_ragged_line_is_a_clear_error(tmp_path):
    (tmp_path / "g.txt").write_text("the 1 2 3\ncat 1 2\n")
    with pytest.raises(glove.GloveFormatError, match=":2: 'cat' has 2 values"):
        glove.read_vectors(str(tmp_path / "g.txt"), ["the", "cat"])


def test_without_glove_every_row_is_random_but_padding(tmp_path):
    matrix, coverage = glove.build_embedding_matrix(caption_text.RESERVED_TOKENS, ["a", "b"], None, "",
                                                    default_dim=16)
    assert matrix.shape == (6, 16) and not matrix[0].any() and np.all(np.abs(matrix[1:]).sum(1) > 0)
    assert coverage.words_found == 0 and coverage.token_weighted_coverage == 0.0


def test_peak_memory_is_bounded_by_the_vocabulary_not_the_file(tmp_path):
    path = tmp_path / "big.300d.txt"
    rng = np.random.RandomState(0)
    row = " ".join(f"{value:.5f}" for value in rng.normal(size=300))
    with open(path, "w", encoding="utf-8") as stream:
        for index in range(30_000):
            stream.write(f"word{index} {row}\n")
    file_bytes = os.path.getsize(path)
    wanted = [f"word{index}" for index in range(0, 30_000, 300)]  # 100 words
    tracemalloc.start()
    vectors, _, _ = glove.read_vectors(str(path), wanted)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(vectors) == 100
    # Holding the whole file as float32 vectors would take ~36 MB; we keep 100 of them.
    assert file_bytes > 60_000_000 / 1.1
    assert peak < 3_000_000, f"peak {peak} bytes while streaming a {file_bytes}-byte file"


@pytest.mark.slow
def test_transform_output_holds_vocabulary_matrix_and_facts(tmp_path):
    _require_sample()
    pipeline_config = config_lib.PipelineConfig(transform=config_lib.TransformConfig(
        glove_path=SAMPLE, vocab_frequency_threshold=1))
    preprocessing_fn = functools.partial(
        preprocessing.preprocessing_fn, custom_config={"pipeline_config": pipeline_config.to_json()})
    output_dir = str(tmp_path / "transform_output")
    with beam.Pipeline() as pipeline, tft_beam.Context(temp_dir=tempfile.mkdtemp(dir=str(tmp_path))):
        transform_fn = (
            (pipeline | beam.Create(TRAIN), preprocessing.raw_metadata())
            | tft_beam.AnalyzeDataset(preprocessing_fn))
        _ = transform_fn | tft_beam.WriteTransformFn(output_dir)
    words, matrix, facts = preprocessing.read_transform_assets(tft.TFTransformOutput(output_dir))
    assert words == ["dog", "a", "the", "t", "sleeps", "runs", "cat", "at"]
    assert matrix.shape == (4 + len(words), 300)
    reference, _, _ = glove.read_vectors(SAMPLE, words)
    for row, word in enumerate(words, start=4):
        if word in reference:
            np.testing.assert_array_equal(matrix[row], reference[word])
    assert facts["vocabulary_size"] == 12 and facts["max_caption_length"] == 6
    assert facts["embedding"]["words_found"] == len(set(words) & set(reference))
    assert facts["train_captions"] == 3 and facts["train_captions_truncated"] == 0
    # The vocabulary the ids are looked up in is the asset the matrix was built from.
    assert os.path.dirname(tft.TFTransformOutput(output_dir).vocabulary_file_by_name(
        preprocessing.MATRIX_ASSET)) == os.path.dirname(
        tft.TFTransformOutput(output_dir).vocabulary_file_by_name(preprocessing.VOCABULARY_ASSET))
    assert tf.io.gfile.exists(os.path.join(output_dir, "transform_fn", "assets", example_format.FACTS_FILE))


def test_a_file_that_is_not_glove_is_a_clear_error_even_without_a_wanted_word(tmp_path):
    """Only wanted words' lines are parsed; the first line is parsed always, so a caption file
    passed as --glove stops here instead of giving 0 words found and random embeddings."""
    (tmp_path / "captions.txt").write_text("image,caption\n1000268201.jpg,A child in pink .\n")
    with pytest.raises(glove.GloveFormatError, match=r"captions.txt:1 is not .* not a GloVe text file"):
        glove.read_vectors(str(tmp_path / "captions.txt"), ["zebra"])


def test_a_missing_glove_file_names_the_setting_that_points_at_it(tmp_path):
    missing = str(tmp_path / "glove.6B.zip")
    with pytest.raises(glove.GloveFileNotFoundError,
                       match=r"GloVe file not found: .*glove\.6B\.zip; the file is "
                             r"transform\.glove_path \(--glove, GLOVE= for make"):
        glove.read_vectors(missing, ["the"])
