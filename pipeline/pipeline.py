"""``create_pipeline``: the one factory that wires the TFX pipeline from the config.

Pure: it builds components and returns a ``tfx.dsl.Pipeline``; runners decide
the pipeline root, the metadata store and the Beam arguments, and run it.
Stages are added in pipeline order as they land (see README, "Status").
"""

from typing import List, Optional

from tfx import v1 as tfx

from components import config as config_lib
from components.flickr8k_gen import Flickr8kExampleGen


def create_pipeline(
    pipeline_config: config_lib.PipelineConfig,
    pipeline_root: str,
    data_fingerprint: str,
    metadata_connection_config=None,
    beam_pipeline_args: Optional[List[str]] = None,
    enable_cache: bool = True,
) -> tfx.dsl.Pipeline:
    """Ingestion → StatisticsGen, configured entirely by ``pipeline_config``.

    ``data_fingerprint`` (``components.flickr8k_gen.data_fingerprint``) keys the
    ingestion cache on the input files, which TFX cannot see by itself.
    """
    example_gen = Flickr8kExampleGen(pipeline_config=pipeline_config.to_json(),
                                     data_fingerprint=data_fingerprint)
    statistics_gen = tfx.components.StatisticsGen(examples=example_gen.outputs["examples"])
    return tfx.dsl.Pipeline(
        pipeline_name=pipeline_config.runtime.pipeline_name,
        pipeline_root=pipeline_root,
        components=[example_gen, statistics_gen],
        enable_cache=enable_cache,
        metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=beam_pipeline_args or [],
    )
