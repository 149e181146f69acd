"""Digests that make TFX's cache see what it cannot see by itself: the code behind each stage.

TFX keys a cached execution on its inputs and exec properties. A stage configured by a module
path (``components.transform.preprocessing.preprocessing_fn``) would hit the cache after that
module's code changed; passing a digest of the code in its exec properties makes a change re-run
the stage, and its new outputs re-run everything after it.

Each stage's digest covers its entry module and every module of this repository that module
imports, directly or through others, at top level or inside a function: the import graph is
read from the source (``ast``), not listed by hand, so it cannot drift from the code.
"""

import ast
import hashlib
import os
from typing import Dict, List, Mapping, Optional

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The packages of this repository whose modules enter the digests.
OWN_PACKAGES = ("components",)
# Each stage's entry point: the module TFX runs for it.
STAGE_ENTRY_MODULES = {
    "ingestion": "components.ingestion.example_gen",
    "validation_gate": "components.transform.validation_gate",
    "transform": "components.transform.preprocessing",
    "trainer": "components.trainer.run_fn",
    "evaluator": "components.evaluation.evaluator",
}


def _module_path(module_name: str, root: str) -> Optional[str]:
    base = os.path.join(root, *module_name.split("."))
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return None


def _imported_names(tree: ast.AST, module_name: str, is_package: bool) -> List[str]:
    """Every module name an import statement anywhere in ``tree`` may refer to."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package_parts = module_name.split(".") if is_package else module_name.split(".")[:-1]
                base_parts = package_parts[:len(package_parts) - node.level + 1]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)  # submodules
    return names


def module_closure(entry_module: str, root: str = REPO_ROOT) -> List[str]:
    """``entry_module`` and every module of :data:`OWN_PACKAGES` it imports, transitively, with
    the packages (``__init__``) on the way; sorted."""
    seen, pending = set(), [entry_module]
    while pending:
        name = pending.pop()
        if name in seen or not any(name == package or name.startswith(package + ".")
                                   for package in OWN_PACKAGES):
            continue
        path = _module_path(name, root)
        if path is None:
            continue  # a name imported from a module (a function or class), not a module
        seen.add(name)
        parts = name.split(".")
        pending.extend(".".join(parts[:end]) for end in range(1, len(parts)))  # parent packages
        with open(path, encoding="utf-8") as stream:
            tree = ast.parse(stream.read(), filename=path)
        pending.extend(_imported_names(tree, name, path.endswith("__init__.py")))
    return sorted(seen)


def code_fingerprint(module_names, root: str = REPO_ROOT) -> str:
    """sha256 over the names and source bytes of the given modules, in a fixed order."""
    digest = hashlib.sha256()
    for name in sorted(module_names):
        digest.update(name.encode("utf-8") + b"\0")
        with open(_module_path(name, root), "rb") as stream:
            digest.update(stream.read() + b"\0")
    return digest.hexdigest()


def stage_fingerprint(entry_module: str, root: str = REPO_ROOT) -> str:
    return code_fingerprint(module_closure(entry_module, root), root)


def pipeline_code_fingerprints(root: str = REPO_ROOT,
                               entry_modules: Mapping[str, str] = STAGE_ENTRY_MODULES) -> Dict[str, str]:
    """``{stage: digest}`` for every stage of :data:`STAGE_ENTRY_MODULES`."""
    return {stage: stage_fingerprint(module, root) for stage, module in entry_modules.items()}
