"""Command-line captioner over an exported SavedModel (needs only TensorFlow).

    python -m components.serving.captioner caption --model DIR image1.jpg image2.jpg [--beam-width K]

``DIR`` is either a SavedModel directory (the Trainer's ``Format-Serving``) or
a push destination holding numbered version directories, of which the newest
complete one is used. Prints ``<file>\\t<caption>`` per image, in order. A
missing file, or an image the model refuses (its ``error`` output: not an
image, corrupt, over the pixel limit), is reported on stderr by name and
skipped; the exit status is then 1. A model directory without a SavedModel
is exit status 2.
"""

import argparse
import json
import os
import re
import sys
from typing import List, Optional, Sequence, Tuple

EXIT_BAD_INPUT = 1
EXIT_BAD_MODEL = 2


class ModelDirError(ValueError):
    """The --model directory holds no SavedModel."""


def resolve_model_dir(path: str) -> str:
    """The SavedModel directory that ``path`` names (itself, or its newest version)."""
    import tensorflow as tf

    if not tf.io.gfile.isdir(path):
        raise ModelDirError(f"Model directory not found: {path}")
    if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
        return path
    versions = sorted((int(name.rstrip("/")) for name in tf.io.gfile.listdir(path)
                       if name.rstrip("/").isdigit()), reverse=True)
    for version in versions:
        candidate = os.path.join(path, str(version))
        if tf.io.gfile.exists(os.path.join(candidate, "saved_model.pb")):
            return candidate
    raise ModelDirError(f"No SavedModel in {path}: neither {path}/saved_model.pb nor a numbered "
                        "version directory with one (is this the Trainer's or Pusher's output?).")


def demo_model_note(model_dir: str) -> str:
    """A warning when the model's own facts say it was trained on the generated demo data, whose
    captions are about coloured shapes; empty otherwise (or without facts)."""
    import tensorflow as tf

    from components import example_format

    path = os.path.join(model_dir, "assets.extra", example_format.FACTS_FILE)
    if not tf.io.gfile.exists(path):
        return ""
    with tf.io.gfile.GFile(path) as stream:
        glove_file = json.load(stream).get("embedding", {}).get("glove_file", "")
    if not glove_file.startswith(example_format.DEMO_GLOVE_PREFIX):
        return ""
    return (f"note: {model_dir} was trained on the generated demo data (coloured shapes on noise; "
            f"its GloVe file was {glove_file}): it describes shapes, not photos. Train on real "
            "data for real captions (README, \"Running on real Flickr8k and GloVe 6B\").")


def read_images(paths: Sequence[str]):
    """``(readable [(path, bytes)], errors [str])``: the files that exist, read whole."""
    readable, errors = [], []
    for path in paths:
        if not os.path.isfile(path):
            errors.append(f"{path}: no such file")
            continue
        with open(path, "rb") as stream:
            readable.append((path, stream.read()))
    return readable, errors


def caption_images(model_dir: str, images: List[bytes], beam_width: int = 0) -> List[Tuple[str, str]]:
    """(caption, error) per image: greedy, or beam search when ``beam_width`` ≥ 1; the error
    is empty when the image was captioned."""
    import tensorflow as tf

    model = tf.saved_model.load(resolve_model_dir(model_dir))
    batch = tf.constant(images, tf.string)
    if beam_width:
        outputs = model.signatures["beam_search"](images=batch, beam_width=tf.constant(beam_width))
    else:
        outputs = model.signatures["serving_default"](images=batch)
    return [(caption.decode("utf-8"), error.decode("utf-8"))
            for caption, error in zip(outputs["caption"].numpy(), outputs["error"].numpy(), strict=True)]


def refusal_reason(message: str) -> str:
    """The model's own reason in a TensorFlow error (an assertion's message, e.g.
    ``beam_width must be in 1..16 (export.max_beam_width)``), not "Graph execution error:"."""
    assertion = re.search(r"assertion failed: \[([^\]]+)\]", message)
    if assertion:
        return assertion.group(1)
    lines = [line.strip() for line in message.strip().splitlines()
             if line.strip() and line.strip() != "Graph execution error:"]
    return lines[0] if lines else message.strip()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m components.serving.captioner", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    caption = commands.add_parser("caption", help="caption image files")
    caption.add_argument("--model", required=True, help="SavedModel or push destination directory")
    caption.add_argument("--beam-width", type=int, default=None,
                         help="beam search with this width, 1 to the model's export.max_beam_width "
                              "(default: greedy decoding)")
    caption.add_argument("images", nargs="+", help="JPEG/PNG files")
    caption.add_argument("--verbose", action="store_true",
                         help="keep TensorFlow's start-up lines and warnings")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not args.verbose:
        from components import quiet_startup

        quiet_startup.quiet()
    if args.beam_width is not None and args.beam_width < 1:
        parser.error(f"--beam-width {args.beam_width}: a beam holds at least 1 caption; leave "
                     "--beam-width out for greedy decoding")
    try:
        model_dir = resolve_model_dir(args.model)
    except ModelDirError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_MODEL
    note = demo_model_note(model_dir)
    if note:
        print(note, file=sys.stderr)
    readable, errors = read_images(args.images)
    for message in errors:
        print(f"error: {message}", file=sys.stderr)
    failed = bool(errors)
    if readable:
        import tensorflow as tf

        try:
            captions = caption_images(model_dir, [image for _, image in readable], args.beam_width or 0)
        except tf.errors.InvalidArgumentError as error:  # a request the model refuses whole
            print(f"error: {refusal_reason(error.message)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        for (path, _), (text, error) in zip(readable, captions, strict=True):
            if error:
                print(f"error: {path}: {error}", file=sys.stderr)
                failed = True
            else:
                print(f"{path}\t{text}")
    return EXIT_BAD_INPUT if failed else 0


if __name__ == "__main__":
    sys.exit(main())
