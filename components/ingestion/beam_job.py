"""Beam ingestion: a Flickr8k-layout folder → TFRecords of ResNet50 features and captions.

One ``tf.Example`` per image, written to ``Split-train``, ``Split-dev`` and
``Split-test`` (the official split lists, never a random split), as TFRecord
files (``.tfrecord``, or ``.gz`` with ``features.compress_examples``)::

    image_id        bytes    the file name, e.g. "1000268201_693b08cb0e.jpg"
    image_features  bytes    float16, little-endian, row-major [49, 2048] (200,704 bytes)
    captions        bytes[]  the image's accepted raw captions, in file order
    caption_indices int64[]  their ``#n`` indices in the token file

Every (image, caption) pair the reader saw ends either in exactly one split or
as a row of ``rejects/rejects-*.jsonl`` (image id, caption index, stage,
reason, detail), with a Beam counter per reason; ``ingestion_summary.json``
holds the totals and ``read == accepted + rejected``.

Outputs are atomic: Beam's sinks write temporary files and rename them when
the job succeeds, and the whole job writes into ``_staging-<id>/`` under the
output directory, whose splits are moved into place only after every sink
has finished. A failed job deletes what it wrote; a killed one leaves its
staging folder, which the next job into the same folder deletes; never a
partial split.

:func:`ingest_flickr8k` builds the graph; the TFX component
(:mod:`components.ingestion.example_gen`) and the standalone job
(``python -m pipeline.ingest``) both call it, so they produce the
same records.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Dict, Iterable, List, NamedTuple, Tuple

import apache_beam as beam
import numpy as np
from absl import logging
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.ml.inference.base import KeyedModelHandler, ModelHandler, RunInference

from components import config as config_lib
from components import cpu_bfloat16, example_format
from components.ingestion import formats, image_files, progress
from components.ingestion.formats import index as index_lib

METRICS_NAMESPACE = "flickr8k_ingestion"
STAGE_READER = "reader"
STAGE_READ = "read"
STAGE_DECODE = "decode"
STAGE_FEATURES = "features"
NON_FINITE_FEATURES = "non_finite_features"
REJECTS_DIR = "rejects"
SUMMARY_FILE = "ingestion_summary.json"
# The job writes here under the output folder; the splits are moved out once every sink is done.
STAGING_PREFIX = "_staging-"
EXAMPLES_FILE_PREFIX = "data_tfrecord"


class ImageMeta(NamedTuple):
    """What travels with an image through RunInference as its key."""

    image_id: str
    split: str
    captions: Tuple[Tuple[int, str], ...]  # (caption index, text)


def split_dir(output_dir: str, split: str) -> str:
    return example_format.split_dir(output_dir, split)


def read_index(data_dir: str, data: config_lib.DataConfig) -> index_lib.CaptionIndex:
    """The reader of ``data.format`` over ``data_dir``, on any file system Beam knows (local,
    gs://, ...)."""
    return formats.read_index(data_dir, data, open_binary=_open_uncompressed)


def _open_uncompressed(path: str):
    # FileSystems.open guesses compression from the name (".gz", ".bz2"): never for our inputs.
    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def reject_row(stage: str, reason: str, detail: str, image_id: str, caption_index: int,
               split: str = "") -> Dict[str, object]:
    return {"stage": stage, "reason": reason, "detail": detail, "image_id": image_id,
            "caption_index": caption_index, "split": split}


def _count_pair_rejects(reason: str, pairs: int) -> None:
    beam.metrics.Metrics.counter(METRICS_NAMESPACE, f"rejected_pairs_{reason}").inc(pairs)
    beam.metrics.Metrics.counter(METRICS_NAMESPACE, "rejected_pairs").inc(pairs)


class ReadImageFile(beam.DoFn):
    """Reads one image file (:mod:`components.ingestion.image_files`); refused files go to
    ``rejects`` with their reason."""

    REJECTS = "rejects"

    def __init__(self, image_dir: str, features: config_lib.FeaturesConfig):
        self._image_dir = image_dir
        self._features = features
        self._progress = None

    def setup(self):
        self._progress = progress.ImageCounter()

    def finish_bundle(self):
        self._progress.flush()

    def process(self, meta: ImageMeta):
        if not index_lib.is_image_path(meta.image_id):  # the readers' own rule, checked again
            self._progress.add()
            yield from _reject(self.REJECTS, STAGE_READ, index_lib.RejectReason.UNSAFE_IMAGE_NAME.value,
                               f"{meta.image_id!r} is not a plain file name", meta)
            return
        try:
            image_bytes = image_files.read_image_file(self._image_dir, meta.image_id,
                                                      self._features.max_image_bytes)
        except image_files.FileRejected as rejected:
            self._progress.add()
            yield from _reject(self.REJECTS, STAGE_READ, rejected.reason, rejected.detail, meta)
            return
        beam.metrics.Metrics.counter(METRICS_NAMESPACE, "images_read").inc()
        yield meta, image_bytes


def _reject(tag: str, stage: str, reason: str, detail: str, meta: ImageMeta):
    _count_pair_rejects(reason, len(meta.captions))
    for caption_index, _ in meta.captions:
        yield beam.pvalue.TaggedOutput(tag, reject_row(
            stage, reason, detail, meta.image_id, caption_index, meta.split))


class ResNet50FeatureHandler(ModelHandler[bytes, Tuple[np.ndarray, str], object]):
    """RunInference handler: image bytes → (features, error) through the serving graph's path.

    The model is :func:`components.resnet_features.features_from_image_bytes`, the
    function every serving signature runs, so an image's training features come
    from the decoding, limits, resize and weights serving uses. It is loaded once
    per worker. ``apache_beam.ml.inference.tensorflow_inference`` does not import
    on this stack (it imports tensorflow_hub, which needs ``tf.estimator``, gone
    in TF 2.16), so this subclasses the base ``ModelHandler`` and keeps Beam's
    batching and per-process model sharing.
    """

    def __init__(self, features: config_lib.FeaturesConfig):
        super().__init__()
        self._features = features
        self._bfloat16 = False

    def load_model(self):
        import tensorflow as tf

        from components import resnet_features

        gpus = tf.config.list_physical_devices("GPU")
        for gpu in gpus:
            # By default TensorFlow reserves nearly all of a GPU's memory for the first process:
            # a second worker on the same machine would fail to allocate any.
            tf.config.experimental.set_memory_growth(gpu, True)
        extractor = resnet_features.build_feature_extractor(self._features)
        # Resolved where the model runs: a Dataflow worker's CPU, not the launching machine's.
        self._bfloat16 = cpu_bfloat16.resolve(self._features.onednn_bfloat16, gpu_visible=bool(gpus))
        # A traced function runs ResNet50 about 1.9x faster than eager calls on CPU.
        return tf.function(lambda images: resnet_features.features_from_image_bytes(
            extractor, images, self._features))

    def run_inference(self, batch, model, inference_args=None) -> Iterable[Tuple[np.ndarray, str]]:
        import tensorflow as tf

        # CPU kernels give results that depend on the batch *shape* (not on the other
        # images in it), so every batch is padded to one shape (with empty images, which
        # fail fast): an image then gets bit-identical features whichever batch Beam puts
        # it in, and reruns match.
        padding = [b""] * (self._features.inference_batch_size - len(batch))
        with cpu_bfloat16.rewrite(self._bfloat16):
            feature_maps, errors = model(tf.constant(list(batch) + padding, tf.string))
        feature_maps, errors = feature_maps.numpy(), errors.numpy()
        return [(feature_maps[row], errors[row].decode("utf-8")) for row in range(len(batch))]

    def batch_elements_kwargs(self):
        return {"min_batch_size": self._features.inference_batch_size,
                "max_batch_size": self._features.inference_batch_size}

    def share_model_across_processes(self) -> bool:
        return False

    def get_metrics_namespace(self) -> str:
        return METRICS_NAMESPACE


class ToExample(beam.DoFn):
    """(meta, (features, error)) → serialized tf.Example in its split; images the graph could
    not decode, and non-finite features, go to ``rejects``."""

    REJECTS = "rejects"

    def __init__(self, feature_dtype: str):
        self._feature_dtype = feature_dtype
        self._progress = None

    def setup(self):
        self._progress = progress.ImageCounter()

    def finish_bundle(self):
        self._progress.flush()

    def process(self, keyed_features: Tuple[ImageMeta, Tuple[np.ndarray, str]]):
        import tensorflow as tf

        meta, (image_features, error) = keyed_features
        self._progress.add()  # read and through ResNet50: finished, whatever comes next
        if error:
            reason, _, detail = error.partition(": ")
            yield from _reject(self.REJECTS, STAGE_DECODE, reason, detail, meta)
            return
        beam.metrics.Metrics.counter(METRICS_NAMESPACE, "images_decoded").inc()
        stored = image_features.astype(np.dtype(self._feature_dtype).newbyteorder("<"))
        if not np.all(np.isfinite(stored)):
            bad = int(np.size(stored) - np.count_nonzero(np.isfinite(stored)))
            yield from _reject(self.REJECTS, STAGE_FEATURES, NON_FINITE_FEATURES,
                               f"{bad} of {stored.size} feature values are not finite as "
                               f"{self._feature_dtype}", meta)
            return
        example = tf.train.Example(features=tf.train.Features(feature={
            example_format.IMAGE_ID: _bytes_feature([meta.image_id.encode("utf-8")]),
            example_format.IMAGE_FEATURES: _bytes_feature([stored.tobytes()]),
            example_format.CAPTIONS: _bytes_feature([text.encode("utf-8") for _, text in meta.captions]),
            example_format.CAPTION_INDICES: tf.train.Feature(
                int64_list=tf.train.Int64List(value=[index for index, _ in meta.captions])),
        }))
        beam.metrics.Metrics.counter(METRICS_NAMESPACE, f"images_{meta.split}").inc()
        beam.metrics.Metrics.counter(METRICS_NAMESPACE, "accepted_pairs").inc(len(meta.captions))
        yield meta.split, example.SerializeToString(deterministic=True)


def _bytes_feature(values: List[bytes]):
    import tensorflow as tf

    return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))


def _reader_reject_rows(index: index_lib.CaptionIndex) -> List[Dict[str, object]]:
    """Caption-line rejects of the reader as reject rows (split-list lines hold no pairs)."""
    return [reject_row(STAGE_READER, reject.reason.value, f"{reject.source}:{reject.line_number}: "
                       f"{reject.detail}", reject.image_id, reject.caption_index)
            for reject in index.rejects if reject.kind == index_lib.CAPTION_LINE]


class _CountReaderRejects(beam.DoFn):
    def process(self, row):
        _count_pair_rejects(row["reason"], 1)
        yield row


@beam.ptransform_fn
def IngestFlickr8k(pipeline: beam.Pipeline, index: index_lib.CaptionIndex, image_dir: str,  # noqa: N802
                   features: config_lib.FeaturesConfig, output_dir: str):
    """Writes the splits and rejects of ``index`` under ``output_dir``; returns the write results."""
    image_metas = [
        ImageMeta(record.image_id, record.split,
                  tuple((caption.index, caption.text) for caption in record.captions))
        for record in index.records()]
    progress.write_total(len(image_metas))

    read = (
        pipeline
        | "CreateImageRecords" >> beam.Create(image_metas, reshuffle=True)
        | "ReadImageFiles" >> beam.ParDo(ReadImageFile(image_dir, features)).with_outputs(
            ReadImageFile.REJECTS, main="images"))
    examples = (
        read.images
        | "ResNet50Features" >> RunInference(KeyedModelHandler(ResNet50FeatureHandler(features)))
        | "ToExamples" >> beam.ParDo(ToExample(example_format.FEATURE_DTYPE)).with_outputs(
            ToExample.REJECTS, main="examples"))
    reader_rejects = (
        pipeline
        | "CreateReaderRejects" >> beam.Create(_reader_reject_rows(index))
        | "CountReaderRejects" >> beam.ParDo(_CountReaderRejects()))

    writes = {}
    for split in example_format.SPLITS:
        writes[split] = (
            examples.examples
            | f"Select_{split}" >> beam.Filter(lambda keyed, wanted=split: keyed[0] == wanted)
            | f"Values_{split}" >> beam.Values()
            | f"Write_{split}" >> beam.io.WriteToTFRecord(
                os.path.join(split_dir(output_dir, split), EXAMPLES_FILE_PREFIX),
                file_name_suffix=".gz" if features.compress_examples else ".tfrecord"))
    writes["rejects"] = (
        (reader_rejects, read[ReadImageFile.REJECTS], examples[ToExample.REJECTS])
        | "FlattenRejects" >> beam.Flatten()
        | "RejectsToJson" >> beam.Map(lambda row: json.dumps(row, sort_keys=True))
        | "WriteRejects" >> beam.io.WriteToText(
            os.path.join(output_dir, REJECTS_DIR, "rejects"), file_name_suffix=".jsonl"))
    return writes


def summarize(result: beam.runners.runner.PipelineResult, index: index_lib.CaptionIndex) -> dict:
    """Totals from the job's counters, checked: pairs read == accepted + rejected."""
    counters = {}
    query = result.metrics().query(
        beam.metrics.MetricsFilter().with_namespace(METRICS_NAMESPACE))
    for counter in query["counters"]:
        name = counter.key.metric.name
        counters[name] = counters.get(name, 0) + (
            counter.committed if counter.committed is not None else counter.attempted)
    pairs_read = index.caption_lines_read
    accepted = counters.get("accepted_pairs", 0)
    rejected = counters.get("rejected_pairs", 0)
    prefix = "rejected_pairs_"
    summary = {
        "pairs_read": pairs_read,
        "pairs_accepted": accepted,
        "pairs_rejected": rejected,
        "rejected_pairs_by_reason": {name[len(prefix):]: value for name, value in
                                     sorted(counters.items()) if name.startswith(prefix)},
        "images_per_split": {split: counters.get(f"images_{split}", 0) for split in example_format.SPLITS},
        "reader": index.summary(),
    }
    if accepted + rejected != pairs_read:
        raise RuntimeError(f"Ingestion lost records: read {pairs_read} (image, caption) pairs but "
                           f"accepted {accepted} + rejected {rejected}. Summary: {summary}")
    return summary


def write_summary(summary: dict, output_dir: str) -> str:
    path = os.path.join(output_dir, SUMMARY_FILE)
    with FileSystems.create(path) as stream:
        stream.write(json.dumps(summary, indent=2, sort_keys=True).encode("utf-8"))
    return path


def run_ingestion(pipeline: beam.Pipeline, pipeline_config: config_lib.PipelineConfig,
                  output_dir: str) -> dict:
    """Reads, builds and runs the job on ``pipeline``; returns the checked summary."""
    data = pipeline_config.data
    index = read_index(data.data_dir, data)
    image_dir = os.path.join(data.data_dir, data.image_dir_name)
    existing = [name for name in _output_names() if FileSystems.exists(os.path.join(output_dir, name))]
    if existing:
        raise FileExistsError(f"{output_dir} already holds {existing}; ingestion writes into a "
                              "new or empty output directory.")
    remove_staging_leftovers(output_dir)
    staging_dir = os.path.join(output_dir, f"{STAGING_PREFIX}{uuid.uuid4().hex}")
    _ = pipeline | "IngestFlickr8k" >> IngestFlickr8k(  # pylint: disable=no-value-for-parameter
        index, image_dir, pipeline_config.features, staging_dir)
    published = []
    try:
        result = pipeline.run()
        result.wait_until_finish()
        summary = summarize(result, index)
        for name in _output_names():
            if FileSystems.exists(os.path.join(staging_dir, name)):
                FileSystems.rename([os.path.join(staging_dir, name)], [os.path.join(output_dir, name)])
                published.append(os.path.join(output_dir, name))
        write_summary(summary, output_dir)
    except BaseException:
        # On gs:// a failed job's files are storage paid for nothing; a half-published output
        # would make the rerun refuse the folder.
        _delete_quietly([staging_dir, *published, os.path.join(output_dir, SUMMARY_FILE)])
        raise
    FileSystems.delete([staging_dir])
    return summary


def remove_staging_leftovers(output_dir: str) -> None:
    """Deletes the ``_staging-*`` folders of jobs into ``output_dir`` that were killed (a failed
    job removes its own): nothing was published from them."""
    pattern = os.path.join(output_dir, f"{STAGING_PREFIX}*")
    leftovers = {metadata.path.split(STAGING_PREFIX, 1)[1].split("/", 1)[0]
                 for metadata in FileSystems.match([os.path.join(pattern, "**")])[0].metadata_list}
    for name in sorted(leftovers):
        logging.warning("Removing %s%s, left in %s by an ingestion job that did not finish.",
                        STAGING_PREFIX, name, output_dir)
        _delete_quietly([os.path.join(output_dir, STAGING_PREFIX + name)])


def _delete_quietly(paths: List[str]) -> None:
    for path in paths:
        try:
            if FileSystems.exists(path):
                FileSystems.delete([path])
        except Exception as error:  # noqa: BLE001 (cleanup must not hide the job's own error)
            logging.warning("Could not delete %s: %s", path, error)


def _output_names() -> List[str]:
    return [os.path.basename(example_format.split_dir("", split))
            for split in example_format.SPLITS] + [REJECTS_DIR]
