"""The built-in sources: the bundled demo, a snapshot directory, and a live Prometheus (+ Kubernetes)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

from collectors.registry import SourceRequest, register_source
from collectors.snapshot import assemble
from collectors.usageframes import fill_at_zero
from recommender.core.catalogue import load_catalogue
from recommender.core.errors import ConfigError, KubernetesError
from recommender.core.inventory import GpuNode, Workload
from recommender.core.progress import Progress
from recommender.core.usage import Snapshot


def _select(snapshot: Snapshot, namespaces: tuple[str, ...]) -> Snapshot:
    """Keep only the chosen namespaces (file and demo sources hold everything)."""
    if not namespaces:
        return snapshot
    keep = tuple(w for w in snapshot.workloads if w.ref.namespace in namespaces)
    keys = {w.ref.key for w in keep}
    usage = {m: f[[c for c in f.columns if c in keys]] for m, f in snapshot.usage.items()}
    return replace(snapshot, workloads=keep, usage=usage)


@register_source("demo")
def demo(req: SourceRequest, progress: Progress) -> Snapshot:
    from collectors.files import read_snapshot
    from recommender.demo import demo_path

    progress.log(f"using the bundled demo cluster ({demo_path()})")
    return _select(read_snapshot(demo_path()), req.settings.namespaces)


@register_source("file")
def file(req: SourceRequest, progress: Progress) -> Snapshot:
    from collectors.files import read_snapshot

    if not req.path:
        raise ConfigError("the file source needs a snapshot directory")
    return _select(read_snapshot(Path(req.path)), req.settings.namespaces)


def _cluster_workloads(req: SourceRequest, progress: Progress
                       ) -> tuple[tuple[Workload, ...] | None, tuple[GpuNode, ...], str | None]:
    """Workloads and GPU nodes from the Kubernetes API, or None with the reason we fell back to metrics."""
    if not req.settings.kubernetes.enabled:
        return None, (), None
    from collectors.kubernetes import discover_cluster

    try:
        catalogue = load_catalogue(req.settings.policy.catalogue_override)
        workloads, nodes = discover_cluster(req.settings, progress, catalogue)
        return workloads, nodes, None
    except KubernetesError as exc:
        why = (f"Kubernetes API not used ({exc}): workloads come from kube-state-metrics and DCGM labels "
               "(--no-kubernetes skips the API)")
        return None, (), why


@register_source("prometheus")
def prometheus(req: SourceRequest, progress: Progress) -> Snapshot:
    from collectors.prometheus import collect_pod_usage, step_for

    s = req.settings
    start = req.end - timedelta(seconds=s.history_s)
    workloads, nodes, why = _cluster_workloads(req, progress)
    usage = collect_pod_usage(s, start, req.end, progress, with_ksm=workloads is None, client=req.client,
                              cache=req.cache)
    if why:
        progress.log(f"warning: {why}")
        usage = type(usage)(**{**usage.__dict__, "warnings": (*usage.warnings, why)})
    catalogue = load_catalogue(s.policy.catalogue_override)
    step_s = step_for(s.history_s, s.prometheus)
    where = s.prometheus.url or "prometheus"
    snap = assemble(usage, workloads, start, req.end, step_s, catalogue, f"prometheus {where}")
    snap = _with_steps_at_zero(snap, req, start, progress)
    return replace(snap, nodes=nodes or snap.nodes)  # without the API: the GPU nodes DCGM reports


def _with_steps_at_zero(snap: Snapshot, req: SourceRequest, start: datetime, progress: Progress) -> Snapshot:
    """The snapshot with demand 0 where a workload had no pod (kube-state-metrics' replica counts), so a
    gap spent at zero reads as idle (``collectors.snapshot.fill_at_zero``)."""
    from collectors.prometheus import collect_workload_replicas
    from collectors.prometheus.queries import KSM_WORKLOAD_REPLICAS

    refs = [w.ref for w in snap.workloads]
    replicas = collect_workload_replicas(req.settings, refs, start, req.end, progress, cache=req.cache)
    if replicas is None:
        if any(r.kind in KSM_WORKLOAD_REPLICAS for r in refs):
            progress.log("note: kube-state-metrics has no replica counts for these workloads (kube_deployment_"
                         "status_replicas): a step a workload spent at zero reads as unknown, not idle")
        return snap
    return replace(snap, usage=fill_at_zero(snap.usage, replicas))
