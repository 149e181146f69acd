"""Pusher: copies a blessed serving model to ``<push_destination>/<version>``, all or nothing.

TFX's own Pusher checks the blessing, picks a Unix-timestamp version and copies
the SavedModel into the version directory, ``saved_model.pb`` last. This
executor keeps TFX's blessing checks and artifact properties and changes how a
version is chosen and written:

* **Version**: ``max(now, highest existing + 1)``, claimed before anything is
  written: each push writes ``.version-claims/<version>-<time>-<random>`` and
  takes the version only if its claim is the only one for it (else it removes
  the claim, backs off and tries the next). Two concurrent pushes therefore get
  different versions on any store with read-after-write listing (POSIX, GCS);
  two that claimed one version at once both give it up, so under contention a
  version number can be skipped (versions stay unique and increasing).
* **Local / POSIX**: the model is copied into a hidden staging directory beside
  the version (``.staging-<version>-<time>-<random>``; TF Serving only loads
  directories whose name is a number) and renamed into place in one step, so a
  version directory never exists without all its files.
* **Object stores** (``gs://``, ``s3://``): a "rename" is a copy, object by object
  in name order, so ``saved_model.pb`` would land before ``variables/``. There
  the model is copied straight into the version directory with
  ``saved_model.pb`` last. That is enough: a version without ``saved_model.pb``
  is not a SavedModel to TF Serving's loader (it fails and is retried, it never
  serves half a model) nor to ``captioner.resolve_model_dir``, and once
  ``saved_model.pb`` is there every other file already is.
* Staging directories and claims left by a killed push are removed by the next
  push once older than ``STALE_AFTER_SECONDS`` (by the time in their names, as
  object stores keep no directory times); younger ones may be a concurrent push.

Pushing the same model again (a re-execution of the Pusher) creates no second
version: each version records a content digest of the SavedModel it came from
(``sha256:`` over every file's relative path and bytes) in
``assets.extra/pushed_from.txt``; never the model's path, which names the
training machine's disk and means nothing where the model is served.
"""

import hashlib
import os
import random
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
CLAIMS_DIR = ".version-claims"
STALE_AFTER_SECONDS = 6 * 3600
MAX_CLAIM_ATTEMPTS = 50
# Beside the SavedModel (TF Serving ignores it): the content digest of the model a version holds.
PUSHED_FROM_FILE = os.path.join("assets.extra", "pushed_from.txt")


def model_digest(model_path: str) -> str:
    """``sha256:<hex>`` of every file under ``model_path`` (relative path and bytes, in name
    order), ``assets.extra/`` excepted: what the Pusher writes there is not the model."""
    digest = hashlib.sha256()
    files = []
    for directory, _, names in fileio.walk(model_path):
        for name in names:
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, model_path)
            if not relative.startswith("assets.extra" + os.sep):
                files.append((relative, path))
    for relative, path in sorted(files):
        digest.update(relative.encode("utf-8") + b"\0")
        with fileio.open(path, "rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                digest.update(chunk)
        digest.update(b"\0")
    return f"sha256:{digest.hexdigest()}"


def renames_are_atomic(path: str) -> bool:
    """False on object stores, where a directory rename copies object by object."""
    return "://" not in path


def _entries(directory: str) -> list:
    return [name.rstrip("/") for name in fileio.listdir(directory)] if fileio.exists(directory) else []


def _existing_versions(base_directory: str) -> set:
    claimed = {name.split("-", 1)[0] for name in _entries(os.path.join(base_directory, CLAIMS_DIR))}
    return {int(name) for name in set(_entries(base_directory)) | claimed if name.isdigit()}


def remove_stale_leftovers(base_directory: str, now: float) -> None:
    """Removes staging directories and claims of pushes that died ``STALE_AFTER_SECONDS`` ago."""
    claims_dir = os.path.join(base_directory, CLAIMS_DIR)
    leftovers = [(os.path.join(base_directory, name), name[len(STAGING_PREFIX):])
                 for name in _entries(base_directory) if name.startswith(STAGING_PREFIX)]
    leftovers += [(os.path.join(claims_dir, name), name) for name in _entries(claims_dir)]
    for path, version_time_random in leftovers:
        parts = version_time_random.split("-")
        created = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else 0
        if now - created > STALE_AFTER_SECONDS:
            logging.warning("Removing %s, left by a push that did not finish.", path)
            if fileio.isdir(path):
                fileio.rmtree(path)
            else:
                fileio.remove(path)


def claim_version(base_directory: str) -> tuple:
    """(version, claim file): a version no other push holds, ``max(now, highest + 1)``."""
    claims_dir = os.path.join(base_directory, CLAIMS_DIR)
    fileio.makedirs(claims_dir)
    version = 0
    for attempt in range(MAX_CLAIM_ATTEMPTS):
        now = int(time.time())
        version = max(now, max(_existing_versions(base_directory), default=0) + 1, version + 1)
        claim = os.path.join(claims_dir, f"{version}-{now}-{uuid.uuid4().hex[:8]}")
        io_utils.write_string_file(claim, "")
        rivals = [name for name in _entries(claims_dir) if name.split("-", 1)[0] == str(version)]
        if len(rivals) == 1 and not fileio.exists(os.path.join(base_directory, str(version))):
            return version, claim
        fileio.remove(claim)
        time.sleep(random.uniform(0, 0.01 * (attempt + 1)))
    raise RuntimeError(f"No version claimed in {base_directory} after {MAX_CLAIM_ATTEMPTS} attempts.")


def copy_model_atomically(model_path: str, serving_path: str, digest: str = "") -> None:
    """Copies ``model_path`` to ``serving_path`` so that it is complete once it has a
    ``saved_model.pb`` (see the module docstring for local disks and object stores)."""
    parent, version = os.path.split(serving_path.rstrip("/"))
    if renames_are_atomic(serving_path):
        target = os.path.join(parent, f"{STAGING_PREFIX}{version}-{int(time.time())}-"
                                      f"{uuid.uuid4().hex[:8]}")
    else:
        target = serving_path
    try:
        io_utils.copy_dir(model_path, target, deny_regex_patterns=[r"saved_model\.pb"])
        io_utils.write_string_file(os.path.join(target, PUSHED_FROM_FILE),
                                   digest or model_digest(model_path))
        io_utils.copy_file(os.path.join(model_path, "saved_model.pb"),
                           os.path.join(target, "saved_model.pb"))
        if target != serving_path:
            fileio.rename(target, serving_path)
    except BaseException:
        if fileio.exists(target):
            fileio.rmtree(target)
        raise
    finally:
        if target != serving_path and fileio.exists(target):
            fileio.rmtree(target)


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
        digest = model_digest(model_path)
        already_pushed = version_pushed_from(base_directory, digest)
        if already_pushed:
            # A re-execution (e.g. after the evaluator re-ran against a new baseline): no new version.
            logging.info("Model %s is already pushed as %s; not pushing it again.", model_path,
                         already_pushed)
            io_utils.copy_dir(model_path, model_push.uri)
            self._MarkPushed(model_push, pushed_destination=already_pushed,
                             pushed_version=os.path.basename(already_pushed))
            return
        fileio.makedirs(base_directory)
        remove_stale_leftovers(base_directory, time.time())
        version, claim = claim_version(base_directory)
        model_version = str(version)
        serving_path = os.path.join(base_directory, model_version)
        try:
            copy_model_atomically(model_path, serving_path, digest)
        finally:
            fileio.remove(claim)
        logging.info("Model pushed to %s (version %s).", serving_path, model_version)
        io_utils.copy_dir(model_path, model_push.uri)
        self._MarkPushed(model_push, pushed_destination=serving_path, pushed_version=model_version)


class AtomicPusher(tfx.components.Pusher):
    """``tfx.components.Pusher`` whose version directories appear complete or not at all."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(AtomicPushExecutor)


def version_pushed_from(base_directory: str, digest: str):
    """The version directory already holding the model of this :func:`model_digest`, or None."""
    if not fileio.exists(base_directory):
        return None
    for name in sorted(fileio.listdir(base_directory)):
        marker = os.path.join(base_directory, name.rstrip("/"), PUSHED_FROM_FILE)
        if name.rstrip("/").isdigit() and fileio.exists(marker) and \
                io_utils.read_string_file(marker) == digest:
            return os.path.join(base_directory, name.rstrip("/"))
    return None
