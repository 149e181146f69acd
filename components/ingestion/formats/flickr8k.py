"""Reader for the raw Flickr8k text layout: captions, split lists, typed rejects.

Flickr8k (Hodosh, Young and Hockenmaier, 2013, "Framing Image Description as a
Ranking Task", JAIR 47) ships as a folder of JPEGs plus text files:

* ``Flickr8k.token.txt``: ``<image>.jpg#<n>\\t<caption>`` (or the Kaggle variant
  ``captions.txt``: a CSV with header ``image,caption``);
* ``Flickr_8k.{train,dev,test}Images.txt``: one image file name per line.

The reader is pure Python (no TensorFlow, no Beam) so the Beam ingestion job,
the TFDS builder and the tests share it. It never crashes on a bad line and never
drops one silently: every caption line read ends either accepted (in exactly
one split) or in :attr:`Flickr8kIndex.rejects` with a :class:`RejectReason`,
and the same holds for split-list lines. Missing or unreadable *files* are
configuration errors and raise :class:`Flickr8kLayoutError` with the path.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import enum
import io
import os
import re
import unicodedata
from typing import BinaryIO, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from components import caption_text, example_format
from components import config as config_lib

_TOKEN_KEY = re.compile(r"^(?P<image>[^#\t]*)#(?P<index>\d+)$")
# Control characters other than TAB never occur in real captions; a line holding
# them is damaged (for example a block of binary garbage that happens to decode).
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_UTF8_BOM = b"\xef\xbb\xbf"
_MAX_CAPTION_INDEX = 2 ** 63 - 1  # tf.Example stores caption indices as int64
# A split-list line holds one file name; nothing longer is a name (ext4 allows 255 bytes).
_MAX_SPLIT_LINE_BYTES = 4096


class Flickr8kLayoutError(ValueError):
    """A required file of the layout is missing, unreadable or of unknown format."""


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
class Flickr8kIndex:
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


def is_plain_file_name(name: str) -> bool:
    """True for a bare file name that cannot escape the folder it is joined to."""
    return bool(name) and name not in (".", "..") and not any(
        separator in name for separator in ("/", "\\", "\x00")) and not (
            len(name) >= 2 and name[1] == ":")


def read_flickr8k(
    data_dir: str,
    captions_file: str = "Flickr8k_text/Flickr8k.token.txt",
    split_files: Optional[Mapping[str, str]] = None,
    image_dir: Optional[str] = None,
    open_binary: Optional[Callable[[str], BinaryIO]] = None,
    max_caption_chars: int = config_lib.DataConfig.max_caption_chars,
    max_captions_per_image: int = config_lib.DataConfig.max_captions_per_image,
) -> Flickr8kIndex:
    """Reads a Flickr8k-layout folder.

    Image names are compared in Unicode NFC (a name typed on macOS is often NFD),
    and the captions file's spelling of a name is the one its file is opened by.
    A UTF-8 byte-order mark at the start of any text file is dropped.

    Args:
      data_dir: root of the layout; relative file arguments are joined to it.
      captions_file: the token file or a Kaggle ``captions.txt`` (format detected
        from its first line).
      split_files: split name -> split-list file; defaults to the official names.
      image_dir: when given, captions of images with no file in this folder are
        rejected as ``missing_image_file`` (one directory listing, no file reads;
        decoding problems are the ingestion job's to find).
      open_binary: opens a path for binary reading; defaults to the local file
        system (the Beam job passes ``FileSystems.open`` for ``gs://`` paths).
      max_caption_chars: longer caption lines are rejected (``caption_too_long``)
        and never held whole in memory.
      max_captions_per_image: an image's captions after this many accepted ones
        are rejected (``too_many_captions``).

    Returns:
      A :class:`Flickr8kIndex`.

    Raises:
      Flickr8kLayoutError: a required file is missing or of unknown format.
    """
    if split_files is None:
        split_files = {split: f"{config_lib.FLICKR8K_TEXT_DIR}/{name}"
                       for split, name in config_lib.FLICKR8K_SPLIT_FILES.items()}
    unknown_splits = set(split_files) - set(example_format.SPLITS)
    if unknown_splits:
        raise Flickr8kLayoutError(
            f"Unknown split names {sorted(unknown_splits)}; expected {example_format.SPLITS}.")

    open_binary = open_binary or _open_local
    image_files = None
    if image_dir is not None:
        if not os.path.isdir(image_dir):
            raise Flickr8kLayoutError(f"Image folder {image_dir!r} does not exist.")
        image_files = set(os.listdir(image_dir))
    captions_path = _resolve(data_dir, captions_file)
    return build_index(
        _split_list_lines(data_dir, split_files, open_binary),
        _parse_caption_lines(captions_path, open_binary, max_caption_chars),
        os.path.basename(captions_path), image_files, max_caption_chars, max_captions_per_image)


def _split_list_lines(data_dir: str, split_files: Mapping[str, str],
                      open_binary: Callable[[str], BinaryIO]) -> Iterator[SplitLine]:
    for split in example_format.SPLITS:
        if split not in split_files:
            continue
        path = _resolve(data_dir, split_files[split])
        source = os.path.basename(path)
        for line_number, text, error in _read_lines(path, open_binary, _MAX_SPLIT_LINE_BYTES):
            if error is None and not text.strip():
                yield SplitLine(line_number, source, blank=True)
            else:
                yield SplitLine(line_number, source, (text or "").strip(), split, error)


@dataclasses.dataclass(frozen=True)
class SplitLine:
    """One entry that puts an image in a split: a split-list line, or an image of a JSON file."""

    line_number: int
    source: str
    image_id: str = ""
    split: str = ""
    error: Optional[Tuple[RejectReason, str]] = None
    blank: bool = False


def build_index(split_lines: Iterable[SplitLine], caption_lines: Iterable[CaptionLine],
                captions_source: str, image_files: Optional[set], max_caption_chars: int,
                max_captions_per_image: int,
                is_safe_name: Callable[[str], bool] = None) -> Flickr8kIndex:
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
        image_id = _name_key(line.image_id)
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
        key = _name_key(parsed.image_id)

        if parsed.error is not None:
            reason, detail = parsed.error
        elif not is_safe_name(parsed.image_id):
            reason, detail = RejectReason.UNSAFE_IMAGE_NAME, f"{parsed.image_id!r} is not a plain file name"
        elif parsed.caption_index > _MAX_CAPTION_INDEX:
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
    return Flickr8kIndex(
        images={split: tuple(records) for split, records in images.items()},
        rejects=tuple(rejects), caption_lines_read=caption_lines_read,
        split_lines_read=split_lines_read, blank_lines=blank_lines)


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


def _name_key(image_id: str) -> str:
    return unicodedata.normalize("NFC", image_id)


def _open_local(path: str) -> BinaryIO:
    return open(path, "rb")


def _resolve(data_dir: str, path: str) -> str:
    return path if os.path.isabs(path) or "://" in path else os.path.join(data_dir, path)


def _open_required(path: str, open_binary: Callable[[str], BinaryIO]) -> BinaryIO:
    try:
        return open_binary(path)
    except Exception as error:  # FileNotFoundError locally, BeamIOError and others remotely
        raise Flickr8kLayoutError(f"Required Flickr8k file not readable: {path} ({error})") from error


def _bounded_lines(stream: BinaryIO, max_bytes: int) -> Iterator[Tuple[bytes, bool]]:
    """(line without its end, whether it was longer than ``max_bytes``); an overlong line's
    rest is skipped in bounded reads, so no line is ever held whole past the bound."""
    while True:
        raw = stream.readline(max_bytes + 1)
        if not raw:
            return
        too_long = len(raw) > max_bytes and not raw.endswith(b"\n")
        while too_long and raw and not raw.endswith(b"\n"):
            raw = stream.readline(max_bytes + 1)
        yield (b"" if too_long else raw.rstrip(b"\n").rstrip(b"\r")), too_long


def _read_lines(path: str, open_binary: Callable[[str], BinaryIO], max_bytes: int
                ) -> Iterator[Tuple[int, Optional[str], Optional[Tuple[RejectReason, str]]]]:
    """Yields (line number, text or None, (reason, detail) or None) per line; CRLF tolerated,
    a leading UTF-8 byte-order mark dropped, lines over ``max_bytes`` rejected unread."""
    with _open_required(path, open_binary) as stream:
        for line_number, (raw, too_long) in enumerate(_bounded_lines(stream, max_bytes), start=1):
            if too_long:
                yield line_number, None, (RejectReason.LINE_TOO_LONG,
                                          f"line is longer than {max_bytes} bytes")
                continue
            if line_number == 1 and raw.startswith(_UTF8_BOM):
                raw = raw[len(_UTF8_BOM):]
            try:
                yield line_number, raw.decode("utf-8"), None
            except UnicodeDecodeError as error:
                yield line_number, None, (RejectReason.NON_UTF8, f"not UTF-8 at byte {error.start}")


def _parse_caption_lines(path: str, open_binary: Callable[[str], BinaryIO], max_caption_chars: int
                         ) -> Iterator[CaptionLine]:
    # A UTF-8 character is at most 4 bytes; the image name and index come on top.
    max_bytes = 4 * max_caption_chars + _MAX_SPLIT_LINE_BYTES
    with _open_required(path, open_binary) as stream:
        head = stream.readline(max_bytes)
    if head.lstrip(_UTF8_BOM).strip().lower() == b"image,caption":
        yield from _parse_kaggle_csv(path, open_binary, max_bytes)
    else:
        yield from _parse_token_file(path, open_binary, max_bytes)


def _line_error(line_number: int, error: Tuple[RejectReason, str]) -> CaptionLine:
    if error[0] is RejectReason.LINE_TOO_LONG:
        error = (RejectReason.CAPTION_TOO_LONG, error[1])
    return CaptionLine(line_number, error=error)


def _parse_token_file(path: str, open_binary: Callable[[str], BinaryIO], max_bytes: int
                      ) -> Iterator[CaptionLine]:
    for line_number, text, error in _read_lines(path, open_binary, max_bytes):
        if error is not None:
            yield _line_error(line_number, error)
            continue
        if not text.strip():
            yield CaptionLine(line_number, blank=True)
            continue
        key, tab, caption = text.partition("\t")
        match = _TOKEN_KEY.match(key)
        if not tab or match is None:
            yield CaptionLine(line_number, error=(
                RejectReason.MALFORMED_LINE,
                "expected '<image>#<n><TAB><caption>'" + ("" if tab else " (no TAB)")))
            continue
        index_digits = match.group("index")
        if len(index_digits) > 19:  # past int64 whatever the digits; int() of a huge run is slow
            yield CaptionLine(line_number, match.group("image"), error=(
                RejectReason.CAPTION_INDEX_OUT_OF_RANGE,
                f"caption index of {len(index_digits)} digits does not fit a signed 64-bit integer"))
            continue
        yield _caption_line(line_number, match.group("image"), int(index_digits), caption)


def _parse_kaggle_csv(path: str, open_binary: Callable[[str], BinaryIO], max_bytes: int
                      ) -> Iterator[CaptionLine]:
    """The Kaggle ``captions.txt``: no caption index, so captions are numbered per image."""
    next_index: Dict[str, int] = collections.defaultdict(int)
    for line_number, text, error in _read_lines(path, open_binary, max_bytes):
        if line_number == 1:
            continue  # header, checked by the caller
        if error is not None:
            yield _line_error(line_number, error)
            continue
        if not text.strip():
            yield CaptionLine(line_number, blank=True)
            continue
        try:
            fields = next(csv.reader(io.StringIO(text)))
        except csv.Error as error:
            fields, detail = [], str(error)
        else:
            detail = f"expected 2 CSV fields, got {len(fields)}"
        if len(fields) != 2:
            yield CaptionLine(line_number, error=(RejectReason.MALFORMED_LINE, detail))
            continue
        image_id, caption = fields
        key = _name_key(image_id.strip())
        caption_index = next_index[key]
        next_index[key] += 1
        yield _caption_line(line_number, image_id, caption_index, caption)


def _caption_line(line_number: int, image_id: str, caption_index: int,
                  caption: str) -> CaptionLine:
    if _CONTROL_CHARACTERS.search(caption) or _CONTROL_CHARACTERS.search(image_id):
        return CaptionLine(line_number, image_id, caption_index, caption, error=(
            RejectReason.CONTROL_CHARACTERS, "line holds control characters (damaged file?)"))
    return CaptionLine(line_number, image_id.strip(), caption_index, caption.strip())


def write_token_file(path: str, captions: Iterable[Tuple[str, Sequence[str]]]) -> None:
    """Writes ``(image_id, [caption, ...])`` pairs in the official token format."""
    with open(path, "w", encoding="utf-8", newline="\n") as stream:
        for image_id, image_captions in captions:
            for caption_index, caption in enumerate(image_captions):
                stream.write(f"{image_id}#{caption_index}\t{caption}\n")


def write_split_file(path: str, image_ids: Iterable[str]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as stream:
        for image_id in image_ids:
            stream.write(f"{image_id}\n")
