"""The README is the user's manual: the settings and make targets it shows exist as written."""

from __future__ import annotations

import os
import re

import pytest

from components import config as config_lib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Shown on purpose as what fails or as a placeholder, not as settings to copy.
NOT_COMMANDS = {
    "section.field=value ...",
    "runtime.direct_num_workers=N",
    "trainer.epochs=0 evaluation.bless_metric=BLEU-5",
}


def _readme() -> str:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as stream:
        return stream.read()


def _shown_settings() -> list:
    return sorted(set(re.findall(r'SET="([^"]*)"', _readme())) - NOT_COMMANDS)


def test_the_readme_shows_settings_to_check():
    assert len(_shown_settings()) >= 8


@pytest.mark.parametrize("setting", _shown_settings())
def test_every_setting_the_readme_shows_is_a_valid_config(setting):
    overrides = config_lib.parse_override_args(setting.split())
    config_lib.PipelineConfig().with_overrides(overrides).validate()


def test_the_failing_example_fails_with_the_message_the_readme_prints():
    readme = _readme()
    overrides = config_lib.parse_override_args("trainer.epochs=0 evaluation.bless_metric=BLEU-5".split())
    with pytest.raises(config_lib.ConfigError) as raised:
        config_lib.PipelineConfig().with_overrides(overrides).validate()
    for line in str(raised.value).splitlines()[1:]:
        assert line in readme, line


def test_every_make_target_the_readme_names_is_in_the_makefile():
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as stream:
        targets = set(re.findall(r"^([a-z][a-z-]*):", stream.read(), flags=re.MULTILINE))
    shown = set(re.findall(r"\bmake ([a-z][a-z-]*)", _readme()))
    assert shown and shown <= targets, sorted(shown - targets)
