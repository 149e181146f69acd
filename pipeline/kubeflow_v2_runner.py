"""Kubeflow Pipelines v2 / Vertex AI runner: ``make pipeline-compile`` and ``make pipeline-vertex``.

Decides paths and platforms only, then hands :func:`pipeline.pipeline.create_pipeline`
to TFX's ``KubeflowV2DagRunner``, which writes the pipeline as a KFP v2
``PipelineJob`` JSON. ``submit`` also runs it on Vertex AI Pipelines with the
``google-cloud-aiplatform`` client. On the cloud (``cloud.*`` settings):

* every component runs in the pipeline image (``Dockerfile``), artifacts live
  under ``gs://<bucket>/pipeline_root`` and pushed models under
  ``gs://<bucket>/serving_model``;
* Beam components (ingestion, StatisticsGen, Transform) run on Dataflow, with
  the pipeline image as the workers' SDK container;
* the Trainer runs as a Vertex AI custom training job on one machine of
  ``cloud.trainer_machine_type`` with ``cloud.trainer_accelerator_count`` GPUs
  of ``cloud.trainer_accelerator_type``; MirroredStrategy uses all of them.

    python -m pipeline.kubeflow_v2_runner compile --project=P --bucket=B --data_dir=gs://B/flickr8k
    python -m pipeline.kubeflow_v2_runner submit  --project=P --region=R --bucket=B --data_dir=...
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import List, Optional, Sequence

from absl import logging

from components import config as config_lib
from pipeline import config_flags

# Where the Dockerfile puts the repository inside the image.
IMAGE_WORKDIR = "/pipeline"
PLACEHOLDER_BUCKET = "YOUR_BUCKET"
PLACEHOLDER_PROJECT = "YOUR_PROJECT"


def project_id(cloud: config_lib.CloudConfig) -> str:
    return cloud.project or PLACEHOLDER_PROJECT


def bucket_uri(cloud: config_lib.CloudConfig, *parts: str) -> str:
    bucket = cloud.bucket or PLACEHOLDER_BUCKET
    bucket = bucket if bucket.startswith("gs://") else f"gs://{bucket}"
    return "/".join([bucket.rstrip("/"), *parts])


def image_uri(cloud: config_lib.CloudConfig) -> str:
    """``cloud.image``, or the image named after the pipeline in the project's registry."""
    return cloud.image or f"gcr.io/{project_id(cloud)}/{config_lib.RuntimeConfig.pipeline_name}:latest"


def pipeline_file(runtime: config_lib.RuntimeConfig) -> str:
    """Where compile writes the pipeline JSON: ``<output_dir>/kfp/<pipeline name>.json``."""
    return os.path.join(runtime.output_dir, "kfp", f"{runtime.pipeline_name}.json")


def dataflow_beam_args(cloud: config_lib.CloudConfig) -> List[str]:
    """Beam options for Dataflow; workers run the pipeline image, so they have this package."""
    return [
        "--runner=DataflowRunner",
        f"--project={project_id(cloud)}",
        f"--region={cloud.region}",
        f"--temp_location={bucket_uri(cloud, 'tmp')}",
        f"--machine_type={cloud.dataflow_machine_type}",
        f"--max_num_workers={cloud.dataflow_max_workers}",
        f"--sdk_container_image={image_uri(cloud)}",
        "--experiments=use_runner_v2",
        "--disk_size_gb=100",
    ]


def vertex_training_config(cloud: config_lib.CloudConfig) -> dict:
    """``custom_config`` keys of TFX's Vertex AI Trainer: one GPU machine, the pipeline image."""
    from tfx import v1 as tfx

    vertex = tfx.extensions.google_cloud_ai_platform
    machine_spec = {"machine_type": cloud.trainer_machine_type}
    if cloud.trainer_accelerator_count > 0:
        machine_spec.update(accelerator_type=cloud.trainer_accelerator_type,
                            accelerator_count=cloud.trainer_accelerator_count)
    from components.trainer import run_fn

    return {
        # run_fn fails when the job's machine shows fewer GPUs than this.
        run_fn.REQUIRED_GPUS_KEY: cloud.trainer_accelerator_count,
        vertex.ENABLE_VERTEX_KEY: True,
        vertex.VERTEX_REGION_KEY: cloud.region,
        vertex.TRAINING_ARGS_KEY: {
            "project": project_id(cloud),
            "worker_pool_specs": [{"machine_spec": machine_spec, "replica_count": 1,
                                   "container_spec": {"image_uri": image_uri(cloud)}}],
        },
    }


def cloud_data_fingerprint(pipeline_config: config_lib.PipelineConfig, compute: bool) -> str:
    """The data digest for the cache key, computed from here when asked (gs:// needs credentials)."""
    from components.ingestion.example_gen import data_fingerprint

    if compute:
        return data_fingerprint(pipeline_config.data)
    logging.warning("Data fingerprint not computed: the cache key holds only the data path %s, so "
                    "changed files under the same path need --disable_cache.",
                    pipeline_config.data.data_dir)
    return f"path-only:{pipeline_config.data.data_dir}"


class CloudConfigError(ValueError):
    """Settings that cannot work on Kubeflow Pipelines / Vertex AI; the message names each one."""


# The one remote filesystem every component, Dataflow worker and training job of a Vertex run reads.
CLOUD_SCHEME = "gs://"
KERAS_RESNET50_NOTOP_FILE = "resnet50_weights_tf_dim_ordering_tf_kernels_notop.h5"


def cloud_problems(pipeline_config: config_lib.PipelineConfig) -> List[str]:
    """What in the config cannot work on the cloud, one sentence each naming the setting and what
    to give instead; empty when it can. A path of this machine would end up in the pipeline JSON
    and name nothing on the workers."""
    problems = []
    paths = {
        "data.data_dir (DATA_DIR=, --data_dir)": pipeline_config.data.data_dir,
        "transform.glove_path (GLOVE=, --glove)": pipeline_config.transform.glove_path,
        "export.push_destination": pipeline_config.export.push_destination,
    }
    weights = pipeline_config.features.resnet_weights
    if weights not in (config_lib.RESNET_WEIGHTS_RANDOM, config_lib.RESNET_WEIGHTS_IMAGENET):
        paths["features.resnet_weights (RESNET_WEIGHTS=, --resnet_weights)"] = weights
    for setting, value in paths.items():
        if value and not value.startswith(CLOUD_SCHEME):
            problems.append(f"{setting} is {value!r}, a path of this machine that no Vertex AI or "
                            f"Dataflow worker can read: upload it and give its {CLOUD_SCHEME}BUCKET/... "
                            "URI.")
    if weights == config_lib.RESNET_WEIGHTS_RANDOM and not pipeline_config.cloud.allow_random_resnet_weights:
        problems.append(
            "features.resnet_weights is 'random': the run would train on the features of an "
            "untrained ResNet50. Give RESNET_WEIGHTS=gs://BUCKET/.../" + KERAS_RESNET50_NOTOP_FILE
            + " (Keras' ImageNet notop file), or SET=cloud.allow_random_resnet_weights=true for a "
            "smoke run.")
    if weights == config_lib.RESNET_WEIGHTS_IMAGENET:
        problems.append(
            "features.resnet_weights is 'imagenet', which reads Keras' cache file "
            f"~/.keras/models/{KERAS_RESNET50_NOTOP_FILE}; the pipeline image (Dockerfile) does "
            "not hold it and nothing downloads it. Upload the file and give "
            f"RESNET_WEIGHTS=gs://BUCKET/.../{KERAS_RESNET50_NOTOP_FILE}.")
    return problems


def compile_pipeline(pipeline_config: config_lib.PipelineConfig, output_file: str,
                     fingerprint_data: bool = True, enable_cache: bool = True) -> str:
    """Writes the KFP v2 PipelineJob JSON to ``output_file`` and returns its path.

    Raises :class:`CloudConfigError` for settings that cannot work on the cloud
    (:func:`cloud_problems`). The spec is KFP's pipeline spec schema 2.1: its executors read
    parameters from ``ExecutorInput.inputs.parameterValues`` with the inputs spec passed on the
    command line, the field KFP v2 launchers (Vertex AI's included) fill; under schema 2.0 TFX's
    entrypoint reads the deprecated ``inputs.parameters`` instead.
    """
    from tfx import v1 as tfx

    from pipeline import fingerprints
    from pipeline.pipeline import SCHEMA_FILE, create_pipeline

    problems = cloud_problems(pipeline_config)
    if problems:
        raise CloudConfigError("This pipeline cannot run on the cloud as configured:\n"
                               + "\n".join(f"  - {problem}" for problem in problems))
    cloud = pipeline_config.cloud
    pipeline_root = bucket_uri(cloud, "pipeline_root")
    pipeline = create_pipeline(
        pipeline_config,
        pipeline_root=pipeline_root,
        data_fingerprint=cloud_data_fingerprint(pipeline_config, fingerprint_data),
        schema_path=os.path.join(IMAGE_WORKDIR, SCHEMA_FILE),
        code_fingerprints=fingerprints.pipeline_code_fingerprints(),
        serving_model_dir=pipeline_config.export.push_destination or bucket_uri(cloud, "serving_model"),
        beam_pipeline_args=dataflow_beam_args(cloud) if cloud.dataflow else ["--runner=DirectRunner"],
        enable_cache=enable_cache,
        vertex_training=vertex_training_config(cloud) if cloud.vertex_training else None,
    )
    output_dir, file_name = os.path.split(os.path.abspath(output_file))
    os.makedirs(output_dir, exist_ok=True)
    tfx.orchestration.experimental.KubeflowV2DagRunner(
        config=tfx.orchestration.experimental.KubeflowV2DagRunnerConfig(
            default_image=image_uri(cloud), use_pipeline_spec_2_1=True),
        output_dir=output_dir, output_filename=file_name).run(pipeline)
    return os.path.join(output_dir, file_name)


def submit(pipeline_config: config_lib.PipelineConfig, pipeline_file: str) -> str:
    """Submits a compiled pipeline to Vertex AI Pipelines; returns the job's resource name."""
    from google.cloud import aiplatform

    cloud = pipeline_config.cloud
    if not cloud.project or not cloud.bucket:
        raise ValueError("Submitting to Vertex AI needs cloud.project and cloud.bucket "
                         "(make pipeline-vertex PROJECT=... REGION=... BUCKET=...).")
    aiplatform.init(project=cloud.project, location=cloud.region,
                    staging_bucket=bucket_uri(cloud, "staging"))
    job = aiplatform.PipelineJob(display_name=pipeline_config.runtime.pipeline_name,
                                 template_path=pipeline_file,
                                 pipeline_root=bucket_uri(cloud, "pipeline_root"))
    job.submit()
    return job.resource_name


def build_config(args: argparse.Namespace) -> config_lib.PipelineConfig:
    pipeline_config = config_flags.config_from_flags(args)
    if not pipeline_config.data.data_dir:
        pipeline_config = dataclasses.replace(pipeline_config, data=dataclasses.replace(
            pipeline_config.data, data_dir=bucket_uri(pipeline_config.cloud, "flickr8k")))
    return pipeline_config


def _parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pipeline.kubeflow_v2_runner", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=("compile", "submit"))
    parser.add_argument("--output_file", default="",
                        help="the pipeline JSON (default: OUTPUT_DIR/kfp/<pipeline name>.json)")
    config_flags.add_config_flags(parser, ("output_dir", "project", "region", "bucket", "image",
                                         "data_dir", "glove", "resnet_weights"))
    parser.add_argument("--no_data_fingerprint", action="store_true",
                        help="do not read DATA_DIR from here (no GCS credentials)")
    parser.add_argument("--disable_cache", action="store_true")
    parser.add_argument("--verbose", action="store_true",
                        help="TFX's and TensorFlow's log lines too")
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    if args.verbose:
        logging.set_verbosity(logging.INFO)
    else:
        from components import quiet_startup

        quiet_startup.quiet()
        logging.set_verbosity(logging.WARNING)
    try:
        pipeline_config = build_config(args)
    except ValueError as error:  # config_lib.ConfigError among them: a paragraph, no traceback
        print(error, file=sys.stderr)
        return 2
    try:
        path = compile_pipeline(pipeline_config, args.output_file or pipeline_file(pipeline_config.runtime),
                                fingerprint_data=not args.no_data_fingerprint,
                                enable_cache=not args.disable_cache)
    except CloudConfigError as error:
        print(error, file=sys.stderr)
        return 2
    print(f"Pipeline JSON: {path}")
    cloud = pipeline_config.cloud
    print(f"  image {image_uri(cloud)}, root {bucket_uri(cloud, 'pipeline_root')}, "
          f"data {pipeline_config.data.data_dir}")
    if args.command == "submit":
        print(f"Submitted: {submit(pipeline_config, path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
