"""What the evaluator reports about a ModelEvaluation it wrote: the metrics table, greedy vs beam
log-probability, sample captions, the verdict and the report's path."""

import json
import os
from typing import List

from components.evaluation import evaluator


def describe(evaluation_uri: str) -> List[str]:
    with open(os.path.join(evaluation_uri, evaluator.METRICS_FILE), encoding="utf-8") as stream:
        document = json.load(stream)
    lines = [f"caption metrics (beam search, width {document['beam_width']}; pycocoevalcap):",
             *evaluator.metrics_table(document["splits"]).splitlines()]
    for split, result in document["splits"].items():
        lines.append(f"{split}: mean caption log-probability " + ", ".join(
            f"{name} {value:.3f}" for name, value in result["mean_log_probability"].items()))
        for row in result["captions"][:2]:
            lines.append(f"  {row['image_id']}: {row['caption']!r} (a reference: {row['references'][0]!r})")
    lines.append(f"{'BLESSED' if document['blessed'] else 'NOT BLESSED'}: {'; '.join(document['reasons'])}")
    lines.append(f"report: {os.path.join(evaluation_uri, evaluator.REPORT_FILE)}")
    return lines
