"""``rightsizer controller`` (the in-cluster loop) and ``rightsizer rollback`` (undo the last change).

Thin: build a Kube client and a Controller, then hand over to ``recommender.controller``. Expected
failures end with one line, ``error: ...``, exit code 2.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from recommender.cli.options import SETTINGS_SECTIONS, build_settings, fail, parse_duration, source_options
from recommender.core.errors import RightsizerError

if TYPE_CHECKING:
    from recommender.analysis.forecast import ModelChoice
    from recommender.controller.constraints import Constrain
    from recommender.core.settings import Settings
    from recommender.pipeline.planstore import PlanStore


def _kube(kubeconfig: str | None, context: str | None, host: str | None, timeout_s: float) -> Any:
    from collectors.kubernetes import make_api_client
    from recommender.controller.kube import Kube
    from recommender.core.settings import KubernetesSettings

    api = make_api_client(KubernetesSettings(kubeconfig=kubeconfig, context=context, host=host, timeout_s=timeout_s))
    return Kube(api, timeout_s)


@click.command()
@source_options
@click.option("--interval", default="5m", show_default=True, help="Time between reconciles.")
@click.option("--dry-run", is_flag=True, help="Log the diff of every change instead of applying it.")
@click.option("--once", is_flag=True, help="Reconcile once and exit (status 1 when anything failed).")
@click.option("--lease-namespace", envvar="POD_NAMESPACE", show_envvar=True, default="gpu-rightsizer",
              show_default=True)
@click.option("--lease-name", default="gpu-rightsizer-leader", show_default=True)
@click.option("--identity", envvar="POD_NAME", show_envvar=True, default=None,
              help="Leader-election identity (default: hostname).")
@click.option("--mig-configmap", help="NAMESPACE/NAME of the mig-parted ConfigMap (key config.yaml) to extend.")
@click.option("--no-serve", is_flag=True, help="Do not start the /healthz, /readyz and /metrics servers.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="Controller ConfigMap file (mode, annotation_mode, signing_secret, interval_s, namespaces, "
                   "history_s, leader_election, serve, "
                   "and the settings sections prometheus, kubernetes, policy, forecast, scaling, mechanisms, "
                   "prices); flags given on the command line win.")
@click.option("--max-mode", type=click.Choice(["Off", "Recommend", "Auto"]), default=None,
              help="The most any policy may do (default Auto, or the config's mode).")
def controller(interval: str, dry_run: bool, once: bool, lease_namespace: str, lease_name: str,
               identity: str | None, mig_configmap: str | None, no_serve: bool, config_file: str | None,
               max_mode: str | None, **opts: Any) -> None:
    """Run in the cluster: plan on a schedule, write recommendations, act on Auto policies."""
    from recommender.controller.kube import Kube
    from recommender.controller.leader import LeaderElector
    from recommender.controller.loop import Controller
    from recommender.controller.mig import MigSettings
    from recommender.controller.policy import Mode
    from recommender.controller.schedule import run_scheduled
    from recommender.controller.signing import SIGNING_SECRET, SecretKeys
    from recommender.core.stopping import on_signals
    from recommender.pipeline.planstore import PlanStore

    cfg = _read_config(config_file) if config_file else {}
    opts["settings_data"] = {k: cfg[k] for k in SETTINGS_SECTIONS if k in cfg}  # over --settings, under flags
    if cfg.get("prometheus", {}).get("url") and not opts.get("prometheus_url"):
        opts["prometheus_url"] = cfg["prometheus"]["url"]
    if cfg.get("namespaces") and not opts.get("namespace"):
        opts["namespace"] = tuple(cfg["namespaces"])
    if cfg.get("history_s") and opts.get("history") == "14d":
        opts["history"] = f"{float(cfg['history_s']):g}s"
    if cfg.get("interval_s") and interval == "5m":
        interval = f"{float(cfg['interval_s']):g}s"
    election = cfg.get("leader_election") or {"enabled": True}
    lease_name = election.get("lease_name", lease_name)
    lease_namespace = election.get("lease_namespace", lease_namespace)
    timing = _lease_timing(election)
    cap = Mode(max_mode or cfg.get("mode") or "Auto")
    annotation_cap = Mode(cfg.get("annotation_mode") or "Recommend")
    logging.basicConfig(level=logging.INFO, format='{"time":"%(asctime)s","level":"%(levelname)s",'
                        '"logger":"%(name)s","message":"%(message)s"}')
    settings = floor_over_interval(build_settings(opts), parse_duration(interval))
    source = "demo" if opts["demo"] else "file" if opts.get("snapshot_dir") else "prometheus"
    if source == "prometheus" and not opts.get("prometheus_url"):
        fail("say where the metrics are: --prometheus-url URL (or PROMETHEUS_URL)")
    where = tuple(mig_configmap.split("/", 1)) if mig_configmap else None
    if where is not None and len(where) != 2:
        fail(f"--mig-configmap {mig_configmap!r} is not NAMESPACE/NAME")
    try:
        kube = _kube(opts.get("kubeconfig"), opts.get("context"), None, settings.kubernetes.timeout_s)
    except RightsizerError as exc:
        fail(str(exc))
        return

    store = PlanStore()
    plan_fn = Cycle(source, opts.get("snapshot_dir"), settings, store)
    elector = LeaderElector(Kube(kube.api, timing.api_timeout_s), lease_namespace, lease_name,
                            identity or socket.gethostname() or str(os.getpid()),
                            timing) if election.get("enabled") else None
    # the change records' signing key: a Secret in the controller's own namespace, made on first use
    keys = SecretKeys(kube, lease_namespace, cfg.get("signing_secret") or SIGNING_SECRET, create=not dry_run)
    ctl = Controller(kube, plan_fn, elector=elector, store=store, dry_run=dry_run, namespaces=settings.namespaces,
                     mig=MigSettings(configmap=where), max_mode=cap,  # type: ignore[arg-type]
                     exclusive_nodes=settings.mechanisms.exclusive_node_selector, keys=keys,
                     annotation_mode=annotation_cap)
    if once:
        if elector is not None:
            elector.start()  # renewed while the pass runs, released after it
        try:
            report = ctl.reconcile()
        finally:
            if elector is not None:
                elector.stop()
        for o in report.outcomes:
            click.echo(f"{o.workload}: {o.status}: {o.message}")
        for line in report.errors:
            click.echo(f"error: {line}", err=True)
        raise SystemExit(1 if report.errors else 0)
    servers = None if no_serve else _serve(store, cfg.get("serve") or {}, kube.api)
    stop = on_signals()
    try:
        run_scheduled(ctl, parse_duration(interval), stop)
    finally:
        if servers is not None:
            servers.stop()


class Cycle:
    """One controller cycle: collect and plan. Its usage cache lets every cycle after the first read only the
    steps added since; the last plan in ``store`` carries capacity forward (policies.replicas.keep_lower_bound);
    the last cycle's forecast model choices (``choices``) are handed to the next, which refits a choice younger
    than ``forecast.reselect_s`` instead of choosing again; a collector's line that the last cycle logged too is
    not logged again."""

    def __init__(self, source: str, path: str | None, settings: Settings, store: PlanStore) -> None:
        from collectors.prometheus.cache import UsageCache

        self.source, self.path, self.settings, self.store = source, path, settings, store
        self.cache = UsageCache()
        self.said: frozenset[str] = frozenset()
        self.choices: dict[str, dict[str, ModelChoice]] = {}  # workload key -> metric -> model (run_cycle's)

    def __call__(self, now: datetime, constrain: Constrain) -> Any:
        """Collect, then plan with the policies' constraints on the workloads collected."""
        from recommender.cli.app import RichProgress, collect
        from recommender.pipeline.run import run_cycle

        with RichProgress(quiet=self.said) as progress:
            snap = collect(self.source, self.path, self.settings, now, self.cache, progress)
        self.said = frozenset(progress.said)
        last = self.store.latest()
        done = run_cycle(snap, self.settings, now, previous=last.plan if last else None,
                         constraints=constrain(snap.workloads), choices=self.choices)
        self.choices = done.choices
        return done.plan, snap


def _read_config(path: str) -> dict[str, Any]:
    """The controller ConfigMap's config.yaml; a missing or malformed file ends with one line."""
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh) or {}
    except (OSError, yaml.YAMLError) as exc:
        fail(f"--config {path}: {exc}")
    modes = ("Off", "Recommend", "Auto")
    if not isinstance(data, dict) or data.get("mode", "Auto") not in modes \
            or data.get("annotation_mode", "Recommend") not in modes:
        fail(f"--config {path}: expected a mapping whose mode and annotation_mode are Off, Recommend or Auto")
    bad = [k for k in (*SETTINGS_SECTIONS, "leader_election", "serve") if k in data and not isinstance(data[k], dict)]
    if bad:
        fail(f"--config {path}: {bad[0]} must be a mapping of settings, not {type(data[bad[0]]).__name__}")
    return data


def _lease_timing(election: dict[str, Any]) -> Any:
    """The ``leader_election`` section's timing (recommender.controller.lease.LeaseTiming); a bad value or
    one that breaks ``renew_deadline_s + api_timeout_s < lease_duration_s`` ends with one line."""
    from pydantic import ValidationError

    from recommender.controller.lease import LeaseTiming

    try:
        return LeaseTiming.model_validate({k: v for k, v in election.items()
                                           if k not in ("enabled", "lease_name", "lease_namespace")})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        fail(f"invalid leader_election setting{' ' + where if where else ''}: {err['msg']}")
        raise AssertionError from exc


def _serve(store: Any, serve_cfg: dict[str, Any], kube_api: Any = None) -> Any:
    """/healthz, /readyz and /metrics from recommender.serve (ready once a plan exists); ``kube_api``
    reads the front-proxy settings when ``requestheader_from_cluster`` asks for them."""
    from pydantic import ValidationError

    from recommender.serve import start_servers
    from recommender.serve.settings import ServeSettings

    try:
        settings = ServeSettings.model_validate(serve_cfg)
    except ValidationError as exc:
        err = exc.errors()[0]
        fail(f"invalid serve setting {'.'.join(str(x) for x in err['loc'])}: {err['msg']}")
        raise AssertionError from exc
    try:
        return start_servers(store, settings, health=lambda: True, ready=lambda: store.latest() is not None,
                             kube_api=kube_api)
    except RightsizerError as exc:  # e.g. the requestheader CA or the TLS key cannot be read: one line
        fail(str(exc))
        raise AssertionError from exc


@click.command()
@click.argument("target", metavar="NAMESPACE/KIND/NAME")
@click.option("--dry-run", is_flag=True, help="Show what would be restored, change nothing.")
@click.option("--kubeconfig", type=click.Path(), help="kubeconfig to use.")
@click.option("--context", help="kubeconfig context.")
@click.option("--server", "host", help="API server URL (overrides the kubeconfig's).", hidden=True)
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds per API call.")
@click.option("--signing-secret", default="gpu-rightsizer/gpu-rightsizer-signing-key", show_default=True,
              metavar="NAMESPACE/NAME",
              help="The controller's signing-key Secret: a change record is undone only when the controller signed "
                   "it, so you need read access to this Secret.")
def rollback(target: str, dry_run: bool, kubeconfig: str | None, context: str | None, host: str | None,
             timeout: float, signing_secret: str) -> None:
    """Restore the values the last recorded change replaced (annotation rightsizer.io/last-change)."""
    from recommender.controller.actuator import Actuator
    from recommender.controller.changeset import ACTUATED_KINDS, ObjectRef
    from recommender.controller.signing import SecretKeys
    from recommender.core.settings import MechanismSettings

    parts = target.split("/")
    if len(parts) != 3 or not all(parts):
        fail(f"{target!r} is not NAMESPACE/KIND/NAME, e.g. llm/Deployment/chat")
    if parts[1] not in ACTUATED_KINDS:
        fail(f"kind {parts[1]!r} is not actuated; one of {', '.join(sorted(ACTUATED_KINDS))}")
    secret = signing_secret.split("/")
    if len(secret) != 2 or not all(secret):
        fail(f"--signing-secret {signing_secret!r} is not NAMESPACE/NAME")
    try:
        kube = _kube(kubeconfig, context, host, timeout)
        signer = SecretKeys(kube, secret[0], secret[1]).load()
    except RightsizerError as exc:
        fail(f"{exc} (rollback checks the change record's signature with it)")
        return
    actuator = Actuator(kube, dry_run=dry_run, signer=signer,
                        selector_keys=tuple(sorted(MechanismSettings().exclusive_node_selector)))
    out = actuator.rollback(ObjectRef(parts[1], parts[0], parts[2]), datetime.now(UTC), "rightsizer rollback")
    if not out.ok:
        fail(f"{out.status}: {out.message}")
    click.echo(f"{out.workload}: {out.status}: {out.message}")


def floor_over_interval(settings: Settings, interval_s: float) -> Settings:
    """``settings`` with the recurring-burst floor reaching until the next pass (``interval_s``) unless the user set
    ``scaling.recurring_floor_interval_s`` (null: off): a floor lasts until the plan after it, so it is on
    wherever plans follow one another, and only there."""
    scaling = settings.scaling
    if "recurring_floor_interval_s" in scaling.model_fields_set:
        return settings
    return settings.model_copy(update={"scaling": scaling.model_copy(
        update={"recurring_floor_interval_s": float(interval_s)})})
