"""What the Trainer reports about a ModelRun it wrote: the losses per epoch and TensorBoard."""

import json
import os
from typing import List

from components import example_format


def describe(model_run_uri: str) -> List[str]:
    """Epochs trained, train and dev loss from first to last (best), dev token accuracy; the
    self-critical phase's dev CIDEr-D and which weights were exported, when it ran."""
    with open(os.path.join(model_run_uri, example_format.HISTORY_FILE), encoding="utf-8") as stream:
        history = json.load(stream)
    lines = [f"epochs {len(history['loss'])}: loss {history['loss'][0]:.3f} -> {history['loss'][-1]:.3f}, "
            f"dev loss {history['val_loss'][0]:.3f} -> {min(history['val_loss']):.3f} (best), "
            f"dev token accuracy {max(history['val_masked_accuracy']):.3f}",
            f"TensorBoard: tensorboard --logdir {os.path.join(model_run_uri, 'tensorboard')}"]
    if "dev_cider" in history:
        exported = history.get("exported_weights") or {}
        lines.insert(1, f"self-critical epochs {len(history['dev_cider'])}: dev CIDEr-D "
                        f"{history['dev_cider_before']:.3f} after cross-entropy -> "
                        f"{max(history['dev_cider']):.3f} best; exported weights: "
                        f"{exported.get('phase', '?').replace('_', '-')} epoch {exported.get('epoch', '?')}")
    return lines
