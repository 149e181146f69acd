"""The ingestion job as a TFX component; ``pipeline/ingest.py`` runs it as a standalone Beam job.

Both run :func:`components.ingestion.beam_job.run_ingestion` on the same config:

* ``Flickr8kExampleGen(pipeline_config=config.to_json())`` inside a TFX
  pipeline; it uses the pipeline's ``beam_pipeline_args`` and writes an
  ``Examples`` artifact with the splits ``train``, ``dev``, ``test``, plus the
  rejects and the summary inside the same artifact directory.
* ``python -m pipeline.ingest --data_dir=... --output_dir=...
  [--resnet_weights=...] [--set section.field=value] [any Beam option]``, e.g.
  ``--runner=DataflowRunner --project=... --region=... --temp_location=gs://...``.
"""


import hashlib
import os

import apache_beam as beam
from absl import logging
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from tfx import v1 as tfx
from tfx.components.example_gen import utils as example_gen_utils
from tfx.components.util import examples_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils

from components import config as config_lib
from components import example_format
from components.ingestion import beam_job


@tfx.dsl.components.component(use_beam=True)
def Flickr8kExampleGen(  # noqa: N802  (TFX components are classes by convention)
    examples: tfx.dsl.components.OutputArtifact[tfx.types.standard_artifacts.Examples],
    pipeline_config: tfx.dsl.components.Parameter[str],
    data_fingerprint: tfx.dsl.components.Parameter[str],
    code_fingerprint: tfx.dsl.components.Parameter[str],
    beam_pipeline: tfx.dsl.components.BeamComponentParameter[beam.Pipeline] = None,
) -> None:
    """Flickr8k folder → Examples (ResNet50 features + captions per image) with rejects.

    ``pipeline_config`` holds the ``data`` and ``features`` sections only.
    ``data_fingerprint`` (from :func:`data_fingerprint`) and ``code_fingerprint`` (of this
    stage's modules) are unused here but are part of TFX's cache key, so changed input files
    or ingestion code re-run ingestion instead of hitting the cache.
    """
    del data_fingerprint, code_fingerprint
    parsed_config = config_lib.PipelineConfig.from_json(pipeline_config)
    summary = beam_job.run_ingestion(beam_pipeline, parsed_config, examples.uri)
    examples.split_names = artifact_utils.encode_split_names(list(example_format.SPLITS))
    examples.span = 0
    examples_utils.set_payload_format(examples, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
    # TFX's name for TFRecord files; readers detect GZIP from the ".gz" extension.
    examples.set_string_custom_property(example_gen_utils.FILE_FORMAT_PROPERTY_NAME,
                                        "tfrecords_gzip")
    log_summary(summary, examples.uri)


def data_fingerprint(data: config_lib.DataConfig) -> str:
    """A digest of the text files' bytes and the image folder's names, sizes and mtimes."""
    digest = hashlib.sha256()
    for relative_path in (data.captions_file, data.train_split_file, data.dev_split_file,
                          data.test_split_file):
        path = os.path.join(data.data_dir, relative_path)
        digest.update(relative_path.encode("utf-8"))
        if FileSystems.exists(path):
            with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
                digest.update(stream.read())
    image_dir = os.path.join(data.data_dir, data.image_dir_name)
    # "**": COCO's images sit in folders under the image folder (train2014/, val2014/).
    matches = FileSystems.match([os.path.join(image_dir, "**")])[0].metadata_list
    for metadata in sorted(matches, key=lambda metadata: metadata.path):
        digest.update(f"{os.path.relpath(metadata.path, image_dir)}\t{metadata.size_in_bytes}\t"
                      f"{metadata.last_updated_in_seconds}\n".encode())
    return digest.hexdigest()


def log_summary(summary: dict, output_dir: str) -> None:
    logging.info(
        "Flickr8k ingestion into %s: %d (image, caption) pairs read = %d accepted + %d rejected; "
        "images per split %s; rejects by reason %s", output_dir, summary["pairs_read"],
        summary["pairs_accepted"], summary["pairs_rejected"], summary["images_per_split"],
        summary["rejected_pairs_by_reason"])
