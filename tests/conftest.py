"""Shared pytest set-up.

* absl flags are marked parsed (absltest-based TFX/TFT test cases need it);
* the CPU is split into 2 logical devices before TensorFlow starts, so
  ``MirroredStrategy`` in the Trainer runs 2 replicas, as on a 2-GPU machine.
"""

import pytest
from absl import flags

LOGICAL_CPUS = 2


def pytest_configure(config):
    del config
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
    import tensorflow as tf

    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(
        cpus[0], [tf.config.LogicalDeviceConfiguration() for _ in range(LOGICAL_CPUS)])


@pytest.fixture(scope="session")
def trained_demo_model(tmp_path_factory):
    """A model trained on real demo JPEGs through ingestion, Transform and run_fn (see
    tests/model_fixtures.py); shared by the export and evaluation tests."""
    from tests import model_fixtures

    return model_fixtures.train_demo_model(str(tmp_path_factory.mktemp("demo_model")))
