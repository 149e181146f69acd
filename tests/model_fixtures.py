"""Builders of transformed datasets and trained models for the Trainer and export tests.

``transform_splits`` runs ``preprocessing_fn`` with tf.Transform's Beam
implementation the way TFX's Transform does (analyzers over train only; the
transform graph, its raw schema and ``Split-*`` directories of gzipped
transformed examples). ``train_demo_model`` is the whole path on real demo
JPEGs: demo dataset → Beam ingestion (random-weight ResNet50) → Transform →
``run_fn.train`` with 2 replicas → exported SavedModel.
"""

import functools
import glob
import os
import tempfile

import apache_beam as beam
import tensorflow as tf
import tensorflow_transform as tft
import tensorflow_transform.beam as tft_beam
from tensorflow_transform.beam.tft_beam_io import transform_fn_io
from tensorflow_transform.tf_metadata import metadata_io

from components import config as config_lib
from components.ingestion import beam_job, demo_data
from components.trainer import run_fn
from components.transform import preprocessing

# learning_rate_batch_size: the tests' 2 replicas x 8 rows train at learning_rate as given.
SMALL_TRAINER = dict(per_replica_batch_size=8, image_dense_units=(64, 32), lstm_units=32,
                     second_lstm_units=32, attention_key_dim=16, warmup_steps=5, learning_rate=3e-3,
                     learning_rate_batch_size=16)


def transform_splits(root: str, rows_by_split: dict, pipeline_config: config_lib.PipelineConfig) -> str:
    """Analyzes ``rows_by_split["train"]``, transforms every split; returns ``root``."""
    preprocessing_fn = functools.partial(
        preprocessing.preprocessing_fn, custom_config={"pipeline_config": pipeline_config.to_json()})
    graph_dir = os.path.join(root, "transform_graph")
    raw_metadata = preprocessing.raw_metadata()
    os.makedirs(root, exist_ok=True)
    with beam.Pipeline() as pipeline, tft_beam.Context(temp_dir=tempfile.mkdtemp(dir=root)):
        (transformed_train, metadata), transform_fn = (
            (pipeline | "CreateTrain" >> beam.Create(rows_by_split["train"]), raw_metadata)
            | tft_beam.AnalyzeAndTransformDataset(preprocessing_fn, output_record_batches=False))
        transformed = {"train": transformed_train}
        for split, rows in rows_by_split.items():
            if split != "train":
                transformed[split], _ = (
                    ((pipeline | f"Create{split}" >> beam.Create(rows), raw_metadata), transform_fn)
                    | f"Transform{split}" >> tft_beam.TransformDataset())
        _ = transform_fn | transform_fn_io.WriteTransformFn(graph_dir)
        coder = tft.coders.ExampleProtoCoder(metadata.schema)
        for split, data in transformed.items():
            _ = (data | f"Encode{split}" >> beam.Map(coder.encode)
                 | f"Write{split}" >> beam.io.WriteToTFRecord(
                     os.path.join(root, f"Split-{split}", "part"), file_name_suffix=".gz"))
    # As TFX's Transform does: the raw schema beside the graph (serving parses raw examples).
    metadata_io.write_metadata(raw_metadata, os.path.join(graph_dir, "metadata"))
    return root


def read_raw_rows(examples_dir: str, split: str) -> list:
    """Ingested ``tf.Example`` records of a split as ``preprocessing.RAW_FEATURE_SPEC`` dicts."""
    rows = []
    for path in sorted(glob.glob(os.path.join(examples_dir, f"Split-{split}", "*"))):
        compression = "GZIP" if path.endswith(".gz") else ""
        for serialized in tf.data.TFRecordDataset(path, compression_type=compression):
            feature = tf.train.Example.FromString(serialized.numpy()).features.feature
            rows.append({name: (list(feature[name].bytes_list.value or feature[name].int64_list.value)
                                if name in ("captions", "caption_indices")
                                else feature[name].bytes_list.value[0])
                         for name in preprocessing.RAW_FEATURE_SPEC})
    return rows


def train_demo_model(root: str, num_images: int = 16, epochs: int = 3) -> dict:
    """Demo JPEGs → ingestion → Transform → 2-replica training → SavedModel; returns paths."""
    dataset = demo_data.generate(os.path.join(root, "demo_data"), num_images, seed=3)
    pipeline_config = config_lib.PipelineConfig(
        data=config_lib.DataConfig(data_dir=dataset.data_dir),
        transform=config_lib.TransformConfig(glove_path=dataset.glove_path,
                                             vocab_frequency_threshold=1),
        trainer=config_lib.TrainerConfig(epochs=epochs, **SMALL_TRAINER))
    examples_dir = os.path.join(root, "examples")
    beam_job.run_ingestion(beam.Pipeline(runner="DirectRunner"), pipeline_config, examples_dir)
    transformed_dir = transform_splits(
        os.path.join(root, "transformed"),
        {split: read_raw_rows(examples_dir, split) for split in ("train", "dev", "test")},
        pipeline_config)
    paths = {
        "dataset": dataset, "config": pipeline_config, "examples": examples_dir,
        "transform_graph": os.path.join(transformed_dir, "transform_graph"),
        "transformed": transformed_dir,
        "model_run": os.path.join(root, "model_run"),
        "serving_model": os.path.join(root, "serving_model"),
    }
    run_fn.train(pipeline_config, [os.path.join(transformed_dir, "Split-train", "*")],
                 [os.path.join(transformed_dir, "Split-dev", "*")], paths["transform_graph"],
                 paths["model_run"], paths["serving_model"], os.path.join(root, "backup"))
    return paths
