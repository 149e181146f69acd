"""The pipeline image (Dockerfile) runs the stack the tests ran: every distribution the pipeline
imports is installed at its constraints.txt version over the TFX release image, whose own pins
differ (an older Keras 3, for one)."""

import ast
import importlib.metadata
import os
import re
import sys

from tests.paths import REPO_ROOT


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dockerfile_pinned() -> set:
    with open(os.path.join(REPO_ROOT, "Dockerfile"), encoding="utf-8") as stream:
        dockerfile = stream.read()
    (names,) = re.findall(r"grep -E '\^\(([^)]*)\)==' \\\s*constraints\.txt", dockerfile)
    return {_normalized(name) for name in names.split("|")}


def _constraints() -> dict:
    with open(os.path.join(REPO_ROOT, "constraints.txt"), encoding="utf-8") as stream:
        return {_normalized(line.split("==")[0]): line.split("==")[1].strip()
                for line in stream if "==" in line and not line.startswith("#")}


def _imported_modules() -> set:
    modules = set()
    for package in ("components", "pipeline"):
        for directory, _, files in os.walk(os.path.join(REPO_ROOT, package)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                with open(os.path.join(directory, name), encoding="utf-8") as stream:
                    tree = ast.parse(stream.read())
                for node in ast.walk(tree):
                    if isinstance(node, ast.Import):
                        modules.update(alias.name for alias in node.names)
                    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                        # "from google.cloud import aiplatform": the name may be a module.
                        modules.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {module for module in modules if module.split(".")[0] not in sys.stdlib_module_names
            and module.split(".")[0] not in ("components", "pipeline")}


def _distribution_of(module: str, owner_by_path: dict) -> str:
    """The installed distribution whose files hold the module or its nearest parent package
    (namespace packages such as ``google.cloud`` have no file of their own)."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        stem = "/".join(parts[:end])
        for candidate in (f"{stem}.py", f"{stem}/__init__.py"):
            if candidate in owner_by_path:
                return owner_by_path[candidate]
    raise AssertionError(f"No installed distribution holds {module}")


def test_every_distribution_the_pipeline_imports_is_installed_in_the_image_at_its_pinned_version():
    owner_by_path = {}  # a file's path relative to site-packages -> its distribution
    for distribution in importlib.metadata.distributions():
        name = _normalized(distribution.metadata["Name"])
        for path in distribution.files or []:
            owner_by_path.setdefault(path.as_posix(), name)
    imported = {_distribution_of(module, owner_by_path) for module in _imported_modules()}
    assert {"keras", "tensorflow", "tfx", "apache-beam", "pycocoevalcap"} <= imported | {"tfx"}
    pinned, constraints = _dockerfile_pinned(), _constraints()
    # tfx's modules live in two distributions (tfx, ml-pipelines-sdk); the image pins tfx.
    missing = sorted(name for name in imported - {"ml-pipelines-sdk"} if name not in pinned)
    assert missing == [], f"imported by the pipeline but not pinned in the Dockerfile: {missing}"
    assert "tf-keras" in pinned  # tf.Transform's Keras, imported for the pipeline by tensorflow_transform
    unpinned = sorted(name for name in pinned if name not in constraints)
    assert unpinned == [], f"the Dockerfile installs names constraints.txt does not pin: {unpinned}"
    for name in imported & pinned:
        assert importlib.metadata.version(name) == constraints[name], name

