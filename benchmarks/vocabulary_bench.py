"""Real Flickr8k vocabulary facts and the output layer they imply, from the Transform code.

Runs ``preprocessing_fn``'s analyzers (tf.Transform on Beam) over the real
Flickr8k train captions at several frequency thresholds and reports the
vocabulary size, caption-length percentiles, the derived maximum caption
length and how many train captions it truncates, and the decoder's output
layer (Dense from the 256-unit LSTM) against the 400,004-word GloVe vocabulary
of the original model.
"""

import functools
import json
import os
import tempfile

import apache_beam as beam
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.tf_metadata import metadata_io

from components import config as config_lib
from components import example_format
from components.ingestion.formats import flickr8k
from components.transform import preprocessing

ORIGINAL_VOCABULARY = 400_004
DECODER_UNITS = 256


def output_layer_parameters(vocabulary_size: int, units: int = DECODER_UNITS) -> int:
    return vocabulary_size * units + vocabulary_size


def write_real_transform_graph(data_dir: str, threshold: int, output_dir: str) -> str:
    """Runs ``preprocessing_fn``'s analyzers over the real train captions into ``output_dir``."""

    index = flickr8k.read_flickr8k(data_dir)
    raw = [{example_format.IMAGE_ID: record.image_id.encode(), example_format.IMAGE_FEATURES: b"",
            example_format.CAPTIONS: [caption.text.encode() for caption in record.captions],
            example_format.CAPTION_INDICES: [caption.index for caption in record.captions]}
           for record in index.images["train"]]
    pipeline_config = config_lib.PipelineConfig(
        transform=config_lib.TransformConfig(vocab_frequency_threshold=threshold))
    preprocessing_fn = functools.partial(
        preprocessing.preprocessing_fn, custom_config={"pipeline_config": pipeline_config.to_json()})
    raw_metadata = preprocessing.raw_metadata()
    with beam.Pipeline() as pipeline, tft_beam.Context(temp_dir=tempfile.mkdtemp()):
        transform_fn = ((pipeline | beam.Create(raw), raw_metadata)
                        | tft_beam.AnalyzeDataset(preprocessing_fn))
        _ = transform_fn | tft_beam.WriteTransformFn(output_dir)
    metadata_io.write_metadata(raw_metadata, os.path.join(output_dir, "metadata"))
    return output_dir


def analyze_real_captions(data_dir: str, thresholds=(1, 3, 5, 10)) -> dict:
    rows = []
    for threshold in thresholds:
        output_dir = write_real_transform_graph(
            data_dir, threshold, tempfile.mkdtemp(prefix="vocabulary_bench_"))
        _, _, facts = preprocessing.read_transform_assets(tft.TFTransformOutput(output_dir))
        rows.append({
            "frequency_threshold": threshold,
            "vocabulary_ids": facts["vocabulary_size"],
            "output_layer_parameters": output_layer_parameters(facts["vocabulary_size"]),
            "max_caption_length_ids": facts["max_caption_length"],
            "train_captions_truncated": facts["train_captions_truncated"],
            "train_captions": facts["train_captions"],
            "words_per_caption_percentiles": facts["caption_words_percentiles"],
        })
    original = output_layer_parameters(ORIGINAL_VOCABULARY)
    return {
        "name": "vocabulary: real Flickr8k train captions through preprocessing_fn",
        "rows": rows,
        "original_output_layer_parameters": original,
        "output_layer_reduction_at_threshold_1": round(original / rows[0]["output_layer_parameters"], 1),
    }


if __name__ == "__main__":
    print(json.dumps(analyze_real_captions(os.path.join(
        os.path.dirname(__file__), "..", "..", "shared", "data", "flickr8k_sample")), indent=2))
