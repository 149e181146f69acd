"""The ingestion job on its own, outside any pipeline: a Flickr8k-layout (or Karpathy / COCO)
folder to TFRecords of ResNet50 features, on DirectRunner or any Beam runner::

    python -m pipeline.ingest --data_dir=... --output_dir=... [--resnet_weights=...]
        [--set section.field=value] [any Beam option, e.g. --runner=DataflowRunner --project=...]

It runs the same :func:`components.ingestion.beam_job.run_ingestion` as the pipeline's
``Flickr8kExampleGen`` on the same config, so both write the same records.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional

import apache_beam as beam
from absl import logging
from apache_beam.options.pipeline_options import PipelineOptions

from components.ingestion import beam_job, example_gen
from pipeline import config_flags


def main(argv: Optional[List[str]] = None) -> int:
    logging.set_verbosity(logging.INFO)
    parser = argparse.ArgumentParser(prog="python -m pipeline.ingest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", required=True, help="where Split-*/ and rejects/ go")
    config_flags.add_config_flags(parser, ("data_dir", "resnet_weights"), required=("data_dir",))
    args, beam_args = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    # --output_dir is this job's records directory here, not runtime.output_dir.
    try:
        pipeline_config = config_flags.config_from_flags(argparse.Namespace(**{
            name: value for name, value in vars(args).items() if name != "output_dir"}))
    except ValueError as error:  # config_lib.ConfigError among them: a paragraph, no traceback
        print(error, file=sys.stderr)
        return 2
    summary = beam_job.run_ingestion(
        beam.Pipeline(options=PipelineOptions(beam_args)), pipeline_config, args.output_dir)
    example_gen.log_summary(summary, args.output_dir)
    print(json.dumps({key: summary[key] for key in (
        "pairs_read", "pairs_accepted", "pairs_rejected", "rejected_pairs_by_reason",
        "images_per_split")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
