"""The ``data`` config section: where the caption dataset lives, its format and the reader's
limits. Read by the dataset readers (``formats/``), the Beam job and the demo data."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Annotated, Literal, Tuple

from components import example_format
from components.config_fields import Ge, Note, check, is_finite, non_empty

# The official Flickr8k text files, relative to the dataset's folder.
FLICKR8K_TEXT_DIR = "Flickr8k_text"
FLICKR8K_TOKEN_FILE = "Flickr8k.token.txt"
FLICKR8K_SPLIT_FILES = {"train": "Flickr_8k.trainImages.txt", "dev": "Flickr_8k.devImages.txt",
                        "test": "Flickr_8k.testImages.txt"}
# Caption dataset formats the reader knows (README "Other datasets"); formats.READERS reads each.
DataFormat = Literal["flickr8k", "karpathy", "coco"]
DATA_FORMATS = DataFormat.__args__
# COCO's official caption annotation files are named after their image folder.
COCO_ANNOTATION_FILE = re.compile(r"^captions_(?P<folder>[A-Za-z0-9_-]+)\.json$")
Split = Literal[example_format.SPLITS]


def _coco_annotation_files(names) -> bool:
    return bool(names) and all(isinstance(name, str) and COCO_ANNOTATION_FILE.match(os.path.basename(name))
                               for name in names)


def _fractions(values) -> bool:
    return (len(values) == 3 and all(is_finite(value) and 0 < value < 1 for value in values)
            and abs(sum(values) - 1.0) < 1e-6)


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the caption dataset lives, in which format, and how its text files are read."""

    # Root of the dataset's folder. Empty: the demo dataset is generated
    # under ``runtime.output_dir``/demo_data and used.
    data_dir: str = ""
    # "flickr8k": the token file (or Kaggle captions.txt) and the three split lists;
    # "karpathy": one Karpathy split file (dataset_flickr8k/flickr30k/coco.json) as captions_file;
    # "coco": COCO's official annotation files (coco_annotation_files).
    format: DataFormat = "flickr8k"
    # data.format=coco: the caption annotation files, relative to data_dir; each file's images are
    # in the folder its name gives (captions_train2014.json -> <image_dir_name>/train2014/).
    coco_annotation_files: Annotated[Tuple[str, ...], check(
        _coco_annotation_files, "must name captions_<image folder>.json files")] = (
            "annotations/captions_train2014.json", "annotations/captions_val2014.json")
    # data.format=coco: a Karpathy split file (dataset_coco.json) whose splits to use; empty:
    # train* files are train, val* files' images are dev or test, half each (stable hash).
    karpathy_split_file: str = ""
    # Where a Karpathy file's "restval" images (COCO's rest of val2014) go.
    restval_split: Split = "train"
    image_dir_name: Annotated[str, check(non_empty, "must name the image folder")] = \
        "Flicker8k_Dataset"  # sic: the official archive's spelling
    # Either the official ``Flickr8k.token.txt`` or a Kaggle-style ``captions.txt``
    # (path relative to ``data_dir``); the reader detects the format.
    captions_file: Annotated[str, check(non_empty, "must name the captions file")] = \
        f"{FLICKR8K_TEXT_DIR}/{FLICKR8K_TOKEN_FILE}"
    train_split_file: Annotated[str, check(non_empty, "must name the train split list")] = \
        f"{FLICKR8K_TEXT_DIR}/{FLICKR8K_SPLIT_FILES['train']}"
    dev_split_file: Annotated[str, check(non_empty, "must name the dev split list")] = \
        f"{FLICKR8K_TEXT_DIR}/{FLICKR8K_SPLIT_FILES['dev']}"
    test_split_file: Annotated[str, check(non_empty, "must name the test split list")] = \
        f"{FLICKR8K_TEXT_DIR}/{FLICKR8K_SPLIT_FILES['test']}"
    # A caption line longer than this is rejected (caption_too_long); COCO's longest is ~1,000
    # characters, Flickr8k's ~200. Lines are never read whole past it, whatever the file holds.
    max_caption_chars: Annotated[int, Ge(1)] = 1000
    # Captions beyond this many for one image are rejected (too_many_captions). Flickr8k and
    # Flickr30k have 5 per image, COCO 5 to 7.
    max_captions_per_image: Annotated[int, Ge(1)] = 10
    # Demo dataset generation (used only when data_dir is empty).
    demo_num_images: Annotated[int, Ge(3), Note("(one image per split at least)")] = 300
    demo_seed: Annotated[int, Ge(0)] = 8
    demo_split_fractions: Annotated[Tuple[float, ...], check(
        _fractions, "must be 3 fractions in (0, 1) for train, dev, test that sum to 1")] = (0.8, 0.1, 0.1)
