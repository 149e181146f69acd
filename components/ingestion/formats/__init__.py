"""Caption dataset formats, one module per layout, registered by the name ``data.format`` takes.

Each format parses its own files into split entries and caption lines; :mod:`.index` holds the
caption index they all read into and the rules they share, :mod:`.files` the file access. A new
format is a module with a ``read_index(data_dir, data, open_binary)`` and a row in
:data:`READERS` (and its name in ``components.config.DATA_FORMATS``, which validates
``data.format`` below this package).
"""

from __future__ import annotations

from typing import BinaryIO, Callable, Optional

from components import config as config_lib
from components.ingestion.formats import coco, flickr8k, karpathy
from components.ingestion.formats.index import CaptionIndex

# data.format -> the format's reader; each takes (data_dir, data config, open_binary).
READERS = {"flickr8k": flickr8k.read_index, "karpathy": karpathy.read_index, "coco": coco.read_index}


def read_index(data_dir: str, data: config_lib.DataConfig,
               open_binary: Optional[Callable[[str], BinaryIO]] = None) -> CaptionIndex:
    """The caption index of the ``data.format`` layout at ``data_dir``; ``open_binary`` opens a
    path of any file system (default: the local disk)."""
    return READERS[data.format](data_dir, data, open_binary)
