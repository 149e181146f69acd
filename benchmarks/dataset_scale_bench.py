"""The caption readers at COCO scale: time and peak memory against loading the file whole.

Generates, from a seed, a Karpathy split file the size of ``dataset_coco.json``
(123,287 images, 616,767 sentences, ~5 per image with some 6 and 7) and the two
official COCO 2014 annotation files of the same images (82,783 train2014 and
40,504 val2014 images), with captions of COCO-like length drawn from a Zipf
distribution over a 30,000-word vocabulary. The real files are not on this
machine, so the vocabulary and length facts printed are those of the generated
captions, not of COCO.

Each reader runs in a fresh process so its peak resident memory (``VmHWM``) is its
own: the project's streaming readers (``data.format=karpathy`` and ``coco``) against
``json.load`` of the same file plus the per-image caption lists (what most captioning
code bases do, e.g. the show-attend-tell tutorial's ``create_input_files``).
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

COCO_IMAGES = {"train2014": 82_783, "val2014": 40_504}
COCO_SENTENCES = 616_767
# Karpathy's dataset_coco.json: 5,000 val, 5,000 test, 30,504 restval, the rest train.
KARPATHY_SPLITS = {"val": 5_000, "test": 5_000, "restval": 30_504}
# A Zipf tail: many words are seen a few times only, as in real caption vocabularies.
VOCABULARY_WORDS = 30_000
ZIPF_EXPONENT = 1.4
# COCO captions are ~8 to 20 words, mean ~10.5.
LENGTH_CHOICES = np.arange(8, 21)
LENGTH_WEIGHTS = 1.0 / (LENGTH_CHOICES - 6.0) ** 1.6


def _captions_per_image(total_images: int, rng: np.random.RandomState) -> np.ndarray:
    """5 each, the surplus (616,767 - 5 x 123,287 = 332) as 7-caption and 6-caption images."""
    counts = np.full(total_images, 5)
    extra = COCO_SENTENCES - 5 * total_images
    sevens = extra // 3
    chosen = rng.choice(total_images, size=extra - sevens, replace=False)
    counts[chosen[:sevens]] = 7
    counts[chosen[sevens:]] = 6
    return counts


def write_coco_scale_files(output_dir: str, seed: int = 0) -> dict:
    """Writes ``dataset_coco.json`` and ``annotations/captions_{train,val}2014.json``."""
    rng = np.random.RandomState(seed)
    words = [f"w{number}" for number in range(VOCABULARY_WORDS)]
    total_images = sum(COCO_IMAGES.values())
    counts = _captions_per_image(total_images, rng)
    lengths = rng.choice(LENGTH_CHOICES, size=int(counts.sum()),
                         p=LENGTH_WEIGHTS / LENGTH_WEIGHTS.sum())
    word_ids = (rng.zipf(ZIPF_EXPONENT, size=int(lengths.sum())) - 1) % VOCABULARY_WORDS

    val_positions = rng.permutation(COCO_IMAGES["val2014"])
    karpathy_split_of_val = np.empty(COCO_IMAGES["val2014"], dtype=object)
    start = 0
    for split, size in KARPATHY_SPLITS.items():
        karpathy_split_of_val[val_positions[start:start + size]] = split
        start += size

    karpathy_images = []
    annotations = {folder: {"info": {}, "images": [], "licenses": [], "annotations": []}
                   for folder in COCO_IMAGES}
    sentence, word_position, image_number = 0, 0, 0
    for folder, size in COCO_IMAGES.items():
        for position in range(size):
            coco_id = image_number + 1
            file_name = f"COCO_{folder}_{coco_id:012d}.jpg"
            captions = []
            for _ in range(counts[image_number]):
                length = lengths[sentence]
                tokens = [words[word_id] for word_id in word_ids[word_position:word_position + length]]
                captions.append(" ".join(tokens).capitalize() + " .")
                annotations[folder]["annotations"].append(
                    {"image_id": coco_id, "id": sentence + 1, "caption": captions[-1]})
                sentence += 1
                word_position += length
            annotations[folder]["images"].append({"id": coco_id, "file_name": file_name,
                                                  "width": 640, "height": 480})
            split = "train" if folder == "train2014" else karpathy_split_of_val[position]
            karpathy_images.append({
                "filepath": folder, "filename": file_name, "imgid": image_number, "cocoid": coco_id,
                "split": split, "sentences": [
                    {"raw": caption, "tokens": caption.lower().split(), "imgid": image_number}
                    for caption in captions]})
            image_number += 1

    paths = {"karpathy": os.path.join(output_dir, "dataset_coco.json")}
    with open(paths["karpathy"], "w", encoding="utf-8") as stream:
        json.dump({"dataset": "coco", "images": karpathy_images}, stream)
    os.makedirs(os.path.join(output_dir, "annotations"), exist_ok=True)
    for folder, content in annotations.items():
        paths[folder] = os.path.join(output_dir, "annotations", f"captions_{folder}.json")
        with open(paths[folder], "w", encoding="utf-8") as stream:
            json.dump(content, stream)
    return {"images": total_images, "sentences": sentence,
            "file_mb": {name: round(os.path.getsize(path) / 1e6, 1) for name, path in paths.items()}}


# Run in a child process: ``python -m benchmarks.dataset_scale_bench <reader> <data_dir>``.
def _child(reader: str, data_dir: str) -> dict:
    import time

    start = time.perf_counter()
    if reader == "json_load":
        with open(os.path.join(data_dir, "dataset_coco.json"), encoding="utf-8") as stream:
            dataset = json.load(stream)
        captions_of = {f"{image['filepath']}/{image['filename']}": [s["raw"] for s in image["sentences"]]
                       for image in dataset["images"]}
        facts = {"images": len(captions_of)}
    else:
        from components import config as config_lib
        from components.ingestion.formats import coco, karpathy

        if reader == "karpathy":
            index = karpathy.read_karpathy(data_dir, "dataset_coco.json")
        else:
            index = coco.read_coco(data_dir, config_lib.DataConfig.coco_annotation_files,
                                   karpathy_split_file="dataset_coco.json")
        summary = index.summary()
        facts = {"images_per_split": summary["images_per_split"],
                 "captions_accepted": summary["captions_accepted"],
                 "caption_lines_rejected": summary["caption_lines_rejected"]}
    seconds = time.perf_counter() - start
    with open("/proc/self/status", encoding="ascii") as stream:
        peak_kb = next(int(line.split()[1]) for line in stream if line.startswith("VmHWM:"))
    if reader == "karpathy":
        facts.update(_caption_facts(index))  # after the measurement
    return {"seconds": round(seconds, 2), "peak_rss_mb": round(peak_kb / 1024), **facts}


def _caption_facts(index) -> dict:
    """Vocabulary sizes (train captions, by frequency threshold) and caption lengths in words."""
    from components import caption_text

    counts, lengths = collections.Counter(), []
    for record in index.images["train"]:
        for caption in record.captions:
            tokens = caption_text.normalize_python(caption.text).split()
            counts.update(tokens)
            lengths.append(len(tokens))
    return {"train_vocabulary_by_threshold": {
                threshold: sum(1 for count in counts.values() if count >= threshold)
                for threshold in (1, 3, 5, 10)},
            "train_caption_words": dict(zip(("p50", "p95", "p99", "max"), (
                int(value) for value in np.percentile(lengths, [50, 95, 99, 100])), strict=True))}


def _run_child(reader: str, data_dir: str) -> dict:
    output = subprocess.run(
        [sys.executable, "-m", "benchmarks.dataset_scale_bench", reader, data_dir],
        check=True, capture_output=True, text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return json.loads(output.stdout.strip().splitlines()[-1])


def bench_dataset_scale() -> dict:
    with tempfile.TemporaryDirectory(prefix="coco_scale_") as data_dir:
        written = write_coco_scale_files(data_dir)
        baseline = _run_child("json_load", data_dir)
        karpathy_reader = _run_child("karpathy", data_dir)
        coco_reader = _run_child("coco", data_dir)
    return {
        "name": "readers at COCO scale (generated files; one fresh process each)",
        "generated": written,
        "json_load_whole_file": baseline,
        "karpathy_reader": {key: value for key, value in karpathy_reader.items()
                            if not key.startswith("train_")},
        "coco_reader_with_karpathy_split": coco_reader,
        "karpathy_reader_time_vs_json_load": round(karpathy_reader["seconds"] / baseline["seconds"], 2),
        "karpathy_reader_memory_vs_json_load": round(
            karpathy_reader["peak_rss_mb"] / baseline["peak_rss_mb"], 2),
        "generated_train_vocabulary_by_threshold": karpathy_reader["train_vocabulary_by_threshold"],
        "generated_train_caption_words": karpathy_reader["train_caption_words"],
    }


PROJECTED_WORKERS = (1, 10, 50)


def coco_ingestion_projection(ingestion: dict) -> dict:
    """COCO 2014's ingestion time on Dataflow from this machine's measured ingestion rate.

    One Dataflow worker of this machine's size (2 vCPUs, e.g. ``n1-standard-2``) is taken to
    ingest at the 2-worker-process DirectRunner job's marginal rate measured by
    ``ingestion_bench`` (one SDK process per core, as Dataflow runs Python). Worker start-up
    (minutes on Dataflow), the images' transfer from GCS and COCO's larger photos (640 x 480
    against Flickr8k's ~500 x 375) are not in the figure, so it is a lower bound.
    """
    images = sum(COCO_IMAGES.values())
    per_worker = ingestion["beam_2_worker_processes_marginal_images_per_s"]
    return {
        "name": "projection: COCO 2014 ingestion on Dataflow (from the ingestion rate above)",
        "coco_images": images,
        "images_per_s_per_2_vcpu_worker": per_worker,
        "minutes_by_workers": {workers: round(images / (per_worker * workers) / 60, 1)
                             for workers in PROJECTED_WORKERS},
        "tfrecord_gb": round(images * ingestion["bytes_on_disk_per_image"] / 1e9, 1),
    }


if __name__ == "__main__":
    print(json.dumps(_child(sys.argv[1], sys.argv[2])))
