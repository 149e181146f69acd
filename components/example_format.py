"""The example format every stage shares: feature names, the ResNet50 feature layout, the split
directories, and the files that carry facts from one stage to the next.

Ingestion writes it, the schema and the validation gate check it, Transform, the Trainer, the
evaluator and the serving signatures read it. This module sits at the bottom of the house with
``config``: it imports nothing of ours.
"""

import os

# The dataset's splits, in pipeline order.
SPLITS = ("train", "dev", "test")

# Features of an ingested example (one per image) and of a transformed one.
IMAGE_ID = "image_id"
IMAGE_FEATURES = "image_features"
CAPTIONS = "captions"
CAPTION_INDICES = "caption_indices"
CAPTION_IDS = "caption_ids"

# ResNet50's last feature map at 224x224: a 7x7 grid of 2048 channels, stored as float16.
FEATURE_POSITIONS = 49
FEATURE_DEPTH = 2048
FEATURE_DTYPE = "float16"
FEATURE_BYTES = FEATURE_POSITIONS * FEATURE_DEPTH * 2

# Transform's vocabulary and caption-length facts (an asset of its graph, copied into the
# serving model's assets.extra/), and the Trainer's per-epoch history.
FACTS_FILE = "caption_facts.json"
HISTORY_FILE = "history.json"
# The generated demo's synthetic GloVe file is named so; facts naming it mean demo training data.
DEMO_GLOVE_PREFIX = "synthetic_glove.demo."


def split_dir(root: str, split: str) -> str:
    """The directory of one split's records under an Examples artifact (TFX's layout)."""
    return os.path.join(root, f"Split-{split}")
