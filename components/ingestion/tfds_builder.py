"""A ``flickr8k`` TensorFlow Datasets builder over the manual-download Flickr8k layout.

For notebook users who want ``tfds.load`` rather than the pipeline::

    import tensorflow_datasets as tfds
    from components.ingestion import tfds_builder  # registers "flickr8k"

    train = tfds.load("flickr8k", split="train", data_dir="~/tensorflow_datasets",
                      download_and_prepare_kwargs={"download_config": tfds.download.DownloadConfig(
                          manual_dir="/data/flickr8k")})

It reads the layout with the same reader as the Beam job (official splits,
typed rejects), the same safe file reading and the serving graph's decoding
rule (``components.image_graph``); every reader or image reject is
logged with its reason and counted in the dataset description's
``rejects.json`` beside the prepared data, never dropped silently.

The pipeline's ``data`` and ``features`` config slices apply as they do to the
Beam job: ``data.format`` (``flickr8k`` or ``karpathy``, e.g. Flickr30k or COCO
with Karpathy's split file), the caption limits and the file-size and pixel
limits. Pass them as builder arguments::

    tfds.load("flickr8k", builder_kwargs={"data": config_lib.DataConfig(
        format="karpathy", captions_file="dataset_coco.json", image_dir_name="")}, ...)

They are not part of the dataset's version: prepare into a new ``data_dir``
when they change.
"""

import json
import os
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds
from absl import logging

from components import config as config_lib
from components import example_format, image_graph
from components.ingestion import image_files
from components.ingestion.formats import flickr8k

_DESCRIPTION = """
Flickr8k: 8,091 Flickr photos, each with 5 crowd-sourced captions, and the
official train/dev/test split lists (6,000 / 1,000 / 1,000 images).
"""

_CITATION = """
@article{hodosh2013framing,
  title={Framing Image Description as a Ranking Task: Data, Models and Evaluation Metrics},
  author={Hodosh, Micah and Young, Peter and Hockenmaier, Julia},
  journal={Journal of Artificial Intelligence Research}, volume={47}, pages={853--899}, year={2013}
}
"""

REJECTS_FILE = "rejects.json"


class Flickr8k(tfds.core.GeneratorBasedBuilder):
    """Flickr8k images with their captions, from a manually downloaded copy."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Official splits; typed rejects; upright RGB JPEGs."}
    MANUAL_DOWNLOAD_INSTRUCTIONS = """
    Flickr8k cannot be downloaded automatically. Request it from the authors (or
    use your institution's copy) and place it in `manual_dir` in this layout:

      manual_dir/Flicker8k_Dataset/*.jpg
      manual_dir/Flickr8k_text/Flickr8k.token.txt
      manual_dir/Flickr8k_text/Flickr_8k.trainImages.txt
      manual_dir/Flickr8k_text/Flickr_8k.devImages.txt
      manual_dir/Flickr8k_text/Flickr_8k.testImages.txt

    `make demo-data` writes a synthetic dataset in the same layout. Karpathy split
    files (builder argument `data=DataConfig(format="karpathy", ...)`) name their
    own images under `manual_dir/<data.image_dir_name>/`.
    """

    def __init__(self, *, data: Optional[config_lib.DataConfig] = None,
                 features: Optional[config_lib.FeaturesConfig] = None, **kwargs):
        self._data = data or config_lib.DataConfig()
        self._features = features or config_lib.FeaturesConfig()
        config_lib.PipelineConfig(data=self._data, features=self._features).validate()
        super().__init__(**kwargs)

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description=_DESCRIPTION,
            features=tfds.features.FeaturesDict({
                "image_id": tfds.features.Text(),
                "image": tfds.features.Image(shape=(None, None, 3), encoding_format="jpeg"),
                "captions": tfds.features.Sequence(tfds.features.Text()),
            }),
            supervised_keys=None,
            citation=_CITATION,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        from components.ingestion import beam_job

        data_dir = os.fspath(dl_manager.manual_dir)
        image_dir = os.path.join(data_dir, self._data.image_dir_name)
        if not os.path.isdir(image_dir):
            raise flickr8k.Flickr8kLayoutError(
                f"No image folder {image_dir}: place the dataset in manual_dir as described.\n"
                f"{self.MANUAL_DOWNLOAD_INSTRUCTIONS}")
        index = beam_job.read_index(data_dir, self._data)
        self._rejects = [reject.to_dict() for reject in index.rejects]
        for reason, count in sorted(index.reject_counts().items()):
            logging.warning("flickr8k: %d text-file lines rejected: %s", count, reason)
        return {split: self._generate_examples(index.images[split], image_dir)
                for split in example_format.SPLITS}

    def _generate_examples(self, records, image_dir):
        features = self._features
        for record in records:
            try:
                pixels = _read_and_decode(image_dir, record.image_id, features)
            except image_files.FileRejected as rejected:
                logging.warning("flickr8k: image %s rejected (%s): %s", record.image_id,
                                rejected.reason, rejected.detail)
                self._rejects.append({"image_id": record.image_id, "reason": rejected.reason,
                                      "detail": rejected.detail,
                                      "captions": len(record.captions)})
                continue
            yield record.image_id, {
                "image_id": record.image_id,
                "image": np.asarray(pixels),
                "captions": [caption.text for caption in record.captions],
            }

    def _download_and_prepare(self, dl_manager, download_config=None):
        super()._download_and_prepare(dl_manager, download_config=download_config)
        with open(os.path.join(self.data_path, REJECTS_FILE), "w", encoding="utf-8") as stream:
            json.dump(self._rejects, stream, indent=1)


def _read_and_decode(image_dir: str, image_id: str, features: config_lib.FeaturesConfig) -> np.ndarray:
    """Upright ``uint8 [h, w, 3]`` pixels, or :class:`image_files.FileRejected` with the file's or
    the decoder's reason."""
    image_bytes = image_files.read_image_file(image_dir, image_id, features.max_image_bytes)
    error = image_graph.header_errors(tf.constant([image_bytes]), features.max_image_pixels)[0]
    error = error.numpy().decode("utf-8")
    if not error:
        try:
            return image_graph.decode_upright_rgb(tf.constant(image_bytes)).numpy()
        except tf.errors.OpError:
            error = image_graph.CORRUPT_IMAGE_ERROR
    reason, _, detail = error.partition(": ")
    raise image_files.FileRejected(reason, detail)
