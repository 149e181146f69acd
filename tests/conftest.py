"""Shared pytest set-up.

* absl flags are marked parsed (absltest-based TFX/TFT test cases need it);
* the CPU is split into 2 logical devices before TensorFlow starts, so
  ``MirroredStrategy`` in the Trainer runs 2 replicas, as on a 2-GPU machine;
* for pytest-xdist (``make test`` runs 2 workers, ``--dist loadgroup``), each
  test gets an ``xdist_group``: its module, so a module's fixtures are built
  once; both users of the session-wide trained model share one; each
  end-to-end test is its own. The longest units are put first, so no worker
  starts a 7-minute pipeline test when the other is nearly done (the Makefile
  passes ``--no-loadscope-reorder``: xdist otherwise orders the groups by their
  number of tests, which puts the one-test end-to-end groups last).
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


# Modules whose tests share the session-scoped trained_demo_model: one worker builds it once.
TRAINED_DEMO_MODEL_MODULES = ("tests/evaluation/test_evaluator.py", "tests/trainer/test_export.py")


def _xdist_group(item) -> str:
    module = item.nodeid.split("::", 1)[0]
    if item.get_closest_marker("e2e"):
        return item.nodeid
    if module in TRAINED_DEMO_MODEL_MODULES:
        return "trained_demo_model"
    return module


def _rank(item) -> int:
    if item.get_closest_marker("e2e"):
        return 0
    if _xdist_group(item) == "trained_demo_model":
        return 1
    return 2 if item.get_closest_marker("slow") else 3


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks into the node ids
def pytest_collection_modifyitems(config, items):
    """Marks each test with its group and orders whole groups longest first (e2e, the trained
    model's users, groups with slow tests, the rest); a group's tests keep their order and stay
    together, so no module-scoped fixture is built twice, with or without xdist."""
    del config
    group_rank = {}
    for item in items:
        group = _xdist_group(item)
        item.add_marker(pytest.mark.xdist_group(group))
        group_rank[group] = min(group_rank.get(group, 3), _rank(item))
    first_index = {}
    for index, item in enumerate(items):
        first_index.setdefault(_xdist_group(item), index)
    items.sort(key=lambda item: (group_rank[_xdist_group(item)], first_index[_xdist_group(item)]))
