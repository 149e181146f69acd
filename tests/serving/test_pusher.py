"""Tests of the atomic Pusher: only blessed models are pushed, into a new numbered version
directory that never exists without its saved_model.pb (on local disk and on an object store),
even when the copy dies midway; versions after every existing one, stale leftovers removed,
concurrent pushes given different versions."""

import os
import threading
import time
import uuid

import pytest
from tfx.dsl.io import fileio
from tfx.proto import pusher_pb2
from tfx.types import standard_artifacts
from tfx.utils import io_utils, proto_utils

from components.serving import captioner, pusher


def _model_artifact(root, name="model"):
    model = standard_artifacts.Model()
    model.uri = str(root / name)
    serving = root / name / "Format-Serving"
    (serving / "variables").mkdir(parents=True, exist_ok=True)
    (serving / "variables" / "variables.data-00000-of-00001").write_bytes(b"\0" * 1000)
    (serving / "saved_model.pb").write_bytes(f"graph of {name}".encode())
    return model


def _blessing(root, blessed):
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(root / f"blessing_{blessed}")
    os.makedirs(blessing.uri, exist_ok=True)
    blessing.set_int_custom_property("blessed", int(blessed))
    return blessing


def _push(root, destination, blessing=None, model_name="model"):
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(root / f"pushed_{uuid.uuid4().hex}")
    inputs = {"model": [_model_artifact(root, model_name)]}
    if blessing is not None:
        inputs["model_blessing"] = [blessing]
    push_destination = proto_utils.proto_to_json(pusher_pb2.PushDestination(
        filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=str(destination))))
    pusher.AtomicPushExecutor().Do(inputs, {"pushed_model": [pushed]},
                                   {"push_destination": push_destination, "custom_config": None})
    return pushed


def _visible(destination):
    """What TF Serving would consider: the names that are not hidden."""
    return sorted(name for name in os.listdir(destination) if not name.startswith("."))


def test_unblessed_model_is_not_pushed_and_blessed_one_is(tmp_path):
    destination = tmp_path / "serving"
    not_pushed = _push(tmp_path, destination, _blessing(tmp_path, blessed=False))
    assert not_pushed.get_int_custom_property("pushed") == 0
    assert not destination.exists() or not os.listdir(destination)

    pushed = _push(tmp_path, destination, _blessing(tmp_path, blessed=True))
    assert pushed.get_int_custom_property("pushed") == 1
    version_dir = pushed.get_string_custom_property("pushed_destination")
    assert os.path.dirname(version_dir) == str(destination)
    assert os.path.basename(version_dir) == pushed.get_string_custom_property("pushed_version")
    assert sorted(os.listdir(version_dir)) == ["assets.extra", "saved_model.pb", "variables"]
    assert captioner.resolve_model_dir(str(destination)) == version_dir


def test_two_models_get_two_versions_and_the_same_model_is_not_pushed_twice(tmp_path):
    destination = tmp_path / "serving"
    first = _push(tmp_path, destination, model_name="model_a").get_string_custom_property("pushed_version")
    second = _push(tmp_path, destination, model_name="model_b").get_string_custom_property("pushed_version")
    assert int(second) > int(first)  # within one second too
    again = _push(tmp_path, destination, model_name="model_a")
    assert again.get_int_custom_property("pushed") == 1
    assert again.get_string_custom_property("pushed_version") == first
    assert _visible(destination) == sorted([first, second])


def test_a_copy_that_dies_midway_leaves_no_version_directory(tmp_path, monkeypatch):
    destination = tmp_path / "serving"

    def dying_copy(source, target, **kwargs):
        os.makedirs(os.path.join(target, "variables"))
        raise OSError("disk full while copying variables")

    monkeypatch.setattr(io_utils, "copy_dir", dying_copy)
    with pytest.raises(OSError, match="disk full"):
        _push(tmp_path, destination)
    assert _visible(destination) == []  # no version
    assert os.listdir(destination) == [pusher.CLAIMS_DIR]  # nor the staging directory
    assert os.listdir(destination / pusher.CLAIMS_DIR) == []  # and the claim is withdrawn


class ObjectStoreRecorder:
    """What a reader of an object store (gs://) could see: every object the push creates, in
    order, with a directory rename performed as GCS does it, object by object in name order."""

    def __init__(self, monkeypatch):
        self.created = []
        real_copy, real_rename = fileio.copy, fileio.rename

        def copy(source, target, overwrite=False):
            real_copy(source, target, overwrite)
            self.created.append(os.path.normpath(target))

        def rename(source, target, overwrite=False):
            for directory, _, names in sorted(os.walk(source)):
                for name in sorted(names):
                    relative = os.path.relpath(os.path.join(directory, name), source)
                    destination = os.path.join(target, relative)
                    os.makedirs(os.path.dirname(destination), exist_ok=True)
                    real_copy(os.path.join(directory, name), destination)
                    self.created.append(os.path.normpath(destination))
            fileio.rmtree(source)

        monkeypatch.setattr(fileio, "copy", copy)
        monkeypatch.setattr(fileio, "rename", rename)
        del real_rename

    def saved_model_pb_came_last(self, version_dir, expected_files):
        """True when saved_model.pb appeared in ``version_dir`` only after every other file."""
        seen = set()
        for path in self.created:
            if os.path.dirname(path) == os.path.normpath(version_dir) and path.endswith("saved_model.pb"):
                return seen >= {os.path.join(version_dir, name) for name in expected_files}
            seen.add(path)
        return False


def test_on_an_object_store_saved_model_pb_is_the_last_object_of_a_version(tmp_path, monkeypatch):
    recorder = ObjectStoreRecorder(monkeypatch)
    # As on gs://: the staged copy and one rename would publish saved_model.pb before variables/.
    destination = tmp_path / "local_rename"
    version_dir = _push(tmp_path, destination).get_string_custom_property("pushed_destination")
    assert not recorder.saved_model_pb_came_last(
        version_dir, ["variables/variables.data-00000-of-00001"])

    monkeypatch.setattr(pusher, "renames_are_atomic", lambda path: False)
    recorder.created.clear()
    destination = tmp_path / "object_store"
    version_dir = _push(tmp_path, destination, model_name="model_b").get_string_custom_property(
        "pushed_destination")
    assert recorder.saved_model_pb_came_last(version_dir, ["variables/variables.data-00000-of-00001"])
    assert sorted(os.listdir(destination)) == [pusher.CLAIMS_DIR, os.path.basename(version_dir)]
    assert os.listdir(destination / pusher.CLAIMS_DIR) == []
    assert captioner.resolve_model_dir(str(destination)) == version_dir


def test_a_copy_that_dies_midway_on_an_object_store_leaves_no_version(tmp_path, monkeypatch):
    monkeypatch.setattr(pusher, "renames_are_atomic", lambda path: False)
    real_copy_file = io_utils.copy_file

    def dying_copy_file(source, target, overwrite=False):
        if target.endswith("saved_model.pb"):
            raise OSError("connection reset")
        real_copy_file(source, target, overwrite)

    monkeypatch.setattr(io_utils, "copy_file", dying_copy_file)
    destination = tmp_path / "serving"
    with pytest.raises(OSError, match="connection reset"):
        _push(tmp_path, destination)
    assert os.listdir(destination) == [pusher.CLAIMS_DIR]
    assert os.listdir(destination / pusher.CLAIMS_DIR) == []


def test_version_is_after_every_existing_one_and_stale_leftovers_are_removed(tmp_path):
    destination = tmp_path / "serving"
    future = int(time.time()) + 10_000  # e.g. a clock that was ahead when it pushed
    (destination / str(future) / "variables").mkdir(parents=True)
    (destination / str(future) / "saved_model.pb").write_bytes(b"graph")
    long_ago = int(time.time()) - pusher.STALE_AFTER_SECONDS - 60
    stale_staging = destination / f"{pusher.STAGING_PREFIX}123-{long_ago}-deadbeef"
    live_staging = destination / f"{pusher.STAGING_PREFIX}124-{int(time.time())}-cafecafe"
    stale_claim = destination / pusher.CLAIMS_DIR / f"125-{long_ago}-deadbeef"
    for directory in (stale_staging / "variables", live_staging / "variables"):
        directory.mkdir(parents=True)
    stale_claim.parent.mkdir()
    stale_claim.write_text("")

    version = _push(tmp_path, destination).get_string_custom_property("pushed_version")
    assert int(version) == future + 1
    assert not stale_staging.exists() and not stale_claim.exists()
    assert live_staging.exists()  # a push that may still be running


def test_concurrent_pushes_all_succeed_with_different_versions(tmp_path, monkeypatch):
    """Four pushes at once, with a clock that stands still so all start from the same version."""
    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.0)
    destination = tmp_path / "serving"
    for index in range(4):
        _model_artifact(tmp_path, f"model_{index}")
    results, errors = {}, []

    def push(index):
        try:
            results[index] = _push(tmp_path, destination, model_name=f"model_{index}")
        except Exception as error:  # noqa: BLE001 (reported by the assertion below)
            errors.append(error)

    threads = [threading.Thread(target=push, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    versions = sorted(int(pushed.get_string_custom_property("pushed_version")) for pushed in results.values())
    # Distinct, not contiguous: two pushes that claim one version at once both give it up, so a
    # version can be skipped (measured: 1800000000, 01, 03, 04 in one CI run).
    assert len(set(versions)) == 4 and versions[0] >= 1_800_000_000, versions
    assert sorted(int(name) for name in os.listdir(destination) if name.isdigit()) == versions
    for version in versions:
        marker = destination / str(version) / pusher.PUSHED_FROM_FILE
        assert (destination / str(version) / "saved_model.pb").exists() and marker.exists()
    pushed_from = {(destination / str(version) / pusher.PUSHED_FROM_FILE).read_text() for version in versions}
    assert len(pushed_from) == 4


def test_a_pushed_model_records_its_content_digest_not_a_path_of_the_training_machine(tmp_path):
    destination = tmp_path / "serving"
    pushed = _push(tmp_path, destination, _blessing(tmp_path, True))
    version_dir = pushed.get_string_custom_property("pushed_destination")
    marker = io_utils.read_string_file(os.path.join(version_dir, pusher.PUSHED_FROM_FILE))
    assert marker == pusher.model_digest(str(tmp_path / "model" / "Format-Serving"))
    assert marker.startswith("sha256:") and str(tmp_path) not in marker
    # The digest is the model's content: the pushed copy (its marker aside) has the same one.
    assert pusher.model_digest(version_dir) == marker
    for directory, _, names in os.walk(version_dir):
        for name in names:
            with open(os.path.join(directory, name), "rb") as stream:
                assert str(tmp_path).encode() not in stream.read(), name
    # The same content pushed again from another path is the same model: no second version.
    (tmp_path / "copy").mkdir()
    io_utils.copy_dir(str(tmp_path / "model"), str(tmp_path / "copy" / "model"))
    again = _push(tmp_path / "copy", destination, _blessing(tmp_path, True))
    assert again.get_string_custom_property("pushed_destination") == version_dir
    assert len([name for name in os.listdir(destination) if name.isdigit()]) == 1


def test_push_reads_and_writes_its_artifacts_on_a_filesystem_that_is_not_the_local_disk(tmp_path):
    """Model, blessing, pushed-model artifact and destination under ram:// (gs:// on Vertex)."""
    from tests import ram_filesystem

    root = ram_filesystem.new_root("pusher")
    local_model = _model_artifact(tmp_path)
    model = standard_artifacts.Model()
    model.uri = ram_filesystem.copy_tree(local_model.uri, f"{root}/model")
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = f"{root}/blessing"
    fileio.makedirs(blessing.uri)
    blessing.set_int_custom_property("blessed", 1)
    pushed = standard_artifacts.PushedModel()
    pushed.uri = f"{root}/pushed_model"
    destination = proto_utils.proto_to_json(pusher_pb2.PushDestination(
        filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=f"{root}/serving")))
    pusher.AtomicPushExecutor().Do({"model": [model], "model_blessing": [blessing]},
                                   {"pushed_model": [pushed]},
                                   {"push_destination": destination, "custom_config": None})
    version = pushed.get_string_custom_property("pushed_version")
    files = ram_filesystem.files_under(root)
    assert f"serving/{version}/saved_model.pb" in files
    assert f"serving/{version}/{pusher.PUSHED_FROM_FILE}" in files
    assert "pushed_model/saved_model.pb" in files
    assert not fileio.exists(str(tmp_path / "serving"))
