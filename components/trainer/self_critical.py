"""Self-critical sequence training (SCST; Rennie et al., 2017, "Self-critical Sequence Training
for Image Captioning"): the Trainer's phase after the cross-entropy epochs (``trainer.scst_epochs``).

Cross-entropy teaches the next word given the true previous words; captions are judged whole.
Here, per image of a batch, ``trainer.scst_samples`` captions are sampled from the model
(``decoding.sample_decode``) and each is rewarded by CIDEr-D (``cider_d.CiderD``) against the
image's train captions, with document frequencies from the train split's captions computed once
per run. Captions are compared as ids through ``<end>`` (finishing a caption is part of the
reward, as in self-critical.pytorch). The baseline (``trainer.scst_baseline``) is the reward of
the image's greedy caption, or the mean reward of its other samples. The loss is
−(reward − baseline) · log p(id), summed over each sample's ids through ``<end>`` and divided by
the sampled ids of the global batch (by 1 for a batch of filler images only, never by 0). The
log-probabilities are those of the policy that sampled: the model without dropout, over the ids
sampling allows.

Under ``MirroredStrategy`` each replica samples and rewards its own images (the reward runs on
the host through ``tf.numpy_function``); the optimizer sums the replicas' gradients and clips the
sum (``optimizers.ReducedGradientClipAdam``), so the step is the single-device one.

The phase cannot silently hurt: after each epoch the dev split's greedy captions are scored by
CIDEr-D (``dev_scores``: words up to ``<end>``, document frequencies from the dev captions, as
pycocoevalcap takes them), and the weights
of the best epoch are kept: the cross-entropy ones when no SCST epoch beats them. A non-finite
loss stops training (``losses.NonFiniteLossError``). Every epoch ends in a checkpoint in the
backup directory (weights, optimizer, the best so far), so a killed Trainer resumes at the next
epoch, and the cross-entropy phase is not trained again (``run_fn``).
"""

import dataclasses
import json
import math
import os
import sys
import time
from typing import List, Optional, Sequence, TextIO, Tuple

import keras
import numpy as np
import tensorflow as tf

from components import caption_text, example_format
from components import config as config_lib
from components.trainer import cider_d, decoding, dev_scores, inputs, losses
from components.trainer import model as model_lib

STATE_FILE = "scst_state.json"


def caption_tokens(ids: np.ndarray) -> Tuple[int, ...]:
    """A row of ids without ``<start>`` → the ids the reward compares: through the first
    ``<end>``, padding dropped (a caption that never ends: all its ids)."""
    tokens = []
    for token in ids.tolist():
        if token == caption_text.PAD_ID:
            continue
        tokens.append(token)
        if token == caption_text.END_ID:
            break
    return tuple(tokens)


def image_references(target_ids: np.ndarray) -> List[Tuple[int, ...]]:
    """One image's ``[captions, time]`` ids without ``<start>`` → its real captions' tokens
    (all-padding rows, which fill an image up to the batch's captions per image, dropped)."""
    return [tokens for tokens in map(caption_tokens, target_ids) if tokens]


def reference_corpus(file_patterns: Sequence[str], max_caption_length: int) -> List[List[tuple]]:
    """Each image's captions of the split (files) as reward tokens, for document frequencies."""
    return [image_references(rows[:, 1:])
            for rows in inputs.caption_id_rows(list(file_patterns), max_caption_length)]


def advantages(scorer: cider_d.CiderD, sample_ids: np.ndarray, greedy_ids: np.ndarray,
               target_ids: np.ndarray, baseline: str) -> Tuple[np.ndarray, np.ndarray]:
    """``(reward - baseline [images, samples], reward [images, samples])``, float32.

    ``sample_ids [images, samples, time]``; ``greedy_ids [images, time]`` (read with
    ``baseline="greedy"``); ``target_ids [images, captions, time]`` the batch's own captions.
    An image without captions (a filler image of a short batch) gets 0 for both.
    """
    images, samples = sample_ids.shape[:2]
    references = [image_references(rows) for rows in target_ids]
    hypotheses = [[caption_tokens(row) for row in rows] for rows in sample_ids]
    rewards = scorer.scores(hypotheses, references).reshape(images, samples)
    if baseline == "greedy":
        base = scorer.scores([[caption_tokens(row)] for row in greedy_ids], references)
    elif baseline == "sample_mean":
        base = (rewards.sum(axis=1, keepdims=True) - rewards) / max(samples - 1, 1)
    else:
        raise ValueError(f"Unknown SCST baseline {baseline!r}.")
    return (rewards - base).astype(np.float32), rewards.astype(np.float32)


def policy_loss(log_probs: tf.Tensor, sample_ids: tf.Tensor, advantage: tf.Tensor,
                image_has_captions: tf.Tensor) -> tf.Tensor:
    """This replica's part of −(reward − baseline) · log p: ``log_probs [images, samples, time,
    vocabulary]`` (over the allowed ids), ``sample_ids [images, samples, time]`` (padding after
    ``<end>``), ``advantage [images, samples]``. Divided by the sampled ids of the global batch,
    so the replicas' parts sum to the single-device loss."""
    token_log_probs = tf.gather(log_probs, sample_ids, batch_dims=3)
    mask = (tf.cast(tf.not_equal(sample_ids, caption_text.PAD_ID), tf.float32)
            * tf.cast(image_has_captions, tf.float32)[:, tf.newaxis, tf.newaxis])
    tokens = tf.reduce_sum(mask)
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        tokens = context.all_reduce(tf.distribute.ReduceOp.SUM, tokens)
    return -tf.reduce_sum(advantage[..., tf.newaxis] * token_log_probs * mask) / tf.maximum(tokens, 1.0)


class SelfCriticalTrainer:
    """The SCST phase on a trained model (``build_captioning_model``'s), under ``strategy``."""

    def __init__(self, model: keras.Model, strategy: tf.distribute.Strategy,
                 trainer: config_lib.TrainerConfig, max_caption_length: int,
                 train_scorer: cider_d.CiderD, global_rows: int, total_steps: int):
        self.model, self.strategy, self.trainer = model, strategy, trainer
        self.max_length = max_caption_length
        self.train_scorer = train_scorer
        self.vocabulary_size = model.output_shape[-1]
        # trainer.learning_rate's warm-up, cosine decay and batch scaling, at the SCST rate.
        scst_trainer = dataclasses.replace(trainer, learning_rate=trainer.scst_learning_rate)
        peak, _ = model_lib.scaled_learning_rate(scst_trainer, global_rows)
        with strategy.scope():
            self.image_encoder, _ = model_lib.split_model(model)
            self.incremental = model_lib.IncrementalDecoder(model)
            self.sample_model = model_lib.image_major_model(model, trainer.scst_samples)
            optimizer = model_lib.make_optimizer(
                trainer, model_lib.learning_rate_schedule(scst_trainer, total_steps, global_rows))
            self.sample_model.compile(optimizer=optimizer)
            optimizer.build(self.sample_model.trainable_variables)
        self.optimizer = optimizer
        self.peak_learning_rate = peak
        self._train_step = tf.function(self._distributed_step)

    def _reward(self, sample_ids, greedy_ids, target_ids):
        return advantages(self.train_scorer, sample_ids, greedy_ids, target_ids,
                          self.trainer.scst_baseline)

    def _replica_step(self, model_inputs, target_ids, step):
        samples = self.trainer.scst_samples
        image_features = model_inputs[example_format.IMAGE_FEATURES]
        projection = self.image_encoder(image_features, training=False)
        images = tf.shape(projection)[0]
        repeated = tf.repeat(projection, samples, axis=0)
        replica = tf.distribute.get_replica_context().replica_id_in_sync_group
        seed = tf.stack([tf.cast(self.trainer.seed, tf.int32) + 7919 * tf.cast(replica, tf.int32),
                         tf.cast(step, tf.int32) * self.max_length])
        sample_ids, _ = decoding.sample_decode(
            self.incremental.step, repeated, self.incremental.initial_state(repeated),
            self.max_length, self.vocabulary_size, seed)
        sample_ids = tf.reshape(sample_ids, [images, samples, self.max_length - 1])
        if self.trainer.scst_baseline == "greedy":
            greedy_ids, _ = decoding.greedy_decode(
                self.incremental.step, projection, self.incremental.initial_state(projection),
                self.max_length, self.vocabulary_size)
        else:
            greedy_ids = tf.zeros([images, self.max_length - 1], tf.int32)
        advantage, reward = tf.numpy_function(self._reward, [sample_ids, greedy_ids, target_ids],
                                              [tf.float32, tf.float32], stateful=False)
        advantage = tf.ensure_shape(advantage, [None, samples])
        reward = tf.ensure_shape(reward, [None, samples])
        has_captions = tf.reduce_any(tf.not_equal(target_ids, caption_text.PAD_ID), axis=[1, 2])
        input_ids = tf.concat([tf.fill([images, samples, 1], caption_text.START_ID),
                               sample_ids[:, :, :-1]], axis=-1)
        bias = decoding.forbidden_bias(self.vocabulary_size)
        with tf.GradientTape() as tape:
            logits = self.sample_model({example_format.IMAGE_FEATURES: image_features,
                                        model_lib.INPUT_IDS: input_ids}, training=False)
            log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32) + bias, axis=-1)
            loss = policy_loss(log_probs, sample_ids, advantage, has_captions)
            scaled = self.optimizer.scale_loss(loss)
        variables = self.sample_model.trainable_variables
        self.optimizer.apply_gradients(zip(tape.gradient(scaled, variables), variables, strict=True))
        counted = tf.cast(has_captions, tf.float32)
        return loss, tf.reduce_sum(tf.reduce_mean(reward, axis=1) * counted), tf.reduce_sum(counted)

    def _distributed_step(self, model_inputs, target_ids, step):
        per_replica = self.strategy.run(self._replica_step, args=(model_inputs, target_ids, step))
        return tuple(self.strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
                     for value in per_replica)

    def train(self, train_dataset: tf.data.Dataset, steps_per_epoch: int, dev_dataset: tf.data.Dataset,
              dev_steps: int, backup_directory: str, stream: Optional[TextIO] = None) -> dict:
        """Runs the remaining SCST epochs, resuming from ``backup_directory``; leaves the best
        weights in the model. Returns the phase's history (``scst_loss``, ``scst_reward``,
        ``dev_cider`` per epoch; ``dev_cider_before``; ``best_epoch``, 0 for the cross-entropy
        weights)."""
        stream = stream or sys.stdout
        epochs = self.trainer.scst_epochs
        dev_scorer = dev_scores.DevCaptionScorer(self.model, self.max_length, dev_dataset, dev_steps)
        state = _read_state(backup_directory)
        if state is None:
            before = dev_scorer.scores()["cider"]
            state = {"epochs_done": 0, "dev_cider_before": before, "best_dev_cider": before,
                     "best_epoch": 0, "best_weights": _best_weights_file(0), "last_weights": None,
                     "scst_loss": [], "scst_reward": [], "dev_cider": []}
            _save_weights(self.model, backup_directory, state["best_weights"])
            _write_state(backup_directory, state)
        elif state["last_weights"]:
            self.sample_model.load_weights(os.path.join(backup_directory, state["last_weights"]))
        print(f"    self-critical phase: dev CIDEr-D {state['dev_cider_before']:.4f} after "
              f"cross-entropy; {self.trainer.scst_samples} samples per image, "
              f"{self.trainer.scst_baseline} baseline, learning rate {self.peak_learning_rate:.3g}",
              file=stream, flush=True)
        # Each replica gets its share of a batch's images (plain tensors would reach every
        # replica whole: each would sample and reward the whole batch).
        iterator = iter(self.strategy.experimental_distribute_dataset(train_dataset))
        for epoch in range(state["epochs_done"], epochs):
            started = time.monotonic()
            losses_seen, reward_sum, images = [], 0.0, 0.0
            for step in range(steps_per_epoch):
                model_inputs, target_ids = next(iterator)
                loss, rewards, counted = self._train_step(
                    model_inputs, target_ids, tf.constant(epoch * steps_per_epoch + step, tf.int64))
                if not math.isfinite(float(loss)):
                    raise losses.NonFiniteLossError(
                        f"Self-critical epoch {epoch + 1}, step {step + 1}: non-finite loss {float(loss)}; "
                        "no model is written.")
                losses_seen.append(float(loss))
                reward_sum, images = reward_sum + float(rewards), images + float(counted)
            dev = dev_scorer.scores()["cider"]
            state["scst_loss"].append(float(np.mean(losses_seen)))
            state["scst_reward"].append(reward_sum / max(images, 1.0))
            state["dev_cider"].append(dev)
            if dev > state["best_dev_cider"]:
                state["best_dev_cider"], state["best_epoch"] = dev, epoch + 1
                state["best_weights"] = _best_weights_file(epoch + 1)
                _save_weights(self.model, backup_directory, state["best_weights"])
            state["epochs_done"] = epoch + 1
            # With the optimizer's moments (the compiled sample model's weights include them).
            state["last_weights"] = f"scst_epoch{epoch + 1}.weights.h5"
            self.sample_model.save_weights(os.path.join(backup_directory, state["last_weights"]))
            _write_state(backup_directory, state)
            print(f"    SCST epoch {epoch + 1}/{epochs}: mean sample reward "
                  f"{state['scst_reward'][-1]:.4f}, dev CIDEr-D {dev:.4f} "
                  f"({time.monotonic() - started:.1f} s)", file=stream, flush=True)
        self.model.load_weights(os.path.join(backup_directory, state["best_weights"]))
        kept = ("the cross-entropy weights" if state["best_epoch"] == 0
                else f"SCST epoch {state['best_epoch']}'s weights")
        print(f"    self-critical phase: kept {kept} (dev CIDEr-D {state['best_dev_cider']:.4f})",
              file=stream, flush=True)
        return {name: state[name] for name in (
            "scst_loss", "scst_reward", "dev_cider", "dev_cider_before", "best_epoch")}


def _best_weights_file(epoch: int) -> str:
    return f"scst_best_epoch{epoch}.weights.h5"


def _save_weights(model: keras.Model, directory: str, name: str) -> None:
    tf.io.gfile.makedirs(directory)
    model.save_weights(os.path.join(directory, name), overwrite=True)


def _read_state(directory: str) -> Optional[dict]:
    path = os.path.join(directory, STATE_FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as stream:
        return json.load(stream)


def _write_state(directory: str, state: dict) -> None:
    """Replaces the state file after the weights it names were written (each epoch's under its
    own name: a kill before the state is replaced leaves the old state naming old, whole
    files), then removes the weights it no longer names."""
    temporary = os.path.join(directory, STATE_FILE + ".tmp")
    with tf.io.gfile.GFile(temporary, "w") as stream:
        json.dump(state, stream)
    tf.io.gfile.rename(temporary, os.path.join(directory, STATE_FILE), overwrite=True)
    for path in tf.io.gfile.glob(os.path.join(directory, "scst_*.weights.h5")):
        if os.path.basename(path) not in (state["best_weights"], state["last_weights"]):
            tf.io.gfile.remove(path)
