"""The Trainer on accelerators: it refuses what would train wrongly or silently slowly on GPUs
(a Keras without per-replica loss scaling, a job that asked for GPUs but sees none), turns mixed
precision on only where it pays, and scales the learning rate with the global batch."""

import math

import pytest

from components import config as config_lib
from components.trainer import model as model_lib
from components.trainer import run_fn


def test_the_trainer_refuses_a_keras_older_than_its_loss_scaling_needs_naming_both_versions():
    with pytest.raises(RuntimeError) as raised:
        run_fn.check_keras_version("3.6.0")
    assert "Keras 3.6.0 is older than 3.8" in str(raised.value)
    run_fn.check_keras_version()  # the installed, pinned one
    run_fn.check_keras_version("3.12.4")


def test_a_training_job_that_asked_for_gpus_and_sees_none_fails_naming_the_setting():
    with pytest.raises(RuntimeError) as raised:
        run_fn.check_required_gpus(2, visible=0)
    message = str(raised.value)
    assert "asked for 2 GPU(s)" in message and "cloud.trainer_accelerator_count" in message
    run_fn.check_required_gpus(2, visible=2)
    run_fn.check_required_gpus(0)  # CPU jobs (the rehearsal's, the local runner's) need none


@pytest.mark.parametrize("mode, capabilities, enabled", [
    ("auto", [], False),                        # CPUs only: float16 is emulated, slower
    ("auto", [(7, 5), (7, 5)], True),           # 2 x T4, the Vertex default
    ("auto", [(8, 0)], True),                   # A100
    ("auto", [(6, 1)], False),                  # P4: no float16 tensor cores
    ("auto", [(8, 0), (6, 1)], False),          # every replica must gain
    ("auto", [None], False),                    # capability unknown
    ("on", [], True),
    ("off", [(9, 0)], False),
])
def test_mixed_precision_auto_is_on_only_where_every_gpu_has_float16_tensor_cores(
        mode, capabilities, enabled):
    assert model_lib.mixed_precision_enabled(mode, capabilities) is enabled


def test_mixed_precision_auto_is_off_on_this_cpu_and_the_model_stays_float32():
    trainer = config_lib.TrainerConfig(image_dense_units=(8,), lstm_units=8, second_lstm_units=8,
                                       attention_key_dim=4)
    assert trainer.mixed_precision == "auto" and not model_lib.mixed_precision_enabled("auto")
    model = model_lib.build_captioning_model(trainer, 20, embedding_dim=8)
    assert {layer.dtype_policy.name for layer in model_lib.split_model(model)[1].layers} == {"float32"}
    on = model_lib.build_captioning_model(
        config_lib.TrainerConfig(**{**trainer.__dict__, "mixed_precision": "on"}), 20, embedding_dim=8)
    assert "mixed_float16" in {layer.dtype_policy.name for layer in model_lib.split_model(on)[1].layers}


def test_the_learning_rate_grows_with_the_square_root_of_the_batch_and_warm_up_spans_the_same_captions():
    trainer = config_lib.TrainerConfig()  # 1e-3 and 100 warm-up steps for 32 caption rows
    assert model_lib.scaled_learning_rate(trainer, 32) == (1e-3, 100)  # one CPU replica: as set
    # 2 x T4 at gpu_per_replica_batch_size: 10x the rows per step.
    rate, warmup = model_lib.scaled_learning_rate(trainer, 2 * trainer.gpu_per_replica_batch_size)
    assert rate == pytest.approx(1e-3 * math.sqrt(10)) and warmup == 10
    assert warmup * 2 * trainer.gpu_per_replica_batch_size == 100 * 32
    # 8 GPUs: the warm-up no longer outlasts Flickr8k's epoch (6,000 images / 256 per step).
    rate, warmup = model_lib.scaled_learning_rate(trainer, 8 * trainer.gpu_per_replica_batch_size)
    assert warmup == 3 and rate == pytest.approx(1e-3 * math.sqrt(40))
    schedule = model_lib.learning_rate_schedule(trainer, total_steps=1000, global_batch_size=320)
    assert float(schedule(10)) == pytest.approx(1e-3 * math.sqrt(10), rel=1e-6)
    assert float(schedule(5)) == pytest.approx(0.5e-3 * math.sqrt(10), rel=1e-6)
