"""The self-critical phase: rewards and baselines, the policy loss over 2 replicas, the phase on 2
logical devices keeping its best weights, and a killed Trainer resuming across the phase boundary."""

import io
import json
import os
import pathlib

import numpy as np
import pytest
import tensorflow as tf

from components import caption_text
from components.trainer import cider_d, run_fn, self_critical
from tests.trainer import test_run_fn

END, PAD = caption_text.END_ID, caption_text.PAD_ID


def test_caption_tokens_run_through_end_and_drop_padding():
    assert self_critical.caption_tokens(np.array([7, 8, END, PAD, PAD])) == (7, 8, END)
    assert self_critical.caption_tokens(np.array([7, 8, 9])) == (7, 8, 9)  # never ended
    assert self_critical.image_references(np.array([[7, END, PAD], [PAD, PAD, PAD]])) == [(7, END)]


def test_advantages_with_each_baseline_and_a_filler_image():
    references = np.array([[[7, 8, 9, END, PAD], [7, 8, 10, END, PAD]],
                           [[PAD] * 5, [PAD] * 5]])  # the second image: filler, no captions
    scorer = cider_d.CiderD([[(7, 8, 9, END), (7, 8, 10, END)], [(11, 12, END)]])
    samples = np.array([[[7, 8, 9, END, PAD], [11, 12, END, PAD, PAD], [7, 8, END, PAD, PAD]],
                        [[7, 8, 9, END, PAD]] * 3])
    greedy = np.array([[7, 8, 10, END, PAD], [7, 8, 9, END, PAD]])
    advantage, reward = self_critical.advantages(scorer, samples, greedy, references, "greedy")
    expected = scorer.scores([[(7, 8, 9, END), (11, 12, END), (7, 8, END)]],
                             [[(7, 8, 9, END), (7, 8, 10, END)]])[0]
    np.testing.assert_allclose(reward[0], expected, rtol=1e-6)
    greedy_reward = scorer.scores([[(7, 8, 10, END)]], [[(7, 8, 9, END), (7, 8, 10, END)]])[0, 0]
    np.testing.assert_allclose(advantage[0], expected - greedy_reward, rtol=1e-5, atol=1e-6)
    assert reward[0, 0] > reward[0, 2] > reward[0, 1] == 0.0
    assert np.all(advantage[1] == 0) and np.all(reward[1] == 0)  # no captions, no signal

    advantage, _ = self_critical.advantages(scorer, samples, greedy, references, "sample_mean")
    others = (expected.sum() - expected) / 2
    np.testing.assert_allclose(advantage[0], expected - others, rtol=1e-5, atol=1e-6)
    assert abs(advantage[0].sum()) < 1e-5 * max(1.0, abs(expected).sum())  # mean baseline: sums to 0


def test_policy_loss_over_two_replicas_is_the_single_device_loss():
    """Replicas holding different numbers of sampled ids: the sum of their parts equals the one
    device's mean over all ids (a per-replica mean would weigh the short replica's ids double)."""
    rng = np.random.default_rng(0)
    log_probs = tf.nn.log_softmax(tf.constant(rng.normal(size=(4, 2, 5, 9)), tf.float32))
    ids = np.array(rng.integers(4, 9, size=(4, 2, 5)), np.int32)
    ids[:2, :, 1:] = PAD  # replica 0: one id per sample; replica 1: five
    advantage = tf.constant(rng.normal(size=(4, 2)), tf.float32)
    has_captions = tf.constant([True, True, True, False])
    single = float(self_critical.policy_loss(log_probs, tf.constant(ids), advantage, has_captions))
    strategy = tf.distribute.MirroredStrategy(
        [device.name for device in tf.config.list_logical_devices("CPU")[:2]],
        cross_device_ops=tf.distribute.ReductionToOneDevice())
    assert strategy.num_replicas_in_sync == 2
    dataset = tf.data.Dataset.from_tensor_slices(
        (log_probs, tf.constant(ids), advantage, has_captions)).batch(4)
    batch = next(iter(strategy.experimental_distribute_dataset(dataset)))
    per_replica = strategy.run(tf.function(self_critical.policy_loss), args=batch)
    parts = [float(value) for value in strategy.experimental_local_results(per_replica)]
    assert parts[0] != pytest.approx(single / 2)
    assert sum(parts) == pytest.approx(single, rel=1e-5)
    real = (ids != PAD) * np.array([1, 1, 1, 0])[:, None, None]
    token_log_probs = np.take_along_axis(log_probs.numpy(), ids[..., None], axis=-1)[..., 0]
    expected = -(advantage.numpy()[..., None] * token_log_probs * real).sum() / real.sum()
    assert single == pytest.approx(expected, rel=1e-5)
    # An all-filler batch: 0, not NaN.
    assert float(self_critical.policy_loss(log_probs, tf.constant(ids), advantage,
                                           tf.zeros([4], tf.bool))) == 0.0


@pytest.fixture(scope="module")
def transformed():
    return test_run_fn._scenario_transformed()  # conftest puts both modules on one worker


def _history_file(out: pathlib.Path) -> dict:
    return json.loads((out / "run" / "history.json").read_text())


@pytest.mark.slow
def test_scst_phase_on_two_replicas_scores_dev_each_epoch_and_exports_its_best_weights(
        transformed, tmp_path, capsys, monkeypatch):
    pipeline_config = test_run_fn._config(epochs=3, scst_epochs=2, scst_samples=3,
                                          scst_learning_rate=3e-4)
    rewarded = []  # (images, samples) of each reward call: one replica's share of a batch
    original_advantages = self_critical.advantages

    def recording_advantages(scorer, sample_ids, *args):
        rewarded.append(sample_ids.shape[:2])
        return original_advantages(scorer, sample_ids, *args)

    monkeypatch.setattr(self_critical, "advantages", recording_advantages)
    history = test_run_fn._train(transformed, tmp_path, pipeline_config)
    # 8 caption rows per replica = 1 image of 5 captions; 48 train images, 2 replicas: 24 steps
    # of 2 images per epoch, each replica rewarding its own image's 3 samples.
    assert set(rewarded) == {(1, 3)} and len(rewarded) == 2 * 24 * 2
    printed = capsys.readouterr().out
    assert len(history["loss"]) == 3 and len(history["dev_cider"]) == 2
    # The dev CIDEr-D curve covers both phases: each cross-entropy epoch is scored too.
    assert len(history["val_cider"]) == 3 and all(np.isfinite(history["val_cider"]))
    assert len(history["scst_reward"]) == 2 and all(np.isfinite(history["scst_loss"]))
    assert "self-critical phase: dev CIDEr-D" in printed and "SCST epoch 2/2" in printed
    saved = _history_file(tmp_path)
    best = saved["best_epoch"]
    assert saved["dev_cider"] == history["dev_cider"]
    if best:
        assert history["dev_cider"][best - 1] == max(history["dev_cider"])
        assert max(history["dev_cider"]) > history["dev_cider_before"]
        assert saved["exported_weights"] == {"phase": "self_critical", "epoch": best}
    else:
        assert max(history["dev_cider"]) <= history["dev_cider_before"]
        assert saved["exported_weights"]["phase"] == "cross_entropy"
    assert (tmp_path / "serving" / "saved_model.pb").exists()
    assert not os.path.exists(str(tmp_path / "backup") + run_fn.SELF_CRITICAL_BACKUP_SUFFIX)
    from components.trainer import summary

    assert any(line.startswith("self-critical epochs 2: dev CIDEr-D ")
               for line in summary.describe(str(tmp_path / "run")))


KILLED_RUN = (
    "import sys, pathlib\n"
    "from tests import conftest\n"
    "conftest.pytest_configure(None)\n"
    "from tests.trainer import test_run_fn, test_self_critical\n"
    "test_run_fn._train(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]),\n"
    "                   test_self_critical.HARMFUL_SCST)\n")
HARMFUL_SCST = test_run_fn._config(epochs=3, scst_epochs=3, scst_samples=2, scst_learning_rate=0.5,
                                   clipnorm=1000.0)


@pytest.mark.slow
def test_a_killed_harmful_scst_phase_resumes_without_cross_entropy_and_exports_its_weights(
        transformed, tmp_path):
    """A Trainer killed (SIGKILL) once SCST epoch 1 of 3 is checkpointed, re-executed: no
    cross-entropy epoch runs again, SCST goes on after its last finished epoch. The learning rate
    wrecks the model, so every SCST epoch's dev CIDEr-D falls below the cross-entropy one's, and
    the exported weights are the cross-entropy ones, bit for bit."""
    import contextlib
    import shutil
    import signal
    import subprocess
    import sys
    import time

    import keras

    from tests.paths import REPO_ROOT

    scst_directory = pathlib.Path(str(tmp_path / "backup") + run_fn.SELF_CRITICAL_BACKUP_SUFFIX)
    state_file = scst_directory / self_critical.STATE_FILE
    job = subprocess.Popen([sys.executable, "-c", KILLED_RUN, str(transformed), str(tmp_path)],
                           cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 400
    while time.time() < deadline and job.poll() is None:
        if state_file.exists() and json.loads(state_file.read_text())["epochs_done"] >= 1:
            break
        time.sleep(0.1)
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    assert job.returncode == -signal.SIGKILL, "training ended before it could be killed"
    killed_state = json.loads(state_file.read_text())
    assert 1 <= killed_state["epochs_done"] < 3
    cross_entropy_weights = tmp_path / "cross_entropy.weights.h5"
    shutil.copy(scst_directory / run_fn.CROSS_ENTROPY_WEIGHTS, cross_entropy_weights)

    class CountEpochs(keras.callbacks.Callback):
        epochs = 0

        def on_epoch_end(self, epoch, logs=None):
            CountEpochs.epochs += 1

    stream = io.StringIO()
    with contextlib.redirect_stdout(stream):
        history = test_run_fn._train(transformed, tmp_path, HARMFUL_SCST, [CountEpochs()])
    printed = stream.getvalue()
    assert CountEpochs.epochs == 0, "the cross-entropy phase was trained again"
    assert "SCST epoch 1/3" not in printed and "SCST epoch 3/3" in printed, printed
    assert len(history["loss"]) == 3 and len(history["dev_cider"]) == 3
    assert max(history["dev_cider"]) < history["dev_cider_before"], history
    assert _history_file(tmp_path)["exported_weights"]["phase"] == "cross_entropy"
    exported = keras.saving.load_model(str(tmp_path / "run" / run_fn.DECODER_FILE))
    expected = keras.saving.load_model(str(tmp_path / "run" / run_fn.DECODER_FILE))
    expected.load_weights(str(cross_entropy_weights))
    for ours, theirs in zip(exported.get_weights(), expected.get_weights(), strict=True):
        np.testing.assert_array_equal(ours, theirs)
    assert (tmp_path / "serving" / "saved_model.pb").exists()
    assert not scst_directory.exists()
