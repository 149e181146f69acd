"""The caption index every dataset format reads into, and the rules all formats share.

A format's parser (:mod:`.flickr8k`, :mod:`.karpathy`, :mod:`.coco`) turns its files into
split entries (:class:`SplitLine`: an image put in a split) and caption lines
(:class:`CaptionLine`: an image's caption, or why the line could not be read);
:func:`build_index` applies the rules every format shares and returns a
:class:`CaptionIndex`. Every line read ends either accepted (in exactly one split) or in
:attr:`CaptionIndex.rejects` with a :class:`RejectReason`, never dropped silently. A
required file that is missing, unreadable or of the wrong format raises a
:class:`DatasetLayoutError` naming the path.

Pure Python (no TensorFlow, no Beam): the Beam ingestion job, the TFDS builder and the tests
share it.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import re
import unicodedata
from typing import Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple

from components import caption_text, example_format

# Control characters other than TAB never occur in real captions; a line holding
# them is damaged (for example a block of binary garbage that happens to decode).
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
MAX_CAPTION_INDEX = 2 ** 63 - 1  # tf.Example stores caption indices as int64


class DatasetLayoutError(ValueError):
    """A required file of a dataset's layout is missing, unreadable or of unknown format."""

    dataset = "dataset"  # how the message names the file ("Required <dataset> file not readable")


class RejectReason(str, enum.Enum):
    """Why a line of the text files was not accepted."""

    MALFORMED_LINE = "malformed_line"
    NON_UTF8 = "non_utf8"
    CONTROL_CHARACTERS = "control_characters"
    EMPTY_CAPTION = "empty_caption"
    CAPTION_EMPTY_AFTER_NORMALIZATION = "caption_empty_after_normalization"
    CAPTION_TOO_LONG = "caption_too_long"
    CAPTION_INDEX_OUT_OF_RANGE = "caption_index_out_of_range"
    DUPLICATE_CAPTION_INDEX = "duplicate_caption_index"
    TOO_MANY_CAPTIONS = "too_many_captions"
    UNSAFE_IMAGE_NAME = "unsafe_image_name"
    IMAGE_NOT_IN_SPLIT = "image_not_in_split"
    IMAGE_IN_MULTIPLE_SPLITS = "image_in_multiple_splits"
    DUPLICATE_CAPTION = "duplicate_caption"
    MISSING_IMAGE_FILE = "missing_image_file"
    # Split-list lines only.
    DUPLICATE_SPLIT_ENTRY = "duplicate_split_entry"
    UNKNOWN_SPLIT = "unknown_split"  # Karpathy files: a split name the format does not have
    LINE_TOO_LONG = "line_too_long"
    UNKNOWN_IMAGE = "unknown_image"


CAPTION_LINE = "caption_line"
SPLIT_LINE = "split_line"


@dataclasses.dataclass(frozen=True)
class Reject:
    """One line that was not accepted, and why."""

    kind: str  # CAPTION_LINE or SPLIT_LINE
    source: str  # file name the line came from
    line_number: int  # 1-based
    reason: RejectReason
    detail: str
    image_id: str = ""
    caption_index: int = -1

    def to_dict(self) -> dict:
        return {
            "kind": self.kind, "source": self.source, "line_number": self.line_number,
            "reason": self.reason.value, "detail": self.detail,
            "image_id": self.image_id, "caption_index": self.caption_index,
        }


@dataclasses.dataclass(frozen=True)
class Caption:
    index: int
    text: str
    line_number: int


@dataclasses.dataclass(frozen=True)
class ImageRecord:
    """An accepted image: its split and its accepted captions, in file order."""

    image_id: str
    split: str
    captions: Tuple[Caption, ...]


@dataclasses.dataclass(frozen=True)
class CaptionIndex:
    """Everything the reader learnt, with the accounting that proves nothing was lost."""

    images: Mapping[str, Tuple[ImageRecord, ...]]  # split -> images sorted by id
    rejects: Tuple[Reject, ...]
    caption_lines_read: int
    split_lines_read: int
    blank_lines: int

    @property
    def captions_accepted(self) -> int:
        return sum(len(image.captions) for image in self.records())

    def records(self) -> Iterator[ImageRecord]:
        for split in example_format.SPLITS:
            yield from self.images.get(split, ())

    def rejected(self, kind: str) -> int:
        return sum(1 for reject in self.rejects if reject.kind == kind)

    def reject_counts(self, kind: Optional[str] = None) -> Dict[str, int]:
        return dict(collections.Counter(
            reject.reason.value for reject in self.rejects if kind in (None, reject.kind)))

    def summary(self) -> dict:
        """Counts for logs and tests. Always: caption_lines_read == captions_accepted
        + caption_lines_rejected, and split_lines_read == split entries accepted +
        split_lines_rejected."""
        return {
            "images_per_split": {split: len(self.images.get(split, ())) for split in example_format.SPLITS},
            "captions_per_split": {
                split: sum(len(image.captions) for image in self.images.get(split, ()))
                for split in example_format.SPLITS},
            "caption_lines_read": self.caption_lines_read,
            "captions_accepted": self.captions_accepted,
            "caption_lines_rejected": self.rejected(CAPTION_LINE),
            "split_lines_read": self.split_lines_read,
            "split_lines_rejected": self.rejected(SPLIT_LINE),
            "blank_lines": self.blank_lines,
            "caption_rejects_by_reason": self.reject_counts(CAPTION_LINE),
            "split_rejects_by_reason": self.reject_counts(SPLIT_LINE),
        }


@dataclasses.dataclass(frozen=True)
class SplitLine:
    """One entry that puts an image in a split: a split-list line, or an image of a JSON file."""

    line_number: int
    source: str
    image_id: str = ""
    split: str = ""
    error: Optional[Tuple[RejectReason, str]] = None
    blank: bool = False


@dataclasses.dataclass(frozen=True)
class CaptionLine:
    """One caption as a format's parser read it (or why it could not)."""

    line_number: int
    image_id: str = ""
    caption_index: int = -1
    caption: str = ""
    error: Optional[Tuple[RejectReason, str]] = None
    blank: bool = False
    source: str = ""  # the file, where a format reads captions from several; else build_index's


def name_key(image_id: str) -> str:
    return unicodedata.normalize("NFC", image_id)


def is_plain_file_name(name: str) -> bool:
    """True for a bare file name that cannot escape the folder it is joined to."""
    return bool(name) and name not in (".", "..") and not any(
        separator in name for separator in ("/", "\\", "\x00")) and not (
            len(name) >= 2 and name[1] == ":")


def is_image_path(name: str) -> bool:
    """A plain file name, or ``folder/file`` with both parts plain (COCO's ``filepath``)."""
    parts = name.split("/")
    return 1 <= len(parts) <= 2 and all(is_plain_file_name(part) for part in parts)



def build_index(split_lines: Iterable[SplitLine], caption_lines: Iterable[CaptionLine],
                captions_source: str, image_files: Optional[set], max_caption_chars: int,
                max_captions_per_image: int,
                is_safe_name: Callable[[str], bool] = None) -> CaptionIndex:
    """The rules every caption dataset format shares, over its parsed split entries and caption
    lines: split entries first (all of them), then captions, then split entries nothing used."""
    is_safe_name = is_safe_name or is_plain_file_name
    rejects: List[Reject] = []
    blank_lines = 0

    # 1. Split entries: image (NFC) -> split, rejecting duplicates and unsafe names.
    # image -> [(split, source, line number)] for every accepted split entry.
    listings: Dict[str, List[Tuple[str, str, int]]] = collections.defaultdict(list)
    split_lines_read = 0
    seen_entries = set()
    for line in split_lines:
        if line.blank:
            blank_lines += 1
            continue
        split_lines_read += 1
        image_id = name_key(line.image_id)
        if line.error is not None:
            reason, detail = line.error
        elif not is_safe_name(image_id):
            reason, detail = RejectReason.UNSAFE_IMAGE_NAME, f"{image_id!r} is not a plain file name"
        elif (image_id, line.source) in seen_entries:
            reason, detail = RejectReason.DUPLICATE_SPLIT_ENTRY, f"listed twice in {line.source}"
        else:
            seen_entries.add((image_id, line.source))
            listings[image_id].append((line.split, line.source, line.line_number))
            continue
        rejects.append(Reject(SPLIT_LINE, line.source, line.line_number, reason, detail, image_id))
    split_of = {image_id: entries[0][0] for image_id, entries in listings.items()}
    splits_of = {image_id: ", ".join(entry[0] for entry in entries)
                 for image_id, entries in listings.items()}
    in_multiple_splits = {image_id for image_id, entries in listings.items() if len(entries) > 1}

    # 2. Captions.
    captions_of: Dict[str, List[Caption]] = collections.defaultdict(list)
    spelling_of: Dict[str, str] = {}  # NFC key -> the captions file's first spelling
    seen_pairs, seen_indices = set(), set()
    caption_lines_read = 0
    for parsed in caption_lines:
        if parsed.blank:
            blank_lines += 1
            continue
        caption_lines_read += 1
        key = name_key(parsed.image_id)

        if parsed.error is not None:
            reason, detail = parsed.error
        elif not is_safe_name(parsed.image_id):
            reason, detail = RejectReason.UNSAFE_IMAGE_NAME, f"{parsed.image_id!r} is not a plain file name"
        elif parsed.caption_index > MAX_CAPTION_INDEX:
            reason, detail = RejectReason.CAPTION_INDEX_OUT_OF_RANGE, (
                f"caption index {parsed.caption_index} does not fit a signed 64-bit integer")
        elif not parsed.caption.strip():
            reason, detail = RejectReason.EMPTY_CAPTION, "caption is empty"
        elif len(parsed.caption) > max_caption_chars:
            reason, detail = RejectReason.CAPTION_TOO_LONG, (
                f"caption has {len(parsed.caption)} characters, over data.max_caption_chars = "
                f"{max_caption_chars}")
        elif not caption_text.normalize_python(parsed.caption):
            reason, detail = RejectReason.CAPTION_EMPTY_AFTER_NORMALIZATION, (
                f"{parsed.caption[:40]!r} has no letter a-z or digit after normalisation")
        elif key in in_multiple_splits:
            reason, detail = RejectReason.IMAGE_IN_MULTIPLE_SPLITS, f"listed in {splits_of[key]}"
        elif key not in split_of:
            reason, detail = RejectReason.IMAGE_NOT_IN_SPLIT, "image is in no split list"
        elif image_files is not None and spelling_of.get(key, parsed.image_id) not in image_files:
            reason, detail = RejectReason.MISSING_IMAGE_FILE, f"no file {parsed.image_id} in the image folder"
        elif (key, parsed.caption_index) in seen_indices:
            reason, detail = RejectReason.DUPLICATE_CAPTION_INDEX, (
                f"caption index {parsed.caption_index} already used for this image")
        elif (key, parsed.caption) in seen_pairs:
            reason, detail = RejectReason.DUPLICATE_CAPTION, "same caption already accepted for this image"
        elif len(captions_of[key]) >= max_captions_per_image:
            reason, detail = RejectReason.TOO_MANY_CAPTIONS, (
                f"image already has data.max_captions_per_image = {max_captions_per_image} captions")
        else:
            seen_pairs.add((key, parsed.caption))
            seen_indices.add((key, parsed.caption_index))
            spelling_of.setdefault(key, parsed.image_id)
            captions_of[key].append(Caption(parsed.caption_index, parsed.caption, parsed.line_number))
            continue
        rejects.append(Reject(CAPTION_LINE, parsed.source or captions_source, parsed.line_number,
                              reason, detail, parsed.image_id, parsed.caption_index))

    # 3. Split entries of images in two splits, or that no accepted caption refers to.
    for image_id, entries in sorted(listings.items()):
        if image_id in in_multiple_splits:
            reason, detail = RejectReason.IMAGE_IN_MULTIPLE_SPLITS, f"listed in {splits_of[image_id]}"
        elif not captions_of.get(image_id):
            reason, detail = RejectReason.UNKNOWN_IMAGE, "no accepted caption refers to this image"
        else:
            continue
        for _, source, line_number in entries:
            rejects.append(Reject(SPLIT_LINE, source, line_number, reason, detail, image_id))

    images = {split: [] for split in example_format.SPLITS}
    for key in sorted(key for key, captions in captions_of.items() if captions):
        images[split_of[key]].append(
            ImageRecord(spelling_of[key], split_of[key], tuple(captions_of[key])))
    return CaptionIndex(
        images={split: tuple(records) for split, records in images.items()},
        rejects=tuple(rejects), caption_lines_read=caption_lines_read,
        split_lines_read=split_lines_read, blank_lines=blank_lines)


def caption_line(line_number: int, image_id: str, caption_index: int,
                  caption: str) -> CaptionLine:
    if _CONTROL_CHARACTERS.search(caption) or _CONTROL_CHARACTERS.search(image_id):
        return CaptionLine(line_number, image_id, caption_index, caption, error=(
            RejectReason.CONTROL_CHARACTERS, "line holds control characters (damaged file?)"))
    return CaptionLine(line_number, image_id.strip(), caption_index, caption.strip())
