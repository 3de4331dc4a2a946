"""Where ``report`` output goes, kubectl's way: ``-o FORMAT[,FORMAT...]`` picks the formats, ``--output-file``
the file; ``-f/--format`` and a file given to ``-o`` (the old habit) are caught before any work is done."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from recommender.cli.options import fail

if TYPE_CHECKING:
    from recommender.controller.policy import LabelSelector

SUFFIXES = {"table": ".txt", "wide": ".wide.txt", "json": ".json", "yaml": ".yaml", "csv": ".csv",
            "markdown": ".md", "html": ".html"}  # a plugin's format gets ".<name>"
NOT_A_FORMAT = "-o takes a format (json, yaml, ...); write to a file with --output-file FILE"


def deprecated(old: str, new: str) -> None:
    """One line on stderr for a flag kept one release for old scripts."""
    click.echo(f"note: {old} is deprecated and goes in the next release; use {new}", err=True)


def pick_formats(output: str | None, legacy: str | None) -> tuple[str, ...]:
    """The formats asked for by ``-o`` (or the deprecated ``-f``), each a known one; a one-line error otherwise."""
    from recommender.outputs import formatter_names

    known = formatter_names()
    for given, flag in ((output, "-o"), (legacy, "-f")):
        names = [n.strip() for n in (given or "").split(",")]
        if given is not None and (not all(names) or any(n not in known for n in names)):
            fail(NOT_A_FORMAT if flag == "-o" else f"unknown format {given!r}; known formats: {', '.join(known)}")
    if legacy is not None:
        deprecated("-f/--format", "-o FORMAT")
        if output is not None and output != legacy:
            fail(f"-f {legacy} and -o {output} disagree; give the format once, with -o FORMAT")
    names = [n.strip() for n in (output or legacy or "table").split(",")]
    return tuple(dict.fromkeys(names))


def pick_selector(text: str | None) -> LabelSelector | None:
    """``-l``'s selector, parsed before any work is done; a one-line error when malformed."""
    if text is None:
        return None
    from recommender.cli.selector import parse_selector  # and the controller's policy model, apscheduler: only for -l
    from recommender.core.errors import ConfigError

    try:
        return parse_selector(text)
    except ConfigError as exc:
        fail(str(exc))
        raise AssertionError from exc  # unreachable: fail() exits


def format_paths(output_file: str, formats: tuple[str, ...]) -> dict[str, Path]:
    """Each format's file: ``output_file`` itself for one format; for several, ``output_file`` with each
    format's suffix (``report`` or ``report.json`` -> ``report.json``, ``report.html``)."""
    path = Path(output_file)
    if len(formats) == 1:
        return {formats[0]: path}
    suffixes = [SUFFIXES.get(f, f".{f}") for f in formats]
    stem = next((path.name.removesuffix(s) for s in suffixes if path.name.endswith(s)), path.name)
    return {f: path.with_name(stem + s) for f, s in zip(formats, suffixes, strict=True)}


def legacy_path(old: str | None, new: str | None, new_flag: str) -> str | None:
    """The path of ``new_flag``, or of the deprecated ``-o`` given instead (not a format's name: that is kubectl's
    ``-o``, and a file or folder named ``json`` is never what was meant)."""
    from recommender.outputs import formatter_names

    if old is None:
        return new
    if old in formatter_names():
        fail(f"-o takes a format; this command writes to {new_flag} PATH")
    if new is not None:
        fail(f"give the path once, with {new_flag} (-o is deprecated)")
    deprecated("-o/--output PATH", f"{new_flag} PATH")
    return old


def beside_path(output: Path, fmt: str, suffix: str) -> Path:
    """``report.csv`` → ``report.mig-nodes.csv``: where a file a format writes beside its report goes."""
    return output.with_name(output.name.removesuffix(f".{fmt}") + suffix)


def write_beside(output: Path, fmt: str, files: dict[str, str]) -> None:
    """Files a format writes beside its report, each whole or not at all (checked first, then written)."""
    from recommender.core.writes import check_file, write_file

    for suffix in files:
        check_file(beside_path(output, fmt, suffix))
    for suffix, text in files.items():
        write_file(beside_path(output, fmt, suffix), text)
