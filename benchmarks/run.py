"""``make bench``: every benchmark measured side by side in one run, printed as ratios.

Each benchmark compares the project's code with a ceiling (the fastest plain
way to do the same work on this machine) or with the original pattern it
replaces, and prints the measured figures and their ratio; results also go to
``<output_dir>/bench.json``.
"""

from __future__ import annotations

import argparse
import json
import logging as std_logging
import os
import sys
import time

from absl import logging

from components import config as config_lib
from components import quiet_startup
from components.ingestion.formats import flickr8k

SAMPLE_TEXT_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data",
                               "flickr8k_sample")


def _best_of(repeats, function):
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        timings.append(time.perf_counter() - start)
    return min(timings)


def bench_reader(data_dir: str) -> dict:
    """Reader over the real token file vs a bare split of the same lines (the ceiling)."""
    token_path = os.path.join(data_dir, config_lib.DataConfig.captions_file)

    def bare_split():
        with open(token_path, encoding="utf-8") as stream:
            return [line.split("\t", 1) for line in stream]

    def reader():
        return flickr8k.read_flickr8k(data_dir)

    lines = len(bare_split())
    ceiling_s = _best_of(5, bare_split)
    reader_s = _best_of(5, reader)
    return {
        "name": "reader: Flickr8k.token.txt lines/s",
        "lines": lines,
        "reader_lines_per_s": round(lines / reader_s),
        "bare_split_lines_per_s": round(lines / ceiling_s),
        "reader_vs_bare_split": round(ceiling_s / reader_s, 3),
    }


def _announce(name: str) -> None:
    """A benchmark takes seconds to minutes: say which one runs (results come at the end)."""
    print(f"running the {name} benchmark", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output_dir", default="outputs/bench")
    parser.add_argument("--data_dir", default=SAMPLE_TEXT_DIR,
                        help="Flickr8k layout whose text files the reader benchmark reads")
    parser.add_argument("--only", action="append", default=[],
                        choices=("reader", "dataset_scale", "ingestion", "vocabulary", "trainer", "scst",
                                 "export"),
                        help="run only these benchmarks (repeatable)")
    parser.add_argument("--verbose", action="store_true",
                        help="keep TensorFlow's start-up lines, INFO logs and Beam's warnings")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.verbose:
        logging.set_verbosity(logging.INFO)
    else:  # before any benchmark imports TensorFlow: its start-up lines silenced at the source
        quiet_startup.quiet()
        # The libraries' warnings about how a benchmark drives them (tf.Transform on instance
        # dicts, tables in tf.functions, Beam without python-snappy) are not results.
        logging.set_verbosity(logging.ERROR)
        for logger in ("apache_beam", "tensorflow"):
            std_logging.getLogger(logger).setLevel(std_logging.ERROR)
    results = []
    if "ingestion" in args.only or not args.only:
        _announce("ingestion")
        from benchmarks.ingestion_bench import bench_ingestion

        results.append(bench_ingestion())
    if "trainer" in args.only or not args.only:
        _announce("trainer")
        from benchmarks.trainer_bench import bench_trainer

        results.append(bench_trainer())
    real_data = os.path.isdir(args.data_dir)
    if "scst" in args.only or not args.only:
        _announce("self-critical")
        from benchmarks.scst_bench import bench_reward, bench_step

        if real_data:
            results.append(bench_reward(args.data_dir))
        results.append(bench_step())
    if not real_data:
        print(f"reader, vocabulary and export benchmarks skipped: no Flickr8k text files at {args.data_dir}")
    if ("reader" in args.only or not args.only) and real_data:
        _announce("reader")
        results.append(bench_reader(args.data_dir))
    if "dataset_scale" in args.only or not args.only:
        _announce("dataset scale")
        from benchmarks.dataset_scale_bench import bench_dataset_scale

        results.append(bench_dataset_scale())
        ingestion = next((result for result in results if result["name"].startswith("ingestion")), None)
        if ingestion is not None:
            from benchmarks.dataset_scale_bench import coco_ingestion_projection

            results.append(coco_ingestion_projection(ingestion))
    if ("vocabulary" in args.only or not args.only) and real_data:
        _announce("vocabulary")
        from benchmarks.vocabulary_bench import analyze_real_captions

        results.append(analyze_real_captions(args.data_dir))
    if ("export" in args.only or not args.only) and real_data:
        _announce("export")
        from benchmarks.export_bench import bench_export

        results.append(bench_export(args.data_dir))
    os.makedirs(args.output_dir, exist_ok=True)
    with open(os.path.join(args.output_dir, "bench.json"), "w", encoding="utf-8") as stream:
        json.dump(results, stream, indent=2)
    for result in results:
        print(result.pop("name"))
        for key, value in result.items():
            if isinstance(value, list):
                for row in value:
                    print("    " + json.dumps(row, sort_keys=True))
            else:
                print(f"  {key:>36}: {value}")
    return 0


if __name__ == "__main__":
    exit_status = main()
    # As pipeline.ingest: the ingestion benchmark's RunInference keeps ResNet50 alive to
    # interpreter teardown, where TensorFlow's AtomicFunction.__del__ prints tracebacks; the
    # results are written and the files closed, so the teardown is skipped.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_status)
