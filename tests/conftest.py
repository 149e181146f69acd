"""Shared pytest set-up: absl flags parsed (absltest-based TFX/TFT test cases need it)."""

from absl import flags


def pytest_configure(config):
    del config
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()
