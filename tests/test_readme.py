"""The README is the user's manual: the settings and make targets it shows exist as written."""

from __future__ import annotations

import os
import re

import pytest

from components import config as config_lib
from pipeline import config_flags

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
    overrides = config_flags.parse_override_args(setting.split())
    config_lib.PipelineConfig().with_overrides(overrides).validate()


def test_the_failing_example_fails_with_the_message_the_readme_prints():
    readme = _readme()
    overrides = config_flags.parse_override_args("trainer.epochs=0 evaluation.bless_metric=BLEU-5".split())
    with pytest.raises(config_lib.ConfigError) as raised:
        config_lib.PipelineConfig().with_overrides(overrides).validate()
    for line in str(raised.value).splitlines()[1:]:
        assert line in readme, line


def test_every_make_target_the_readme_names_is_in_the_makefile():
    with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as stream:
        targets = set(re.findall(r"^([a-z][a-z-]*):", stream.read(), flags=re.MULTILINE))
    shown = set(re.findall(r"\bmake ([a-z][a-z-]*)", _readme()))
    assert shown and shown <= targets, sorted(shown - targets)


def test_make_help_lists_every_target_the_readme_names():
    import subprocess

    shown = set(re.findall(r"\bmake ([a-z][a-z-]*)", _readme()))
    listed = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True,
                            text=True, check=True, timeout=60).stdout
    named = set(re.findall(r"\b([a-z][a-z-]+)\b", listed))
    assert shown - {"help"} <= named, sorted(shown - named)


def test_the_load_snippet_finds_the_version_directories_the_pusher_writes(tmp_path, monkeypatch):
    """The README's Python snippet picks the newest numbered version, whatever its number."""
    snippet = re.search(r'newest = (max\(glob\.glob\("outputs/serving_model/\[0-9\]\*"\).*\))\n',
                        _readme()).group(1)
    for version in ("1796300000", "1796300012", ".staging-1796300013-1-abc"):
        (tmp_path / "outputs" / "serving_model" / version).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    import glob

    newest = eval(snippet, {"glob": glob, "os": os})  # noqa: S307 (the README's own expression)
    assert newest == os.path.join("outputs", "serving_model", "1796300012")


def test_the_readme_opens_with_a_quick_start_of_at_most_25_lines_naming_the_demos_paths():
    readme = _readme()
    sections = re.split(r"^## ", readme, flags=re.MULTILINE)
    assert sections[1].startswith("Quick start\n")
    assert len(sections[1].strip().splitlines()) <= 25
    data = config_lib.DataConfig()
    # The demo the captioner command names is the one make pipeline-local generates by default.
    assert f"outputs/demo_data/seed{data.demo_seed}_n{data.demo_num_images}/{data.image_dir_name}/" \
           f"demo{data.demo_seed}_00000.jpg" in sections[1]
    for target in ("pipeline-local", "test", "pipeline-rehearse", "settings"):
        assert f"make {target}" in sections[1]
