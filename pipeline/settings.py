"""``make settings``: every configuration key with its default, type and allowed values.

Generated from the config itself (``components.config.describe_settings``), so it cannot drift
from what ``SET="section.field=value"`` accepts.

    python -m pipeline.settings [--markdown]
"""

import argparse
import sys
from typing import List, Optional

from components import config as config_lib


def render(rows: list, markdown: bool = False) -> str:
    header = ("key", "default", "type", "allowed")
    cells = [(key, repr(default) if isinstance(default, str) else str(default), type_name, allowed)
             for key, default, type_name, allowed in rows]
    if markdown:
        return "\n".join(["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)] + [
            "| " + " | ".join(f"`{text}`" if index == 0 else text.replace("|", "\\|")
                              for index, text in enumerate(row)) + " |" for row in cells])
    widths = [max(len(row[column]) for row in [header, *cells]) for column in range(3)]
    return "\n".join("  ".join(text.ljust(width) for text, width in zip(row[:3], widths, strict=True))
                     + ("  " + row[3] if row[3] else "") for row in [header, *cells])


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.settings", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        print(render(config_lib.describe_settings(), args.markdown))
    except BrokenPipeError:  # make settings | head
        sys.stderr.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
