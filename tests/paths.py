"""Where the tests find the repository and the real-data samples in ``../shared/data``."""

import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA_DIR = os.path.join(os.path.dirname(REPO_ROOT), "shared", "data")
SCHEMA_PATH = os.path.join(REPO_ROOT, "schemas", "schema.pbtxt")
