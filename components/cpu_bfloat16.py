"""bfloat16 on CPUs through oneDNN's graph rewrite, for ingestion's ResNet50 and the Trainer.

TensorFlow's grappler pass ``auto_mixed_precision_onednn_bfloat16`` rewrites a
traced graph so oneDNN runs matrix products and convolutions in bfloat16 while
variables, losses and reductions stay float32. It is a runtime option, read each
time a traced function runs (not when it is traced), and never stored in a
SavedModel. Keras'
``mixed_bfloat16`` policy, tried first, gave no speed-up on this stack (issue 17);
the rewrite did, on CPUs with native bfloat16 instructions (``avx512_bf16``,
``amx_bf16``). Without them oneDNN emulates bfloat16 and is slower, so ``auto``
turns the rewrite on only where the CPU has them (README "Speed").
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

MODES = ("auto", "on", "off")
NATIVE_FLAGS = ("avx512_bf16", "amx_bf16")
_OPTION = "auto_mixed_precision_onednn_bfloat16"


def cpu_flags(cpuinfo_path: str = "/proc/cpuinfo") -> frozenset:
    """The first CPU's feature flags (Linux); empty where ``/proc/cpuinfo`` is absent."""
    try:
        with open(cpuinfo_path, encoding="utf-8", errors="replace") as stream:
            for line in stream:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def native_bfloat16_flags(cpuinfo_path: str = "/proc/cpuinfo") -> tuple:
    return tuple(flag for flag in NATIVE_FLAGS if flag in cpu_flags(cpuinfo_path))


def resolve(mode: str, cpuinfo_path: str = "/proc/cpuinfo", gpu_visible: bool = False) -> bool:
    """Whether ``mode`` turns the rewrite on here. ``auto``: no GPU is visible (the model runs
    on the GPU then, and oneDNN's CPU rewrite gains nothing), the CPU has native bfloat16 and
    oneDNN is not disabled (``TF_ENABLE_ONEDNN_OPTS=0`` leaves nothing to rewrite)."""
    if mode not in MODES:
        raise ValueError(f"bfloat16 mode must be one of {MODES}, got {mode!r}.")
    if mode != "auto":
        return mode == "on"
    if gpu_visible or os.environ.get("TF_ENABLE_ONEDNN_OPTS", "1") == "0":
        return False
    return bool(native_bfloat16_flags(cpuinfo_path))


@contextlib.contextmanager
def rewrite(enabled: bool) -> Iterator[None]:
    """Traced functions called inside run with the rewrite ``enabled``; the process-wide
    option is restored on exit, so later components are unaffected."""
    import tensorflow as tf

    previous = tf.config.optimizer.get_experimental_options().get(_OPTION, False)
    tf.config.optimizer.set_experimental_options({_OPTION: bool(enabled)})
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({_OPTION: previous})
