"""The data-validation gate: stops the pipeline before Transform when examples are not blessed.

TFX's ExampleValidator only records anomalies (and a per-split ``blessed``
property); nothing downstream refuses to run. ``ExampleValidationGate`` reads
that verdict and fails with a message naming every anomaly, and also checks
what the schema cannot express: that ``image_features`` holds exactly one
float16 ``[49, 2048]`` map per image (its byte length).
"""

import os
from typing import List

import tensorflow_data_validation as tfdv
from tensorflow_data_validation.utils import anomalies_util
from tfx import v1 as tfx
from tfx.components.example_validator import executor as example_validator_executor
from tfx.types import artifact_utils

from components import example_format


class ExamplesNotBlessedError(RuntimeError):
    """The examples violate the schema; the message names each anomaly."""


def anomaly_messages(anomalies_uri: str, blessed_by_split: dict) -> List[str]:
    messages = []
    for split, blessed in sorted(blessed_by_split.items()):
        if blessed == example_validator_executor.BLESSED_VALUE:
            continue
        path = os.path.join(example_format.split_dir(anomalies_uri, split),
                            example_validator_executor.DEFAULT_FILE_NAME)
        anomalies = anomalies_util.load_anomalies_binary(path)
        for feature, info in sorted(anomalies.anomaly_info.items()):
            description = info.description or info.short_description
            messages.append(f"split {split}: feature '{feature}': {description}")
        if anomalies.HasField("dataset_anomaly_info"):
            messages.append(f"split {split}: dataset: {anomalies.dataset_anomaly_info.description}")
    return messages


def feature_length_messages(statistics_uri: str, split_names: List[str], expected_bytes: int) -> List[str]:
    messages = []
    for split in split_names:
        stats = tfdv.load_stats_binary(os.path.join(example_format.split_dir(statistics_uri, split),
                                                    "FeatureStats.pb"))
        for feature in stats.datasets[0].features:
            if (list(feature.path.step) != [example_format.IMAGE_FEATURES]
                    or not feature.HasField("string_stats")):
                continue
            average = feature.string_stats.avg_length
            if feature.string_stats.common_stats.num_non_missing and abs(average - expected_bytes) > 1e-3:
                messages.append(
                    f"split {split}: feature '{example_format.IMAGE_FEATURES}': average length "
                    f"{average:.1f} bytes, "
                    f"expected {expected_bytes} (float16 [49, 2048] per image)")
    return messages


@tfx.dsl.components.component
def ExampleValidationGate(  # noqa: N802
    statistics: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.ExampleStatistics],
    anomalies: tfx.dsl.components.InputArtifact[tfx.types.standard_artifacts.ExampleAnomalies],
    expected_feature_bytes: tfx.dsl.components.Parameter[int],
    code_fingerprint: tfx.dsl.components.Parameter[str],
) -> None:
    """Fails, naming each anomaly, unless every split is blessed and well shaped.

    ``code_fingerprint`` (of this module) only enters TFX's cache key."""
    del code_fingerprint
    blessed_by_split = dict(anomalies.get_json_value_custom_property(
        example_validator_executor.ARTIFACT_PROPERTY_BLESSED_KEY) or {})
    messages = anomaly_messages(anomalies.uri, blessed_by_split)
    split_names = artifact_utils.decode_split_names(statistics.split_names)
    messages += feature_length_messages(statistics.uri, split_names, expected_feature_bytes)
    if not blessed_by_split:
        messages.append("ExampleValidator recorded no verdict (no 'blessed' property).")
    if messages:
        raise ExamplesNotBlessedError(
            "Examples are not blessed; stopping before Transform and training:\n  "
            + "\n  ".join(messages))
