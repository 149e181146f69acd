"""Train-step cost of the original model (400,004-word GloVe vocabulary) vs ours.

The original is rebuilt from the question's ``model_build()`` (seed file in
``../shared/seed/``): frozen Embedding(400004, 300) with a random matrix,
unmasked; LSTM(512) → attention → LSTM(256) → Dense(400004) clipped to
[-10, 10]; loss ``SparseCategoricalCrossentropy(from_logits=False,
ignore_class=0)``; Adam(1e-4, clipnorm=1). Ours is
``build_captioning_model`` with the real Flickr8k vocabulary at the default
threshold. Same batch shape as the question: 8 captions of 37 tokens, 49×2048
features. Each variant runs in its own process so peak memory (max RSS) is its
own.
"""

import json
import resource
import subprocess
import sys
import time

import numpy as np

BATCH, LENGTH = 8, 37
ORIGINAL_VOCABULARY = 400_004
OUR_VOCABULARY = 2_539  # real Flickr8k train split, frequency threshold 5 (vocabulary bench)
WARMUP_STEPS, MEASURED_STEPS = 2, 8


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


def _build_ours():
    from components import config as config_lib
    from components.trainer import model as model_lib

    trainer = config_lib.TrainerConfig()
    matrix = np.random.RandomState(0).normal(0, 0.4, size=(OUR_VOCABULARY, 300)).astype(np.float32)
    model = model_lib.build_captioning_model(trainer, OUR_VOCABULARY, matrix)
    model_lib.compile_model(model, trainer, total_steps=1000, learning_rate=trainer.learning_rate)
    return model, lambda features, ids: {"image_features": features, "input_ids": ids}, OUR_VOCABULARY


def measure(variant: str) -> dict:
    import keras

    keras.utils.set_random_seed(0)
    model, to_inputs, vocabulary = {"original": _build_original, "ours": _build_ours}[variant]()
    rng = np.random.RandomState(1)
    step_times, step_losses = [], []
    for step in range(WARMUP_STEPS + MEASURED_STEPS):
        features = np.abs(rng.normal(size=(BATCH, 49, 2048))).astype(np.float32)
        ids = rng.randint(4, vocabulary, size=(BATCH, LENGTH + 1))
        ids[:, rng.randint(10, LENGTH):] = 0
        start = time.perf_counter()
        loss = model.train_on_batch(to_inputs(features, ids[:, :-1]), ids[:, 1:])
        elapsed = time.perf_counter() - start
        if step >= WARMUP_STEPS:
            step_times.append(elapsed)
            step_losses.append(float(np.asarray(loss).reshape(-1)[0]))
    return {
        "variant": variant,
        "vocabulary": vocabulary,
        "parameters": int(model.count_params()),
        "trainable_parameters": int(sum(np.prod(w.shape) for w in model.trainable_weights)),
        "median_step_s": float(np.median(step_times)),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "non_finite_losses": int(np.sum(~np.isfinite(step_losses))),
    }


def bench_trainer() -> dict:
    results = {}
    for variant in ("original", "ours"):
        completed = subprocess.run([sys.executable, "-m", "benchmarks.trainer_bench", variant],
                                   capture_output=True, text=True, check=True)
        results[variant] = json.loads(completed.stdout.strip().splitlines()[-1])
    original, ours = results["original"], results["ours"]
    return {
        "name": f"trainer: one train step, batch {BATCH} x {LENGTH} tokens, 49x2048 features (CPU)",
        "rows": [original, ours],
        "step_speedup": round(original["median_step_s"] / ours["median_step_s"], 1),
        "parameter_reduction": round(original["parameters"] / ours["parameters"], 1),
        "peak_memory_reduction": round(original["peak_rss_mb"] / ours["peak_rss_mb"], 1),
        "our_non_finite_losses": ours["non_finite_losses"],
    }


if __name__ == "__main__":
    print(json.dumps(measure(sys.argv[1])))
