"""The ``cloud`` and ``runtime`` config sections: where and how the pipeline runs. Read by the
runners in ``pipeline/`` only; they live here because the root config, which composes every
section, cannot import ``pipeline/``."""

from __future__ import annotations

import dataclasses
import re
from typing import Annotated, Tuple

from components.config_fields import Ge, Note, check, non_empty


@dataclasses.dataclass(frozen=True)
class CloudConfig:
    """Kubeflow Pipelines / Vertex AI and Dataflow; read only by ``pipeline.kubeflow_v2_runner``."""

    project: str = ""
    region: str = "us-central1"
    bucket: str = ""  # gs://<bucket>/pipeline_root, /serving_model, /tmp are used
    # The pipeline image (Dockerfile); empty: gcr.io/<project>/<runtime.pipeline_name>:latest.
    image: str = ""
    # Beam components on Dataflow, workers running the pipeline image.
    dataflow: bool = True
    dataflow_machine_type: str = "n1-standard-8"
    dataflow_max_workers: Annotated[int, Ge(1)] = 8
    # The Trainer as a Vertex AI custom training job; MirroredStrategy uses every GPU of it.
    vertex_training: bool = True
    trainer_machine_type: str = "n1-standard-16"
    trainer_accelerator_type: str = "NVIDIA_TESLA_T4"
    trainer_accelerator_count: Annotated[int, Ge(0)] = 2
    # Compile refuses features.resnet_weights=random (features of an untrained ResNet50) unless
    # this says the run is a smoke run (make pipeline-rehearse sets it).
    allow_random_resnet_weights: bool = False


def _pipeline_name(name) -> bool:
    return isinstance(name, str) and re.fullmatch(r"[a-z0-9][a-z0-9-]{0,127}", name) is not None


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
    """Where outputs go and how Beam runs; nothing here changes results."""

    pipeline_name: Annotated[str, check(
        _pipeline_name, "must be lower-case letters, digits and '-' (a Kubeflow/Vertex pipeline name)"
    )] = "flickr8k-captioning"
    output_dir: Annotated[str, check(non_empty, "must name a directory")] = "outputs"
    beam_runner: Annotated[str, check(non_empty, "must name a Beam runner")] = "DirectRunner"
    # 0: one worker per CPU core (DirectRunner multi_processing mode).
    direct_num_workers: Annotated[int, Ge(0), Note("(0: one per CPU core)")] = 0
    extra_beam_args: Tuple[str, ...] = ()
