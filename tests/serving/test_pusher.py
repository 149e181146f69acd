"""Tests of the atomic Pusher: only blessed models are pushed, into a new numbered version
directory that never exists without its saved_model.pb, even when the copy dies midway."""

import os

import pytest
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
    (serving / "saved_model.pb").write_bytes(b"graph")
    return model


def _blessing(root, blessed):
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = str(root / f"blessing_{blessed}")
    os.makedirs(blessing.uri, exist_ok=True)
    blessing.set_int_custom_property("blessed", int(blessed))
    return blessing


def _push(root, destination, blessing=None, model_name="model"):
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(root / f"pushed_{len(os.listdir(root))}")
    inputs = {"model": [_model_artifact(root, model_name)]}
    if blessing is not None:
        inputs["model_blessing"] = [blessing]
    push_destination = proto_utils.proto_to_json(pusher_pb2.PushDestination(
        filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=str(destination))))
    pusher.AtomicPushExecutor().Do(inputs, {"pushed_model": [pushed]},
                                   {"push_destination": push_destination, "custom_config": None})
    return pushed


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
    assert sorted(os.listdir(destination)) == sorted([first, second])


def test_a_copy_that_dies_midway_leaves_no_version_directory(tmp_path, monkeypatch):
    destination = tmp_path / "serving"

    def dying_copy(source, target, **kwargs):
        os.makedirs(os.path.join(target, "variables"))
        raise OSError("disk full while copying variables")

    monkeypatch.setattr(io_utils, "copy_dir", dying_copy)
    with pytest.raises(OSError, match="disk full"):
        _push(tmp_path, destination)
    assert os.listdir(destination) == []  # neither a version nor the staging directory
