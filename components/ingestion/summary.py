"""What ingestion reports about an Examples artifact it wrote: the reader's accounting."""

import json
import os
from typing import List

from components.ingestion import beam_job


def describe(examples_uri: str) -> List[str]:
    """Pairs read = accepted + rejected (by reason), images per split, where the rejects are."""
    with open(os.path.join(examples_uri, beam_job.SUMMARY_FILE), encoding="utf-8") as stream:
        summary = json.load(stream)
    return [f"(image, caption) pairs read {summary['pairs_read']} = accepted "
            f"{summary['pairs_accepted']} + rejected {summary['pairs_rejected']} "
            f"{summary['rejected_pairs_by_reason']}",
            f"images per split: {summary['images_per_split']}",
            f"rejects: {os.path.join(examples_uri, beam_job.REJECTS_DIR)}"]
