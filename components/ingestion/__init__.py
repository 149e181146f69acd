"""The ingestion stage: the caption dataset readers (formats/), image decoding, the Beam job that
writes ResNet50 features as TFRecords (beam_job.py), its TFX ExampleGen component and standalone
entry point (example_gen.py), the demo dataset and the TFDS builder."""
