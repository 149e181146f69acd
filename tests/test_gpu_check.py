"""``make gpu-check`` on a machine without a GPU: it refuses clearly; its verdict fails on a
non-finite loss or a first-step loss away from the CPU's. (Run by hand with ``--allow-cpu`` it
does the same steps on the CPU and prints PASS; on a GPU it has not run yet.)"""

import math
import subprocess
import sys

from benchmarks import gpu_check
from tests.paths import REPO_ROOT


def test_without_a_gpu_it_refuses_with_exit_status_2_and_says_why(tmp_path):
    completed = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", f"--output_dir={tmp_path}"],
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                               env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "-1",
                                    "HOME": str(tmp_path)})
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert "make gpu-check needs a machine with a GPU, and TensorFlow sees none here" in completed.stderr
    assert "Traceback" not in completed.stderr and completed.stdout == ""


def _result(first_loss, losses=None, replicas=2):
    return {"replicas": replicas, "first_loss": first_loss, "losses": losses or [first_loss, 2.0],
            "ms_per_caption": 1.0}


def _measured(float32, mixed):
    return {"float32": float32, "mixed_float16": mixed, "feature_images_per_second": 100.0}


def test_the_verdict_fails_on_a_non_finite_loss_or_a_first_loss_away_from_the_cpus():
    cpu = _measured(_result(3.7, replicas=1), _result(3.7, replicas=1))
    cpu["feature_images_per_second"] = 10.0
    assert gpu_check.table(_measured(_result(3.7001), _result(3.72)), cpu, "2 x GPU")[-1] == "PASS"
    assert gpu_check.table(_measured(_result(3.71), _result(3.7)), cpu, "2 x GPU")[-1] == "FAIL"
    assert gpu_check.table(_measured(_result(3.7), _result(3.9)), cpu, "2 x GPU")[-1] == "FAIL"
    non_finite = _result(3.7, losses=[3.7, math.nan])
    assert gpu_check.table(_measured(_result(3.7), non_finite), cpu, "2 x GPU")[-1] == "FAIL"
    rows = gpu_check.table(_measured(_result(3.7), _result(3.7)), cpu, "2 x GPU")
    assert any(row.startswith("ResNet50 images / s") and row.endswith("10.00x") for row in rows)
