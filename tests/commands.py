"""Running the project's command-line entry points as a user does: ``python -m <module>`` from the
repository, output captured."""

import subprocess
import sys

from tests.paths import REPO_ROOT


def run_module(module: str, *arguments: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *arguments], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout, check=False)
