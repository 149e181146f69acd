"""Reader for the raw Flickr8k text layout: captions, split lists, typed rejects.

Flickr8k (Hodosh, Young and Hockenmaier, 2013, "Framing Image Description as a
Ranking Task", JAIR 47) ships as a folder of JPEGs plus text files:

* ``Flickr8k.token.txt``: ``<image>.jpg#<n>\\t<caption>`` (or the Kaggle variant
  ``captions.txt``: a CSV with header ``image,caption``);
* ``Flickr_8k.{train,dev,test}Images.txt``: one image file name per line.

The reader parses the lines; the rules every format shares (:func:`.index.build_index`)
decide what is accepted. It never crashes on a bad line and never drops one silently:
every caption line read ends either accepted (in exactly one split) or in
:attr:`.index.CaptionIndex.rejects` with a :class:`.index.RejectReason`, and the same holds
for split-list lines. Missing or unreadable *files* are configuration errors and raise
:class:`Flickr8kLayoutError` with the path.
"""

from __future__ import annotations

import collections
import csv
import io
import os
import re
from typing import BinaryIO, Callable, Dict, Iterable, Iterator, Mapping, Optional, Sequence, Tuple

from components import config as config_lib
from components import example_format
from components.ingestion.formats import files, index
from components.ingestion.formats.index import CaptionLine, RejectReason, SplitLine

_TOKEN_KEY = re.compile(r"^(?P<image>[^#\t]*)#(?P<index>\d+)$")
_UTF8_BOM = b"\xef\xbb\xbf"
# A split-list line holds one file name; nothing longer is a name (ext4 allows 255 bytes).
_MAX_SPLIT_LINE_BYTES = 4096


class Flickr8kLayoutError(index.DatasetLayoutError):
    """A required file of the Flickr8k layout is missing, unreadable or of unknown format."""

    dataset = "Flickr8k"


def read_flickr8k(
    data_dir: str,
    captions_file: str = config_lib.DataConfig.captions_file,
    split_files: Optional[Mapping[str, str]] = None,
    image_dir: Optional[str] = None,
    open_binary: Optional[Callable[[str], BinaryIO]] = None,
    max_caption_chars: int = config_lib.DataConfig.max_caption_chars,
    max_captions_per_image: int = config_lib.DataConfig.max_captions_per_image,
) -> index.CaptionIndex:
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
      A :class:`index.CaptionIndex`.

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

    open_binary = open_binary or files.open_local
    image_files = None
    if image_dir is not None:
        if not os.path.isdir(image_dir):
            raise Flickr8kLayoutError(f"Image folder {image_dir!r} does not exist.")
        image_files = set(os.listdir(image_dir))
    captions_path = files.resolve(data_dir, captions_file)
    return index.build_index(
        _split_list_lines(data_dir, split_files, open_binary),
        files.naming_setting(_parse_caption_lines(captions_path, open_binary, max_caption_chars),
                             "data.captions_file"),
        os.path.basename(captions_path), image_files, max_caption_chars, max_captions_per_image)


def read_index(data_dir: str, data: config_lib.DataConfig,
               open_binary: Optional[Callable[[str], BinaryIO]] = None) -> index.CaptionIndex:
    """:func:`read_flickr8k` with ``data``'s settings (the format registry's entry point)."""
    return read_flickr8k(
        data_dir, captions_file=data.captions_file,
        split_files={"train": data.train_split_file, "dev": data.dev_split_file,
                     "test": data.test_split_file},
        open_binary=open_binary, max_caption_chars=data.max_caption_chars,
        max_captions_per_image=data.max_captions_per_image)


def _split_list_lines(data_dir: str, split_files: Mapping[str, str],
                      open_binary: Callable[[str], BinaryIO]) -> Iterator[SplitLine]:
    for split in example_format.SPLITS:
        if split not in split_files:
            continue
        path = files.resolve(data_dir, split_files[split])
        source = os.path.basename(path)
        for line_number, text, error in files.naming_setting(
                _read_lines(path, open_binary, _MAX_SPLIT_LINE_BYTES), f"data.{split}_split_file"):
            if error is None and not text.strip():
                yield SplitLine(line_number, source, blank=True)
            else:
                yield SplitLine(line_number, source, (text or "").strip(), split, error)


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
    with files.open_required(path, open_binary, Flickr8kLayoutError) as stream:
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
    with files.open_required(path, open_binary, Flickr8kLayoutError) as stream:
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
        yield index.caption_line(line_number, match.group("image"), int(index_digits), caption)


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
        key = index.name_key(image_id.strip())
        caption_index = next_index[key]
        next_index[key] += 1
        yield index.caption_line(line_number, image_id, caption_index, caption)


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
