"""Shared pytest set-up.

* absl flags are marked parsed (absltest-based TFX/TFT test cases need it);
* the CPU is split into 2 logical devices before TensorFlow starts, so
  ``MirroredStrategy`` in the Trainer runs 2 replicas, as on a 2-GPU machine;
* for pytest-xdist (``make test`` runs 2 workers, ``--dist loadgroup``), each
  test gets an ``xdist_group``: its module, so a module's fixtures are built
  once; both users of the session-wide trained model share one; each
  end-to-end test is its own. The longest units are put first (longest processing
  time first: ``tests/group_seconds.json`` holds each group's seconds measured on
  a fresh-clone run; a group not in it is estimated from its marks), so no worker
  starts a 5-minute unit when the other is nearly done (the Makefile passes
  ``--no-loadscope-reorder``: xdist otherwise orders the groups by their number
  of tests, which puts the one-test end-to-end groups last).
"""

import functools
import json
import os

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


# Modules that share another module's process-wide fixtures (run_fn's transformed examples,
# tests/trainer/test_run_fn.py::_scenario_transformed): one worker builds them once.
SHARED_MODULE_GROUPS = {"tests/trainer/test_self_critical.py": "tests/trainer/test_run_fn.py"}


def _xdist_group(item) -> str:
    module = item.nodeid.split("::", 1)[0]
    if item.get_closest_marker("e2e"):
        return item.nodeid
    if module in TRAINED_DEMO_MODEL_MODULES:
        return "trained_demo_model"
    return SHARED_MODULE_GROUPS.get(module, module)


@functools.cache
def _measured_group_seconds() -> dict:
    with open(os.path.join(os.path.dirname(__file__), "group_seconds.json"), encoding="utf-8") as stream:
        return json.load(stream)


def _estimated_seconds(item) -> float:
    """The seconds of the item's group: measured, or guessed from its marks for a new group."""
    group = _xdist_group(item)
    if group in _measured_group_seconds():
        return _measured_group_seconds()[group]
    if item.get_closest_marker("e2e"):
        return 300
    return 20 if item.get_closest_marker("slow") else 1


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks into the node ids
def pytest_collection_modifyitems(config, items):
    """Marks each test with its group and orders whole groups longest first; a group's tests
    keep their order and stay together, so no module-scoped fixture is built twice, with or
    without xdist."""
    del config
    group_seconds = {}
    for item in items:
        group = _xdist_group(item)
        item.add_marker(pytest.mark.xdist_group(group))
        group_seconds[group] = max(group_seconds.get(group, 0), _estimated_seconds(item))
    first_index = {}
    for index, item in enumerate(items):
        first_index.setdefault(_xdist_group(item), index)
    items.sort(key=lambda item: (-group_seconds[_xdist_group(item)], first_index[_xdist_group(item)]))
