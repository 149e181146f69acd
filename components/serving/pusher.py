"""Pusher: copies a blessed serving model to ``<push_destination>/<version>``, all or nothing.

TFX's own Pusher checks the blessing, picks a Unix-timestamp version and copies
the SavedModel into the version directory, ``saved_model.pb`` last. A model
server polling the destination can still see that directory while its
variables are half copied. This executor copies into a hidden staging
directory beside it (``.staging-<version>-<random>``; TF Serving only loads
directories whose name is a number) and renames it into place once complete,
so on a local or POSIX file system a version directory never exists without
its ``saved_model.pb``. On object stores (``gs://``), where a rename is a
copy, the base executor's ``saved_model.pb``-last order still holds.

Pushing the same model artifact again (a re-execution of the Pusher) creates
no second version: each version records the model it came from in
``assets.extra/pushed_from.txt``. Everything else (blessing checks,
``PushedModel`` properties, the archive copy in the artifact) is TFX's.
"""

import os
import time
import uuid

from absl import logging
from tfx import v1 as tfx
from tfx.components.pusher import executor as pusher_executor
from tfx.dsl.components.base import executor_spec
from tfx.dsl.io import fileio
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils, proto_utils

STAGING_PREFIX = ".staging-"
# Beside the SavedModel (TF Serving ignores it): which model a version was pushed from.
PUSHED_FROM_FILE = os.path.join("assets.extra", "pushed_from.txt")


def copy_model_atomically(model_path: str, serving_path: str) -> None:
    """Copies ``model_path`` to ``serving_path``, which appears only when complete."""
    parent, version = os.path.split(serving_path.rstrip("/"))
    staging_path = os.path.join(parent, f"{STAGING_PREFIX}{version}-{uuid.uuid4().hex[:8]}")
    try:
        io_utils.copy_dir(model_path, staging_path, deny_regex_patterns=[r"saved_model\.pb"])
        io_utils.write_string_file(os.path.join(staging_path, PUSHED_FROM_FILE), model_path)
        io_utils.copy_file(os.path.join(model_path, "saved_model.pb"),
                           os.path.join(staging_path, "saved_model.pb"))
        fileio.rename(staging_path, serving_path)
    finally:
        if fileio.exists(staging_path):
            fileio.rmtree(staging_path)


class AtomicPushExecutor(pusher_executor.Executor):
    """TFX's Pusher executor with an atomic copy into the version directory."""

    def Do(self, input_dict, output_dict, exec_properties) -> None:  # noqa: N802 (TFX's name)
        self._log_startup(input_dict, output_dict, exec_properties)
        model_push = artifact_utils.get_single_instance(
            output_dict[standard_component_specs.PUSHED_MODEL_KEY])
        if not self.CheckBlessing(input_dict):
            logging.warning("Model not pushed: it is not blessed (see the evaluator's metrics).")
            self._MarkNotPushed(model_push)
            return
        model_path = self.GetModelPath(input_dict)
        if not fileio.exists(os.path.join(model_path, "saved_model.pb")):
            raise FileNotFoundError(f"No SavedModel to push: {model_path} has no saved_model.pb.")
        push_destination = pusher_pb2.PushDestination()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.PUSH_DESTINATION_KEY],
                                  push_destination)
        if push_destination.WhichOneof("destination") != "filesystem":
            raise NotImplementedError(f"Push destination {push_destination} is not a file system.")
        base_directory = push_destination.filesystem.base_directory
        already_pushed = version_pushed_from(base_directory, model_path)
        if already_pushed:
            # A re-execution (e.g. after the evaluator re-ran against a new baseline): no new version.
            logging.info("Model %s is already pushed as %s; not pushing it again.", model_path,
                         already_pushed)
            io_utils.copy_dir(model_path, model_push.uri)
            self._MarkPushed(model_push, pushed_destination=already_pushed,
                             pushed_version=os.path.basename(already_pushed))
            return
        model_version = str(int(time.time()))
        serving_path = os.path.join(base_directory, model_version)
        while fileio.exists(serving_path):  # two pushes within one second
            model_version = str(int(model_version) + 1)
            serving_path = os.path.join(base_directory, model_version)
        fileio.makedirs(base_directory)
        copy_model_atomically(model_path, serving_path)
        logging.info("Model pushed to %s (version %s).", serving_path, model_version)
        io_utils.copy_dir(model_path, model_push.uri)
        self._MarkPushed(model_push, pushed_destination=serving_path, pushed_version=model_version)


class AtomicPusher(tfx.components.Pusher):
    """``tfx.components.Pusher`` whose version directories appear complete or not at all."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(AtomicPushExecutor)


def version_pushed_from(base_directory: str, model_path: str):
    """The version directory already holding a push of ``model_path``, or None."""
    if not fileio.exists(base_directory):
        return None
    for name in sorted(fileio.listdir(base_directory)):
        marker = os.path.join(base_directory, name.rstrip("/"), PUSHED_FROM_FILE)
        if name.rstrip("/").isdigit() and fileio.exists(marker) and \
                io_utils.read_string_file(marker) == model_path:
            return os.path.join(base_directory, name.rstrip("/"))
    return None
