"""The report's training charts: legends never cover a plotted line (from the SVG geometry)."""

import re

from components.evaluation import report

# Wider than any sans-serif glyph at the chart's 12 px legend font (Chromium's DejaVu Sans
# measured 7.1 px at most per character in the report test); an estimate that errs towards
# finding an overlap.
CHARACTER_WIDTH_PX, LEGEND_FONT_PX = 8.0, 12.0


def legend_boxes(svg):
    """(left, top, right, bottom) of each legend label, from its x, y and text."""
    return [(float(x), float(y) - LEGEND_FONT_PX, float(x) + CHARACTER_WIDTH_PX * len(text),
             float(y) + 3.0)
            for x, y, text in re.findall(
                r'<text class="legend" x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]*)</text>', svg)]


def polylines(svg):
    return [[tuple(float(value) for value in point.split(",")) for point in points.split()]
            for points in re.findall(r'<polyline [^>]*points="([^"]*)"', svg)]


def segment_hits_box(start, end, box, samples=200):
    left, top, right, bottom = box
    return any(left <= start[0] + (end[0] - start[0]) * step / samples <= right
               and top <= start[1] + (end[1] - start[1]) * step / samples <= bottom
               for step in range(samples + 1))


def overlaps(svg, boxes=None):
    """Legend boxes crossed by a plotted segment (each box once)."""
    boxes = legend_boxes(svg) if boxes is None else boxes
    lines = polylines(svg)
    return [box for box in boxes
            if any(segment_hits_box(start, end, box)
                   for line in lines for start, end in zip(line, line[1:], strict=False))]


def test_legends_stay_clear_of_curves_that_end_where_the_legend_used_to_be():
    """Accuracy rising to the top right and loss falling to the bottom right, with long labels:
    the legend sat top-right inside the plot, over the accuracy curves."""
    rising = [0.1 + 0.8 * epoch / 24 for epoch in range(25)]
    charts = {
        "token accuracy per epoch": {"masked_accuracy": rising,
                                     "val_masked_accuracy": [value * 0.97 for value in rising]},
        "loss per epoch": {"loss": [3.0 - value * 3 for value in rising],
                           "val_loss": [3.1 - value * 3 for value in rising]},
        "flat": {"a_very_long_metric_name_indeed": [1.0] * 25, "other": [0.5] * 25},
    }
    for title, series in charts.items():
        svg = report._line_chart(title, series)
        assert len(legend_boxes(svg)) == len(series) and len(polylines(svg)) == len(series)
        assert overlaps(svg) == [], title


def test_the_overlap_check_finds_a_legend_drawn_on_a_line():
    svg = ('<svg><polyline points="0,10 100,10"/>'
           '<text class="legend" x="40" y="14" font-size="12">loss</text></svg>')
    assert overlaps(svg) == legend_boxes(svg)


def boundaries(svg):
    return [float(x) for x in re.findall(r'<line class="phase-boundary" x1="([\d.]+)"', svg)]


def test_with_a_self_critical_phase_loss_and_dev_cider_run_over_both_phases_with_the_boundary_marked():
    """3 cross-entropy epochs (dev CIDEr measured each, as trainer.select_on=dev_cider does), the
    cross-entropy weights the phase starts from, then 2 self-critical epochs."""
    history = {"loss": [3.0, 2.0, 1.5], "val_loss": [3.1, 2.2, 1.8], "masked_accuracy": [0.2, 0.4, 0.5],
               "val_cider": [0.5, 1.0, 1.4], "dev_cider_before": 1.5, "dev_cider": [1.7, 1.6],
               "scst_loss": [-0.05, 0.02], "scst_reward": [1.2, 1.4],
               "exported_weights": {"phase": "self_critical", "epoch": 1}}
    loss, accuracy, cider = report._training_charts(history)
    assert "exported: self-critical epoch 1" in cider and "epoch 5</text>" in cider
    train_loss, dev_loss, scst_loss = polylines(loss)
    (boundary,) = boundaries(loss)
    assert boundaries(cider) == [boundary] and boundaries(accuracy) == []
    # Cross-entropy losses left of the boundary, the policy loss right of it.
    assert len(train_loss) == len(dev_loss) == 3 and len(scst_loss) == 2
    assert max(x for x, _ in train_loss + dev_loss) < boundary < min(x for x, _ in scst_loss)
    dev, reward = polylines(cider)
    # Dev CIDEr-D at each cross-entropy epoch, on the boundary (the weights the phase starts
    # from) and each self-critical epoch; the reward only where samples were drawn.
    assert len(dev) == 6 and dev[3][0] == boundary and len(reward) == 2 and reward[0][0] > boundary
    assert overlaps(loss) == overlaps(cider) == []
    # Without select_on=dev_cider the cross-entropy epochs have no dev CIDEr-D: the curve starts
    # at the boundary.
    without = {key: value for key, value in history.items() if key != "val_cider"}
    dev, _ = polylines(report._training_charts(without)[2])
    assert len(dev) == 3 and dev[0][0] == boundary


def test_without_a_self_critical_phase_the_charts_are_loss_and_accuracy_only():
    charts = report._training_charts({"loss": [2.0, 1.0], "val_loss": [2.1, 1.2],
                                      "masked_accuracy": [0.3, 0.5]})
    assert len(charts) == 2 and not any(boundaries(chart) for chart in charts)
