"""Local runner: ``make pipeline-local`` and ``make demo-data`` land here.

Decides paths only: builds the :class:`~components.config.PipelineConfig` from
the command line (``--data_dir``, ``--glove``, ``--resnet_weights``,
``--output_dir``, ``--set section.field=value``), generates the demo dataset
when no data folder is given, and runs :func:`pipeline.pipeline.create_pipeline`
with ``LocalDagRunner``, a SQLite ML Metadata store and Beam's DirectRunner
(in-process below 800 images, one worker per core above), then prints where
the outputs are.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import List, Optional, Sequence

from absl import logging

from components import config as config_lib
from components import example_format
from components.ingestion import demo_data
from pipeline import beam_workers, config_flags, console, run_outputs

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_config(args: argparse.Namespace) -> config_lib.PipelineConfig:
    """The validated config the command line asks for, before the demo data is resolved."""
    return config_flags.config_from_flags(args)


def resolve_data(pipeline_config: config_lib.PipelineConfig) -> config_lib.PipelineConfig:
    """Fills in the demo dataset (generated once per seed and size) when no data_dir is set: the
    Flickr8k layout for ``data.format=flickr8k``, COCO 2014's (``demo_data.generate_coco``) for
    ``karpathy`` and ``coco``, whose image folder and Karpathy file it names in the config."""
    if pipeline_config.data.data_dir:
        return pipeline_config
    data = pipeline_config.data
    coco_layout = data.format != "flickr8k"
    demo_dir = os.path.abspath(os.path.join(
        pipeline_config.runtime.output_dir, "demo_data",
        f"{'coco_' if coco_layout else ''}seed{data.demo_seed}_n{data.demo_num_images}"))
    marker = os.path.join(demo_dir, "README.txt")
    if os.path.exists(marker):
        logging.info("Using the demo dataset already generated in %s", demo_dir)
        glove_path = os.path.join(demo_dir, "glove",
                                  f"{example_format.DEMO_GLOVE_PREFIX}{demo_data.SYNTHETIC_GLOVE_DIM}d.txt")
    else:
        logging.info("Generating the demo dataset (%d images, seed %d, %s layout) in %s",
                     data.demo_num_images, data.demo_seed, "COCO" if coco_layout else "Flickr8k",
                     demo_dir)
        generate = demo_data.generate_coco if coco_layout else demo_data.generate
        dataset = generate(demo_dir, data.demo_num_images, data.demo_seed, data.demo_split_fractions)
        glove_path = dataset.glove_path
    data = dataclasses.replace(data, data_dir=demo_dir)
    if coco_layout:
        data = dataclasses.replace(data, image_dir_name=demo_data.COCO_IMAGE_DIR, **(
            {"captions_file": demo_data.COCO_KARPATHY_FILE} if data.format == "karpathy" else {}))
    transform = pipeline_config.transform
    return dataclasses.replace(
        pipeline_config, data=data,
        transform=dataclasses.replace(transform, glove_path=transform.glove_path or glove_path))


def serving_model_dir(pipeline_config: config_lib.PipelineConfig) -> str:
    """Where the Pusher puts versioned models: ``export.push_destination`` or
    ``<output_dir>/serving_model``."""
    return os.path.abspath(pipeline_config.export.push_destination or os.path.join(
        pipeline_config.runtime.output_dir, "serving_model"))


def run_pipeline(pipeline_config: config_lib.PipelineConfig) -> None:
    from tfx import v1 as tfx

    from components.ingestion.example_gen import data_fingerprint
    from pipeline import fingerprints
    from pipeline.pipeline import SCHEMA_FILE, create_pipeline

    output_dir = os.path.abspath(pipeline_config.runtime.output_dir)
    os.makedirs(os.path.dirname(run_outputs.metadata_path(output_dir)), exist_ok=True)
    import tensorflow as tf

    num_images = beam_workers.count_image_files(pipeline_config.data)
    gpus = len(tf.config.list_physical_devices("GPU"))
    for flag, value in beam_workers.beam_flag_values(pipeline_config.runtime, num_images, gpus).items():
        os.environ[beam_workers.BEAM_FLAG_ENVIRONMENT[flag]] = value
    tfx.orchestration.LocalDagRunner().run(create_pipeline(
        pipeline_config,
        pipeline_root=os.path.join(output_dir, "pipeline_root"),
        data_fingerprint=data_fingerprint(pipeline_config.data),
        schema_path=os.path.join(REPO_ROOT, SCHEMA_FILE),
        code_fingerprints=fingerprints.pipeline_code_fingerprints(),
        serving_model_dir=serving_model_dir(pipeline_config),
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            run_outputs.metadata_path(output_dir)),
        beam_pipeline_args=beam_workers.beam_pipeline_args(pipeline_config.runtime)))


def _parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pipeline.local_runner", description=__doc__)
    parser.add_argument("command", choices=("run", "demo-data"))
    parser.add_argument("--verbose", action="store_true",
                        help="also log TFX, TensorFlow and Beam to the console (always in the log file)")
    config_flags.add_config_flags(parser, ("output_dir", "data_dir", "glove", "resnet_weights"))
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    logging.set_verbosity(logging.INFO)
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "demo-data":
        try:
            pipeline_config = resolve_data(build_config(args))
        except ValueError as error:
            print(error, file=sys.stderr)
            return 2
        print(f"Demo dataset: {pipeline_config.data.data_dir}")
        print(f"Synthetic GloVe file: {pipeline_config.transform.glove_path}")
        return 0
    try:
        pipeline_config = build_config(args)  # a bad override stops here, before any log file
    except ValueError as error:  # config_lib.ConfigError among them: a paragraph, no traceback
        if args.verbose:
            raise
        print(error, file=sys.stderr)
        return 2
    with console.run_log(pipeline_config.runtime.output_dir, verbose=args.verbose) as run:
        try:
            pipeline_config = resolve_data(pipeline_config)
            run_pipeline(pipeline_config)
            run_outputs.print_outputs(pipeline_config)
        except Exception as error:  # any node's failure: one paragraph here, the traceback in the log
            logging.exception("The pipeline run failed in %s", run.running)
            print(console.failure_paragraph(error, run.running, run.log_path))
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
