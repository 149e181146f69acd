"""TFX Trainer entry point: ``run_fn(fn_args)`` trains the decoder under MirroredStrategy.

Reads the vocabulary, GloVe matrix and caption facts from the Transform output,
builds the model from the config (``custom_config["pipeline_config"]``), and
trains with:

* ``tf.distribute.MirroredStrategy`` over all visible GPUs, or over the CPU
  devices when there is none (one, unless tests split the CPU into two logical
  devices), on image-major batches (``inputs``: images with all their captions;
  ``model.image_major_model``: the image encoder once per image), a whole number
  of images per replica;
* ``BackupAndRestore`` in a directory derived from the inputs, the config and
  the code (``custom_config["backup_root"]``), not from the execution's working
  directory, so a re-execution after a crash resumes where training stopped;
* ``TerminateOnNaN`` (and ``run_fn`` then fails instead of exporting a broken
  model), ``EarlyStopping`` on dev loss (watched from ``early_stopping_start_fraction`` of the
  epochs on) with the best weights restored,
  ``TensorBoard`` under ``model_run_dir``, a line per epoch and, on a terminal, a bar over the
  whole training (``EpochProgress``).

Writes the self-contained serving SavedModel (``components.trainer.export``: JPEG
bytes → captions) to ``serving_model_dir``, with the caption facts in its
``assets.extra/``, and the Keras model ``decoder.keras`` and ``history.json``
(loss, dev loss, accuracy per epoch) to ``model_run_dir``.
"""

import contextlib
import hashlib
import json
import math
import os
import re
import sys
import time
from typing import List, NamedTuple, Optional, TextIO

import keras
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
from absl import logging

from components import config as config_lib
from components import cpu_bfloat16, example_format, terminal
from components.trainer import cider_d, dev_scores, export, inputs, self_critical
from components.trainer import model as model_lib
from components.trainer.losses import NonFiniteLossError
from components.transform import preprocessing

DECODER_FILE = "decoder.keras"


# Keras divides each replica's ``sum_over_batch_size`` loss by the number of replicas since 3.8;
# losses.MaskedCaptionLoss relies on it. An older Keras (the TFX 1.16 image's own) would sum the
# replicas' gradients: N times too large on N GPUs, and clipped differently.
MIN_KERAS_VERSION = (3, 8)


# custom_config key: the GPUs the machine was asked for (the Vertex AI training job's worker pool).
REQUIRED_GPUS_KEY = "required_gpus"


def check_required_gpus(required: int, visible: Optional[int] = None) -> None:
    """Fails when fewer GPUs are visible than the job asked for: a GPU job that silently
    trained on the CPU would take days and look like it worked."""
    if visible is None:
        visible = len(tf.config.list_physical_devices("GPU"))
    if visible < required:
        raise RuntimeError(
            f"The training job asked for {required} GPU(s) (cloud.trainer_accelerator_count) but "
            f"TensorFlow sees {visible}: check the machine's accelerators and the image's CUDA "
            f"libraries (nvidia-smi; python -c \"import tensorflow as tf; "
            f"print(tf.config.list_physical_devices('GPU'))\"), or set "
            f"cloud.trainer_accelerator_count={visible} to train without them.")


def check_keras_version(version: str = keras.__version__) -> None:
    """Refuses a Keras older than :data:`MIN_KERAS_VERSION`, naming both versions."""
    found = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    if found < MIN_KERAS_VERSION:
        needed = ".".join(map(str, MIN_KERAS_VERSION))
        raise RuntimeError(
            f"Keras {version} is older than {needed}, the first that divides each replica's loss "
            f"by the number of replicas, which the Trainer's loss relies on. Install the pinned "
            f"Keras (constraints.txt; the Dockerfile does) instead of Keras {version}.")


def make_strategy() -> tf.distribute.MirroredStrategy:
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        return tf.distribute.MirroredStrategy(devices=[device.name for device in gpus])
    # On CPU devices, collective all-reduce keys clash between two strategies built in
    # one process (shape mismatch in the collective instance); reduce on one device.
    return tf.distribute.MirroredStrategy(
        devices=[device.name for device in tf.config.list_logical_devices("CPU")],
        cross_device_ops=tf.distribute.ReductionToOneDevice())


def backup_dir(backup_root: str, train_files: List[str], transform_output: str, config_json: str,
               code_fingerprint: str) -> str:
    """The same directory for the same inputs, config and code, whatever the execution id."""
    digest = hashlib.sha256("\n".join(
        sorted(train_files) + [transform_output, config_json, code_fingerprint]).encode("utf-8"))
    return os.path.join(backup_root, digest.hexdigest()[:16])


class EpochProgress(keras.callbacks.Callback):
    """Logs every epoch's metrics and prints one line per epoch; on a terminal, the lines print
    above a bar over the whole training (steps done, epoch, running loss, time left if every
    epoch runs), instead of Keras' bar, which knows one epoch only and leaves two lines each."""

    def __init__(self, epochs: int, steps_per_epoch: int, stream: Optional[TextIO] = None):
        super().__init__()
        self._epochs, self._steps = epochs, steps_per_epoch
        self._stream = stream or sys.stdout
        self._on_terminal = self._stream.isatty()
        self._bar = None
        self._epoch, self._started = 0, 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch, self._started = epoch, time.monotonic()
        if self._on_terminal and self._bar is None:  # a resumed training starts past 0
            self._bar = terminal.progress_bar(self._stream, self._epochs * self._steps, "Trainer",
                                              "steps", initial=epoch * self._steps)

    def on_train_batch_end(self, batch, logs=None):
        if self._bar is None:
            return
        loss = (logs or {}).get("loss")
        self._bar.set_postfix_str(f"epoch {self._epoch + 1}/{self._epochs}" + (
            f", loss {float(loss):.4f}" if loss is not None else ""), refresh=False)
        self._bar.update(self._epoch * self._steps + batch + 1 - self._bar.n)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        logging.info("epoch %d: %s", epoch + 1,
                     ", ".join(f"{name} {float(value):.4f}" for name, value in sorted(logs.items())))
        names = (("loss", "loss"), ("val_loss", "dev loss"), ("val_masked_accuracy", "dev token accuracy"),
                 ("val_bleu4", "dev BLEU-4"), ("val_cider", "dev CIDEr-D"))
        metrics = ", ".join(f"{label} {float(logs[name]):.4f}" for name, label in names if name in logs)
        line = f"    epoch {epoch + 1}/{self._epochs}: {metrics} ({time.monotonic() - self._started:.1f} s)"
        if self._bar is not None:
            self._bar.refresh()  # the epoch's last step, whatever tqdm's redraw interval skipped
            self._bar.write(line, file=self._stream)
        else:
            print(line, file=self._stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def on_train_end(self, logs=None):
        self.close()


@contextlib.contextmanager
def op_determinism(enabled: bool):
    """TensorFlow's op determinism inside the block when ``enabled``, as it was after it: the
    LocalDagRunner runs every component in one process, and the setting is process-wide."""
    # is_/disable_op_determinism are not exported under tf.config; enable_op_determinism is.
    from tensorflow.python.framework import config as framework_config

    was_enabled = framework_config.is_op_determinism_enabled()
    if enabled and not was_enabled:
        tf.config.experimental.enable_op_determinism()
    try:
        yield
    finally:
        if enabled and not was_enabled:
            framework_config.disable_op_determinism()


def train(pipeline_config: config_lib.PipelineConfig, train_files: List[str], eval_files: List[str],
          transform_output_dir: str, model_run_dir: str, serving_model_dir: str,
          backup_directory: str, extra_callbacks=()) -> dict:
    """Trains and writes the model; returns what ``history.json`` holds: the history per epoch
    and ``exported_weights`` (the phase and 1-based epoch of the exported weights)."""
    with op_determinism(pipeline_config.trainer.deterministic):
        return _train(pipeline_config, train_files, eval_files, transform_output_dir, model_run_dir,
                      serving_model_dir, backup_directory, extra_callbacks)


# trainer.select_on → (the epoch log's key, whether higher is better).
SELECTION_LOGS = {"dev_loss": ("val_loss", "min"), "dev_bleu4": ("val_bleu4", "max"),
                  "dev_cider": ("val_cider", "max")}


def early_stopping(trainer: config_lib.TrainerConfig) -> keras.callbacks.EarlyStopping:
    """Stops after ``early_stopping_patience`` epochs without a better ``trainer.select_on``
    (dev loss, or dev BLEU-4 / CIDEr-D of greedy captions), watching from
    ``early_stopping_start_fraction`` of the epochs on, and restores the best watched weights."""
    monitor, mode = SELECTION_LOGS[trainer.select_on]
    return keras.callbacks.EarlyStopping(
        monitor=monitor, mode=mode, patience=trainer.early_stopping_patience,
        restore_best_weights=True,
        start_from_epoch=int(trainer.epochs * trainer.early_stopping_start_fraction))


def _train(pipeline_config, train_files, eval_files, transform_output_dir, model_run_dir,
           serving_model_dir, backup_directory, extra_callbacks) -> dict:
    trainer = pipeline_config.trainer
    # Before any dataset or layer is built: tf.data's shuffle seeds and the initial weights
    # then depend on the config alone, not on what the process ran before.
    keras.utils.set_random_seed(trainer.seed)
    words, matrix, facts = preprocessing.read_transform_assets(
        tft.TFTransformOutput(transform_output_dir))
    max_caption_length = facts["max_caption_length"]
    fine_tune = trainer.fine_tune_embedding or facts["embedding_trainable_by_default"]
    if facts["embedding_trainable_by_default"] and not trainer.fine_tune_embedding:
        logging.warning("Transform had no GloVe file: training the randomly initialised embedding.")

    strategy = make_strategy()
    batches = _batches(trainer, train_files, eval_files, max_caption_length,
                       strategy.num_replicas_in_sync)
    peak_learning_rate, warmup_steps = model_lib.scaled_learning_rate(trainer, batches.global_rows)
    logging.info("Training on %d replica(s) %s: batches of %d images x %d caption rows, "
                 "vocabulary %d ids (%d words); learning rate %.3g after %d warm-up steps "
                 "(trainer.learning_rate %.3g for %d rows, scaled to %d x %d rows); mixed "
                 "precision %s.", strategy.num_replicas_in_sync, strategy.extended.worker_devices,
                 batches.images_per_batch, batches.captions_per_image, matrix.shape[0], len(words),
                 peak_learning_rate, warmup_steps, trainer.learning_rate,
                 trainer.learning_rate_batch_size, strategy.num_replicas_in_sync,
                 batches.per_replica_rows,
                 "on" if model_lib.mixed_precision_enabled(trainer.mixed_precision) else "off")
    feature_mean, feature_variance = inputs.feature_statistics(train_files, max_caption_length)
    logging.info("Image features standardised per channel: mean %.3f, std %.3f on average over "
                 "the channels.", feature_mean.mean(), np.sqrt(feature_variance).mean())
    with strategy.scope():
        model = model_lib.build_captioning_model(
            trainer, matrix.shape[0], matrix, fine_tune_embedding=fine_tune,
            feature_statistics=(feature_mean, feature_variance))
        # Trained image-major (the encoder once per image); saved and exported caption-major.
        training_model = model_lib.image_major_model(model, batches.captions_per_image)
        model_lib.compile_model(training_model, trainer,
                                total_steps=batches.steps_per_epoch * trainer.epochs,
                                global_batch_size=batches.global_rows)

    scst_directory = backup_directory.rstrip("/") + SELF_CRITICAL_BACKUP_SUFFIX
    history = _cross_entropy_phase(trainer, model, training_model, max_caption_length,
                                   batches.train_dataset, batches.eval_dataset,
                                   batches.steps_per_epoch, batches.validation_steps,
                                   backup_directory, scst_directory,
                                   os.path.join(model_run_dir, "tensorboard"), extra_callbacks)
    exported_weights = {"phase": "cross_entropy", "epoch": history.pop("best_epoch")}
    if trainer.scst_epochs:
        scst = self_critical.SelfCriticalTrainer(
            model, strategy, trainer, max_caption_length,
            cider_d.CiderD(self_critical.reference_corpus(train_files, max_caption_length)),
            global_rows=batches.images_per_batch * trainer.scst_samples,
            total_steps=batches.steps_per_epoch * trainer.scst_epochs)
        with cpu_bfloat16.rewrite(_bfloat16(trainer)):
            scst_history = scst.train(batches.train_dataset, batches.steps_per_epoch,
                                      batches.eval_dataset, batches.validation_steps, scst_directory)
        history.update(scst_history)
        if scst_history["best_epoch"]:
            exported_weights = {"phase": "self_critical", "epoch": scst_history["best_epoch"]}

    history["exported_weights"] = exported_weights
    _write_model(model, history, facts, pipeline_config, transform_output_dir, model_run_dir,
                 serving_model_dir)
    if tf.io.gfile.exists(scst_directory):
        tf.io.gfile.rmtree(scst_directory)
    return history


class _Batches(NamedTuple):
    """The datasets and their sizes: whole images per replica, every image's captions."""
    train_dataset: tf.data.Dataset
    eval_dataset: tf.data.Dataset
    steps_per_epoch: int
    validation_steps: int
    images_per_batch: int
    captions_per_image: int
    per_replica_rows: int
    global_rows: int


def _batches(trainer, train_files, eval_files, max_caption_length, replicas) -> _Batches:
    on_gpus = bool(tf.config.list_logical_devices("GPU"))
    per_replica_rows = trainer.gpu_per_replica_batch_size if on_gpus else trainer.per_replica_batch_size
    train_images, train_most_captions = inputs.caption_counts(train_files, max_caption_length)
    eval_images, eval_most_captions = inputs.caption_counts(eval_files, max_caption_length)
    captions_per_image = max(train_most_captions, eval_most_captions, 1)
    images_per_batch = inputs.images_per_batch(per_replica_rows, captions_per_image, replicas)
    # fit is told the exact steps of one pass over repeated datasets: left to find the end of
    # the data itself, the replicas raced for it, and the loss Keras reported for an epoch
    # counted the last step or not (measured: identical weights and accuracies, losses off by
    # one step's share, so EarlyStopping could restore other weights).
    train_dataset = inputs.make_dataset(train_files, max_caption_length, images_per_batch,
                                        captions_per_image, shuffle=True, seed=trainer.seed,
                                        cache=trainer.cache_dataset, repeat=True)
    eval_dataset = inputs.make_dataset(eval_files, max_caption_length, images_per_batch,
                                       captions_per_image, shuffle=False,
                                       cache=trainer.cache_dataset, repeat=True)
    return _Batches(train_dataset, eval_dataset,
                    steps_per_epoch=max(1, math.ceil(train_images / images_per_batch)),
                    validation_steps=max(1, math.ceil(eval_images / images_per_batch)),
                    images_per_batch=images_per_batch, captions_per_image=captions_per_image,
                    per_replica_rows=per_replica_rows, global_rows=per_replica_rows * replicas)


def _write_model(model, history, facts, pipeline_config, transform_output_dir, model_run_dir,
                 serving_model_dir) -> None:
    """history.json and the Keras model in the run folder; the serving SavedModel with the
    caption facts in its ``assets.extra/``."""
    tf.io.gfile.makedirs(model_run_dir)
    with tf.io.gfile.GFile(os.path.join(model_run_dir, example_format.HISTORY_FILE), "w") as stream:
        json.dump(history, stream, indent=2)
    model.save(os.path.join(model_run_dir, DECODER_FILE))
    export.export_saved_model(model, transform_output_dir, pipeline_config, serving_model_dir)
    extra_dir = os.path.join(serving_model_dir, export.ASSETS_EXTRA_DIR)
    tf.io.gfile.makedirs(extra_dir)
    with tf.io.gfile.GFile(os.path.join(extra_dir, example_format.FACTS_FILE), "w") as stream:
        json.dump(facts, stream, indent=2, sort_keys=True)
    logging.info("Serving SavedModel written to %s", serving_model_dir)


# The self-critical phase's checkpoints (and the finished cross-entropy phase's weights) sit
# beside the cross-entropy backup directory, which Keras' BackupAndRestore deletes when its fit
# ends: a Trainer killed during the self-critical phase resumes there, not at epoch 1.
SELF_CRITICAL_BACKUP_SUFFIX = "-self-critical"
CROSS_ENTROPY_WEIGHTS = "cross_entropy.weights.h5"
CROSS_ENTROPY_HISTORY = "cross_entropy_history.json"


def _bfloat16(trainer: config_lib.TrainerConfig) -> bool:
    return cpu_bfloat16.resolve(trainer.onednn_bfloat16,
                                gpu_visible=bool(tf.config.list_logical_devices("GPU")))


def _cross_entropy_phase(trainer, model, training_model, max_caption_length, train_dataset,
                         eval_dataset, steps_per_epoch, validation_steps, backup_directory,
                         scst_directory, tensorboard_dir, extra_callbacks) -> dict:
    """``fit`` with the callbacks; the history per epoch plus ``best_epoch`` (1-based) of the
    weights left in the model. With a self-critical phase to follow, a finished phase is saved in
    ``scst_directory`` and a re-execution takes it from there instead of training again."""
    finished_history = os.path.join(scst_directory, CROSS_ENTROPY_HISTORY)
    if trainer.scst_epochs and tf.io.gfile.exists(finished_history):
        model.load_weights(os.path.join(scst_directory, CROSS_ENTROPY_WEIGHTS))
        with tf.io.gfile.GFile(finished_history) as stream:
            history = json.load(stream)
        logging.info("Cross-entropy phase already finished (%s): not trained again.", scst_directory)
        return history
    progress = EpochProgress(trainer.epochs, steps_per_epoch)
    stopping = early_stopping(trainer)
    # Dev captions are decoded each epoch when selection needs them, or when a self-critical
    # phase follows, so that its dev CIDEr-D curve starts at epoch 1.
    measures_dev_captions = trainer.select_on != "dev_loss" or trainer.scst_epochs > 0
    dev_metrics = [dev_scores.DevCaptionMetrics(dev_scores.DevCaptionScorer(
        model, max_caption_length, eval_dataset, validation_steps))] if measures_dev_captions else []
    callbacks = [
        keras.callbacks.BackupAndRestore(backup_directory),
        keras.callbacks.TerminateOnNaN(),
        *dev_metrics,  # before EarlyStopping, which reads what it adds to the epoch's logs
        stopping,
        keras.callbacks.TensorBoard(log_dir=tensorboard_dir),
        progress,
        *extra_callbacks,
    ]
    bfloat16 = _bfloat16(trainer)
    logging.info("oneDNN bfloat16 rewrite of the train step: %s (trainer.onednn_bfloat16=%s).",
                 "on" if bfloat16 else "off", trainer.onednn_bfloat16)
    with cpu_bfloat16.rewrite(bfloat16):
        try:
            fitted = training_model.fit(
                train_dataset, validation_data=eval_dataset, epochs=trainer.epochs,
                steps_per_epoch=steps_per_epoch, validation_steps=validation_steps,
                callbacks=callbacks, verbose=0)
        finally:
            progress.close()  # a training that raised leaves no bar behind its error
    losses = fitted.history.get("loss", [])
    if not losses or not np.all(np.isfinite(losses)):
        raise NonFiniteLossError(f"Training stopped on a non-finite loss; losses per epoch: {losses}")
    history = {"epoch": [int(epoch) for epoch in fitted.epoch],
               **{name: [float(value) for value in values] for name, values in fitted.history.items()},
               # The epoch whose weights EarlyStopping left in the model (its epochs count from
               # the first of the training, a resumed one's too; a resumed fit that watched no
               # epoch itself keeps its last one's).
               "best_epoch": int(stopping.best_epoch if stopping.best_weights is not None
                                 else fitted.epoch[-1]) + 1}
    if trainer.scst_epochs:
        tf.io.gfile.makedirs(scst_directory)
        model.save_weights(os.path.join(scst_directory, CROSS_ENTROPY_WEIGHTS), overwrite=True)
        with tf.io.gfile.GFile(finished_history, "w") as stream:
            json.dump(history, stream)
    return history


def run_fn(fn_args) -> None:
    """TFX Trainer entry point (``Trainer(run_fn="components.trainer.run_fn.run_fn")``)."""
    check_keras_version()
    custom_config = fn_args.custom_config or {}
    check_required_gpus(int(custom_config.get(REQUIRED_GPUS_KEY, 0)))
    config_json = custom_config["pipeline_config"]
    pipeline_config = config_lib.PipelineConfig.from_json(config_json)
    backup_root = custom_config.get("backup_root") or os.path.join(fn_args.model_run_dir, "backup")
    train(pipeline_config, fn_args.train_files, fn_args.eval_files, fn_args.transform_output,
          fn_args.model_run_dir, fn_args.serving_model_dir,
          backup_dir(backup_root, fn_args.train_files, fn_args.transform_output, config_json,
                     custom_config.get("code_fingerprint", "")))
