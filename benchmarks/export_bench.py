"""Serving latency of the exported SavedModel next to ResNet50 alone (the floor).

The model is exported exactly as the Trainer does it, with the real Flickr8k
vocabulary and maximum caption length (Transform analyzers over the real
train captions, default threshold) and the default decoder sizes; weights are
untrained. Decoding stops once every caption of the batch has emitted
``<end>``; the report gives the decoding steps actually run (an untrained model
rarely ends early, so this is close to the worst case of ``max_length - 1``).
Both paths are signatures of the same loaded SavedModel, measured side by side
on the same JPEG bytes of demo images:

* floor: ``image_features`` (decode, resize, ResNet50) alone;
* ``serving_default`` (the floor + greedy decoding), and ``beam_search`` width 3;

p50/p95 latency for one image over repeated calls, and images/s for a batch of 32.
"""

import os
import tempfile
import time

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from components import caption_text
from components import config as config_lib
from components.ingestion import demo_data
from components.trainer import export
from components.trainer import model as model_lib
from components.transform import preprocessing

SINGLE_IMAGE_CALLS = 30
BATCH = 32
BATCH_CALLS = 3


def _latencies(function, calls):
    function()  # warm-up
    timings = []
    for _ in range(calls):
        start = time.perf_counter()
        function()
        timings.append(time.perf_counter() - start)
    return np.array(timings)


def bench_export(data_dir: str) -> dict:
    from benchmarks.vocabulary_bench import write_real_transform_graph

    work_dir = tempfile.mkdtemp(prefix="export_bench_")
    pipeline_config = config_lib.PipelineConfig()
    graph_dir = write_real_transform_graph(
        data_dir, pipeline_config.transform.vocab_frequency_threshold, os.path.join(work_dir, "tft"))
    _, matrix, facts = preprocessing.read_transform_assets(tft.TFTransformOutput(graph_dir))
    decoder = model_lib.build_captioning_model(pipeline_config.trainer, matrix.shape[0], matrix)
    export_dir = export.export_saved_model(decoder, graph_dir, pipeline_config,
                                           os.path.join(work_dir, "saved_model"))
    model = tf.saved_model.load(export_dir)

    demo = demo_data.generate(os.path.join(work_dir, "images"), num_images=BATCH, seed=5)
    images = [open(os.path.join(demo.data_dir, "Flicker8k_Dataset", image.image_id), "rb").read()
              for image in demo.images]
    one, batch = tf.constant(images[:1]), tf.constant(images)
    width = tf.constant(3, tf.int32)
    calls = {
        "resnet50_floor": lambda inputs: model.signatures["image_features"](images=inputs),
        "serving_default_greedy": lambda inputs: model.signatures["serving_default"](images=inputs),
        "beam_search_width_3": lambda inputs: model.signatures["beam_search"](
            images=inputs, beam_width=width),
    }
    rows = []
    for name, call in calls.items():
        single = _latencies(lambda call=call: call(one), SINGLE_IMAGE_CALLS)
        batched = _latencies(lambda call=call: call(batch), BATCH_CALLS)
        rows.append({"path": name, "p50_ms_1_image": round(1000 * float(np.median(single)), 1),
                     "p95_ms_1_image": round(1000 * float(np.percentile(single, 95)), 1),
                     f"images_per_s_batch_{BATCH}": round(BATCH / float(np.median(batched)), 2)})
    floor, greedy = rows[0], rows[1]
    greedy_tokens = model.signatures["serving_default"](images=batch)["tokens"].numpy()
    steps_run = max(int(np.argmax(row == caption_text.END_ID)) + 1 if caption_text.END_ID in row
                    else len(row) for row in greedy_tokens)
    return {
        "name": (f"serving: exported SavedModel, vocabulary {facts['vocabulary_size']} ids, "
                 f"{facts['max_caption_length'] - 1} decoding steps (CPU, 2 cores)"),
        "rows": rows,
        "greedy_decoding_steps_run_batch_32": steps_run,
        "greedy_decoder_share_of_1_image_p50": round(
            1 - floor["p50_ms_1_image"] / greedy["p50_ms_1_image"], 3),
        "greedy_batch_throughput_vs_floor": round(
            greedy[f"images_per_s_batch_{BATCH}"] / floor[f"images_per_s_batch_{BATCH}"], 3),
    }
