"""Ingestion throughput: the Beam job vs a plain ``model.predict`` ceiling vs a naive loop.

All three run on the same demo images in one process run:

* ceiling: ``model.predict`` over all images already decoded and resized, batch 16
  (nothing but ResNet50 on this machine; best of two runs);
* naive: one ``model.predict`` call per image, the pattern public tutorials use
  (timed on a subset, reported per image);
* Beam: the whole ingestion job end to end (read, decode, RunInference, write),
  DirectRunner in-memory and multi-processing.

Also bytes on disk per image for the written splits.
"""

import glob
import os
import tempfile
import time

import apache_beam as beam
import numpy as np
import tensorflow as tf

from components import config as config_lib
from components import example_format, image_graph, resnet_features
from components.ingestion import beam_job, demo_data


def _timed(function):
    start = time.perf_counter()
    value = function()
    return time.perf_counter() - start, value


def bench_ingestion(num_images: int = 320, naive_images: int = 48) -> dict:
    work_dir = tempfile.mkdtemp(prefix="ingestion_bench_")
    demo = demo_data.generate(os.path.join(work_dir, "data"), num_images=num_images, seed=11,
                              split_fractions=(1.0, 0.0, 0.0))
    features = config_lib.FeaturesConfig()
    image_dir = os.path.join(demo.data_dir, "Flicker8k_Dataset")
    images = []
    for image in demo.images:
        with open(os.path.join(image_dir, image.image_id), "rb") as stream:
            pixels = image_graph.decode_upright_rgb(tf.constant(stream.read()))
        images.append(resnet_features.resize_for_resnet(pixels, features.image_size).numpy())
    images = np.stack(images)
    model = resnet_features.build_feature_extractor(features)
    model.predict(images[:16], batch_size=16, verbose=0)  # warm-up: tracing, thread pools

    # Best of two, so a noisy neighbour cannot make the ceiling look low and Beam look good.
    ceiling_s = min(_timed(lambda: model.predict(images, batch_size=16, verbose=0))[0]
                    for _ in range(2))
    naive_s, _ = _timed(lambda: [model.predict(image[None], verbose=0) for image in images[:naive_images]])

    pipeline_config = config_lib.PipelineConfig(data=config_lib.DataConfig(data_dir=demo.data_dir))
    beam_rates = {}
    bytes_per_image = None
    for mode, options in (("in_memory", {}), ("multi_processing_2", {
            "direct_running_mode": "multi_processing", "direct_num_workers": 2})):
        output_dir = os.path.join(work_dir, f"out_{mode}")
        pipeline = beam.Pipeline(runner="DirectRunner",
                                 options=beam.options.pipeline_options.PipelineOptions(**options))
        start = time.perf_counter()
        summary = beam_job.run_ingestion(pipeline, pipeline_config, output_dir)
        beam_s = time.perf_counter() - start
        assert summary["pairs_rejected"] == 0
        beam_rates[mode] = num_images / beam_s
        split_bytes = sum(os.path.getsize(path) for path in glob.glob(
            os.path.join(example_format.split_dir(output_dir, "*"), "*")))
        bytes_per_image = split_bytes / num_images

    ceiling_rate = num_images / ceiling_s
    result = {
        "name": f"ingestion: images/s on {num_images} demo images (2 cores, random-init ResNet50)",
        "ceiling_model_predict_images_per_s": round(ceiling_rate, 2),
        "naive_one_at_a_time_images_per_s": round(naive_images / naive_s, 2),
        "naive_vs_ceiling": round(naive_images / naive_s / ceiling_rate, 3),
    }
    for mode, rate in beam_rates.items():
        result[f"beam_{mode}_images_per_s"] = round(rate, 2)
        result[f"beam_{mode}_vs_ceiling"] = round(rate / ceiling_rate, 3)
    result["bytes_on_disk_per_image"] = round(bytes_per_image)
    result["raw_float16_bytes_per_image"] = ingestion_feature_bytes()
    return result


def ingestion_feature_bytes() -> int:
    return example_format.FEATURE_BYTES
