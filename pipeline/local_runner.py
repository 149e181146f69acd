"""Local runner: ``make pipeline-local`` and ``make demo-data`` land here.

Decides paths only: builds the :class:`~components.config.PipelineConfig` from
the command line (``--data_dir``, ``--glove``, ``--resnet_weights``,
``--output_dir``, ``--set section.field=value``), generates the demo dataset
when no data folder is given, and runs the job.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import List, Optional, Sequence

from absl import logging

from components import config as config_lib
from components import demo_data, flickr8k


def build_config(args: argparse.Namespace) -> config_lib.PipelineConfig:
    """The config the command line asks for, before the demo data is resolved."""
    pipeline_config = config_lib.PipelineConfig()
    overrides = config_lib.parse_override_args(args.set or [])
    named = {
        "runtime.output_dir": args.output_dir,
        "data.data_dir": args.data_dir,
        "transform.glove_path": args.glove,
        "features.resnet_weights": args.resnet_weights,
    }
    overrides.update({key: value for key, value in named.items() if value})
    return pipeline_config.with_overrides(overrides)


def resolve_data(pipeline_config: config_lib.PipelineConfig) -> config_lib.PipelineConfig:
    """Fills in the demo dataset (generated once per seed and size) when no data_dir is set."""
    if pipeline_config.data.data_dir:
        return pipeline_config
    data = pipeline_config.data
    demo_dir = os.path.abspath(os.path.join(
        pipeline_config.runtime.output_dir, "demo_data",
        f"seed{data.demo_seed}_n{data.demo_num_images}"))
    marker = os.path.join(demo_dir, "README.txt")
    if os.path.exists(marker):
        logging.info("Using the demo dataset already generated in %s", demo_dir)
        glove_path = os.path.join(demo_dir, "glove",
                                  f"synthetic_glove.demo.{demo_data.SYNTHETIC_GLOVE_DIM}d.txt")
    else:
        logging.info("Generating the demo dataset (%d images, seed %d) in %s",
                     data.demo_num_images, data.demo_seed, demo_dir)
        dataset = demo_data.generate(demo_dir, data.demo_num_images, data.demo_seed,
                                     data.demo_split_fractions)
        glove_path = dataset.glove_path
    transform = pipeline_config.transform
    return dataclasses.replace(
        pipeline_config,
        data=dataclasses.replace(data, data_dir=demo_dir),
        transform=dataclasses.replace(transform, glove_path=transform.glove_path or glove_path))


def read_dataset(pipeline_config: config_lib.PipelineConfig) -> flickr8k.Flickr8kIndex:
    data = pipeline_config.data
    return flickr8k.read_flickr8k(
        data.data_dir,
        captions_file=data.captions_file,
        split_files={"train": data.train_split_file, "dev": data.dev_split_file,
                     "test": data.test_split_file},
        image_dir=os.path.join(data.data_dir, data.image_dir_name))


def write_reader_report(index: flickr8k.Flickr8kIndex, output_dir: str) -> str:
    """Writes the reader's summary and one JSON line per reject; returns the summary path."""
    report_dir = os.path.join(output_dir, "reader")
    os.makedirs(report_dir, exist_ok=True)
    with open(os.path.join(report_dir, "rejects.jsonl"), "w", encoding="utf-8") as stream:
        for reject in index.rejects:
            stream.write(json.dumps(reject.to_dict()) + "\n")
    summary_path = os.path.join(report_dir, "summary.json")
    with open(summary_path, "w", encoding="utf-8") as stream:
        json.dump(index.summary(), stream, indent=2, sort_keys=True)
    return summary_path


def _parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pipeline.local_runner", description=__doc__)
    parser.add_argument("command", choices=("run", "demo-data"))
    parser.add_argument("--output_dir", default="outputs")
    parser.add_argument("--data_dir", default="", help="Flickr8k-layout folder (default: demo data)")
    parser.add_argument("--glove", default="", help="GloVe .txt, .txt.gz or Stanford .zip")
    parser.add_argument("--resnet_weights", default="",
                        help="'random', 'imagenet' (Keras cache) or a weights file path/URI")
    parser.add_argument("--set", action="append", metavar="SECTION.FIELD=VALUE",
                        help="any other config override; repeatable")
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    logging.set_verbosity(logging.INFO)
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    pipeline_config = resolve_data(build_config(args))
    if args.command == "demo-data":
        print(f"Demo dataset: {pipeline_config.data.data_dir}")
        print(f"Synthetic GloVe file: {pipeline_config.transform.glove_path}")
        return 0
    index = read_dataset(pipeline_config)
    summary_path = write_reader_report(index, pipeline_config.runtime.output_dir)
    summary = index.summary()
    print(json.dumps(summary, indent=2, sort_keys=True))
    print(f"Reader summary: {summary_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
