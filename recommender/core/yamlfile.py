"""Reading a YAML file the user or the package gives, with one line of error when it cannot be read.

The GPU catalogue, the model cards and ``--settings`` read their files through here, so an unreadable file,
a file that is not YAML and a file that is not the mapping expected say so in the same words everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from recommender.core.errors import ConfigError


class YamlFileError(ConfigError):
    """A YAML file could not be read or parsed; ``reason`` is the one-line cause without the path."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def read_yaml(path: str | Path, encoding: str | None = None) -> Any:
    """The parsed document at ``path`` (None for an empty file); :class:`YamlFileError` when it cannot be
    read (``cannot read PATH: strerror``) or parsed (``PATH is not valid YAML: first line of the error``)."""
    try:
        return yaml.safe_load(Path(path).read_text(encoding=encoding))
    except OSError as exc:
        reason = exc.strerror or str(exc).splitlines()[0]
        raise YamlFileError(f"cannot read {path}: {reason}", reason) from exc
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        reason = str(exc).splitlines()[0]
        raise YamlFileError(f"{path} is not valid YAML: {reason}", reason) from exc


def read_mapping(path: str | Path, expected: str, sections: Sequence[str] = ()) -> dict[str, Any]:
    """:func:`read_yaml` of a file that must hold a mapping, with each of ``sections`` a mapping in it;
    otherwise a :class:`ConfigError` ``PATH: expected a mapping with EXPECTED``."""
    data = read_yaml(path)
    if not isinstance(data, dict) or not all(isinstance(data.get(s), dict) for s in sections):
        raise ConfigError(f"{path}: expected a mapping with {expected}")
    return data
