"""Reader for COCO's official caption annotation files (``data.format=coco``).

The files the COCO site publishes (``annotations/captions_train2014.json``,
``captions_val2014.json``; 2017 files have the same shape)::

    {"info": {...}, "images": [{"id": 391895, "file_name": "COCO_val2014_000000391895.jpg", ...}],
     "licenses": [...], "annotations": [{"image_id": 391895, "id": 192, "caption": "A man ..."}]}

Each file's images live in the folder its name gives (``captions_val2014.json`` ->
``<data.image_dir_name>/val2014/``), so image ids are ``val2014/COCO_val2014_....jpg``,
the same ids a Karpathy split file gives (:mod:`components.ingestion.formats.karpathy`).

Splits: with ``data.karpathy_split_file`` (``dataset_coco.json``) its train / val /
test / restval entries are the split entries (restval to ``data.restval_split``) and
the annotation files give the captions. Without it, a ``train*`` file's images are
train and a ``val*`` file's images are dev or test, half each, chosen by a stable hash
of the image's name (COCO publishes no test captions).

The rules of :func:`components.ingestion.formats.index.build_index` apply: an annotation is
a caption line (its ``line_number`` its position in ``annotations``, from 1; its
caption index its position among its image's annotations), an ``images`` entry that is
no ``{"id": int, "file_name": str}`` or repeats an id is a ``malformed_line`` split
reject, and an annotation whose ``image_id`` no entry has is a ``malformed_line``
caption reject. Each file is streamed (``ijson``) twice; memory holds the index and
one id -> name map per file, never a parsed file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import os
from typing import BinaryIO, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import ijson

from components import config as config_lib
from components.ingestion.formats import files, index, karpathy
from components.ingestion.formats.index import CaptionLine, RejectReason, SplitLine


class CocoLayoutError(index.DatasetLayoutError):
    """A required COCO annotation file is missing, unreadable or not of the format."""

    dataset = "COCO annotation"


def image_folder(annotation_file: str) -> str:
    """``train2014`` for ``.../captions_train2014.json``.

    Raises:
      CocoLayoutError: the name is not ``captions_<folder>.json``.
    """
    match = config_lib.COCO_ANNOTATION_FILE.match(os.path.basename(annotation_file))
    if match is None:
        raise CocoLayoutError(
            f"{annotation_file!r} is not named like a COCO caption annotation file "
            "(captions_<image folder>.json, e.g. captions_train2014.json).")
    return match.group("folder")


def default_split(folder: str, file_name: str) -> Optional[str]:
    """The split of an image without a Karpathy file: ``train*`` folders train, ``val*``
    folders dev or test by a stable hash of the name; None for any other folder."""
    if folder.startswith("train"):
        return "train"
    if folder.startswith("val"):
        return ("dev", "test")[hashlib.sha1(file_name.encode("utf-8")).digest()[0] % 2]
    return None


def read_coco(
    data_dir: str,
    annotation_files: Sequence[str],
    karpathy_split_file: str = "",
    restval_split: str = config_lib.DataConfig.restval_split,
    image_dir: Optional[str] = None,
    open_binary: Optional[Callable[[str], BinaryIO]] = None,
    max_caption_chars: int = config_lib.DataConfig.max_caption_chars,
    max_captions_per_image: int = config_lib.DataConfig.max_captions_per_image,
) -> index.CaptionIndex:
    """Reads COCO annotation files; the other arguments are :func:`.flickr8k.read_flickr8k`'s.

    Raises:
      CocoLayoutError: a file is missing, not JSON of this format, or badly named.
    """
    if not annotation_files:
        raise CocoLayoutError("data.coco_annotation_files names no annotation file.")
    open_binary = open_binary or files.open_local
    paths = [files.resolve(data_dir, name) for name in annotation_files]
    folders = [image_folder(path) for path in paths]
    if not karpathy_split_file:
        for path, folder in zip(paths, folders, strict=True):
            if default_split(folder, "") is None:
                raise CocoLayoutError(
                    f"{path}: images of {folder}/ have no split without data.karpathy_split_file "
                    "(only train* and val* folders do).")
    image_files = files.list_image_files(image_dir) if image_dir is not None else None

    # One pass over each file's images: id -> image id, and the bad entries as split rejects.
    names_by_file: List[Dict[int, str]] = []
    image_entries: List[SplitLine] = []
    for path, folder in zip(paths, folders, strict=True):
        try:
            names, entries = _read_images(path, folder, open_binary)
        except CocoLayoutError as error:
            raise CocoLayoutError(
                f"{error}; {files.setting_hint('data.coco_annotation_files')}") from error
        names_by_file.append(names)
        image_entries.extend(entries)

    if karpathy_split_file:
        split_path = files.resolve(data_dir, karpathy_split_file)
        splits = dict(karpathy.KARPATHY_SPLITS, **{karpathy.RESTVAL: restval_split})
        split_lines = itertools.chain([line for line in image_entries if line.error is not None],
                             files.naming_setting(karpathy.split_entries(split_path, open_binary, splits),
                                                  "data.karpathy_split_file"))
    else:
        split_lines = iter(image_entries)
    caption_lines = (line for path, names in zip(paths, names_by_file, strict=True)
                     for line in _caption_lines(path, names, open_binary))
    return index.build_index(
        split_lines, caption_lines, os.path.basename(paths[0]), image_files, max_caption_chars,
        max_captions_per_image, is_safe_name=index.is_image_path)


def _items(path: str, prefix: str, open_binary: Callable[[str], BinaryIO]) -> Iterator[Tuple[int, object]]:
    """(position from 1, item) for each element of the JSON list at ``prefix``."""
    with files.open_required(path, open_binary, CocoLayoutError) as stream:
        try:
            yield from enumerate(ijson.items(stream, prefix, use_float=True), start=1)
        except ijson.JSONError as error:
            raise CocoLayoutError(
                f"{path} is not a COCO caption annotation file (JSON with 'images' and "
                f"'annotations' lists): {error}") from error


def _read_images(path: str, folder: str, open_binary) -> Tuple[Dict[int, str], List[SplitLine]]:
    """The file's ``id -> folder/file_name`` map, and one split entry per ``images`` entry
    (its split without a Karpathy file; an error for a bad or repeated entry)."""
    source = os.path.basename(path)
    names: Dict[int, str] = {}
    entries: List[SplitLine] = []
    for number, entry in _items(path, "images.item", open_binary):
        image_number = entry.get("id") if isinstance(entry, dict) else None
        file_name = entry.get("file_name") if isinstance(entry, dict) else None
        if not _is_integer(image_number) or not isinstance(file_name, str):
            entries.append(SplitLine(number, source, error=(
                RejectReason.MALFORMED_LINE,
                f"images entry {number} is not {{'id': integer, 'file_name': string}}")))
            continue
        image_id = f"{folder}/{file_name.strip()}"
        if image_number in names:
            entries.append(SplitLine(number, source, image_id, error=(
                RejectReason.MALFORMED_LINE,
                f"image id {image_number} already names {names[image_number]!r}")))
            continue
        names[image_number] = image_id
        entries.append(SplitLine(number, source, image_id, default_split(folder, file_name.strip()) or ""))
    return names, entries


def _is_integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _caption_lines(path: str, names: Dict[int, str], open_binary) -> Iterator[CaptionLine]:
    source = os.path.basename(path)
    next_index: Dict[int, int] = {}
    for number, annotation in _items(path, "annotations.item", open_binary):
        image_number = annotation.get("image_id") if isinstance(annotation, dict) else None
        caption = annotation.get("caption") if isinstance(annotation, dict) else None
        if not _is_integer(image_number):
            image_number = None  # a list or an object would not even hash
        if image_number not in names or not isinstance(caption, str):
            what = ("no string 'caption'" if image_number in names else
                    f"image_id {image_number!r} is in no entry of the file's 'images'")
            yield CaptionLine(number, names.get(image_number, ""), error=(
                RejectReason.MALFORMED_LINE, f"annotation {number}: {what}"), source=source)
            continue
        caption_index = next_index.get(image_number, 0)
        next_index[image_number] = caption_index + 1
        line = index.caption_line(number, names[image_number], caption_index, caption)
        yield dataclasses.replace(line, source=source)


def read_index(data_dir: str, data: config_lib.DataConfig,
               open_binary: Optional[Callable[[str], BinaryIO]] = None) -> index.CaptionIndex:
    """:func:`read_coco` with ``data``'s settings (the format registry's entry point)."""
    return read_coco(data_dir, data.coco_annotation_files,
                     karpathy_split_file=data.karpathy_split_file, restval_split=data.restval_split,
                     open_binary=open_binary, max_caption_chars=data.max_caption_chars,
                     max_captions_per_image=data.max_captions_per_image)
