"""The ``features`` config section: ResNet50 feature extraction, read at ingestion and by the
serving graph's copy of the extractor (``components.resnet_features``)."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

from components import cpu_bfloat16
from components.config_fields import Ge, Gt, Interval, Note, check, non_empty

# Where the Keras application weights are looked up; "random" never touches disk.
RESNET_WEIGHTS_RANDOM = "random"
RESNET_WEIGHTS_IMAGENET = "imagenet"
# oneDNN's bfloat16 rewrite (components.cpu_bfloat16): "auto" is on where the CPU has native bfloat16.
Bfloat16Mode = Literal[cpu_bfloat16.MODES]


@dataclasses.dataclass(frozen=True)
class FeaturesConfig:
    """ResNet50 feature extraction at ingestion (and inside the serving graph)."""

    # "random" (tests, demo), "imagenet" (Keras cache; never downloaded at test
    # time), or a path / gs:// URI of a Keras ``.h5`` / ``.weights.h5`` file.
    resnet_weights: Annotated[str, check(
        non_empty, f"must be {RESNET_WEIGHTS_RANDOM!r}, {RESNET_WEIGHTS_IMAGENET!r} or a weights file path"
    )] = RESNET_WEIGHTS_RANDOM
    random_weights_seed: Annotated[int, Ge(0)] = 0
    # ResNet50's 7x7 grid needs ceil(image_size / 32) == 7: the [49, 2048] feature layout the
    # schema, the validation gate and the Trainer read.
    image_size: Annotated[int, Interval(ge=193, le=224), Note(
        "(ResNet50's 7x7 grid: the [49, 2048] feature layout the schema and the Trainer read)")] = 224
    # Images with more pixels than this are rejected (decompression bombs).
    # 40 MP is ~2x the largest consumer photos; Flickr8k images are ~0.19 MP.
    max_image_pixels: Annotated[int, Gt(0)] = 40_000_000
    # Image files larger than this are rejected before they are read (file_too_large).
    max_image_bytes: Annotated[int, Ge(1)] = 50_000_000
    inference_batch_size: Annotated[int, Ge(1)] = 16
    # oneDNN's bfloat16 rewrite of ResNet50: "auto", "on", "off". README "Benchmarks" has what it
    # gains and changes.
    onednn_bfloat16: Bfloat16Mode = "off"
    # GZIP the TFRecords: less disk, less ingestion throughput (README "Benchmarks" has both).
    compress_examples: bool = False
