"""What the Trainer reports about a ModelRun it wrote: the losses per epoch and TensorBoard."""

import json
import os
from typing import List

from components import example_format


def describe(model_run_uri: str) -> List[str]:
    """Epochs trained, train and dev loss from first to last (best), dev token accuracy."""
    with open(os.path.join(model_run_uri, example_format.HISTORY_FILE), encoding="utf-8") as stream:
        history = json.load(stream)
    return [f"epochs {len(history['loss'])}: loss {history['loss'][0]:.3f} -> {history['loss'][-1]:.3f}, "
            f"dev loss {history['val_loss'][0]:.3f} -> {min(history['val_loss']):.3f} (best), "
            f"dev token accuracy {max(history['val_masked_accuracy']):.3f}",
            f"TensorBoard: tensorboard --logdir {os.path.join(model_run_uri, 'tensorboard')}"]
