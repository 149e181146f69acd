"""Generates the embedded demo dataset in the exact Flickr8k layout.

Real Flickr8k cannot be downloaded on an air-gapped machine, so the default run
and the tests use pictures this module draws: one or two coloured shapes
(circle, square, triangle) at a named position and size on a varied, noisy
background, saved as real JPEG files of several sizes. Each picture gets five
differently phrased captions that are all true of it (colour, shape, position,
size, count), so the captions are a function of the picture and a working
model can learn them.

It also writes a GloVe-format text file of *synthetic* vectors covering the
demo vocabulary plus distractor words, named ``synthetic_glove.demo.<dim>d.txt``
so nobody mistakes it for Stanford's vectors.

Everything is derived from one seed: the same seed gives byte-identical files.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
from typing import Dict, List, Sequence, Tuple

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from components import config as config_lib
from components import example_format
from components.ingestion.formats import flickr8k

COLOURS: Dict[str, Tuple[int, int, int]] = {
    "red": (220, 30, 30),
    "green": (30, 170, 40),
    "blue": (30, 60, 220),
    "yellow": (240, 210, 20),
}
SHAPES = ("circle", "square", "triangle")
# Single-shape positions: name -> centre as a fraction of (width, height).
POSITIONS: Dict[str, Tuple[float, float]] = {
    "left": (0.25, 0.5),
    "right": (0.75, 0.5),
    "top": (0.5, 0.25),
    "bottom": (0.5, 0.75),
    "center": (0.5, 0.5),
}
# Radius as a fraction of min(width, height); the two classes never overlap.
SIZES: Dict[str, Tuple[float, float]] = {"small": (0.09, 0.12), "large": (0.17, 0.21)}
BACKGROUNDS: Tuple[Tuple[int, int, int], ...] = (
    (245, 245, 245), (200, 200, 200), (235, 225, 200), (205, 225, 235), (225, 210, 225),
)
IMAGE_SIZES: Tuple[Tuple[int, int], ...] = ((224, 224), (300, 225), (225, 300), (256, 256))
TWO_SHAPE_FRACTION = 0.3
DISTRACTOR_WORDS = (
    "dog", "man", "woman", "child", "water", "grass", "running", "playing", "street", "ball",
    "beach", "snow", "jumping", "shirt", "black", "white", "brown", "orange", "purple", "pink",
    "bike", "people", "rock", "field", "air", "camera", "young", "girl", "boy", "hat",
)
SYNTHETIC_GLOVE_DIM = 50


@dataclasses.dataclass(frozen=True)
class ShapeSpec:
    colour: str
    shape: str
    size: str
    position: str


@dataclasses.dataclass(frozen=True)
class DemoImage:
    image_id: str
    shapes: Tuple[ShapeSpec, ...]
    width: int
    height: int
    background: Tuple[int, int, int]


@dataclasses.dataclass(frozen=True)
class DemoDataset:
    """Paths of a generated demo dataset."""

    data_dir: str
    glove_path: str
    images: Tuple[DemoImage, ...]
    splits: Dict[str, Tuple[str, ...]]


def captions_for(shapes: Sequence[ShapeSpec]) -> List[str]:
    """Five differently phrased, true captions in Flickr8k style (final " .")."""
    if len(shapes) == 1:
        (spec,) = shapes
        thing = f"{spec.colour} {spec.shape}"
        where = {"center": "in the center", "top": "at the top", "bottom": "at the bottom"}.get(
            spec.position, f"on the {spec.position}")
        side = "the center" if spec.position == "center" else f"the {spec.position} side"
        captions = [
            f"A {thing} {where} .",
            f"A {spec.size} {thing} {where} of the picture .",
            f"There is one {spec.size} {thing} .",
            f"The image shows a {thing} near {side} .",
            f"One {spec.colour} {spec.shape} is placed {where}",
        ]
    else:
        first, second = shapes
        captions = [
            f"A {first.colour} {first.shape} and a {second.colour} {second.shape} .",
            f"A {first.colour} {first.shape} on the left and a {second.colour} {second.shape} "
            f"on the right .",
            f"Two shapes : a {first.colour} {first.shape} and a {second.colour} {second.shape} .",
            f"There is a {first.size} {first.colour} {first.shape} next to a {second.size} "
            f"{second.colour} {second.shape} .",
            f"The picture shows two shapes , a {first.colour} {first.shape} on the left",
        ]
    return captions


def demo_vocabulary() -> List[str]:
    """Every word the demo captions can use, lower-cased, sorted."""
    words = set()
    for colour in COLOURS:
        for shape in SHAPES:
            for size in SIZES:
                for position in POSITIONS:
                    one = ShapeSpec(colour, shape, size, position)
                    for caption in captions_for([one]) + captions_for([one, one]):
                        words.update(word for word in caption.lower().split() if word.isalpha())
    return sorted(words)


def extra_captions_for(shapes: Sequence[ShapeSpec]) -> List[str]:
    """Two more true captions, in words :func:`captions_for` already uses (COCO images have 5
    to 7 captions)."""
    if len(shapes) == 1:
        (spec,) = shapes
        where = {"center": "in the center", "top": "at the top", "bottom": "at the bottom"}.get(
            spec.position, f"on the {spec.position}")
        return [f"The picture shows a {spec.size} {spec.colour} {spec.shape} .",
                f"There is a {spec.colour} {spec.shape} {where} ."]
    first, second = shapes
    return [f"There is a {first.colour} {first.shape} and a {second.colour} {second.shape} .",
            f"The image shows two shapes , a {first.shape} and a {second.shape} ."]


def generate(output_dir: str, num_images: int = 300, seed: int = 8,
             split_fractions: Sequence[float] = (0.8, 0.1, 0.1)) -> DemoDataset:
    """Writes the demo dataset under ``output_dir`` (Flickr8k layout) and returns its paths.

    ``output_dir`` gets ``Flicker8k_Dataset/*.jpg``, ``Flickr8k_text/`` with the
    token file and the three split lists, and ``glove/`` with the synthetic
    GloVe file. Existing files of the same names are overwritten.
    """
    images, jpegs, split_indices = _draw(num_images, seed, split_fractions)
    image_dir = os.path.join(output_dir, "Flicker8k_Dataset")
    text_dir = os.path.join(output_dir, config_lib.FLICKR8K_TEXT_DIR)
    for directory in (image_dir, text_dir):
        os.makedirs(directory, exist_ok=True)
    for demo_image, jpeg in zip(images, jpegs, strict=True):
        _write_bytes(os.path.join(image_dir, demo_image.image_id), jpeg)

    flickr8k.write_token_file(
        os.path.join(text_dir, config_lib.FLICKR8K_TOKEN_FILE),
        ((image.image_id, captions_for(image.shapes)) for image in images))
    splits = {split: tuple(sorted(images[i].image_id for i in indices))
              for split, indices in split_indices.items()}
    for split, image_ids in splits.items():
        flickr8k.write_split_file(os.path.join(text_dir, config_lib.FLICKR8K_SPLIT_FILES[split]),
                                  image_ids)
    glove_path = _write_glove_and_readme(output_dir, seed, (
        f"Synthetic demo dataset in the Flickr8k layout, generated by components.ingestion.demo_data "
        f"(seed {seed}, {num_images} images)."))
    return DemoDataset(output_dir, glove_path, tuple(images), splits)


# The COCO demo's image folder, under data_dir (data.image_dir_name), and its Karpathy file.
COCO_IMAGE_DIR = "images"
COCO_KARPATHY_FILE = "dataset_coco.json"


def generate_coco(output_dir: str, num_images: int = 300, seed: int = 8,
                  split_fractions: Sequence[float] = (0.8, 0.1, 0.1)) -> DemoDataset:
    """Writes the demo pictures in COCO 2014's layout, with both caption formats COCO is read in.

    ``output_dir`` gets ``images/train2014/`` and ``images/val2014/`` (``COCO_<folder>_<id>.jpg``),
    the official ``annotations/captions_train2014.json`` and ``captions_val2014.json``, and a
    Karpathy split file ``dataset_coco.json``: three quarters of the train split in train2014
    (``train``), the other quarter in val2014 as ``restval``; dev is ``val``, test ``test``.
    Images have 5, 6 or 7 captions. The returned ``images`` and ``splits`` use the pipeline's
    image ids (``train2014/COCO_train2014_000000000001.jpg``) and split names (restval in train).
    """
    images, jpegs, split_indices = _draw(num_images, seed, split_fractions)
    train = sorted(split_indices["train"])
    karpathy_split = {index: "train" for index in train[:max(1, (3 * len(train)) // 4)]}
    karpathy_split.update({index: "restval" for index in train if index not in karpathy_split})
    karpathy_split.update({index: "val" for index in split_indices["dev"]})
    karpathy_split.update({index: "test" for index in split_indices["test"]})

    annotations = {"train2014": ([], []), "val2014": ([], [])}  # folder -> (images, annotations)
    karpathy_images, named_images = [], []
    next_annotation_id = 1
    for index, (demo_image, jpeg) in enumerate(zip(images, jpegs, strict=True)):
        folder = "train2014" if karpathy_split[index] == "train" else "val2014"
        coco_id = index + 1
        file_name = f"COCO_{folder}_{coco_id:012d}.jpg"
        _write_bytes(os.path.join(output_dir, COCO_IMAGE_DIR, folder, file_name), jpeg)
        captions = (captions_for(demo_image.shapes) + extra_captions_for(demo_image.shapes))[
            :5 + index % 3]
        file_images, file_annotations = annotations[folder]
        file_images.append({"id": coco_id, "file_name": file_name, "width": demo_image.width,
                            "height": demo_image.height})
        for caption in captions:
            file_annotations.append({"image_id": coco_id, "id": next_annotation_id, "caption": caption})
            next_annotation_id += 1
        karpathy_images.append({
            "filepath": folder, "filename": file_name, "imgid": index, "cocoid": coco_id,
            "split": karpathy_split[index],
            "sentences": [{"raw": caption, "tokens": caption.lower().split(), "imgid": index}
                          for caption in captions]})
        named_images.append(dataclasses.replace(demo_image, image_id=f"{folder}/{file_name}"))

    for folder, (file_images, file_annotations) in annotations.items():
        _write_json(os.path.join(output_dir, "annotations", f"captions_{folder}.json"), {
            "info": {"description": "Synthetic demo captions in COCO's format"},
            "images": file_images, "licenses": [], "annotations": file_annotations})
    _write_json(os.path.join(output_dir, COCO_KARPATHY_FILE),
                {"dataset": "coco", "images": karpathy_images})
    splits = {split: tuple(sorted(named_images[i].image_id for i in indices))
              for split, indices in split_indices.items()}
    glove_path = _write_glove_and_readme(output_dir, seed, (
        f"Synthetic demo dataset in the COCO 2014 layout, generated by "
        f"components.ingestion.demo_data (seed {seed}, {num_images} images)."))
    return DemoDataset(output_dir, glove_path, tuple(named_images), splits)


def _draw(num_images: int, seed: int, split_fractions: Sequence[float]
          ) -> Tuple[List[DemoImage], List[bytes], Dict[str, np.ndarray]]:
    """The pictures (as JPEG bytes) and each split's picture numbers, all from ``seed``."""
    if num_images < 3:
        raise ValueError(f"The demo dataset needs at least 3 images (one per split), got {num_images}.")
    if len(split_fractions) != 3 or abs(sum(split_fractions) - 1.0) > 1e-6 or min(split_fractions) < 0:
        raise ValueError(f"split_fractions must be three non-negative numbers summing to 1, "
                         f"got {tuple(split_fractions)}.")
    rng = np.random.RandomState(seed)
    images, jpegs = [], []
    for image_number in range(num_images):
        demo_image = _sample_image(rng, f"demo{seed}_{image_number:05d}.jpg")
        encoded = io.BytesIO()
        _render(demo_image, rng).save(encoded, format="JPEG", quality=92)
        images.append(demo_image)
        jpegs.append(encoded.getvalue())

    order = rng.permutation(num_images)
    num_train = max(1, int(round(split_fractions[0] * num_images)))
    num_dev = max(1, int(round(split_fractions[1] * num_images)))
    num_train = min(num_train, num_images - num_dev - 1)
    split_indices = {
        "train": order[:num_train],
        "dev": order[num_train:num_train + num_dev],
        "test": order[num_train + num_dev:],
    }
    return images, jpegs, split_indices


def _write_bytes(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as stream:
        stream.write(data)


def _write_json(path: str, value) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(value, stream)


def _write_glove_and_readme(output_dir: str, seed: int, what: str) -> str:
    glove_dir = os.path.join(output_dir, "glove")
    os.makedirs(glove_dir, exist_ok=True)
    glove_path = os.path.join(glove_dir, f"{example_format.DEMO_GLOVE_PREFIX}{SYNTHETIC_GLOVE_DIM}d.txt")
    write_synthetic_glove(glove_path, demo_vocabulary() + list(DISTRACTOR_WORDS),
                          SYNTHETIC_GLOVE_DIM, seed)
    with open(os.path.join(output_dir, "README.txt"), "w", encoding="utf-8") as stream:
        stream.write(f"{what}\nThe pictures are drawn shapes and "
                     "glove/ holds SYNTHETIC random vectors, not Stanford GloVe.\n")
    return glove_path


def write_synthetic_glove(path: str, words: Sequence[str], dim: int, seed: int) -> None:
    """GloVe text format (``word v1 ... vN``, no header) with seeded random vectors."""
    rng = np.random.RandomState(seed + 1)
    with open(path, "w", encoding="utf-8", newline="\n") as stream:
        for word in dict.fromkeys(words):  # de-duplicated, order kept
            vector = rng.normal(0.0, 0.4, size=dim)
            stream.write(word + " " + " ".join(f"{value:.5f}" for value in vector) + "\n")


def _sample_image(rng: np.random.RandomState, image_id: str) -> DemoImage:
    width, height = IMAGE_SIZES[rng.randint(len(IMAGE_SIZES))]
    background = BACKGROUNDS[rng.randint(len(BACKGROUNDS))]
    colour_names = list(COLOURS)
    sizes = list(SIZES)
    if rng.rand() < TWO_SHAPE_FRACTION:
        first_colour, second_colour = rng.choice(colour_names, size=2, replace=False)
        shapes = (
            ShapeSpec(str(first_colour), SHAPES[rng.randint(3)], sizes[rng.randint(2)], "left"),
            ShapeSpec(str(second_colour), SHAPES[rng.randint(3)], sizes[rng.randint(2)], "right"),
        )
    else:
        shapes = (ShapeSpec(colour_names[rng.randint(len(colour_names))], SHAPES[rng.randint(3)],
                            sizes[rng.randint(2)], list(POSITIONS)[rng.randint(len(POSITIONS))]),)
    return DemoImage(image_id, shapes, width, height, background)


def _render(demo_image: DemoImage, rng: np.random.RandomState) -> Image.Image:
    width, height = demo_image.width, demo_image.height
    noise = rng.normal(0.0, 12.0, size=(height, width, 3))
    pixels = np.clip(np.asarray(demo_image.background, dtype=np.float64) + noise, 0, 255)
    picture = Image.fromarray(pixels.astype(np.uint8), "RGB").filter(ImageFilter.GaussianBlur(1))
    draw = ImageDraw.Draw(picture)
    for spec in demo_image.shapes:
        low, high = SIZES[spec.size]
        radius = rng.uniform(low, high) * min(width, height)
        if len(demo_image.shapes) == 2:
            centre_x = (0.27 if spec.position == "left" else 0.73) * width
            centre_y = rng.uniform(0.4, 0.6) * height
        else:
            fraction_x, fraction_y = POSITIONS[spec.position]
            centre_x = (fraction_x + rng.uniform(-0.04, 0.04)) * width
            centre_y = (fraction_y + rng.uniform(-0.04, 0.04)) * height
        jitter = rng.randint(-15, 16, size=3)
        fill = tuple(int(np.clip(channel + offset, 0, 255))
                     for channel, offset in zip(COLOURS[spec.colour], jitter, strict=False))
        box = (centre_x - radius, centre_y - radius, centre_x + radius, centre_y + radius)
        if spec.shape == "circle":
            draw.ellipse(box, fill=fill)
        elif spec.shape == "square":
            side = radius * 0.9
            draw.rectangle((centre_x - side, centre_y - side, centre_x + side, centre_y + side),
                           fill=fill)
        else:
            draw.polygon([(centre_x, centre_y - radius),
                          (centre_x - radius, centre_y + radius * 0.8),
                          (centre_x + radius, centre_y + radius * 0.8)], fill=fill)
    return picture
