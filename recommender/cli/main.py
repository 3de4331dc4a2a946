"""``rightsizer`` command line: thin wrappers that build Settings, pick a source and a formatter.

Expected failures (a dead Prometheus, a bad flag value, an empty namespace) end with one line,
``error: ...``, and exit code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from datetime import datetime
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from recommender.cli.controller import controller, rollback
from recommender.cli.options import build_settings, cache_options, fail, parse_time, pick_source, source_options
from recommender.cli.serve import serve
from recommender.core.errors import RightsizerError

if TYPE_CHECKING:
    from collectors.prometheus.client import PromClient
    from recommender.controller.policy import LabelSelector
    from recommender.core.settings import Settings

FORMATS = ("table", "wide", "json", "yaml", "csv", "markdown", "html")  # built in; plugins add more
OUT_OF_MEMORY = ("ran out of memory (an allocation failed; any file it was writing is left as it was): fewer "
                 "namespaces or workloads (-n, -l), a shorter --history or a larger memory limit needs less")
MAX_HORIZON_STEPS = 20_000  # forecast steps per series (139 days at 10-minute steps): memory grows with it


@click.group()
@click.version_option(package_name="gpu-rightsizer")
def main() -> None:
    """gpu-rightsizer: right-size GPU workloads on Kubernetes from DCGM and vLLM metrics."""


@main.command()
@source_options
@cache_options
@click.option("-o", "--output", "output", metavar="FORMAT[,FORMAT...]",
              help=f"Output format, as kubectl's -o: {', '.join(FORMATS)} (wide: the table at full width, whatever "
                   "the terminal) or a plugin's; several, comma-separated, from one run, with --output-file. "
                   "[default: table]")
@click.option("--output-file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the report to FILE instead of stdout (kubectl has no such flag; it redirects). With several "
                   "formats, each goes to FILE with its suffix: -o json,html --output-file r gives r.json, r.html.")
@click.option("-f", "--format", "legacy_fmt", metavar="FORMAT", help="Deprecated: use -o FORMAT.")
@click.option("-l", "--selector", metavar="SELECTOR",
              help="Only workloads whose labels match, kubectl's syntax: app=chat,tier!=web, env in (a,b), gpu, !spot.")
@click.option("--forecast-horizon", default="24h", show_default=True, help="How far ahead to forecast demand.")
@click.option("--forecast-max", type=click.IntRange(min=0), default=100, show_default=True,
              help="Forecast at most this many workloads (those holding the most GPUs; ~50 ms a series).")
@click.option("--no-forecast", is_flag=True, help="Classify workloads but do not forecast their demand.")
def report(output: str | None, output_file: str | None, legacy_fmt: str | None, selector: str | None,
           **opts: Any) -> None:
    """Dry-run report: what each GPU workload holds, uses, and should get."""
    from recommender.cli.gctune import fewer_collections, no_collection_at_exit
    from recommender.cli.output import pick_formats, pick_selector

    no_collection_at_exit()
    fmts = pick_formats(output, legacy_fmt)
    labels = pick_selector(selector)
    if len(fmts) > 1 and not output_file:
        fail(f"-o {','.join(fmts)} writes several files: add --output-file NAME (gives NAME.json, ...)")
    settings = build_settings(opts)
    name, path = pick_source(opts)
    end = parse_time(opts.get("end_time"))
    client = _census_ahead(name, settings, end)
    with fewer_collections(lambda: import_module("recommender.cli.app")):
        _report(fmts, labels, output_file, settings, (name, path), end, client)


def _census_ahead(source: str, settings: Settings, end: datetime) -> PromClient | None:
    """Prometheus' client, having sent a cached collection's census while the collector and pandas import
    (``collectors.prometheus.ahead``); None for another source or where the cache says nothing."""
    if source != "prometheus":
        return None
    from collectors.prometheus.ahead import census_ahead

    try:
        return census_ahead(settings, end)
    except RightsizerError:  # the collection meets it again, where it is one line
        return None


def _report(fmts: tuple[str, ...], labels: LabelSelector | None, output_file: str | None, settings: Settings,
            source: tuple[str, str | None], end: datetime, client: PromClient | None) -> None:
    from recommender.cli.app import make_reports
    from recommender.cli.output import beside_path, format_paths, write_beside
    from recommender.core.writes import check_file, write_file

    name, path = source
    paths = format_paths(output_file, fmts) if output_file else {}
    try:
        for dest in paths.values():
            check_file(dest)  # before the run, not after it
        rendered = make_reports(name, path, settings, end, fmts, labels, client)
        for fmt, dest in paths.items():
            write_file(dest, rendered[fmt][0])
            write_beside(dest, fmt, rendered[fmt][1])
    except RightsizerError as exc:
        fail(str(exc))
        return
    except MemoryError:
        fail(OUT_OF_MEMORY)
        return
    if paths:
        for fmt, dest in paths.items():
            click.echo(f"wrote {fmt} report to {dest}", err=True)
            for suffix in rendered[fmt][1]:
                click.echo(f"wrote {beside_path(dest, fmt, suffix)}", err=True)
        return
    text, beside = rendered[fmts[0]]
    click.echo(text, nl=not text.endswith("\n"))
    if beside:
        click.echo(f"note: the {fmts[0]} report leaves out {', '.join(s.lstrip('.') for s in beside)}: give "
                   "--output-file FILE to write them beside it", err=True)


@main.command()
@source_options
@cache_options
@click.option("--output-dir", type=click.Path(file_okay=False), metavar="DIR", help="Directory to write (required).")
@click.option("-o", "--output", "legacy_output", type=click.Path(file_okay=False), metavar="DIR",
              help="Deprecated: use --output-dir DIR.")
def snapshot(output_dir: str | None, legacy_output: str | None, **opts: Any) -> None:
    """Save the collected snapshot to a directory, for offline analysis or a later --snapshot."""
    from recommender.cli.output import legacy_path
    from recommender.core.writes import check_dir

    output = legacy_path(legacy_output, output_dir, "--output-dir")
    if not output:
        fail("say where to write the snapshot: --output-dir DIR")
        return
    settings = build_settings(opts)
    name, path = pick_source(opts)
    end = parse_time(opts.get("end_time"))
    try:
        check_dir(output)  # before the run, not after it
        client = _census_ahead(name, settings, end)
        from recommender.cli.app import save_snapshot

        save_snapshot(name, path, settings, end, Path(output), client)
    except RightsizerError as exc:
        fail(str(exc))
        return
    except MemoryError:
        fail(OUT_OF_MEMORY)
        return
    click.echo(f"wrote snapshot to {output}", err=True)


@main.command()
@click.argument("input_csv", metavar="CSV", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--horizon", type=click.IntRange(min=1, max=MAX_HORIZON_STEPS), required=True,
              help=f"Steps to forecast, in each series' own step (144 at 10-minute steps = 1 day; at most "
                   f"{MAX_HORIZON_STEPS:,}).")
@click.option("--level", "levels", type=click.IntRange(1, 99), multiple=True, default=(80, 95), show_default=True,
              help="Prediction-interval level in percent (repeatable).")
@click.option("--output-file", type=click.Path(dir_okay=False), metavar="FILE",
              help="Write the forecasts to FILE (default stdout).")
@click.option("-o", "--output", "legacy_output", type=click.Path(dir_okay=False), metavar="FILE",
              help="Deprecated: use --output-file FILE.")
def forecast(input_csv: str, horizon: int, levels: tuple[int, ...], output_file: str | None,
             legacy_output: str | None) -> None:
    """Forecast every series of a CSV (series_id, timestamp, value) with prediction bands, as CSV.

    Timestamps are unix seconds or ISO 8601 (one form per file). Each series gets the model that did
    best in a backtest at this horizon; a series with too little history is skipped with a warning.
    """
    from recommender.analysis.forecast.batch import forecast_many
    from recommender.analysis.forecast.csvio import forecasts_frame, read_series_csv, write_forecasts_csv
    from recommender.cli.app import RichProgress
    from recommender.cli.output import legacy_path
    from recommender.core.writes import check_file, write_with

    output = legacy_path(legacy_output, output_file, "--output-file")
    try:
        if output:
            check_file(output)  # before the work, not after it
        series = read_series_csv(sys.stdin if input_csv == "-" else input_csv)
    except (RightsizerError, OSError) as exc:
        fail(f"{input_csv}: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}")
        return
    with RichProgress() as progress:
        results, skipped = forecast_many(series, horizon, levels, progress)
    for line in skipped:
        click.echo(f"warning: {line}", err=True)
    if not results:
        fail(f"{input_csv}: none of its {len(series)} series could be forecast")
    frame = forecasts_frame(results, sorted(set(levels)))
    if output:
        try:
            write_with(output, lambda tmp: write_forecasts_csv(frame, tmp))
        except RightsizerError as exc:
            fail(str(exc))
        click.echo(f"wrote {len(frame)} rows for {len(results)} series to {output}", err=True)
    else:
        write_forecasts_csv(frame, sys.stdout)



main.add_command(controller)
main.add_command(rollback)


main.add_command(serve)
