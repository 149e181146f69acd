"""The ``trainer`` and ``export`` config sections: the decoder, its optimisation and the serving
signatures, read by ``run_fn``, ``model``, ``inputs`` and ``export``."""

from __future__ import annotations

import dataclasses
from typing import Annotated, List, Literal, Tuple

from components import cpu_bfloat16
from components.config_fields import FINITE, Ge, Gt, Interval, Note, check

MixedPrecisionMode = Literal["auto", "on", "off"]
MIXED_PRECISION_MODES = MixedPrecisionMode.__args__


def _layer_sizes(sizes) -> bool:
    return len(sizes) > 0 and all(isinstance(units, int) and units >= 1 for units in sizes)


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    """Decoder architecture and optimisation."""

    image_dense_units: Annotated[Tuple[int, ...], check(
        _layer_sizes, "must be a non-empty list of layer sizes >= 1")] = (1024, 512)
    lstm_units: Annotated[int, Ge(1)] = 512
    second_lstm_units: Annotated[int, Ge(1)] = 256
    attention_heads: Annotated[int, Ge(1)] = 1
    attention_key_dim: Annotated[int, Ge(1)] = 64
    # Why 0.1 and not the original's 0.3: README "Trainer" (measured on the demo data).
    dropout_rate: Annotated[float, Interval(ge=0, lt=1)] = 0.1
    fine_tune_embedding: bool = False
    # Caption rows per replica: on CPU devices, and on each GPU (where a batch of 32 rows leaves
    # the GPU mostly idle). Images per batch = rows // captions per image.
    per_replica_batch_size: Annotated[int, Ge(1)] = 32
    gpu_per_replica_batch_size: Annotated[int, Ge(1)] = 160
    epochs: Annotated[int, Ge(1)] = 40
    # learning_rate and warmup_steps are for a global batch of learning_rate_batch_size caption
    # rows. Another global batch (replicas x rows per replica) scales the learning rate by the
    # square root of the ratio (Adam; Malladi et al. 2022, "On the SDEs and Scaling Rules for
    # Adaptive Gradient Algorithms") and the warm-up steps by its inverse, so the warm-up spans
    # as many captions on 8 GPUs as on one CPU.
    learning_rate: Annotated[float, Gt(0), FINITE] = 1e-3
    warmup_steps: Annotated[int, Ge(0)] = 100
    learning_rate_batch_size: Annotated[int, Ge(1)] = 32
    # Train steps per call into the compiled graph: >1 saves the per-step Python overhead that
    # keeps a fast GPU waiting; callbacks then see every steps_per_execution-th step.
    steps_per_execution: Annotated[int, Ge(1)] = 1
    clipnorm: Annotated[float, Gt(0), FINITE] = 1.0
    early_stopping_patience: Annotated[int, Ge(0)] = 5
    # Early stopping watches dev loss from this fraction of ``epochs`` on (the best weights are
    # restored from that part only); why half: README "Trainer" (measured on the demo data).
    early_stopping_start_fraction: Annotated[float, Interval(ge=0, le=1)] = 0.5
    # What early stopping watches and the kept epoch is best by: dev loss, or the dev split's
    # greedy captions scored each epoch by BLEU-4 or CIDEr-D (components.trainer.dev_scores).
    select_on: Literal["dev_loss", "dev_bleu4", "dev_cider"] = "dev_loss"
    cache_dataset: bool = True  # parsed images in memory: ~200 KB each
    # float16 compute with float32 variables, logits and loss: "auto" (on where every visible
    # GPU has float16 tensor cores, compute capability 7.0+; off on CPUs), "on", "off".
    mixed_precision: MixedPrecisionMode = "auto"
    # oneDNN's bfloat16 rewrite of the train step (components.cpu_bfloat16): "auto" (on where the
    # CPU has native bfloat16), "on", "off". Variables, the loss and the exported model stay float32.
    onednn_bfloat16: Literal[cpu_bfloat16.MODES] = "auto"
    seed: Annotated[int, Ge(0)] = 42
    # Self-critical sequence training after the cross-entropy epochs (components.trainer.
    # self_critical): epochs (0: off), captions sampled per image, the reward's baseline
    # ("greedy": the greedy caption's CIDEr-D; "sample_mean": the mean of the image's other
    # samples) and the peak learning rate for learning_rate_batch_size sampled rows (scaled as
    # learning_rate is). Why these defaults: README "Self-critical training".
    scst_epochs: Annotated[int, Ge(0)] = 0
    scst_samples: Annotated[int, Interval(ge=1, le=64)] = 5
    scst_baseline: Literal["greedy", "sample_mean"] = "greedy"
    scst_learning_rate: Annotated[float, Gt(0), FINITE] = 5e-5
    # Op determinism while training (restored after): same config + same data give bit-identical
    # weights on CPU; slower. On GPU some kernels have no deterministic version (README "Trainer").
    deterministic: bool = False

    def field_rule_problems(self) -> List[str]:
        """The rules between this section's fields."""
        if self.scst_epochs and self.scst_baseline == "sample_mean" and self.scst_samples < 2:
            return [f"trainer.scst_samples={self.scst_samples}: must be at least 2 with "
                    "trainer.scst_baseline='sample_mean' (each sample's baseline is the mean of the "
                    "image's other samples)"]
        return []


@dataclasses.dataclass(frozen=True)
class ExportConfig:
    """Serving signatures and model pushing."""

    max_decode_length: Annotated[int, Ge(0), Note("(0: the Transform's maximum caption length)")] = 0
    # Beam search ranks hypotheses by log-probability / ((5 + length) / 6) ** alpha
    # (GNMT). 0 ranks by the plain sum, which favours short, generic captions.
    beam_length_alpha: Annotated[float, Ge(0), FINITE] = 0.0
    # The widest beam a serving request may ask for: beam search holds beam_width
    # hypotheses per image, so an unchecked width is a request-sized memory bill.
    max_beam_width: Annotated[int, Interval(ge=1, le=1024)] = 16
    push_destination: str = ""  # empty: <output_dir>/serving_model
