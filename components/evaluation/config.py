"""The ``evaluation`` config section: caption metrics, the blessing that gates the Pusher, and the
report; read by the evaluator."""

from __future__ import annotations

import dataclasses
from typing import Annotated, List, Literal, Tuple

from components import example_format
from components.config_fields import FINITE, Ge, Note, check

# The caption metrics the evaluator computes (pycocoevalcap).
CaptionMetric = Literal["BLEU-1", "BLEU-2", "BLEU-3", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr"]
CAPTION_METRIC_NAMES = CaptionMetric.__args__


def _distinct_splits(splits) -> bool:
    return len(splits) > 0 and len(set(splits)) == len(splits) and set(splits) <= set(example_format.SPLITS)


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
    """Caption metrics, the blessing that gates the Pusher, and the report."""

    # Splits scored in the pipeline. The test split is reported, never used to decide.
    splits: Annotated[Tuple[str, ...], check(
        _distinct_splits, f"must be distinct splits among {list(example_format.SPLITS)}")] = ("dev", "test")
    bless_split: str = "dev"
    bless_metric: CaptionMetric = "BLEU-4"
    # Absolute floor. Published Flickr8k BLEU-4 is ~0.2 for this model family; a
    # model below 0.1 has not learned to caption.
    bless_threshold: Annotated[float, Ge(0), FINITE] = 0.1
    # How much worse than the latest blessed model a new model may score and be blessed.
    max_regression: Annotated[float, Ge(0), FINITE] = 0.01
    beam_width: Annotated[int, Ge(0), Note("(0: greedy)")] = 3
    with_meteor: bool = True  # needs Java, as the tokenizer does
    report_images: Annotated[int, Ge(0)] = 6

    def field_rule_problems(self) -> List[str]:
        """The rules between this section's fields."""
        problems = []
        if self.bless_split not in self.splits:
            problems.append(f"evaluation.bless_split={self.bless_split!r}: must be one of "
                            f"evaluation.splits {list(self.splits)}")
        if self.bless_split == "train":
            problems.append(f"evaluation.bless_split={self.bless_split!r}: must not be train: a "
                            "model is blessed on data it did not fit")
        if self.bless_metric == "METEOR" and not self.with_meteor:
            problems.append(f"evaluation.bless_metric={self.bless_metric!r}: needs "
                            "evaluation.with_meteor=true")
        return problems
