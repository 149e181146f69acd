"""Progress bars on the console: tqdm, sized to the terminal, drawn even where it reports no size.

Used by the local run's ingestion display (``pipeline.console``) and the Trainer's
progress (``components.trainer.run_fn``); both draw only when their stream is a
terminal and write plain lines otherwise.
"""

from __future__ import annotations

import os
from typing import TextIO

import tqdm


def tqdm_shape(stream: TextIO) -> dict:
    """tqdm's size arguments: follow the terminal where it reports a size; 80×24 where it
    reports 0×0 (a pseudo-terminal nobody sized: ``script`` or ``docker exec -t`` without a
    terminal, some CI runners), on which tqdm draws nothing at all (measured)."""
    try:
        size = os.get_terminal_size(stream.fileno())
    except (AttributeError, ValueError, OSError):
        size = os.terminal_size((0, 0))
    if size.columns > 0 and size.lines > 0:
        return {"dynamic_ncols": True}
    return {"ncols": 80, "nrows": 24}


def progress_bar(stream: TextIO, total: int, label: str, unit: str, initial: int = 0) -> tqdm.tqdm:
    """A bar on ``stream`` that clears itself when closed (the caller prints the lasting line)."""
    return tqdm.tqdm(total=total, initial=initial, desc=f"  {label}", unit=f" {unit}", file=stream,
                     leave=False, **tqdm_shape(stream))
