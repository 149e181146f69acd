"""Reader for Andrej Karpathy's caption split files (``dataset_{flickr8k,flickr30k,coco}.json``).

The files most captioning code bases read (``data.format=karpathy``)::

    {"dataset": "coco", "images": [
      {"filepath": "val2014", "filename": "COCO_val2014_000000391895.jpg", "split": "test",
       "sentences": [{"raw": "A man with a red helmet on a small moped ...", ...}, ...]}, ...]}

``filepath`` (COCO only) is a folder under the image folder. ``split`` is
``train``, ``val`` (the pipeline's ``dev``), ``test`` or ``restval`` (COCO's
rest of val2014, which goes to ``data.restval_split``, train by default).
Captions are the ``raw`` sentences, indexed by their position in the image's
list.

The rules of :func:`components.ingestion.formats.index.build_index` apply as for the
Flickr8k text files, with an image entry in the role of a split-list line (its
``line_number`` is the entry's position in ``images``, from 1) and a sentence in
the role of a caption line: every sentence ends accepted in exactly one split
or rejected with a reason, and entries that are not what the format says
(no ``filename``, a ``sentences`` that is no list, a sentence without ``raw``)
are ``malformed_line`` rejects, and an unknown ``split`` is ``unknown_split``.
The file is streamed (``ijson``), twice, so memory holds the index and
never the parsed file; a file that is not JSON raises
:class:`KarpathyLayoutError`.
"""

from __future__ import annotations

import os
from typing import BinaryIO, Callable, Dict, Iterator, Optional

import ijson

from components import config as config_lib
from components.ingestion.formats import files, index
from components.ingestion.formats.index import CaptionLine, RejectReason, SplitLine

KARPATHY_SPLITS = {"train": "train", "val": "dev", "test": "test"}
RESTVAL = "restval"


class KarpathyLayoutError(index.DatasetLayoutError):
    """A required Karpathy split file is missing, unreadable or not of the format."""

    dataset = "Karpathy split"



def read_karpathy(
    data_dir: str,
    captions_file: str,
    restval_split: str = config_lib.DataConfig.restval_split,
    image_dir: Optional[str] = None,
    open_binary: Optional[Callable[[str], BinaryIO]] = None,
    max_caption_chars: int = config_lib.DataConfig.max_caption_chars,
    max_captions_per_image: int = config_lib.DataConfig.max_captions_per_image,
) -> index.CaptionIndex:
    """Reads a Karpathy split file; the arguments are :func:`.flickr8k.read_flickr8k`'s.

    Raises:
      KarpathyLayoutError: the file is missing or not JSON of this format.
    """
    open_binary = open_binary or files.open_local
    path = files.resolve(data_dir, captions_file)
    image_files = files.list_image_files(image_dir) if image_dir is not None else None
    splits = dict(KARPATHY_SPLITS, **{RESTVAL: restval_split})
    return index.build_index(
        files.naming_setting(split_entries(path, open_binary, splits), "data.captions_file"),
        files.naming_setting(_caption_lines(path, open_binary), "data.captions_file"),
        os.path.basename(path), image_files, max_caption_chars, max_captions_per_image,
        is_safe_name=index.is_image_path)


def _entries(path: str, open_binary: Callable[[str], BinaryIO]) -> Iterator[tuple]:
    """(entry number from 1, image id or None, the entry) for each of ``images``."""
    with files.open_required(path, open_binary, KarpathyLayoutError) as stream:
        try:
            for number, entry in enumerate(ijson.items(stream, "images.item", use_float=True), start=1):
                yield number, _image_id(entry), entry
        except ijson.JSONError as error:
            raise KarpathyLayoutError(
                f"{path} is not a Karpathy split file (JSON with an 'images' list): {error}") from error


def _image_id(entry) -> Optional[str]:
    if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str):
        return None
    filepath = entry.get("filepath")
    if isinstance(filepath, str) and filepath:
        return f"{filepath.strip()}/{entry['filename'].strip()}"
    return entry["filename"].strip()



def split_entries(path: str, open_binary: Callable[[str], BinaryIO], splits: Dict[str, str]
                  ) -> Iterator[SplitLine]:
    """One split entry per ``images`` entry of a Karpathy file, ``splits`` mapping its split
    names to the pipeline's."""
    source = os.path.basename(path)
    for number, image_id, entry in _entries(path, open_binary):
        if image_id is None:
            yield SplitLine(number, source, error=(
                RejectReason.MALFORMED_LINE, f"image entry {number} has no string 'filename'"))
            continue
        split = entry.get("split")
        if split not in splits:
            yield SplitLine(number, source, image_id, error=(
                RejectReason.UNKNOWN_SPLIT,
                f"split {split!r} is not one of {sorted(splits)}"))
            continue
        yield SplitLine(number, source, image_id, splits[split])


def _caption_lines(path: str, open_binary) -> Iterator[CaptionLine]:
    for number, image_id, entry in _entries(path, open_binary):
        sentences = entry.get("sentences") if isinstance(entry, dict) else None
        if not isinstance(sentences, list):
            # One caption line stands for the entry, so the entry is counted and rejected.
            yield CaptionLine(number, image_id or "", error=(
                RejectReason.MALFORMED_LINE, f"image entry {number} has no 'sentences' list"))
            continue
        for caption_index, sentence in enumerate(sentences):
            raw = sentence.get("raw") if isinstance(sentence, dict) else None
            if image_id is None or not isinstance(raw, str):
                what = "no string 'filename'" if image_id is None else \
                    f"sentence {caption_index} has no string 'raw'"
                yield CaptionLine(number, image_id or "", caption_index, error=(
                    RejectReason.MALFORMED_LINE, f"image entry {number}: {what}"))
                continue
            yield index.caption_line(number, image_id, caption_index, raw)


def read_index(data_dir: str, data: config_lib.DataConfig,
               open_binary: Optional[Callable[[str], BinaryIO]] = None) -> index.CaptionIndex:
    """:func:`read_karpathy` with ``data``'s settings (the format registry's entry point)."""
    return read_karpathy(data_dir, data.captions_file, restval_split=data.restval_split,
                         open_binary=open_binary, max_caption_chars=data.max_caption_chars,
                         max_captions_per_image=data.max_captions_per_image)
