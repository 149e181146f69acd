"""The command-line side of the config: ``--set section.field=value`` and the named flags
(``--data_dir``, ``--glove``, ...) every entry point shares, turned into a validated config."""

from __future__ import annotations

import argparse
from typing import Iterable, Optional, Sequence

from components import config as config_lib


def parse_override_args(assignments: Iterable[str]) -> dict:
    """Turns ``["trainer.epochs=3", ...]`` (``--set`` flags) into an override dict."""
    overrides = {}
    for assignment in assignments:
        key, separator, value = assignment.partition("=")
        if not separator:
            raise ValueError(f"Override {assignment!r} is not of the form section.field=value.")
        overrides[key.strip()] = value
    return overrides


# The command-line flags every entry point shares, and the config key each one sets.
CONFIG_FLAGS = {
    "output_dir": ("runtime.output_dir", "where every output goes"),
    "data_dir": ("data.data_dir", "Flickr8k-layout folder, local or gs://"),
    "glove": ("transform.glove_path", "GloVe .txt, .txt.gz or Stanford .zip"),
    "resnet_weights": ("features.resnet_weights",
                       "'random', 'imagenet' (Keras cache) or a weights file path/URI"),
    "project": ("cloud.project", "Google Cloud project"),
    "region": ("cloud.region", "Google Cloud region"),
    "bucket": ("cloud.bucket", "gs://BUCKET for pipeline_root, serving_model, tmp"),
    "image": ("cloud.image", "the pipeline image"),
}


# What an optional flag left out means, said in its help.
OPTIONAL_FLAG_DEFAULTS = {"data_dir": "the generated demo data"}


def add_config_flags(parser: argparse.ArgumentParser, names: Sequence[str],
                     required: Sequence[str] = ()) -> argparse.ArgumentParser:
    """Adds ``--NAME`` for each of ``names`` (keys of :data:`CONFIG_FLAGS`) and ``--set``."""
    for name in names:
        default = "" if name in required or name not in OPTIONAL_FLAG_DEFAULTS else \
            f"; default: {OPTIONAL_FLAG_DEFAULTS[name]}"
        parser.add_argument(f"--{name}", default="", required=name in required,
                            help=f"{CONFIG_FLAGS[name][1]} ({CONFIG_FLAGS[name][0]}{default})")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                        help="any other config override; repeatable")
    return parser


def config_from_flags(args: argparse.Namespace,
                      base: Optional[config_lib.PipelineConfig] = None) -> config_lib.PipelineConfig:
    """The validated config that ``--set`` and the named flags of :func:`add_config_flags` ask
    for; a named flag given a value wins over the same key in ``--set``."""
    overrides = parse_override_args(args.set or [])
    overrides.update({key: getattr(args, name) for name, (key, _) in CONFIG_FLAGS.items()
                      if getattr(args, name, "")})
    return (base or config_lib.PipelineConfig()).with_overrides(overrides).validate()
