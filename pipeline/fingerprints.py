"""Digests that make TFX's cache see what it cannot see by itself: the user code.

TFX keys a cached execution on its inputs and exec properties. A Transform or
Trainer configured by a module path (``components.transform.preprocessing.preprocessing_fn``)
would hit the cache after that module's code changed; passing this digest in
``custom_config`` makes the change re-run the stage and everything after it.
"""

import hashlib
import importlib
import inspect
from typing import Iterable


def code_fingerprint(module_names: Iterable[str]) -> str:
    """sha256 over the source of the named modules, in a fixed order."""
    digest = hashlib.sha256()
    for name in sorted(module_names):
        digest.update(name.encode("utf-8"))
        digest.update(inspect.getsource(importlib.import_module(name)).encode("utf-8"))
    return digest.hexdigest()


TRANSFORM_MODULES = ("components.transform.preprocessing", "components.caption_text",
                     "components.transform.glove", "components.config")
TRAINER_MODULES = TRANSFORM_MODULES + ("components.trainer.model", "components.trainer.losses",
                                       "components.trainer.inputs", "components.trainer.run_fn",
                                       "components.trainer.export", "components.trainer.decoding",
                                       "components.resnet_features")


EVALUATOR_MODULES = ("components.evaluation.evaluator", "components.evaluation.split_captions",
                     "components.evaluation.caption_metrics", "components.evaluation.report",
                     "components.config")


def pipeline_code_fingerprints() -> dict:
    return {"transform": code_fingerprint(TRANSFORM_MODULES),
            "trainer": code_fingerprint(TRAINER_MODULES),
            "evaluator": code_fingerprint(EVALUATOR_MODULES)}
