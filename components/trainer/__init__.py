"""The Trainer stage: the captioning model (model.py), its loss and metric (losses.py), the input
pipeline (inputs.py), in-graph decoding (decoding.py), the serving SavedModel (export.py) and the
TFX entry point ``run_fn`` (run_fn.py)."""
