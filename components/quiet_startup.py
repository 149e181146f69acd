"""Quiet start-up for the command-line entry points (captioner, compile, rehearsal).

Importing TensorFlow prints CUDA probing, cuFFT/cuDNN/cuBLAS factory registration and CPU
feature lines from C++, and Google's client libraries warn about the Python version: a dozen
lines that say nothing about the command the user ran. :func:`quiet` silences both at their
source; it must run before TensorFlow is imported, and ``--verbose`` skips it. Errors still
reach the user as Python exceptions, which every entry point turns into one paragraph.
"""

import os
import warnings


def quiet() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"google\.")
