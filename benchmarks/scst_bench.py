"""The self-critical phase's cost: its reward against pycocoevalcap, its step against cross-entropy's.

* Reward: CIDEr-D of 1,000 captions (200 real Flickr8k train images x 5 "samples": the first
  caption of the image and of 4 other images), each against its image's 5 real captions.
  pycocoevalcap's ``Cider`` recomputes the document frequencies from the given references on every
  call (here: the 200 images'); ``cider_d.CiderD`` takes them from the 6,000 train images once,
  when the scorer is built (timed apart, once per run), then scores.
* Step: the default decoder (``TrainerConfig()``, the real vocabulary's 2,539 ids) on 8 images of
  49x2048 features: a cross-entropy step on their 5 captions each (image-major, what ``fit`` runs)
  against a self-critical step with 5 samples each (sampling, the greedy baseline, the reward on
  the host, the policy gradient), one CPU replica, float32. The model is untrained, so its
  samples run to the length limit (37 ids): the step's worst case.
"""

import collections
import os
import time

import numpy as np

IMAGES, CAPTIONS, SAMPLES, LENGTH = 8, 5, 5, 37
OUR_VOCABULARY = 2_539
WARMUP_STEPS, MEASURED_STEPS = 2, 6


def _real_captions(data_dir: str):
    from components.ingestion import config as ingestion_config

    data = ingestion_config.DataConfig()
    captions = collections.defaultdict(list)
    with open(os.path.join(data_dir, data.captions_file), encoding="utf-8") as stream:
        for line in stream:
            key, _, caption = line.rstrip("\n").partition("\t")
            captions[key.split("#")[0]].append(caption.lower().split())
    with open(os.path.join(data_dir, data.train_split_file), encoding="utf-8") as stream:
        train = [line.strip() for line in stream if line.strip()]
    return [captions[image] for image in train if len(captions.get(image, ())) == 5]


def bench_reward(data_dir: str) -> dict:
    from pycocoevalcap.cider.cider import Cider

    from components.trainer import cider_d

    train = _real_captions(data_dir)
    images = train[:200]
    hypotheses = [[images[(index + offset) % len(images)][0] for offset in range(SAMPLES)]
                  for index in range(len(images))]
    started = time.perf_counter()
    scorer = cider_d.CiderD(train)
    build_s = time.perf_counter() - started
    started = time.perf_counter()
    scorer.scores(hypotheses, images)
    ours_s = time.perf_counter() - started
    started = time.perf_counter()
    for sample in range(SAMPLES):  # pycocoevalcap takes one hypothesis per image per call
        Cider().compute_score({i: [" ".join(ref) for ref in refs] for i, refs in enumerate(images)},
                              {i: [" ".join(hypotheses[i][sample])] for i in range(len(images))})
    theirs_s = time.perf_counter() - started
    captions = len(images) * SAMPLES
    return {
        "name": f"SCST reward: CIDEr-D of {captions} captions, 5 real Flickr8k references each",
        "rows": [{"scorer": "pycocoevalcap Cider (df from the scored images, every call)",
                  "s_per_1000_captions": round(1000 * theirs_s / captions, 3)},
                 {"scorer": "cider_d.CiderD (df from the train split, once)",
                  "s_per_1000_captions": round(1000 * ours_s / captions, 3),
                  "document_frequencies_once_s": round(build_s, 2),
                  "train_images": len(train)}],
        "reward_speedup_vs_pycocoevalcap": round(theirs_s / ours_s, 1),
    }


def bench_step() -> dict:
    import keras
    import tensorflow as tf

    from components import config as config_lib
    from components.trainer import cider_d, self_critical
    from components.trainer import model as model_lib
    from components.trainer.run_fn import make_strategy

    keras.utils.set_random_seed(0)
    trainer = config_lib.TrainerConfig(onednn_bfloat16="off", scst_epochs=1, scst_samples=SAMPLES)
    matrix = np.random.RandomState(0).normal(0, 0.4, size=(OUR_VOCABULARY, 300)).astype(np.float32)
    strategy = make_strategy()
    rng = np.random.RandomState(1)
    features = np.abs(rng.normal(size=(IMAGES, 49, 2048))).astype(np.float32)
    ids = rng.randint(4, OUR_VOCABULARY, size=(IMAGES, CAPTIONS, LENGTH + 1)).astype(np.int32)
    ids[..., 0] = 1  # <start>
    for image in range(IMAGES):
        for caption in range(CAPTIONS):
            end = rng.randint(10, LENGTH)
            ids[image, caption, end] = 2  # <end>
            ids[image, caption, end + 1:] = 0
    inputs = {"image_features": tf.constant(features), "input_ids": tf.constant(ids[..., :-1])}
    targets = tf.constant(ids[..., 1:])
    with strategy.scope():
        model = model_lib.build_captioning_model(trainer, OUR_VOCABULARY, matrix)
        training_model = model_lib.image_major_model(model, CAPTIONS)
        model_lib.compile_model(training_model, trainer, total_steps=1000,
                                learning_rate=trainer.learning_rate)
    corpus = [self_critical.image_references(rows) for rows in ids[:, :, 1:]]
    scst = self_critical.SelfCriticalTrainer(model, strategy, trainer, LENGTH + 1,
                                             cider_d.CiderD(corpus), IMAGES * SAMPLES, 1000)

    def timed(step):
        times = []
        for number in range(WARMUP_STEPS + MEASURED_STEPS):
            started = time.perf_counter()
            step(number)
            if number >= WARMUP_STEPS:
                times.append(time.perf_counter() - started)
        return float(np.median(times))

    cross_entropy_s = timed(lambda _: training_model.train_on_batch(inputs, targets))
    scst_s = timed(lambda number: [value.numpy() for value in scst._train_step(
        inputs, targets, tf.constant(number, tf.int64))])
    return {
        "name": f"SCST step vs cross-entropy step: {IMAGES} images, default decoder, 1 CPU replica",
        "rows": [{"step": f"cross-entropy, {CAPTIONS} captions per image",
                  "ms_per_image": round(1000 * cross_entropy_s / IMAGES, 1)},
                 {"step": f"self-critical, {SAMPLES} samples + greedy baseline per image "
                          f"({LENGTH} ids each, untrained model)",
                  "ms_per_image": round(1000 * scst_s / IMAGES, 1)}],
        "scst_vs_cross_entropy_step": round(scst_s / cross_entropy_s, 2),
    }
