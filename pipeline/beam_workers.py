"""How the local runner runs Beam: in-process or one worker per core, chosen by dataset size and
GPUs, passed to the components as environment placeholders that no cache key holds."""

from __future__ import annotations

import os
from typing import Optional

from components import config as config_lib

# Beam's runner settings reach the components through these environment variables, not as
# literal flags: TFX puts a component's Beam arguments in its executor spec, which is part of
# its cache key, and how Beam runs (runtime.*) must not re-run anything.
BEAM_FLAG_ENVIRONMENT = {
    "runner": "CAPTIONING_BEAM_RUNNER",
    "direct_running_mode": "CAPTIONING_BEAM_DIRECT_RUNNING_MODE",
    "direct_num_workers": "CAPTIONING_BEAM_DIRECT_NUM_WORKERS",
}


# Below this many images one in-process worker finishes a Beam job sooner than one worker per
# core. On 2 cores (make bench, ingestion of real-size photos) the break-even moved between ~780
# images (in-process 18.5 images/s after 8.7 s of start-up, 2 workers 21.2 after 14.1 s) and
# ~2,200 (21.2 after 7.3 s, 22.1 after 11.3 s) in two runs; the demo (300) and Flickr8k (8,091)
# fall on the same side in both.
IN_PROCESS_BELOW_IMAGES = 800


def beam_flag_values(runtime: config_lib.RuntimeConfig, num_images: Optional[int] = None,
                     gpus: int = 0) -> dict:
    """``{flag: value}`` for :data:`BEAM_FLAG_ENVIRONMENT`. ``runtime.direct_num_workers``
    workers when set (in-process for 1); otherwise in-process for datasets under
    :data:`IN_PROCESS_BELOW_IMAGES` images (``num_images``), one worker per core above, and
    at most one per GPU where ``gpus`` are visible (each worker loads its own ResNet50 there)."""
    if runtime.direct_num_workers:
        workers = runtime.direct_num_workers
    elif num_images is not None and num_images < IN_PROCESS_BELOW_IMAGES:
        workers = 1
    else:
        workers = os.cpu_count() or 1
        if gpus:
            workers = min(workers, gpus)
    return {"runner": runtime.beam_runner,
            "direct_running_mode": "multi_processing" if workers > 1 else "in_memory",
            "direct_num_workers": str(workers)}


def count_image_files(data: config_lib.DataConfig, stop_at: int = IN_PROCESS_BELOW_IMAGES) -> Optional[int]:
    """Files under the image folder (sub-folders too: COCO's ``train2014/``); the listing
    stops after the folder that reaches ``stop_at`` (no file opened). None without the folder."""
    image_dir = os.path.join(data.data_dir, data.image_dir_name)
    if not os.path.isdir(image_dir):
        return None
    count = 0
    for _, _, files in os.walk(image_dir):
        count += len(files)
        if count >= stop_at:
            break
    return count


def beam_pipeline_args(runtime: config_lib.RuntimeConfig) -> list:
    """Beam flags as environment-variable placeholders (set by :func:`run_pipeline`), then
    ``runtime.extra_beam_args`` as given (those do enter the Beam components' cache keys)."""
    from tfx.dsl.placeholder import placeholder as ph

    return [f"--{flag}=" + ph.environment_variable(variable)
            for flag, variable in BEAM_FLAG_ENVIRONMENT.items()] + list(runtime.extra_beam_args)
