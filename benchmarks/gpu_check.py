"""``make gpu-check``: what only a machine with GPUs can show, in one prepared run and one table.

On every visible GPU (MirroredStrategy, as the Trainer), in float32 and in mixed float16
(``trainer.mixed_precision``): a few training steps of the demo-sized decoder on image-major
batches built by the Trainer's own input pipeline (5 captions per image and a short last batch:
the padded rows the cuDNN LSTM path checks), through the Trainer's own model, loss and
optimizers. It reports whether every loss is finite, the first step's loss against the same step
on the CPU (a fresh process with ``CUDA_VISIBLE_DEVICES=-1``, same seed and data), the step time
per caption, and ResNet50 feature extraction (ingestion's and serving's one path) in images/s on
the GPU against the CPU.

Without a GPU it refuses (exit status 2) unless ``--allow-cpu`` (what the tests run: the same
steps on the CPU, to keep this script working where no GPU is). It has not yet run on a GPU
(README "Benchmarks").

    python -m benchmarks.gpu_check [--output_dir=DIR] [--steps=N] [--allow-cpu]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

import numpy as np

MAX_CAPTION_LENGTH = 20
VOCABULARY = 40
CAPTIONS_PER_IMAGE = 5
IMAGES = 46  # with 6 images per replica and batch: a short last batch on 1, 2, 4 or 8 GPUs
# float32 on GPU vs CPU: different kernels, same math. mixed float16 rounds activations.
FIRST_LOSS_TOLERANCE = {"float32": 1e-3, "mixed_float16": 2e-2}


def write_examples(path: str, seed: int = 0) -> str:
    """Transformed-example TFRecords (features and caption ids) as the Trainer reads them."""
    import tensorflow as tf

    from components import caption_text, example_format

    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(IMAGES):
            ids = []
            for _ in range(CAPTIONS_PER_IMAGE):
                words = int(rng.integers(3, MAX_CAPTION_LENGTH - 2))
                row = [caption_text.START_ID, *rng.integers(4, VOCABULARY, words), caption_text.END_ID]
                ids += row + [caption_text.PAD_ID] * (MAX_CAPTION_LENGTH - len(row))
            features = np.maximum(rng.normal(size=(49, 2048)), 0).astype("<f2").tobytes()
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                example_format.IMAGE_FEATURES: tf.train.Feature(
                    bytes_list=tf.train.BytesList(value=[features])),
                example_format.CAPTION_IDS: tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
            })).SerializeToString())
    return path


def train_steps(examples: str, precision: str, steps: int) -> dict:
    """``steps`` training steps on every visible device; losses and seconds per caption."""
    import keras

    from components import config as config_lib
    from components.trainer import inputs, run_fn
    from components.trainer import model as model_lib

    keras.utils.set_random_seed(0)
    trainer = config_lib.TrainerConfig(per_replica_batch_size=30,
                                       mixed_precision="off" if precision == "float32" else "on")
    strategy = run_fn.make_strategy()
    per_batch = inputs.images_per_batch(trainer.per_replica_batch_size, CAPTIONS_PER_IMAGE,
                                        strategy.num_replicas_in_sync)
    dataset = inputs.make_dataset([examples], MAX_CAPTION_LENGTH, per_batch, CAPTIONS_PER_IMAGE,
                                  shuffle=False, repeat=True)
    with strategy.scope():  # the layers' own policy follows trainer.mixed_precision
        model = model_lib.build_captioning_model(trainer, VOCABULARY, embedding_dim=50,
                                                 fine_tune_embedding=True)
        training_model = model_lib.image_major_model(model, CAPTIONS_PER_IMAGE)
        model_lib.compile_model(training_model, trainer, total_steps=steps,
                                learning_rate=trainer.learning_rate)
    first = training_model.fit(dataset, steps_per_epoch=1, epochs=1, verbose=0).history["loss"]
    started = time.perf_counter()
    later = training_model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0).history["loss"]
    seconds = time.perf_counter() - started
    return {"replicas": strategy.num_replicas_in_sync, "first_loss": float(first[0]),
            "losses": [float(first[0]), *map(float, later)],
            "ms_per_caption": 1000 * seconds / (steps * per_batch * CAPTIONS_PER_IMAGE)}


def feature_images_per_second(images: List[bytes], batch: int = 16, rounds: int = 3) -> float:
    import tensorflow as tf

    from components import config as config_lib
    from components import resnet_features

    features = config_lib.FeaturesConfig()
    extractor = resnet_features.build_feature_extractor(features)
    extract = tf.function(lambda images: resnet_features.features_from_image_bytes(
        extractor, images, features))
    batch_tensor = tf.constant((images * batch)[:batch], tf.string)
    extract(batch_tensor)[0].numpy()  # trace
    started = time.perf_counter()
    for _ in range(rounds):
        extract(batch_tensor)[0].numpy()
    return rounds * batch / (time.perf_counter() - started)


def _demo_jpegs(directory: str) -> List[bytes]:
    from components.ingestion import demo_data

    dataset = demo_data.generate(directory, num_images=8, seed=1)
    image_dir = os.path.join(dataset.data_dir, "Flicker8k_Dataset")
    images = []
    for name in sorted(os.listdir(image_dir)):
        with open(os.path.join(image_dir, name), "rb") as stream:
            images.append(stream.read())
    return images


def measure(output_dir: str, steps: int) -> dict:
    """Everything this process can measure on its visible devices."""
    examples = write_examples(os.path.join(output_dir, "examples.tfrecord"))
    results = {precision: train_steps(examples, precision, steps)
               for precision in ("float32", "mixed_float16")}
    results["feature_images_per_second"] = feature_images_per_second(
        _demo_jpegs(os.path.join(output_dir, "demo")))
    return results


def cpu_reference(output_dir: str, steps: int) -> dict:
    """:func:`measure` in a fresh process that sees no GPU."""
    result_path = os.path.join(output_dir, "cpu.json")
    environment = dict(os.environ, CUDA_VISIBLE_DEVICES="-1")
    subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--measure-only",
                    f"--output_dir={os.path.join(output_dir, 'cpu')}", f"--steps={steps}",
                    f"--result={result_path}"], env=environment, check=True)
    with open(result_path, encoding="utf-8") as stream:
        return json.load(stream)


def table(accelerated: dict, cpu: dict, device: str) -> List[str]:
    rows = [f"{'':26}{device:>18}{'CPU':>14}{'ratio':>10}"]
    ok = True
    for precision in ("float32", "mixed_float16"):
        here, there = accelerated[precision], cpu[precision]
        finite = all(np.isfinite(here["losses"])) and all(np.isfinite(there["losses"]))
        relative = abs(here["first_loss"] - there["first_loss"]) / max(abs(there["first_loss"]), 1e-9)
        within = relative <= FIRST_LOSS_TOLERANCE[precision]
        ok = ok and finite and within
        rows.append(f"{precision + ' replicas':26}{here['replicas']:>18}{there['replicas']:>14}")
        rows.append(f"{precision + ' first loss':26}{here['first_loss']:>18.5f}{there['first_loss']:>14.5f}"
                    f"{relative:>10.2e}  {'OK' if within else 'DIFFERS'} "
                    f"(tolerance {FIRST_LOSS_TOLERANCE[precision]:g})")
        rows.append(f"{precision + ' losses finite':26}{str(finite):>18}")
        speed_up = there["ms_per_caption"] / here["ms_per_caption"]
        rows.append(f"{precision + ' ms / caption':26}{here['ms_per_caption']:>18.3f}"
                    f"{there['ms_per_caption']:>14.3f}{speed_up:>10.2f}x")
    here, there = accelerated["feature_images_per_second"], cpu["feature_images_per_second"]
    rows.append(f"{'ResNet50 images / s':26}{here:>18.1f}{there:>14.1f}{here / there:>10.2f}x")
    rows.append("PASS" if ok else "FAIL")
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output_dir", default="")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--allow-cpu", action="store_true",
                        help="run the steps on the CPU when no GPU is visible (tests)")
    parser.add_argument("--measure-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    output_dir = args.output_dir or tempfile.mkdtemp(prefix="gpu_check_")
    os.makedirs(output_dir, exist_ok=True)
    import tensorflow as tf

    if args.measure_only:
        with open(args.result, "w", encoding="utf-8") as stream:
            json.dump(measure(output_dir, args.steps), stream)
        return 0
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus and not args.allow_cpu:
        print("make gpu-check needs a machine with a GPU, and TensorFlow sees none here "
              "(nvidia-smi shows the driver's view; python -c \"import tensorflow as tf; "
              "print(tf.config.list_physical_devices('GPU'))\" TensorFlow's).", file=sys.stderr)
        return 2
    accelerated = measure(output_dir, args.steps)
    cpu = cpu_reference(output_dir, args.steps)
    device = f"{len(gpus)} x GPU" if gpus else "CPU (--allow-cpu)"
    rows = table(accelerated, cpu, device)
    print("\n".join(rows))
    return 0 if rows[-1] == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
