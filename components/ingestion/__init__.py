"""The ingestion stage: the Flickr8k reader (flickr8k.py), image decoding, the Beam job that
writes ResNet50 features as TFRecords (beam_job.py), its TFX ExampleGen component and standalone
entry point (example_gen.py), the demo dataset and the TFDS builder."""
