"""recommender.core.yamlfile: the one way a YAML file is read, and its one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from policies.modelcards import load_model_cards
from recommender.core.catalogue import load_catalogue
from recommender.core.errors import ConfigError
from recommender.core.yamlfile import YamlFileError, read_mapping, read_yaml


def test_errors_are_one_line_with_the_path(tmp_path: Path) -> None:
    with pytest.raises(YamlFileError, match=r"^cannot read .*absent\.yaml: No such file or directory$") as err:
        read_yaml(tmp_path / "absent.yaml")
    assert err.value.reason == "No such file or directory"
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [unclosed\n")
    with pytest.raises(YamlFileError, match=r"^.*bad\.yaml is not valid YAML: [^\n]+$"):
        read_yaml(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: expected a mapping with 'models'$"):
        read_mapping(bad, "'models'", ("models",))
    bad.write_text("models: [a]\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: expected a mapping with 'models'$"):
        read_mapping(bad, "'models'", ("models",))
    assert read_yaml(tmp_path / "bad.yaml") == {"models": ["a"]}


def test_catalogue_and_model_cards_say_the_same_words(tmp_path: Path) -> None:
    bad = tmp_path / "over.yaml"
    bad.write_text("a: [unclosed\n")
    for load in (load_catalogue, load_model_cards):
        with pytest.raises(ConfigError, match=r"over\.yaml is not valid YAML: "):
            load(str(bad))
    bad.write_text("[1, 2]\n")
    with pytest.raises(ConfigError, match=r"over\.yaml: expected a mapping with 'shapes' and/or 'gpus'$"):
        load_catalogue(str(bad))
    with pytest.raises(ConfigError, match=r"over\.yaml: expected a mapping with 'models'$"):
        load_model_cards(str(bad))
