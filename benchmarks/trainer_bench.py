"""Train-step cost of the original model (400,004-word GloVe vocabulary) vs ours, per caption.

The original is rebuilt from the question's ``model_build()`` (seed file in
``../shared/seed/``): frozen Embedding(400004, 300) with a random matrix,
unmasked; LSTM(512) → attention → LSTM(256) → Dense(400004) clipped to
[-10, 10]; loss ``SparseCategoricalCrossentropy(from_logits=False,
ignore_class=0)``; Adam(1e-4, clipnorm=1); the question's batch of 8 captions
of 37 tokens with 49×2048 features each. Ours is ``build_captioning_model``
with the real Flickr8k vocabulary at the default threshold, trained two ways
on the same 40 captions (8 images × 5 captions, Flickr8k's count): caption-major
(each caption a row with its image's features, the encoder once per caption)
and image-major (``image_major_model``: the encoder once per image, what the
Trainer runs), in float32 and under oneDNN's bfloat16 rewrite (the Trainer's
default on CPUs with native bfloat16). Times are per caption. Each variant runs in its own process so
peak memory (max RSS) is its own.

``trainer.steps_per_execution`` is measured through ``fit`` (what the Trainer calls) on a
repeated in-memory dataset of the same batches: 1 step per call into the graph against
:data:`STEPS_PER_EXECUTION_MEASURED`, the median of ``FIT_ROUNDS`` epochs of ``FIT_STEPS`` steps.
"""

import json
import resource
import subprocess
import sys
import time

import numpy as np

BATCH, LENGTH = 8, 37  # the question's batch: 8 captions
IMAGES, CAPTIONS_PER_IMAGE = 8, 5  # ours: 8 images with Flickr8k's 5 captions each
ORIGINAL_VOCABULARY = 400_004
OUR_VOCABULARY = 2_539  # real Flickr8k train split, frequency threshold 5 (vocabulary bench)
WARMUP_STEPS, MEASURED_STEPS = 2, 8
FIT_STEPS, FIT_ROUNDS = 16, 3
STEPS_PER_EXECUTION_MEASURED = 8


def _build_original():
    import keras
    from keras.layers import LSTM, Dense, Embedding, LayerNormalization, MultiHeadAttention

    emb_matrix = np.random.RandomState(0).normal(0, 0.4, size=(ORIGINAL_VOCABULARY, 300)).astype(
        np.float32)
    image = keras.Input((49, 2048))
    input_caption = keras.Input((None,))
    x_image = Dense(1024, activation="relu")(image)
    x_image = Dense(512, activation="relu")(x_image)
    embedding_layer = Embedding(ORIGINAL_VOCABULARY, 300, trainable=False, mask_zero=False)
    embedding_layer.build((None,))
    embedding_layer.set_weights([emb_matrix])
    x_caption = embedding_layer(input_caption)
    x_caption = LSTM(512, return_sequences=True)(x_caption)
    attention = MultiHeadAttention(num_heads=1, key_dim=64)(query=x_caption, value=x_image)
    x = keras.layers.Add()([x_caption, attention])
    x = LayerNormalization(epsilon=1e-6)(x)
    x = keras.layers.Dropout(0.3)(x)
    x = LSTM(256, return_sequences=True)(x)
    x = keras.layers.Dropout(0.3)(x)
    logits = Dense(ORIGINAL_VOCABULARY, activation="linear", name="logits_layer")(x)
    logits = keras.layers.Lambda(lambda t: keras.ops.clip(t, -10.0, 10.0))(logits)
    model = keras.Model(inputs=[image, input_caption], outputs=logits)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=1e-4, clipnorm=1.0),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=False, ignore_class=0))
    return model, lambda features, ids: [features, ids], ORIGINAL_VOCABULARY


def _build_ours(captions_per_image=None):
    from components import config as config_lib
    from components.trainer import model as model_lib

    trainer = config_lib.TrainerConfig()
    matrix = np.random.RandomState(0).normal(0, 0.4, size=(OUR_VOCABULARY, 300)).astype(np.float32)
    model = model_lib.build_captioning_model(trainer, OUR_VOCABULARY, matrix)
    if captions_per_image:
        model = model_lib.image_major_model(model, captions_per_image)
    model_lib.compile_model(model, trainer, total_steps=1000, learning_rate=trainer.learning_rate)
    return model, lambda features, ids: {"image_features": features, "input_ids": ids}, OUR_VOCABULARY


def training_flops_per_caption(trainer, vocabulary_size: int, input_tokens: int,
                               captions_per_image: int, embedding_dim: int = 300) -> dict:
    """Floating-point operations of one caption's train step, counted from the layer shapes
    (a multiply-add is 2): the image encoder once per image, shared by its captions; per input
    token the first LSTM, the attention (its key and value projections of the 49 image
    positions once per caption row), the second LSTM and the logits. Training is taken as 3x
    the forward pass (the backward pass ~2x), the usual estimate; element-wise ops, the loss and
    the optimizer are left out. TensorFlow's graph profiler cannot count this: it counts a
    while-loop body (the LSTMs' time loop on CPU) once, not once per token."""
    positions, depth = 49, 2048
    encoder, width = 0, depth
    for units in trainer.image_dense_units:
        encoder += 2 * positions * width * units
        width = units
    attention_width = trainer.attention_heads * trainer.attention_key_dim
    first, second = trainer.lstm_units, trainer.second_lstm_units
    per_token = {
        "caption_lstm": 2 * 4 * first * (embedding_dim + first),
        "attention": (2 * first * attention_width  # query projection
                      + 2 * 2 * positions * attention_width  # scores and weighted sum
                      + 2 * attention_width * first),  # output projection
        "decoder_lstm": 2 * 4 * second * (first + second),
        "logits": 2 * second * vocabulary_size,
    }
    forward = (encoder / captions_per_image + 2 * 2 * positions * width * attention_width
               + input_tokens * sum(per_token.values()))
    return {"forward_flops": forward, "training_flops": 3 * forward,
            "encoder_flops_per_image": encoder, "flops_per_token": per_token}


# variant → (builder, images per step, captions per image; caption-major repeats the features)
VARIANTS = {
    "original": (_build_original, BATCH, 1),
    "ours_caption_major": (_build_ours, IMAGES * CAPTIONS_PER_IMAGE, 1),
    "ours_image_major": (lambda: _build_ours(CAPTIONS_PER_IMAGE), IMAGES, CAPTIONS_PER_IMAGE),
    # The Trainer's default on CPUs with native bfloat16 (trainer.onednn_bfloat16=auto).
    "ours_image_major_bfloat16": (lambda: _build_ours(CAPTIONS_PER_IMAGE), IMAGES, CAPTIONS_PER_IMAGE),
}


def measure(variant: str) -> dict:
    import keras

    from components import cpu_bfloat16

    keras.utils.set_random_seed(0)
    builder, images, captions_per_image = VARIANTS[variant]
    model, to_inputs, vocabulary = builder()
    rng = np.random.RandomState(1)
    step_times, step_losses = [], []
    for step in range(WARMUP_STEPS + MEASURED_STEPS):
        features = np.abs(rng.normal(size=(images, 49, 2048))).astype(np.float32)
        ids = rng.randint(4, vocabulary, size=(images, captions_per_image, LENGTH + 1))
        for image in range(images):
            for caption in range(captions_per_image):
                ids[image, caption, rng.randint(10, LENGTH):] = 0
        if captions_per_image == 1:
            ids = ids[:, 0]
        start = time.perf_counter()
        with cpu_bfloat16.rewrite(variant.endswith("bfloat16")):
            loss = model.train_on_batch(to_inputs(features, ids[..., :-1]), ids[..., 1:])
        elapsed = time.perf_counter() - start
        if step >= WARMUP_STEPS:
            step_times.append(elapsed)
            step_losses.append(float(np.asarray(loss).reshape(-1)[0]))
    captions = images * captions_per_image
    return {
        "variant": variant,
        "vocabulary": vocabulary,
        "captions_per_step": captions,
        "parameters": int(model.count_params()),
        "trainable_parameters": int(sum(np.prod(w.shape) for w in model.trainable_weights)),
        "median_step_s": float(np.median(step_times)),
        "ms_per_caption": round(1000 * float(np.median(step_times)) / captions, 2),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "non_finite_losses": int(np.sum(~np.isfinite(step_losses))),
    }


def measure_fit(steps_per_execution: int) -> dict:
    """Image-major training through ``fit`` with ``steps_per_execution`` steps per graph call."""
    import dataclasses

    import keras
    import tensorflow as tf

    from components import config as config_lib
    from components.trainer import model as model_lib

    keras.utils.set_random_seed(0)
    trainer = dataclasses.replace(config_lib.TrainerConfig(), steps_per_execution=steps_per_execution,
                                  onednn_bfloat16="off")
    matrix = np.random.RandomState(0).normal(0, 0.4, size=(OUR_VOCABULARY, 300)).astype(np.float32)
    model = model_lib.image_major_model(
        model_lib.build_captioning_model(trainer, OUR_VOCABULARY, matrix), CAPTIONS_PER_IMAGE)
    model_lib.compile_model(model, trainer, total_steps=1000, learning_rate=trainer.learning_rate)
    rng = np.random.RandomState(1)
    features = np.abs(rng.normal(size=(IMAGES, 49, 2048))).astype(np.float32)
    ids = rng.randint(4, OUR_VOCABULARY, size=(IMAGES, CAPTIONS_PER_IMAGE, LENGTH + 1))
    dataset = tf.data.Dataset.from_tensors(
        ({"image_features": features, "input_ids": ids[..., :-1]}, ids[..., 1:])).repeat()
    model.fit(dataset, steps_per_epoch=FIT_STEPS, epochs=1, verbose=0)  # tracing
    epoch_times = []
    for _ in range(FIT_ROUNDS):
        started = time.perf_counter()
        model.fit(dataset, steps_per_epoch=FIT_STEPS, epochs=1, verbose=0)
        epoch_times.append(time.perf_counter() - started)
    return {"variant": f"fit_steps_per_execution_{steps_per_execution}",
            "ms_per_caption": round(1000 * float(np.median(epoch_times)) / (
                FIT_STEPS * IMAGES * CAPTIONS_PER_IMAGE), 2)}


def _in_process(argument: str) -> dict:
    completed = subprocess.run([sys.executable, "-m", "benchmarks.trainer_bench", argument],
                               capture_output=True, text=True, check=True)
    return json.loads(completed.stdout.strip().splitlines()[-1])


def _achieved_flops(image_major: dict, image_major_bf16: dict) -> dict:
    """The image-major step's counted work per caption and the rate the CPU ran it at."""
    from components import config as config_lib

    counted = training_flops_per_caption(config_lib.TrainerConfig(), OUR_VOCABULARY, LENGTH,
                                         CAPTIONS_PER_IMAGE)
    gflops = counted["training_flops"] / 1e9
    return {"training_gflops_per_caption": round(gflops, 3),
            "achieved_gflops_per_s_float32": round(gflops / (image_major["ms_per_caption"] / 1000), 1),
            "achieved_gflops_per_s_bfloat16": round(
                gflops / (image_major_bf16["ms_per_caption"] / 1000), 1)}


def bench_trainer() -> dict:
    results = {variant: _in_process(variant) for variant in VARIANTS}
    fit_one, fit_many = (_in_process(f"fit:{steps}") for steps in (1, STEPS_PER_EXECUTION_MEASURED))
    original = results["original"]
    caption_major, image_major = results["ours_caption_major"], results["ours_image_major"]
    image_major_bf16 = results["ours_image_major_bfloat16"]
    return {
        "name": f"trainer: one train step per caption, {LENGTH} tokens, 49x2048 features (CPU)",
        "rows": list(results.values()),
        "per_caption_speedup_vs_original": round(
            original["ms_per_caption"] / image_major["ms_per_caption"], 1),
        "per_caption_speedup_bfloat16_vs_original": round(
            original["ms_per_caption"] / image_major_bf16["ms_per_caption"], 1),
        "bfloat16_vs_float32_image_major": round(
            image_major["ms_per_caption"] / image_major_bf16["ms_per_caption"], 2),
        "per_caption_speedup_caption_major_vs_original": round(
            original["ms_per_caption"] / caption_major["ms_per_caption"], 1),
        "image_major_vs_caption_major": round(
            caption_major["ms_per_caption"] / image_major["ms_per_caption"], 2),
        "parameter_reduction": round(original["parameters"] / image_major["parameters"], 1),
        "peak_memory_reduction": round(original["peak_rss_mb"] / image_major["peak_rss_mb"], 1),
        "our_non_finite_losses": sum(row["non_finite_losses"] for name, row in results.items()
                                     if name != "original"),
        "fit_rows": [fit_one, fit_many],
        **_achieved_flops(image_major, image_major_bf16),
        "steps_per_execution_speedup": round(fit_one["ms_per_caption"] / fit_many["ms_per_caption"], 3),
    }


if __name__ == "__main__":
    if sys.argv[1].startswith("fit:"):
        print(json.dumps(measure_fit(int(sys.argv[1].split(":", 1)[1]))))
    else:
        print(json.dumps(measure(sys.argv[1])))
