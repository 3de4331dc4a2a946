"""``rightsizer`` command line: thin wrappers that build Settings, pick a source and a formatter.

Expected failures (a dead Prometheus, a bad flag value, an empty namespace) end with one line,
``error: ...``, and exit code 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from recommender.errors import RightsizerError
from recommender.settings import ForecastSettings, KubernetesSettings, PolicySettings, PrometheusSettings, Settings

_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
FORMATS = ("table", "wide", "json", "yaml", "csv", "markdown", "html")  # built in; plugins add more
MAX_HORIZON_STEPS = 20_000  # forecast steps per series (139 days at 10-minute steps): memory grows with it


def parse_duration(text: str) -> float:
    """'14d', '12h', '90m', '3600s', '2w' or '1d12h' → seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhdw])", text.strip())
    if not parts or "".join(a + b for a, b in parts) != text.strip():
        raise click.BadParameter(f"{text!r} is not a duration like 14d, 12h or 90m")
    return sum(float(n) * _UNITS_S[u] for n, u in parts)


def parse_time(text: str | None) -> datetime:
    """ISO-8601 or unix seconds; naive times are UTC. None → now."""
    if text is None:
        return datetime.now(UTC)
    try:
        return datetime.fromtimestamp(float(text), UTC)
    except ValueError:
        pass
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{text!r} is not an ISO-8601 time or unix seconds") from None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


SETTINGS_SECTIONS = ("prometheus", "kubernetes", "policy", "forecast", "scaling", "mechanisms", "prices")


def build_settings(opts: dict[str, Any]) -> Settings:
    """Settings from the settings file (``--settings``, or the controller ConfigMap's sections in
    ``opts["settings_data"]``) with the CLI's options on top where they differ from their defaults; invalid
    values or unknown keys end the run with one line."""
    data = merge_settings(read_settings_file(opts.get("settings_file")), opts.get("settings_data") or {})
    try:
        flags = Settings(
            namespaces=tuple(opts["namespace"]),
            history_s=parse_duration(opts["history"]),
            prometheus=PrometheusSettings(
                url=opts.get("prometheus_url"), bearer_token=opts.get("bearer_token"),
                username=opts.get("username"), password=opts.get("password"), ca_file=opts.get("ca_file"),
                client_cert=opts.get("client_cert"), client_key=opts.get("client_key"),
                insecure_skip_verify=opts.get("insecure", False), timeout_s=opts.get("timeout", 60.0),
                max_workers=opts.get("workers", 4),
            ),
            kubernetes=KubernetesSettings(enabled=not opts.get("no_kubernetes", False),
                                          kubeconfig=opts.get("kubeconfig"), context=opts.get("context")),
            policy=PolicySettings(catalogue_override=opts.get("gpu_catalogue"),
                                  models_override=opts.get("model_catalogue"),
                                  min_history_s=parse_duration(opts.get("min_history") or "24h")),
            forecast=ForecastSettings(enabled=not opts.get("no_forecast", False),
                                      horizon_s=parse_duration(opts.get("forecast_horizon") or "24h"),
                                      max_workloads=opts.get("forecast_max", 100)),
        )
        return Settings.model_validate(merge_settings(data, flags.model_dump(exclude_defaults=True))) if data \
            else flags
    except ValidationError as exc:
        err = exc.errors()[0]
        fail(f"invalid setting {'.'.join(str(x) for x in err['loc'])}: {err['msg']}")
        raise AssertionError from exc  # unreachable: fail() exits


def read_settings_file(path: str | None) -> dict[str, Any]:
    """The settings file's mapping ({} without one); unreadable, not YAML, not a mapping or an unknown section
    ends the run with one line."""
    if not path:
        return {}
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        fail(f"--settings {path}: {getattr(exc, 'strerror', None) or str(exc).splitlines()[0]}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        fail(f"--settings {path}: expected a mapping of sections ({', '.join(SETTINGS_SECTIONS)})")
    unknown = sorted(str(k) for k in data if k not in Settings.model_fields)
    if unknown:
        fail(f"--settings {path}: unknown section {unknown[0]!r}; known: {', '.join(Settings.model_fields)}")
    return dict(data)


def merge_settings(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over``'s values on top, section by section (a mapping merges, anything else replaces)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = merge_settings(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@click.group()
@click.version_option(package_name="gpu-rightsizer")
def main() -> None:
    """gpu-rightsizer: right-size GPU workloads on Kubernetes from DCGM and vLLM metrics."""


def source_options(fn: Any) -> Any:
    """Options shared by every command that reads a snapshot."""
    opts = [
        click.option("--demo", is_flag=True, help="Use the bundled demo cluster (no cluster or Prometheus needed)."),
        click.option("--snapshot", "snapshot_dir", type=click.Path(), help="Read a snapshot directory instead."),
        click.option("--prometheus-url", envvar="PROMETHEUS_URL", show_envvar=True,
                     help="Prometheus-compatible API base URL."),
        click.option("--bearer-token", envvar="PROMETHEUS_TOKEN", show_envvar=True,
                     help="Bearer token for Prometheus."),
        click.option("--username", envvar="PROMETHEUS_USERNAME", show_envvar=True,
                     help="Basic-auth user for Prometheus."),
        click.option("--password", envvar="PROMETHEUS_PASSWORD", show_envvar=True,
                     help="Basic-auth password for Prometheus."),
        click.option("--ca-file", type=click.Path(), help="CA bundle for Prometheus TLS."),
        click.option("--client-cert", type=click.Path(), help="Client certificate for mutual TLS."),
        click.option("--client-key", type=click.Path(), help="Client key for mutual TLS."),
        click.option("--insecure", is_flag=True, help="Skip TLS verification (testing only)."),
        click.option("--timeout", type=float, default=60.0, show_default=True, help="Seconds per HTTP request."),
        click.option("--workers", type=int, default=4, show_default=True, help="Queries in flight at once."),
        click.option("-n", "--namespace", multiple=True, help="Namespace to analyse (repeatable; default all)."),
        click.option("--history", default="14d", show_default=True, help="How far back to read usage."),
        click.option("--end", "end_time", help="End of the window (ISO-8601 or unix s; default now)."),
        click.option("--min-history", default="24h", show_default=True,
                     help="History a firm recommendation needs; with less, down to policy.provisional_min_history_s "
                          "(6h), it is provisional: wider bounds, low confidence, never applied by Auto."),
        click.option("--kubeconfig", type=click.Path(), help="kubeconfig for the workload inventory."),
        click.option("--context", help="kubeconfig context."),
        click.option("--no-kubernetes", is_flag=True, help="Do not call the Kubernetes API (use KSM metrics)."),
        click.option("--gpu-catalogue", type=click.Path(), help="YAML overriding/extending the GPU catalogue."),
        click.option("--model-catalogue", type=click.Path(), help="YAML overriding/extending the model cards."),
        click.option("--settings", "settings_file", type=click.Path(dir_okay=False),
                     help="YAML of settings by section (scaling, mechanisms, prices, policy, forecast, prometheus, "
                          "kubernetes: recommender/settings.py); a flag given wins over it."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def pick_source(opts: dict[str, Any]) -> tuple[str, str | None]:
    if opts["demo"]:
        return "demo", None
    if opts.get("snapshot_dir"):
        return "file", opts["snapshot_dir"]
    if opts.get("prometheus_url"):
        return "prometheus", None
    fail("say where the metrics are: --prometheus-url URL (or PROMETHEUS_URL), --snapshot DIR, or --demo")
    raise AssertionError


@main.command()
@source_options
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
    from recommender.app import make_reports
    from recommender.cli_output import beside_path, format_paths, pick_formats, pick_selector, write_beside
    from recommender.writes import check_file, write_file

    fmts = pick_formats(output, legacy_fmt)
    labels = pick_selector(selector)
    if len(fmts) > 1 and not output_file:
        fail(f"-o {','.join(fmts)} writes several files: add --output-file NAME (gives NAME.json, ...)")
    settings = build_settings(opts)
    name, path = pick_source(opts)
    paths = format_paths(output_file, fmts) if output_file else {}
    try:
        for dest in paths.values():
            check_file(dest)  # before the run, not after it
        rendered = make_reports(name, path, settings, parse_time(opts.get("end_time")), fmts, labels)
        for fmt, dest in paths.items():
            write_file(dest, rendered[fmt][0])
            write_beside(dest, fmt, rendered[fmt][1])
    except RightsizerError as exc:
        fail(str(exc))
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
@click.option("--output-dir", type=click.Path(file_okay=False), metavar="DIR", help="Directory to write (required).")
@click.option("-o", "--output", "legacy_output", type=click.Path(file_okay=False), metavar="DIR",
              help="Deprecated: use --output-dir DIR.")
def snapshot(output_dir: str | None, legacy_output: str | None, **opts: Any) -> None:
    """Save the collected snapshot to a directory, for offline analysis or a later --snapshot."""
    from recommender.app import save_snapshot
    from recommender.cli_output import legacy_path
    from recommender.writes import check_dir

    output = legacy_path(legacy_output, output_dir, "--output-dir")
    if not output:
        fail("say where to write the snapshot: --output-dir DIR")
        return
    settings = build_settings(opts)
    name, path = pick_source(opts)
    try:
        check_dir(output)  # before the run, not after it
        save_snapshot(name, path, settings, parse_time(opts.get("end_time")), Path(output))
    except RightsizerError as exc:
        fail(str(exc))
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
    from recommender.app import RichProgress
    from recommender.cli_output import legacy_path
    from recommender.forecast.batch import forecast_many
    from recommender.forecast.csvio import forecasts_frame, read_series_csv, write_forecasts_csv
    from recommender.writes import check_file, write_with

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


from recommender.cli_controller import controller, rollback  # noqa: E402  (needs main's helpers)

main.add_command(controller)
main.add_command(rollback)

from recommender.cli_serve import serve  # noqa: E402  (needs main's helpers)

main.add_command(serve)
