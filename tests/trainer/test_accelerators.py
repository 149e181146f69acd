"""The Trainer refuses what would train wrongly or silently slowly on GPUs: a Keras without
per-replica loss scaling, and a job that asked for GPUs but sees none."""

import pytest

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
