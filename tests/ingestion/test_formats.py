"""The dataset format registry: one reader per ``data.format`` name, no format leaning on
another's private helpers."""

import ast
import os

import pytest

from components import config as config_lib
from components.ingestion import formats
from tests.paths import REPO_ROOT

FORMATS_DIR = os.path.join(REPO_ROOT, "components", "ingestion", "formats")


def test_every_format_the_config_accepts_has_a_reader_and_no_other():
    assert tuple(formats.READERS) == config_lib.DATA_FORMATS


@pytest.mark.parametrize("name", sorted(os.listdir(FORMATS_DIR)))
def test_no_format_module_calls_another_modules_private_helpers(name):
    if not name.endswith(".py"):
        return
    with open(os.path.join(FORMATS_DIR, name), encoding="utf-8") as stream:
        tree = ast.parse(stream.read())
    imported_modules = {alias.asname or alias.name for node in ast.walk(tree)
                        if isinstance(node, ast.ImportFrom) for alias in node.names}
    private = [f"{node.value.id}.{node.attr}" for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
               and node.value.id in imported_modules and node.attr.startswith("_")
               and not node.attr.startswith("__")]
    assert not private, f"{name} calls {private}"


def test_a_format_name_picks_its_reader(tmp_path):
    """data.format=karpathy reads the file as a Karpathy split file, not as a token file."""
    (tmp_path / "dataset.json").write_text('{"images": [{"filename": "a.jpg", "split": "train", '
                                           '"sentences": [{"raw": "a dog runs"}]}]}')
    data = config_lib.DataConfig(format="karpathy", captions_file="dataset.json")
    index = formats.read_index(str(tmp_path), data)
    assert [record.image_id for record in index.records()] == ["a.jpg"]
    with pytest.raises(formats.flickr8k.Flickr8kLayoutError):
        formats.read_index(str(tmp_path), config_lib.DataConfig(captions_file="dataset.json"))
