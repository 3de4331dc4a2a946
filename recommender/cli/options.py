"""Options and helpers every rightsizer command shares: durations, times, settings, one-line failures."""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:  # pydantic and the settings models load when a command runs, not for --help
    from recommender.core.settings import Settings

_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


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
    from pydantic import ValidationError

    from recommender.core.settings import (
        ForecastSettings,
        KubernetesSettings,
        PolicySettings,
        PrometheusSettings,
        Settings,
    )

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
                cache=not opts.get("no_cache", False), cache_dir=opts.get("cache_dir"),
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
    from recommender.core.settings import Settings
    from recommender.core.yamlfile import YamlFileError, read_yaml

    try:
        data = read_yaml(path, encoding="utf-8")
    except YamlFileError as exc:
        fail(f"--settings {path}: {exc.reason}")
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
        click.option("--workers", type=int, default=4, show_default=True,
                     help="Queries in flight at once (at most the server's cores, where it says them)."),
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
                          "kubernetes: recommender/core/settings.py); a flag given wins over it."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def cache_options(fn: Any) -> Any:
    """The on-disk cache of the commands that collect once (report, snapshot)."""
    fn = click.option("--no-cache", is_flag=True,
                      help="Read everything from Prometheus; neither use nor update the cache of earlier reports.")(fn)
    # not checked here: a folder that cannot be used is one warning and an uncached report (collectors/.../store.py)
    return click.option("--cache-dir", type=click.Path(readable=False), metavar="DIR",
                        help="Where reports keep what they read from Prometheus, so the next one over the same "
                             "server, selection, step and history reads only new steps [default: "
                             "$XDG_CACHE_HOME/gpu-rightsizer, else ~/.cache/gpu-rightsizer].")(fn)


def pick_source(opts: dict[str, Any]) -> tuple[str, str | None]:
    if opts["demo"]:
        return "demo", None
    if opts.get("snapshot_dir"):
        return "file", opts["snapshot_dir"]
    if opts.get("prometheus_url"):
        return "prometheus", None
    fail("say where the metrics are: --prometheus-url URL (or PROMETHEUS_URL), --snapshot DIR, or --demo")
    raise AssertionError
