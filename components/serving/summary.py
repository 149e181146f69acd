"""What the Pusher's output means to a user: how to caption images with the pushed model."""

import os
from typing import List


def describe(pushed_version_dir: str) -> List[str]:
    """The captioner command for the model directory the Pusher's versions live in."""
    return [f"caption images: .venv/bin/python -m components.serving.captioner caption --model "
            f"{os.path.dirname(pushed_version_dir)} IMAGE.jpg ..."]
