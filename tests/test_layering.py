"""The one-way house (``../shared/DESIGN.md``): ``components/`` never imports ``pipeline/``; the
shared bottom modules import no stage; a stage imports only the bottom and the stages before it."""

import ast
import os

import pytest

from tests.paths import REPO_ROOT

BOTTOM = ("components.config", "components.config_fields", "components.features_config",
          "components.orchestration_config",
          "components.example_format", "components.caption_text", "components.image_graph",
          "components.resnet_features", "components.cpu_bfloat16")
STAGES = ("ingestion", "transform", "trainer", "evaluation", "serving")
# Each stage declares its config section beside its code; the root config composes them, so it
# may import them, and they import nothing but the bottom.
SECTIONS = tuple(f"components.{stage}.config" for stage in STAGES)


def _within(imported: str, modules) -> bool:
    """``imported`` is one of ``modules`` or a name from one (``from module import name``)."""
    return any(imported == module or imported.startswith(module + ".") for module in modules)


def _modules():
    for directory, _, files in os.walk(os.path.join(REPO_ROOT, "components")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                module = os.path.relpath(path, REPO_ROOT)[:-3].replace(os.sep, ".")
                yield module.removesuffix(".__init__"), path


def _imports(path):
    with open(path, encoding="utf-8") as stream:
        tree = ast.parse(stream.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def _stage(module: str):
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in STAGES else None


@pytest.mark.parametrize("module, path", sorted(_modules()))
def test_imports_point_down_or_back_along_the_dag(module, path):
    own = _stage(module)
    for imported in _imports(path):
        assert not imported.startswith("pipeline"), f"{module} imports {imported}"
        if not imported.startswith("components."):
            continue
        if module in BOTTOM:
            assert _within(imported, BOTTOM) or (
                module == "components.config" and _within(imported, SECTIONS)), \
                f"bottom module {module} imports {imported}"
        if module in SECTIONS:
            assert _within(imported, BOTTOM) and not _within(imported, ["components.config"]), \
                f"config section {module} imports {imported}"
        target = _stage(imported)
        if target and own:
            assert STAGES.index(target) <= STAGES.index(own), f"{module} imports {imported}"
