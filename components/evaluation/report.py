"""The evaluation report: one self-contained static HTML page (images inlined as data URIs).

It shows the blessing verdict and its reasons, the metrics of every evaluated
split next to the image-blind baselines, the mean caption log-probability of
greedy vs beam search, the training curves (loss, dev loss, accuracy) from
the Trainer's ``history.json``, and for a sample of images of the last
evaluated split: the picture, the generated captions, the references, and
for each generated word the decoder's attention over the 7x7 feature grid
drawn over the picture.
"""

import base64
import html
import io
import json
import os
from typing import List, Optional, Sequence

import numpy as np
import tensorflow as tf
from absl import logging
from PIL import Image

from components import caption_text, example_format
from components import config as config_lib
from components.evaluation import caption_metrics, split_captions

THUMBNAIL = 224
WORD_THUMBNAIL = 112
GRID = 7


def _data_uri(image: Image.Image, image_format: str = "JPEG") -> str:
    buffer = io.BytesIO()
    image.save(buffer, format=image_format, quality=85)
    mime = "jpeg" if image_format == "JPEG" else "png"
    return f"data:image/{mime};base64,{base64.b64encode(buffer.getvalue()).decode('ascii')}"


def _load_picture(pipeline_config: config_lib.PipelineConfig, image_id: str):
    data = pipeline_config.data
    path = os.path.join(data.data_dir, data.image_dir_name, image_id)
    try:
        with tf.io.gfile.GFile(path, "rb") as stream:
            picture = Image.open(io.BytesIO(stream.read()))
            return picture.convert("RGB").resize((THUMBNAIL, THUMBNAIL), Image.BILINEAR)
    except (OSError, tf.errors.OpError) as error:
        logging.warning("Report: no picture for %s (%s)", image_id, error)
        return None


def attention_overlay(picture: Image.Image, weights: np.ndarray) -> Image.Image:
    """The picture darkened where the 7x7 attention ``weights`` are low."""
    grid = (weights.reshape(GRID, GRID) / max(float(weights.max()), 1e-9) * 255).astype(np.uint8)
    heat = np.asarray(Image.fromarray(grid).resize(picture.size, Image.BILINEAR), np.float32) / 255
    pixels = np.asarray(picture, np.float32)
    shaded = pixels * (0.25 + 0.75 * heat[..., None])
    shaded[..., 0] = np.maximum(shaded[..., 0], 255 * heat * 0.6)
    return Image.fromarray(shaded.clip(0, 255).astype(np.uint8)).resize(
        (WORD_THUMBNAIL, WORD_THUMBNAIL), Image.BILINEAR)


def _line_chart(title: str, series: dict, width: int = 520, height: int = 220,
                boundary: Optional[int] = None, last_epoch: Optional[int] = None) -> str:
    """An inline SVG line chart of ``{label: values}`` over epochs; the legend has its own
    column right of the plot, so no curve runs under it. ``boundary``: the step where the
    self-critical phase starts, drawn as a dashed vertical line."""
    margin, legend_width = 40, 150
    plot_right = width - legend_width - 10
    values = [value for points in series.values() for value in points if np.isfinite(value)]
    if not values:
        return f"<p>{html.escape(title)}: no data</p>"
    low, high = min(values), max(values)
    high = high if high > low else low + 1.0
    epochs = max(len(points) for points in series.values())
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    parts = [f'<svg class="chart" width="{width}" height="{height}" role="img" '
             f'aria-label="{html.escape(title)}"><text x="{margin}" y="16">{html.escape(title)}</text>',
             f'<line x1="{margin}" y1="{height - margin}" x2="{plot_right}" y2="{height - margin}" '
             'stroke="#999"/>',
             f'<line x1="{margin}" y1="24" x2="{margin}" y2="{height - margin}" stroke="#999"/>',
             f'<text x="2" y="30" font-size="11">{high:.3g}</text>',
             f'<text x="2" y="{height - margin}" font-size="11">{low:.3g}</text>',
             f'<text x="{plot_right - 50}" y="{height - 12}" font-size="11">'
             f'epoch {last_epoch or epochs}</text>']
    if boundary is not None:
        x = margin + (plot_right - margin) * boundary / max(epochs - 1, 1)
        parts.append(f'<line class="phase-boundary" x1="{x:.1f}" y1="24" x2="{x:.1f}" '
                     f'y2="{height - margin}" stroke="#666" stroke-dasharray="4,3"/>'
                     f'<text x="{x + 3:.1f}" y="{height - margin - 4}" font-size="11" '
                     'fill="#666">self-critical</text>')
    for index, (label, points) in enumerate(series.items()):
        coordinates = " ".join(
            f"{margin + (plot_right - margin) * step / max(epochs - 1, 1):.1f},"
            f"{24 + (height - margin - 24) * (1 - (value - low) / (high - low)):.1f}"
            for step, value in enumerate(points) if np.isfinite(value))
        colour = colours[index % len(colours)]
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coordinates}"/>')
        parts.append(f'<text class="legend" x="{plot_right + 12}" y="{30 + 14 * index}" '
                     f'font-size="12" fill="{colour}">{html.escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _metrics_tables(document: dict) -> str:
    parts = []
    for split, result in document["splits"].items():
        parts.append(f"<h3>{html.escape(split)} split ({result['images']} images)</h3>")
        parts.append('<table class="metrics"><tr><th></th>' + "".join(
            f"<th>{name}</th>" for name in caption_metrics.METRIC_NAMES) + "</tr>")
        for row, values in result["metrics"].items():
            parts.append(f"<tr><td>{html.escape(row)}</td>" + "".join(
                f"<td>{values[name]:.4f}</td>" if name in values else "<td>n/a</td>"
                for name in caption_metrics.METRIC_NAMES) + "</tr>")
        parts.append("</table>")
        log_probability = ", ".join(f"{name} {value:.3f}"
                                    for name, value in result["mean_log_probability"].items())
        blind = result["image_blind_captions"]
        parts.append(f"<p>Mean caption log-probability: {html.escape(log_probability)}. "
                     f"Image-blind captions: zero features → “{html.escape(blind['zero_features'])}”; "
                     f"most frequent train caption → “{html.escape(blind['most_frequent_train_caption'])}”."
                     "</p>")
    return "".join(parts)


def _samples(document: dict, model_run_uri: str, examples_uri: str,
             pipeline_config: config_lib.PipelineConfig) -> str:
    import keras

    from components.trainer import (
        losses,  # noqa: F401  (registers the Keras objects)
        run_fn,
    )
    from components.trainer import model as model_lib

    split = list(document["splits"])[-1]
    rows = document["splits"][split]["captions"][:pipeline_config.evaluation.report_images]
    wanted = {row["image_id"] for row in rows}
    features = {image_id: image_features for image_id, image_features, _ in
                split_captions.split_records(examples_uri, split) if image_id in wanted}
    decoder = keras.models.load_model(os.path.join(model_run_uri, run_fn.DECODER_FILE), compile=False)
    image_encoder, _ = model_lib.split_model(decoder)
    incremental = model_lib.IncrementalDecoder(decoder)
    parts = [f"<h2>Sample {html.escape(split)} images</h2>"]
    for row in rows:
        words = row["caption"].split()
        token_ids = np.array([[caption_text.START_ID] + row["tokens"][:len(words)]], np.int32)
        projection = image_encoder(features[row["image_id"]][None].astype(np.float32))
        weights = incremental.attention_weights(projection, token_ids)[0]
        picture = _load_picture(pipeline_config, row["image_id"])
        parts.append('<div class="sample">')
        parts.append(f"<h3>{html.escape(row['image_id'])}</h3>")
        if picture is not None:
            parts.append(f'<img class="picture" alt="{html.escape(row["image_id"])}" '
                         f'src="{_data_uri(picture)}" width="{THUMBNAIL}" height="{THUMBNAIL}">')
        else:
            parts.append("<p>(picture not available)</p>")
        parts.append(f"<p><b>beam search:</b> {html.escape(row['caption']) or '(empty)'}<br>"
                     f"<b>greedy:</b> {html.escape(row['greedy_caption']) or '(empty)'}</p>")
        parts.append("<ol class=\"references\">" + "".join(
            f"<li>{html.escape(reference)}</li>" for reference in row["references"]) + "</ol>")
        if picture is not None and words:
            parts.append('<div class="attention">')
            for index, word in enumerate(words):
                parts.append(f'<figure><img alt="attention for {html.escape(word)}" '
                             f'src="{_data_uri(attention_overlay(picture, weights[index]))}" '
                             f'width="{WORD_THUMBNAIL}" height="{WORD_THUMBNAIL}">'
                             f"<figcaption>{html.escape(word)}</figcaption></figure>")
            parts.append("</div>")
        parts.append("</div>")
    return "".join(parts)


def training_history(model_run_uri: str) -> dict:
    """The Trainer's ``history.json`` (empty without one)."""
    path = os.path.join(model_run_uri, example_format.HISTORY_FILE)
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as stream:
        return json.load(stream)


def _series(history: dict, names: Sequence[str]) -> dict:
    return {name: history[name] for name in names if name in history}


def _training_charts(history: dict) -> List[str]:
    """Loss and token accuracy per epoch; with a self-critical phase, the loss and dev CIDEr-D
    charts run over both phases, its first step (the cross-entropy weights it starts from, where
    no loss is measured) marked by a dashed line."""
    accuracy = _line_chart("token accuracy per epoch",
                           _series(history, ["masked_accuracy", "val_masked_accuracy"]))
    if "dev_cider" not in history:
        return [_line_chart("loss per epoch", _series(history, ["loss", "val_loss"])), accuracy]
    cross_entropy_epochs, scst_epochs = len(history.get("loss", [])), len(history["dev_cider"])
    before, after = [float("nan")] * (cross_entropy_epochs + 1), [float("nan")] * (scst_epochs + 1)
    exported = history.get("exported_weights") or {}
    kept = (f"; exported: {exported.get('phase', '?').replace('_', '-')} epoch {exported.get('epoch', '?')}"
            if exported else "")
    last_epoch = cross_entropy_epochs + scst_epochs
    loss = _line_chart("loss per epoch (cross-entropy, then self-critical policy loss)", {
        **{name: [*values, *after] for name, values in _series(history, ["loss", "val_loss"]).items()},
        "self-critical loss": [*before, *history.get("scst_loss", [])]},
        boundary=cross_entropy_epochs, last_epoch=last_epoch)
    cider = _line_chart(f"dev CIDEr-D per epoch{kept}", {
        # Measured each cross-entropy epoch when a self-critical phase follows (a history from
        # before that has NaN there).
        "dev CIDEr-D": [*history.get("val_cider", [float("nan")] * cross_entropy_epochs),
                        history["dev_cider_before"], *history["dev_cider"]],
        "train sample reward": [*before, *history["scst_reward"]]},
        boundary=cross_entropy_epochs, last_epoch=last_epoch)
    return [loss, accuracy, cider]


PAGE_SCRIPT = """<script>
window.addEventListener('load', () => {
  const images = Array.from(document.images);
  document.body.dataset.imagesTotal = images.length;
  document.body.dataset.imagesLoaded = images.filter(i => i.complete && i.naturalWidth > 0).length;
  // Each chart's legend boxes as laid out (for the report test's overlap check).
  document.querySelectorAll('svg.chart').forEach(svg => {
    svg.dataset.legendBoxes = JSON.stringify(Array.from(svg.querySelectorAll('text.legend'), text => {
      const box = text.getBBox();
      return [box.x, box.y, box.x + box.width, box.y + box.height];
    }));
  });
});
</script>"""

STYLE = """<style>
body { font-family: sans-serif; margin: 2em; max-width: 1100px; }
table.metrics { border-collapse: collapse; margin-bottom: 0.5em; }
table.metrics td, table.metrics th { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
table.metrics td:first-child { text-align: left; }
.sample { border-top: 1px solid #ddd; padding-top: 0.5em; margin-top: 1em; }
.attention figure { display: inline-block; margin: 2px; text-align: center; font-size: 12px; }
.blessed { color: #17803d; } .not-blessed { color: #b42318; }
</style>"""


def write_report(document: dict, history: dict, model_run_uri: str, examples_uri: str,
                 pipeline_config: config_lib.PipelineConfig, path: str) -> str:
    """Renders the page to ``path`` and returns it (``history``: the Trainer's
    :func:`training_history`)."""
    verdict = "BLESSED" if document["blessed"] else "NOT BLESSED"
    parts: List[str] = [
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\">",
        f"<title>Caption evaluation: {verdict}</title>{STYLE}</head><body>",
        f"<h1>Caption evaluation: <span class=\"{'blessed' if document['blessed'] else 'not-blessed'}\">"
        f"{verdict}</span></h1>",
        "<ul class=\"reasons\">" + "".join(f"<li>{html.escape(reason)}</li>"
                                          for reason in document["reasons"]) + "</ul>",
        f"<p>Captions by beam search (width {document['beam_width']}); metrics by pycocoevalcap "
        "(PTB tokenizer; BLEU with closest reference length; METEOR 1.5; ROUGE-L; CIDEr-D). "
        f"Blessing decided on the {html.escape(document['bless_split'])} split by "
        f"{html.escape(document['bless_metric'])}; other splits are reported only.</p>",
        "<h2>Metrics</h2>", _metrics_tables(document),
        "<h2>Training</h2>",
        *_training_charts(history),
        _samples(document, model_run_uri, examples_uri, pipeline_config),
        PAGE_SCRIPT, "</body></html>",
    ]
    with tf.io.gfile.GFile(path, "w") as stream:
        stream.write("\n".join(parts))
    return path
