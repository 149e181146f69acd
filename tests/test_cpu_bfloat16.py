"""Tests of the oneDNN bfloat16 switch: when ``auto`` turns it on, that it changes the arithmetic
of traced functions inside it and only there, and that ingestion and the Trainer honour it."""

import os

import numpy as np
import pytest
import tensorflow as tf

from components import config as config_lib
from components import cpu_bfloat16

NATIVE = bool(cpu_bfloat16.native_bfloat16_flags()) and os.environ.get("TF_ENABLE_ONEDNN_OPTS") != "0"


def _cpuinfo(tmp_path, flags):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nflags\t\t: fpu sse2 avx2 {flags}\n\nprocessor\t: 1\n")
    return str(path)


def test_auto_is_on_only_for_native_bfloat16_cpus_with_onednn(tmp_path, monkeypatch):
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    assert cpu_bfloat16.resolve("auto", _cpuinfo(tmp_path, "avx512f avx512_bf16"))
    assert cpu_bfloat16.resolve("auto", _cpuinfo(tmp_path, "amx_bf16 amx_tile"))
    assert not cpu_bfloat16.resolve("auto", _cpuinfo(tmp_path, "avx512f avx512bw"))
    assert not cpu_bfloat16.resolve("auto", str(tmp_path / "no_such_cpuinfo"))
    assert cpu_bfloat16.resolve("on", _cpuinfo(tmp_path, "avx2"))
    assert not cpu_bfloat16.resolve("off", _cpuinfo(tmp_path, "avx512_bf16"))
    # A GPU host with an AMX CPU: the model runs on the GPU, the CPU rewrite would gain nothing.
    assert not cpu_bfloat16.resolve("auto", _cpuinfo(tmp_path, "amx_bf16"), gpu_visible=True)
    assert cpu_bfloat16.resolve("on", _cpuinfo(tmp_path, "amx_bf16"), gpu_visible=True)
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    assert not cpu_bfloat16.resolve("auto", _cpuinfo(tmp_path, "avx512_bf16"))
    with pytest.raises(ValueError, match="auto"):
        cpu_bfloat16.resolve("yes")


def test_the_config_refuses_an_unknown_mode():
    for section in ("features", "trainer"):
        with pytest.raises(ValueError, match=f"{section}.onednn_bfloat16"):
            config_lib.PipelineConfig().with_overrides({f"{section}.onednn_bfloat16": "fast"}).validate()


@pytest.mark.skipif(not NATIVE, reason="the CPU has no native bfloat16 (avx512_bf16 / amx_bf16)")
def test_the_rewrite_changes_traced_matmuls_inside_only_and_restores_the_option():
    """Inside ``rewrite(True)`` a traced matmul rounds its inputs to bfloat16 (8 bits of
    mantissa: a relative error near 1e-3, against 1e-7 in float32); outside and under
    ``rewrite(False)`` it is bit-identical to float32, so the option does not leak."""
    rng = np.random.RandomState(0)
    left = tf.constant(rng.normal(size=(256, 256)).astype(np.float32))
    right = tf.constant(rng.normal(size=(256, 256)).astype(np.float32))
    matmul = tf.function(tf.linalg.matmul)
    exact = np.matmul(left.numpy().astype(np.float64), right.numpy().astype(np.float64))

    def relative_error(product):
        return float(np.abs(product.numpy() - exact).mean() / np.abs(exact).mean())

    plain = matmul(left, right)
    with cpu_bfloat16.rewrite(True):
        rewritten = matmul(left, right)
    after = matmul(left, right)
    with cpu_bfloat16.rewrite(False):
        switched_off = matmul(left, right)
    assert relative_error(plain) < 1e-5
    assert relative_error(rewritten) > 1e-4
    np.testing.assert_array_equal(after.numpy(), plain.numpy())
    np.testing.assert_array_equal(switched_off.numpy(), plain.numpy())
    assert not tf.config.optimizer.get_experimental_options().get(
        "auto_mixed_precision_onednn_bfloat16", False)
