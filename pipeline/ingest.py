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
import logging as std_logging
import os
import sys
from typing import List, Optional

from absl import logging

from pipeline import config_flags


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.ingest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", required=True, help="where Split-*/ and rejects/ go")
    parser.add_argument("--verbose", action="store_true",
                        help="TensorFlow's start-up lines and Beam's INFO log too")
    config_flags.add_config_flags(parser, ("data_dir", "resnet_weights"), required=("data_dir",))
    args, beam_args = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    # --output_dir is this job's records directory here, not runtime.output_dir.
    try:
        pipeline_config = config_flags.config_from_flags(argparse.Namespace(**{
            name: value for name, value in vars(args).items() if name not in ("output_dir", "verbose")}))
    except ValueError as error:  # config_lib.ConfigError among them: a paragraph, no traceback
        print(error, file=sys.stderr)
        return 2
    if args.verbose:
        logging.set_verbosity(logging.INFO)
    else:  # before TensorFlow is imported (below): its start-up lines are silenced at the source
        from components import quiet_startup

        quiet_startup.quiet()
        logging.set_verbosity(logging.WARNING)
        # Beam warns that python-snappy is missing (a slower checksum) on every run.
        std_logging.getLogger("apache_beam").setLevel(std_logging.ERROR)
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from components.ingestion import beam_job, example_gen
    from components.ingestion.formats.index import DatasetLayoutError

    try:
        summary = beam_job.run_ingestion(
            beam.Pipeline(options=PipelineOptions(beam_args)), pipeline_config, args.output_dir)
    except DatasetLayoutError as error:  # a missing or unreadable dataset file: the user's to fix
        if args.verbose:
            raise
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        return 1
    example_gen.log_summary(summary, args.output_dir)
    print(json.dumps({key: summary[key] for key in (
        "pairs_read", "pairs_accepted", "pairs_rejected", "rejected_pairs_by_reason",
        "images_per_split")}, indent=2))
    return 0


if __name__ == "__main__":
    exit_status = main()
    # Beam's model cache keeps the job's ResNet50 alive to interpreter teardown, where TensorFlow
    # has already cleared the globals its functions' __del__ needs: each printed an "Exception
    # ignored in AtomicFunction.__del__" traceback after a successful job. The job is done and its
    # files are closed; skip the teardown.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_status)
