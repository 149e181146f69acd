"""Tests of the exported SavedModel: a fresh process with only TensorFlow captions JPEG bytes
like the in-process model, the signatures saved_model_cli lists, batching, beam width 1, bad
bytes, serving-time tokenisation, and the command-line captioner."""

import base64
import dataclasses
import glob
import json
import os
import re
import subprocess
import sys

import apache_beam as beam
import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_transform as tft

from components import caption_text, cpu_bfloat16, example_format, resnet_features
from components import config as config_lib
from components.ingestion import beam_job
from components.ingestion.formats import flickr8k
from components.serving import captioner
from components.trainer import model as model_lib
from components.trainer import run_fn
from components.transform import preprocessing
from tests import image_fixtures
from tests.paths import REPO_ROOT, SHARED_DATA_DIR

pytestmark = pytest.mark.slow
SAVED_MODEL_CLI = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")


@pytest.fixture(scope="module")
def trained(trained_demo_model):
    return trained_demo_model


@pytest.fixture(scope="module")
def loaded(trained):
    return tf.saved_model.load(trained["serving_model"])


def _test_images(trained, count=3):
    dataset = trained["dataset"]
    names = sorted(dataset.splits["test"] + dataset.splits["dev"])[:count]
    paths = [os.path.join(dataset.data_dir, "Flicker8k_Dataset", name) for name in names]
    return paths, [open(path, "rb").read() for path in paths]


def _in_process_greedy(trained, image_bytes):
    """The Keras model over the whole prefix at each step (no incremental decoding) on the
    ingestion feature extractor's output: greedy, written out here as the reference."""
    decoder = keras.models.load_model(os.path.join(trained["model_run"], run_fn.DECODER_FILE),
                                      compile=False)
    image_encoder, text_decoder = model_lib.split_model(decoder)
    extractor = resnet_features.build_feature_extractor(trained["config"].features)
    words, _, facts = preprocessing.read_transform_assets(
        tft.TFTransformOutput(trained["transform_graph"]))
    pixels = tf.io.decode_image(image_bytes, channels=3, expand_animations=False)
    features = extractor(resnet_features.resize_for_resnet(pixels, 224)[tf.newaxis])
    projection = image_encoder(features)
    ids, score = [caption_text.START_ID], 0.0
    while len(ids) < facts["max_caption_length"] and ids[-1] != caption_text.END_ID:
        logits = text_decoder({"image_projection": projection, "input_ids": tf.constant([ids])})
        log_probs = tf.nn.log_softmax(logits[0, -1]).numpy()
        log_probs[[caption_text.PAD_ID, caption_text.START_ID, caption_text.UNK_ID]] = -np.inf
        ids.append(int(np.argmax(log_probs)))
        score += float(log_probs[ids[-1]])
    tokens = ids[1:] + [caption_text.PAD_ID] * (facts["max_caption_length"] - len(ids))
    vocabulary = list(facts["reserved_tokens"]) + words
    caption = " ".join(vocabulary[token] for token in ids[1:]  # nothing follows <end>
                       if token >= caption_text.NUM_RESERVED_IDS)
    return caption, np.array(tokens), score


FRESH_PROCESS = """
import json, os, sys
repo, model_dir, image_paths = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path = [p for p in sys.path if p and os.path.realpath(p) != repo]
import importlib.util
assert importlib.util.find_spec("components") is None, "this project is importable"
import tensorflow as tf
model = tf.saved_model.load(model_dir)
outputs = model.signatures["serving_default"](
    images=tf.constant([open(path, "rb").read() for path in image_paths]))
print(json.dumps({"caption": [c.decode() for c in outputs["caption"].numpy()],
                  "tokens": outputs["tokens"].numpy().tolist(),
                  "score": outputs["score"].numpy().tolist()}))
"""


def test_fresh_process_without_this_repo_captions_like_the_in_process_model(trained, tmp_path):
    paths, images = _test_images(trained)
    completed = subprocess.run(
        [sys.executable, "-I", "-c", FRESH_PROCESS, os.path.realpath(REPO_ROOT),
         trained["serving_model"], *paths],
        cwd=str(tmp_path), capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    served = json.loads(completed.stdout.strip().splitlines()[-1])
    for index, image_bytes in enumerate(images):
        caption, ids, score = _in_process_greedy(trained, image_bytes)
        assert served["caption"][index] == caption
        assert served["tokens"][index] == ids.tolist()
        assert served["score"][index] == pytest.approx(score, abs=1e-3)
    assert all(served["caption"]), "the trained demo model should say something"


# saved_model_cli's own entry point, in a process that cannot import this project: `run` loads
# through the TF1 session loader (loader.load + Session.run), the path TensorFlow Serving's
# SavedModelBundle takes.
SAVED_MODEL_CLI_RUN = """
import os, sys
repo = sys.argv[1]
sys.path = [p for p in sys.path if p and os.path.realpath(p) != repo]
import importlib.util
assert importlib.util.find_spec("components") is None, "this project is importable"
from tensorflow.python.tools.saved_model_cli import main
sys.argv = ["saved_model_cli"] + sys.argv[2:]
sys.exit(main())
"""


TF1_LOADER_INPUTS = {"caption_features": ["image_features"],
                     "caption_features_beam": ["image_features", "beam_width"],
                     "image_features": ["images"], "serving_examples": ["examples"],
                     "transform_features": ["examples"]}
TF1_LOADER_RUN = """
import os, sys
repo, model_dir, work_dir = sys.argv[1:]
sys.path = [p for p in sys.path if p and os.path.realpath(p) != repo]
import numpy as np
import tensorflow as tf
inputs = {inputs!r}
with tf.compat.v1.Session(graph=tf.Graph()) as session:
    meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], model_dir)
    for signature, names in inputs.items():
        signature_def = meta_graph.signature_def[signature]
        feed = {signature_def.inputs[name].name: np.load(os.path.join(work_dir, name + ".npy"),
                                                        allow_pickle=True) for name in names}
        fetches = {name: info.name for name, info in signature_def.outputs.items()}
        np.savez(os.path.join(work_dir, "tf1_" + signature + ".npz"), **session.run(fetches, feed))
""".replace("{inputs!r}", repr(TF1_LOADER_INPUTS))


def _saved_model_cli_run(model_dir, signature, inputs, work_dir):
    """``saved_model_cli run --dir model_dir --tag_set serve --signature_def signature
    --inputs inputs --outdir ...``, as the README shows it; returns {output name: array}."""
    out_dir = work_dir / f"out_{signature}"
    completed = subprocess.run(
        [sys.executable, "-I", "-c", SAVED_MODEL_CLI_RUN, os.path.realpath(REPO_ROOT),
         "run", "--dir", model_dir, "--tag_set", "serve", "--signature_def", signature,
         "--inputs", inputs, "--outdir", str(out_dir)],
        cwd=str(work_dir), capture_output=True, text=True, timeout=600,
        env={"PATH": os.environ["PATH"], "HOME": str(work_dir)})
    assert completed.returncode == 0, (signature, completed.stderr[-3000:])
    return {name[:-len(".npy")]: np.load(out_dir / name, allow_pickle=True)
            for name in os.listdir(out_dir)}


def _assert_same_captions(cli_outputs, in_process, signature):
    assert set(cli_outputs) == set(in_process), signature
    if "error" in in_process:  # the image signatures: the last image is not one
        assert cli_outputs["error"].tolist() == in_process["error"].numpy().tolist(), signature
        assert cli_outputs["error"][-1].startswith(b"unsupported_format") and not any(
            cli_outputs["error"][:-1])
    assert cli_outputs["caption"].tolist() == in_process["caption"].numpy().tolist(), signature
    np.testing.assert_array_equal(cli_outputs["tokens"], in_process["tokens"].numpy())
    np.testing.assert_allclose(cli_outputs["score"], in_process["score"].numpy(), atol=1e-4)


def test_every_signature_runs_in_the_tf1_session_loader_as_tf_serving_loads_it(loaded, trained, tmp_path):
    """Real Flickr8k JPEGs through saved_model_cli run (the TF1 loader): the same captions,
    tokens and scores as tf.saved_model.load gives; every signature, not just `show`."""
    real_photos = sorted(glob.glob(os.path.join(SHARED_DATA_DIR, "flickr8k_sample", "Flicker8k_Dataset",
                                                "*.jpg")))[:3]
    if not real_photos:
        pytest.skip("../shared/data/flickr8k_sample is not beside this checkout")
    images = [open(path, "rb").read() for path in real_photos] + [b"not an image"]
    np.save(tmp_path / "images.npy", np.array(images, dtype=object), allow_pickle=True)
    np.save(tmp_path / "beam_width.npy", np.int32(3))
    raw_paths = sorted(glob.glob(os.path.join(trained["examples"], "Split-test", "*")))
    raw_records = [record.numpy() for record in tf.data.TFRecordDataset(raw_paths)][:4]
    np.save(tmp_path / "examples.npy", np.array(raw_records, dtype=object), allow_pickle=True)
    image_features = loaded.signatures["image_features"](images=tf.constant(images))["image_features"]
    np.save(tmp_path / "image_features.npy", image_features.numpy())
    model_dir = trained["serving_model"]

    for signature, inputs, in_process in [
            ("serving_default", "images=images.npy",
             loaded.signatures["serving_default"](images=tf.constant(images))),
            ("beam_search", "images=images.npy;beam_width=beam_width.npy",
             loaded.signatures["beam_search"](images=tf.constant(images), beam_width=tf.constant(3)))]:
        _assert_same_captions(_saved_model_cli_run(model_dir, signature, inputs, tmp_path),
                              in_process, signature)

    # The other signatures through the same loader (loader.load + Session.run), in one process:
    # each saved_model_cli run pays ~13 s of start-up here.
    completed = subprocess.run(
        [sys.executable, "-I", "-c", TF1_LOADER_RUN, os.path.realpath(REPO_ROOT), model_dir,
         str(tmp_path)], cwd=str(tmp_path), capture_output=True, text=True, timeout=600,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
    assert completed.returncode == 0, completed.stderr[-3000:]
    outputs = {signature: dict(np.load(tmp_path / f"tf1_{signature}.npz", allow_pickle=True))
               for signature in TF1_LOADER_INPUTS}
    _assert_same_captions(outputs["caption_features"], loaded.signatures["caption_features"](
        image_features=image_features), "caption_features")
    _assert_same_captions(outputs["caption_features_beam"], loaded.signatures["caption_features_beam"](
        image_features=image_features, beam_width=tf.constant(3)), "caption_features_beam")
    _assert_same_captions(outputs["serving_examples"], loaded.signatures["serving_examples"](
        examples=tf.constant(raw_records)), "serving_examples")
    np.testing.assert_allclose(outputs["image_features"]["image_features"], image_features.numpy(),
                               atol=1e-4)
    assert outputs["image_features"]["error"].tolist() == [b""] * len(real_photos) + [
        b"unsupported_format: not a JPEG, PNG, GIF or BMP image"]
    in_process = loaded.signatures["transform_features"](examples=tf.constant(raw_records))
    assert set(outputs["transform_features"]) == set(in_process)
    for name, value in in_process.items():
        np.testing.assert_array_equal(outputs["transform_features"][name], value.numpy(), err_msg=name)
    assert outputs["transform_features"][example_format.CAPTION_IDS].ndim == 2  # dense, 0-padded


def _readme_rest_bodies() -> dict:
    """{file stem: printf format} of the README's TF Serving request bodies."""
    with open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8") as readme:
        lines = re.findall(r"""^printf '(\{.*\})' "\$\(base64 -w0 dog\.jpg\)" > (\w+)\.json$""",
                           readme.read(), re.MULTILINE)
    return {stem: body_format for body_format, stem in lines}


def _as_tf_serving_decodes_it(body: dict, signature) -> dict:
    """TF Serving's REST predict API: {"b64": ...} is bytes; the row form ("instances", each a
    dict of named inputs) stacks each input along a batch axis, the columnar form ("inputs")
    takes each input whole; dtypes come from the signature."""
    def decode(value):
        if isinstance(value, dict) and set(value) == {"b64"}:
            return base64.b64decode(value["b64"])
        return [decode(item) for item in value] if isinstance(value, list) else value

    if "instances" in body:
        columns = {name: [decode(instance[name]) for instance in body["instances"]]
                   for name in body["instances"][0]}
    else:
        columns = {name: decode(value) for name, value in body["inputs"].items()}
    specs = signature.structured_input_signature[1]
    assert set(columns) == set(specs), (set(columns), set(specs))
    return {name: tf.constant(value, dtype=specs[name].dtype) for name, value in columns.items()}


def test_readme_tf_serving_requests_caption_like_the_signatures(loaded, trained):
    bodies = _readme_rest_bodies()
    assert set(bodies) == {"greedy", "beam"}, bodies
    _, images = _test_images(trained, count=1)
    encoded = base64.b64encode(images[0]).decode("ascii")
    expected = {
        "greedy": ("serving_default", loaded.signatures["serving_default"](images=tf.constant(images))),
        "beam": ("beam_search", loaded.signatures["beam_search"](images=tf.constant(images),
                                                                beam_width=tf.constant(3)))}
    for stem, body_format in bodies.items():
        body = json.loads(body_format.replace("%s", encoded))  # what printf writes
        signature_name, reference = expected[stem]
        assert body["signature_name"] == signature_name
        signature = loaded.signatures[signature_name]
        served = signature(**_as_tf_serving_decodes_it(body, signature))
        assert served["caption"].numpy().tolist() == reference["caption"].numpy().tolist()
        np.testing.assert_array_equal(served["tokens"].numpy(), reference["tokens"].numpy())


def test_nothing_exported_names_a_path_of_the_training_machine(trained):
    """The fixture wrote everything (data, GloVe, Transform, model) under one temporary root;
    no byte of the SavedModel, its assets or assets.extra names it. GloVe is recorded by file
    name and sha256."""
    import hashlib

    root = os.path.dirname(trained["serving_model"])
    model_dir = trained["serving_model"]
    exported = [os.path.join(model_dir, "saved_model.pb")] + [
        os.path.join(directory, name)
        for folder in ("assets", "assets.extra")
        for directory, _, names in os.walk(os.path.join(model_dir, folder)) for name in names]
    assert len(exported) >= 3, exported
    for path in exported:
        with open(path, "rb") as stream:
            assert root.encode() not in stream.read(), path
    facts = json.loads(open(os.path.join(model_dir, "assets.extra", example_format.FACTS_FILE)).read())
    glove_path = trained["dataset"].glove_path
    assert facts["embedding"]["glove_file"] == os.path.basename(glove_path)
    assert facts["embedding"]["glove_sha256"] == hashlib.sha256(open(glove_path, "rb").read()).hexdigest()


def test_saved_model_cli_lists_the_documented_signatures(trained):
    listing = subprocess.run([SAVED_MODEL_CLI, "show", "--dir", trained["serving_model"], "--all"],
                             capture_output=True, text=True, check=True, timeout=300).stdout
    blocks = {block.split("'", 1)[0]: block
              for block in listing.split("signature_def['")[1:]}
    assert {"serving_default", "beam_search", "image_features", "caption_features", "caption_features_beam",
            "serving_examples", "transform_features"} <= set(blocks)
    for name, inputs in {"serving_default": ["images"], "beam_search": ["images", "beam_width"],
                         "caption_features": ["image_features"], "serving_examples": ["examples"],
                         "caption_features_beam": ["image_features", "beam_width"]}.items():
        block = blocks[name]
        for input_name in inputs:
            assert f"inputs['{input_name}']" in block, (name, input_name)
        for output_name, dtype in (("caption", "DT_STRING"), ("tokens", "DT_INT32"),
                                   ("score", "DT_FLOAT")):
            output_block = block.split(f"outputs['{output_name}']", 1)[1]
            assert output_block.split("dtype: ", 1)[1].startswith(dtype), (name, output_name)
    assert "inputs['images'] tensor_info:\n        dtype: DT_STRING" in blocks["serving_default"]
    assert "DT_INT32" in blocks["beam_search"].split("inputs['beam_width']", 1)[1]
    feature_maps = blocks["image_features"].split("outputs['image_features']", 1)[1]
    assert "DT_FLOAT" in feature_maps and "shape: (-1, 49, 2048)" in feature_maps


def _ingest(images, pipeline_config, root):
    """The Beam job over ``images`` ({file name: bytes}, all in train) under ``root``:
    {file name: stored 49x2048 features as float32}."""
    (root / "Flicker8k_Dataset").mkdir(parents=True)
    (root / "Flickr8k_text").mkdir()
    for name, image_bytes in images.items():
        (root / "Flicker8k_Dataset" / name).write_bytes(image_bytes)
    flickr8k.write_token_file(str(root / "Flickr8k_text" / "Flickr8k.token.txt"),
                              [(name, ["A picture ."]) for name in images])
    for split, names in (("train", list(images)), ("dev", []), ("test", [])):
        flickr8k.write_split_file(
            str(root / "Flickr8k_text" / config_lib.FLICKR8K_SPLIT_FILES[split]), names)
    pipeline_config = dataclasses.replace(
        pipeline_config, data=dataclasses.replace(pipeline_config.data, data_dir=str(root)))
    output_dir = root / "examples"
    summary = beam_job.run_ingestion(beam.Pipeline(runner="DirectRunner"), pipeline_config, str(output_dir))
    assert summary["pairs_rejected"] == 0 and summary["pairs_accepted"] == len(images)
    stored = {}
    for path in glob.glob(str(output_dir / "Split-train" / "*")):
        for record in tf.data.TFRecordDataset(path):
            example = tf.train.Example.FromString(record.numpy())
            name = example.features.feature["image_id"].bytes_list.value[0].decode()
            stored[name] = np.frombuffer(example.features.feature["image_features"].bytes_list.value[0],
                                         "<f2").reshape(49, 2048).astype(np.float32)
    assert sorted(stored) == sorted(images)
    return stored


def _served_features(loaded, images, names):
    served = loaded.signatures["image_features"](images=tf.constant([images[name] for name in names]))
    assert [error.decode() for error in served["error"].numpy()] == [""] * len(names)
    return served["image_features"].numpy()


def test_ingestion_features_equal_the_image_features_signature_on_every_kind_of_image(
        loaded, trained, tmp_path):
    """One decoding rule: the Beam job's stored features of EXIF-rotated, grayscale, CMYK,
    palette, RGBA, gray+alpha, 16-bit and progressive images (and a real Flickr8k photo) equal
    what the pushed model's image_features signature computes from the same bytes. Before,
    ingestion decoded with Pillow: the EXIF-rotated JPEG came out (240, 200) at ingestion and
    (200, 240) at serving, 16-bit PNGs were clipped instead of scaled."""
    images = dict(image_fixtures.convertible_files())
    real_photo = sorted(glob.glob(os.path.join(SHARED_DATA_DIR, "flickr8k_sample", "Flicker8k_Dataset",
                                               "*.jpg")))[:1]
    if real_photo:
        images["real_flickr8k.jpg"] = open(real_photo[0], "rb").read()
    stored = _ingest(images, trained["config"], tmp_path)
    names = sorted(images)
    served = _served_features(loaded, images, names)
    for row, name in enumerate(names):
        scale = np.abs(stored[name]).max()
        difference = np.abs(served[row] - stored[name]).max()
        assert difference <= 1e-3 * scale, (name, difference, scale)


@pytest.mark.skipif(not cpu_bfloat16.resolve("auto"),
                    reason="the CPU has no native bfloat16 (avx512_bf16 / amx_bf16) or oneDNN is off")
def test_bfloat16_ingestion_stays_close_to_the_float32_serving_features_and_captions(
        loaded, trained, tmp_path):
    """``features.onednn_bfloat16=on`` trains on features the served model (float32: TensorFlow
    Serving applies no grappler rewrite) does not compute. The skew is bounded: the mean
    relative difference is under 2% (measured 0.83%, against 0.018% for float32 ingestion,
    which float16 storage accounts for), and greedy captions decoded from the bfloat16 features
    mostly match the served ones. Measured: 11 of these 12 on this 3-epoch fixture, whose
    near-tied words ("a the" / "the the") flip easily; 100 of 100 demo photos on the model a
    default ``make pipeline-local`` trains (bound: 9 of 12)."""
    dataset = trained["dataset"]
    names = sorted(name for split_names in dataset.splits.values() for name in split_names)[:12]
    images = {name: open(os.path.join(dataset.data_dir, "Flicker8k_Dataset", name), "rb").read()
              for name in names}
    config_on = dataclasses.replace(trained["config"], features=dataclasses.replace(
        trained["config"].features, onednn_bfloat16="on"))
    stored_float32 = _ingest(images, trained["config"], tmp_path / "float32")
    stored_bfloat16 = _ingest(images, config_on, tmp_path / "bfloat16")
    served = _served_features(loaded, images, names)

    def mean_relative_difference(stored):
        return float(np.mean([np.abs(served[row] - stored[name]).mean() / np.abs(served[row]).mean()
                              for row, name in enumerate(names)]))

    assert mean_relative_difference(stored_float32) < 1e-3
    assert 1e-3 < mean_relative_difference(stored_bfloat16) < 0.02
    served_captions = loaded.signatures["serving_default"](images=tf.constant(list(images.values())))
    from_bfloat16 = loaded.signatures["caption_features"](
        image_features=tf.constant(np.stack([stored_bfloat16[name] for name in names])))
    served_captions, from_bfloat16 = served_captions["caption"].numpy(), from_bfloat16["caption"].numpy()
    assert np.sum(served_captions == from_bfloat16) >= 0.75 * len(names), (served_captions, from_bfloat16)


def test_batched_images_get_the_same_captions_as_one_at_a_time(loaded, trained):
    _, images = _test_images(trained)
    batched = loaded.signatures["serving_default"](images=tf.constant(images))
    for index, image_bytes in enumerate(images):
        alone = loaded.signatures["serving_default"](images=tf.constant([image_bytes]))
        assert alone["caption"].numpy()[0] == batched["caption"].numpy()[index]
        np.testing.assert_allclose(alone["score"].numpy()[0], batched["score"].numpy()[index],
                                   rtol=1e-4)


def test_beam_width_one_equals_greedy_and_wider_beams_score_at_least_as_high(loaded, trained):
    _, images = _test_images(trained)
    greedy = loaded.signatures["serving_default"](images=tf.constant(images))
    width_one = loaded.signatures["beam_search"](images=tf.constant(images), beam_width=tf.constant(1))
    np.testing.assert_array_equal(width_one["tokens"].numpy(), greedy["tokens"].numpy())
    wide = loaded.signatures["beam_search"](images=tf.constant(images), beam_width=tf.constant(4))
    assert np.all(wide["score"].numpy() >= greedy["score"].numpy() - 1e-4)


def test_one_bad_image_fails_only_its_own_row(loaded, trained):
    """Good, garbage, empty, truncated and bomb bytes in one batch: each bad row has an empty
    caption, zero tokens and score, and its reason; the good rows caption as they do alone."""
    _, (good,) = _test_images(trained, count=1)
    bad = {"garbage": b"not an image at all", "empty": b"", "truncated": good[:len(good) // 2],
           "header_bomb_jpeg": image_fixtures.header_bomb_jpeg(),
           "pixel_bomb_png": image_fixtures.pixel_bomb_png()}
    reasons = ["unsupported_format", "empty_image", "corrupt_image", "too_many_pixels", "too_many_pixels"]
    batch = tf.constant([good, *bad.values(), good])
    for signature, extra in (("serving_default", {}), ("beam_search", {"beam_width": tf.constant(2)})):
        alone = loaded.signatures[signature](images=tf.constant([good]), **extra)
        outputs = loaded.signatures[signature](images=batch, **extra)
        errors = [error.decode() for error in outputs["error"].numpy()]
        assert errors[0] == errors[-1] == "" and alone["error"].numpy().tolist() == [b""]
        for row in (0, -1):
            assert outputs["caption"].numpy()[row] == alone["caption"].numpy()[0]
            np.testing.assert_array_equal(outputs["tokens"].numpy()[row], alone["tokens"].numpy()[0])
        for row, (name, reason) in enumerate(zip(bad, reasons, strict=True), start=1):
            assert errors[row].startswith(reason + ": "), (signature, name, errors[row])
            assert outputs["caption"].numpy()[row] == b"" and not outputs["tokens"].numpy()[row].any()
            assert outputs["score"].numpy()[row] == 0.0
        assert "features.max_image_pixels = 40000000" in errors[4]


@pytest.mark.parametrize("beam_width", [0, -1, 17, 100_000])
def test_beam_width_outside_the_limit_is_refused_naming_it(loaded, trained, beam_width):
    _, images = _test_images(trained, count=1)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"beam_width must be in 1\.\.16 "
                                                             r"\(export\.max_beam_width\)"):
        loaded.signatures["beam_search"](images=tf.constant(images), beam_width=tf.constant(beam_width))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"export\.max_beam_width"):
        loaded.signatures["caption_features_beam"](
            image_features=tf.zeros([1, 49, 2048]), beam_width=tf.constant(beam_width))


BOMB_PROCESS = """
import resource, sys
import tensorflow as tf
model_dir, good_path, bomb_jpeg_path, bomb_png_path = sys.argv[1:]
serve = tf.saved_model.load(model_dir).signatures["serving_default"]
serve(images=tf.constant([open(good_path, "rb").read()]))  # traced and warm
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
errors = serve(images=tf.constant([open(bomb_jpeg_path, "rb").read(),
                                   open(bomb_png_path, "rb").read()]))["error"].numpy()
growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print("GROWTH_MB", growth_mb)
for error in errors:
    print("ERROR", error.decode())
"""


def test_decompression_bombs_are_refused_from_the_header_without_a_memory_spike(trained, tmp_path):
    """Decoded, the 633-byte JPEG (12000x12000 header) is 432 MB and the 62 KB PNG 192 MB; the
    peak RSS of a fresh serving process grows by far less than either."""
    paths, _ = _test_images(trained, count=1)
    (tmp_path / "bomb.jpg").write_bytes(image_fixtures.header_bomb_jpeg())
    (tmp_path / "bomb.png").write_bytes(image_fixtures.pixel_bomb_png())
    completed = subprocess.run(
        [sys.executable, "-c", BOMB_PROCESS, trained["serving_model"], paths[0],
         str(tmp_path / "bomb.jpg"), str(tmp_path / "bomb.png")],
        capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    growth_mb = float([line for line in lines if line.startswith("GROWTH_MB")][0].split()[1])
    errors = [line[len("ERROR "):] for line in lines if line.startswith("ERROR ")]
    limit = "features.max_image_pixels = 40000000"
    assert errors == [f"too_many_pixels: header says 12000x12000 = 144000000 pixels, over {limit}",
                      f"too_many_pixels: header says 8000x8000 = 64000000 pixels, over {limit}"]
    assert growth_mb < 300, growth_mb


def test_examples_and_features_signatures_agree_with_serving_tokenisation(loaded, trained):
    """serving_examples on ingested records = caption_features on their features, and
    transform_features tokenises raw records exactly as the training data was."""
    raw_paths = sorted(glob.glob(os.path.join(trained["examples"], "Split-test", "*")))
    raw_records = [record.numpy() for record in tf.data.TFRecordDataset(raw_paths)]
    from_examples = loaded.signatures["serving_examples"](examples=tf.constant(raw_records))
    features = np.stack([np.frombuffer(tf.train.Example.FromString(record).features
                                       .feature["image_features"].bytes_list.value[0], "<f2")
                         .reshape(49, 2048).astype(np.float32) for record in raw_records])
    from_features = loaded.signatures["caption_features"](image_features=tf.constant(features))
    np.testing.assert_array_equal(from_examples["tokens"].numpy(), from_features["tokens"].numpy())

    transformed = loaded.signatures["transform_features"](examples=tf.constant(raw_records))
    expected = {}
    for path in glob.glob(os.path.join(trained["transformed"], "Split-test", "*")):
        for record in tf.data.TFRecordDataset(path, compression_type="GZIP"):
            feature = tf.train.Example.FromString(record.numpy()).features.feature
            expected[feature["image_id"].bytes_list.value[0]] = list(
                feature[example_format.CAPTION_IDS].int64_list.value)
    caption_ids = transformed[example_format.CAPTION_IDS]
    image_ids = transformed["image_id"].numpy().reshape(-1)
    assert len(expected) == len(raw_records) > 0
    for image_id, ids in zip(image_ids, caption_ids.numpy(), strict=True):
        assert list(ids[:len(expected[image_id])]) == expected[image_id]


def test_command_line_captioner(trained, tmp_path, capsys):
    paths, images = _test_images(trained, count=2)
    served = tf.saved_model.load(trained["serving_model"]).signatures["serving_default"](
        images=tf.constant(images))["caption"].numpy()

    assert captioner.main(["caption", "--model", trained["serving_model"], *paths]) == 0
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert lines == [f"{path}\t{caption.decode()}" for path, caption in zip(paths, served, strict=True)]
    # The model's own facts say it learnt from the generated demo data: the user is told.
    assert captured.err.startswith("note: ") and "trained on the generated demo data" in captured.err

    not_an_image = tmp_path / "notes.jpg"
    not_an_image.write_text("this is text")
    missing = tmp_path / "missing.jpg"
    assert captioner.main(["caption", "--model", trained["serving_model"], "--beam-width", "2",
                           str(missing), str(not_an_image), paths[0]]) == captioner.EXIT_BAD_INPUT
    captured = capsys.readouterr()
    assert f"{missing}: no such file" in captured.err
    assert f"error: {not_an_image}: unsupported_format: not a JPEG, PNG, GIF or BMP image" in captured.err
    assert captured.out.startswith(f"{paths[0]}\t") and len(captured.out.strip().splitlines()) == 1

    empty = tmp_path / "empty_model"
    empty.mkdir()
    assert captioner.main(["caption", "--model", str(empty), paths[0]]) == captioner.EXIT_BAD_MODEL
    assert "No SavedModel in" in capsys.readouterr().err

    # A width over the model's limit: the model's own reason, not "Graph execution error:".
    assert captioner.main(["caption", "--model", trained["serving_model"], "--beam-width", "17",
                           paths[0]]) == captioner.EXIT_BAD_INPUT
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "error: beam_width must be in 1..16 (export.max_beam_width)"
    # 0 used to mean greedy without a word; it is refused, greedy is the flag left out.
    with pytest.raises(SystemExit) as exited:
        captioner.main(["caption", "--model", trained["serving_model"], "--beam-width", "0", paths[0]])
    assert exited.value.code == 2
    assert "leave --beam-width out for greedy decoding" in capsys.readouterr().err


def test_the_captioner_prints_its_captions_and_nothing_of_tensorflows_start_up(trained):
    paths, _ = _test_images(trained, count=1)
    completed = subprocess.run(
        [sys.executable, "-m", "components.serving.captioner", "caption", "--model",
         trained["serving_model"], *paths], cwd=REPO_ROOT, capture_output=True, text=True,
        timeout=300, check=False)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.startswith(f"{paths[0]}\t") and len(completed.stdout.splitlines()) == 1
    (note,) = completed.stderr.splitlines()  # the demo-data note, nothing else
    assert note.startswith("note: ") and "generated demo data" in note


def test_captioner_picks_the_newest_complete_version_of_a_push_destination(trained, tmp_path):
    destination = tmp_path / "pushed"
    destination.mkdir()
    os.symlink(trained["serving_model"], destination / "100")
    (destination / "200").mkdir()  # a newer version still being copied: no saved_model.pb yet
    (destination / ".staging-300-abcd").mkdir()
    assert captioner.resolve_model_dir(str(destination)) == str(destination / "100")
