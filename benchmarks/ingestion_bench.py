"""Ingestion throughput: the Beam job against its ceiling, on real-size Flickr8k JPEGs.

Everything runs in one ``make bench`` run, on copies of the 20 real photos in
``../shared/data/flickr8k_sample/`` (about 500x375, 100-200 KB, like all of
Flickr8k), so decoding costs what it costs on the real dataset:

* ceiling: the ingestion job's own traced function (decode + resize + ResNet50,
  ``features_from_image_bytes``) on batches of 16 image byte strings read
  beforehand, one process, nothing else; best of 3. Once in float32, once under
  oneDNN's bfloat16 rewrite (``components.cpu_bfloat16``), each in its own
  process, with the mean relative difference of the two features; and two
  float32 processes at once, the ceiling of the 2-worker job;
* the Beam job end to end (read files, decode, RunInference, write TFRecords) on
  two sizes, so the fixed start-up cancels: marginal images/s = extra images /
  extra seconds, start-up = small run's seconds - its images / marginal rate.
  DirectRunner in-process, in-process with the bfloat16 rewrite, and 2 worker
  processes; every job in a fresh process (so the start-up is a cold job's).

Also the bytes on disk per image of the written splits.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

SAMPLE_IMAGE_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data",
                                "flickr8k_sample", "Flicker8k_Dataset")
SMALL_RUN, LARGE_RUN = 160, 480
CEILING_IMAGES = 160
CEILING_REPEATS = 3
# mode → (DirectRunner options, features.onednn_bfloat16)
BEAM_MODES = {
    "in_process": ({}, "off"),
    "in_process_bfloat16": ({}, "on"),
    "2_worker_processes": ({"direct_running_mode": "multi_processing", "direct_num_workers": 2}, "off"),
}


def write_photo_layout(root: str, num_images: int, photo_dir: str = SAMPLE_IMAGE_DIR) -> str:
    """A Flickr8k layout of ``num_images`` copies of the real photos, all in train."""
    from components import config as config_lib
    from components.ingestion.formats import flickr8k

    photos = sorted(glob.glob(os.path.join(photo_dir, "*.jpg")))
    if not photos:
        raise FileNotFoundError(f"No real photos at {photo_dir}: the ingestion bench needs "
                                "../shared/data/flickr8k_sample beside the checkout.")
    image_dir = os.path.join(root, "Flicker8k_Dataset")
    text_dir = os.path.join(root, config_lib.FLICKR8K_TEXT_DIR)
    os.makedirs(image_dir)
    os.makedirs(text_dir)
    names = [f"copy{number:05d}_{os.path.basename(photos[number % len(photos)])}"
             for number in range(num_images)]
    for number, name in enumerate(names):
        shutil.copyfile(photos[number % len(photos)], os.path.join(image_dir, name))
    flickr8k.write_token_file(os.path.join(text_dir, config_lib.FLICKR8K_TOKEN_FILE),
                              ((name, ["A photo ."]) for name in names))
    for split, split_names in (("train", names), ("dev", []), ("test", [])):
        flickr8k.write_split_file(os.path.join(text_dir, config_lib.FLICKR8K_SPLIT_FILES[split]),
                                  split_names)
    return root


def measure_ceiling(image_dir: str, bfloat16: bool, features_path: str) -> dict:
    """In this process: the traced ingestion function alone, best of 3 passes."""
    import tensorflow as tf

    from components import config as config_lib
    from components import cpu_bfloat16
    from components.ingestion import beam_job

    features = config_lib.FeaturesConfig()
    function = beam_job.ResNet50FeatureHandler(features).load_model()
    images = [open(path, "rb").read() for path in sorted(glob.glob(os.path.join(image_dir, "*.jpg")))]
    batch_size = features.inference_batch_size
    batches = [tf.constant(images[start:start + batch_size])
               for start in range(0, len(images), batch_size)]
    with cpu_bfloat16.rewrite(bfloat16):
        first_features = function(batches[0])[0].numpy()  # warm-up: tracing, thread pools
        timings = []
        for _ in range(CEILING_REPEATS):
            start = time.perf_counter()
            for batch in batches:
                function(batch)[0].numpy()
            timings.append(time.perf_counter() - start)
    np.save(features_path, first_features)
    return {"images": len(images), "images_per_s": len(images) / min(timings)}


def _ceiling_command(image_dir: str, bfloat16: bool, features_path: str) -> list:
    return [sys.executable, "-m", "benchmarks.ingestion_bench", image_dir, "on" if bfloat16 else "off",
            features_path]


def _ceiling_in_subprocess(image_dir: str, bfloat16: bool, features_path: str) -> dict:
    completed = subprocess.run(_ceiling_command(image_dir, bfloat16, features_path),
                               capture_output=True, text=True, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _ceiling_in_two_processes(image_dir: str, features_path: str) -> float:
    """Two ceiling processes at once (the 2-worker job's ceiling): the sum of their rates."""
    processes = [subprocess.Popen(_ceiling_command(image_dir, False, features_path),
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                 for _ in range(2)]
    rates = []
    for process in processes:
        output, _ = process.communicate()
        if process.returncode:
            raise RuntimeError(f"ceiling process failed with exit code {process.returncode}")
        rates.append(json.loads(output.strip().splitlines()[-1])["images_per_s"])
    return sum(rates)


def _beam_seconds(data_dir: str, output_dir: str, mode: str) -> float:
    """In this process: one ingestion job, timed from building the pipeline to its summary."""
    import apache_beam as beam

    from components import config as config_lib
    from components.ingestion import beam_job

    options, bfloat16 = BEAM_MODES[mode]

    pipeline_config = config_lib.PipelineConfig(
        data=config_lib.DataConfig(data_dir=data_dir),
        features=dataclasses.replace(config_lib.FeaturesConfig(), onednn_bfloat16=bfloat16))
    pipeline = beam.Pipeline(runner="DirectRunner",
                             options=beam.options.pipeline_options.PipelineOptions(**options))
    start = time.perf_counter()
    summary = beam_job.run_ingestion(pipeline, pipeline_config, output_dir)
    seconds = time.perf_counter() - start
    assert summary["pairs_rejected"] == 0, summary
    return seconds


def _beam_seconds_in_subprocess(data_dir: str, output_dir: str, mode: str) -> float:
    """Each job in a fresh process, so both sizes pay the same one-time costs (imports,
    first model build) and the marginal rate is the job's own."""
    completed = subprocess.run(
        [sys.executable, "-m", "benchmarks.ingestion_bench", "beam", data_dir, output_dir, mode],
        capture_output=True, text=True, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])["seconds"]


def bench_ingestion() -> dict:
    from components import cpu_bfloat16, example_format

    work_dir = tempfile.mkdtemp(prefix="ingestion_bench_")
    ceiling_dir = write_photo_layout(os.path.join(work_dir, "ceiling"), CEILING_IMAGES)
    float32_path, bfloat16_path = (os.path.join(work_dir, f"{name}.npy") for name in ("f32", "bf16"))
    ceiling = _ceiling_in_subprocess(os.path.join(ceiling_dir, "Flicker8k_Dataset"), False, float32_path)
    ceiling_bf16 = _ceiling_in_subprocess(os.path.join(ceiling_dir, "Flicker8k_Dataset"), True,
                                          bfloat16_path)
    ceiling_two_processes = _ceiling_in_two_processes(os.path.join(ceiling_dir, "Flicker8k_Dataset"),
                                                      os.path.join(work_dir, "two.npy"))
    float32_features, bfloat16_features = np.load(float32_path), np.load(bfloat16_path)
    relative_difference = float(np.abs(bfloat16_features - float32_features).mean()
                                / np.abs(float32_features).mean())

    data_dirs = {size: write_photo_layout(os.path.join(work_dir, f"data_{size}"), size)
                 for size in (SMALL_RUN, LARGE_RUN)}
    result = {
        "name": (f"ingestion: images/s, copies of the 20 real Flickr8k photos ({os.cpu_count()} cores, "
                 "random-init ResNet50, batch 16)"),
        "cpu_native_bfloat16": list(cpu_bfloat16.native_bfloat16_flags()) or "none",
        "ceiling_float32_images_per_s": round(ceiling["images_per_s"], 2),
        "ceiling_bfloat16_images_per_s": round(ceiling_bf16["images_per_s"], 2),
        "ceiling_float32_2_processes_images_per_s": round(ceiling_two_processes, 2),
        "ceiling_bfloat16_vs_float32": round(ceiling_bf16["images_per_s"] / ceiling["images_per_s"], 2),
        "bfloat16_mean_relative_feature_difference": round(relative_difference, 4),
    }
    bytes_per_image = None
    for mode, (_, bfloat16) in BEAM_MODES.items():
        seconds = {}
        for size, data_dir in data_dirs.items():
            output_dir = os.path.join(work_dir, f"out_{mode}_{size}")
            seconds[size] = _beam_seconds_in_subprocess(data_dir, output_dir, mode)
            split_bytes = sum(os.path.getsize(path) for path in glob.glob(
                os.path.join(example_format.split_dir(output_dir, "*"), "*")))
            bytes_per_image = split_bytes / size
        marginal = (LARGE_RUN - SMALL_RUN) / (seconds[LARGE_RUN] - seconds[SMALL_RUN])
        ceiling_rate = (ceiling_bf16["images_per_s"] if bfloat16 == "on" else
                        ceiling_two_processes if "processes" in mode else ceiling["images_per_s"])
        result[f"beam_{mode}_marginal_images_per_s"] = round(marginal, 2)
        result[f"beam_{mode}_vs_its_ceiling"] = round(marginal / ceiling_rate, 3)
        result[f"beam_{mode}_start_up_s"] = round(seconds[SMALL_RUN] - SMALL_RUN / marginal, 1)
        result[f"beam_{mode}_{LARGE_RUN}_images_s"] = round(seconds[LARGE_RUN], 1)
    result["bytes_on_disk_per_image"] = round(bytes_per_image)
    result["raw_float16_bytes_per_image"] = example_format.FEATURE_BYTES
    shutil.rmtree(work_dir, ignore_errors=True)
    return result


if __name__ == "__main__":
    if sys.argv[1] == "beam":
        print(json.dumps({"seconds": _beam_seconds(*sys.argv[2:5])}))
    else:
        print(json.dumps(measure_ceiling(sys.argv[1], sys.argv[2] == "on", sys.argv[3])))
