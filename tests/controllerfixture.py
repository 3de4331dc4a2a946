"""Hand-built cluster objects, plans and snapshots for the controller tests (no policies run)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from recommender.core import usage as m
from recommender.core.inventory import WorkloadRef
from recommender.core.plan import NodeMigPlan, Plan, Recommendation, ScalingPlan
from tests import planfixture as pf
from tests.kubefixture import container, manifest, pod_from, template

NS, NAME = "llm", "llama-3-8b-chat"
KEY = f"{NS}/Deployment/{NAME}"
ARGS = ["--model", "meta-llama/Meta-Llama-3-8B-Instruct", "--gpu-memory-utilization", "0.9", "--max-num-seqs", "256"]


def deployment(name: str = NAME, replicas: int = 2, args: list[str] | None = None,
               limits: dict[str, str] | None = None, pod_annotations: dict[str, str] | None = None,
               annotations: dict[str, str] | None = None) -> dict[str, Any]:
    tmpl = template({"app": name}, container("vllm", "vllm/vllm-openai:v0.6.3", limits or {"nvidia.com/gpu": "1"},
                                             args=list(args or ARGS)), annotations=pod_annotations)
    spec = {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": tmpl}
    return manifest("Deployment", NS, name, spec, labels={"app": name}, annotations=annotations)


def pods_of(dep: dict[str, Any], count: int = 2) -> list[dict[str, Any]]:
    """Running pods of ``dep`` (its template's labels), one container each, never restarted."""
    out = []
    for i in range(count):
        p = pod_from(None, NS, f"{dep['metadata']['name']}-{i}", dep["spec"]["template"], "gpu-a")
        p["status"]["containerStatuses"] = [{"name": "vllm", "restartCount": 0, "ready": True,
                                             "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]
        out.append(p)
    return out


def with_allocation(r: Recommendation, **alloc: Any) -> Recommendation:
    """``r`` recommending another allocation (sharing, hami_*, kai_*...) than the golden MIG one."""
    assert r.recommended is not None
    return replace(r, recommended=replace(r.recommended, **alloc))


def policy(name: str, spec: dict[str, Any], namespace: str = NS) -> dict[str, Any]:
    return {"apiVersion": "rightsizer.io/v1alpha1", "kind": "GPURightsizingPolicy",
            "metadata": {"name": name, "namespace": namespace, "generation": 1}, "spec": spec}


def auto_spec(**over: Any) -> dict[str, Any]:
    spec = {"target": {"workloadRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": NAME}},
            "mode": "Auto", "allowedMechanisms": ["replicas", "vllm"],
            "changeLimits": {"maxReplicaChangePerStep": 1, "cooldownSeconds": 600}}
    return spec | over


def recommendation(name: str = NAME, replicas: int = 4) -> Recommendation:
    """The llama recommendation of the golden plan (MIG 3g.40gb, vLLM 0.9 → 0.82) plus 4 replicas."""
    base = pf.llama()
    scaling = ScalingPlan("request_rate_per_s", 10.0, 7.0, 1, 6, replicas, 0.0, 300, False, 0.3, None)
    wl = replace(base.workload, ref=WorkloadRef(NS, "Deployment", name), labels={"app": name})
    return replace(base, workload=wl, scaling=scaling)


def plan(*recs: Recommendation, now: datetime = pf.END, mig_nodes: tuple[NodeMigPlan, ...] = ()) -> Plan:
    recs = recs or (recommendation(),)
    return Plan(now, pf.START, now, pf.STEP_S, tuple(recs), pf.summary(tuple(recs)), mig_nodes=mig_nodes,
                  mig_parted_config={"version": "v1", "mig-configs": {}} if mig_nodes else {})


def snapshot(now: datetime, ttft_before_s: float, ttft_after_s: float, change_at: datetime | None = None,
             key: str = KEY) -> m.Snapshot:
    """TTFT p95 every 60 s over the two hours before ``now``: ``before`` until ``change_at``, then ``after``."""
    idx = pd.date_range(end=now, periods=120, freq="60s")
    cut = change_at or now
    ttft = [ttft_after_s if t > pd.Timestamp(cut) else ttft_before_s for t in idx]
    frame = pd.DataFrame({key: ttft}, index=idx)
    return m.Snapshot((recommendation().workload,), {m.TTFT_P95_S: frame}, now - timedelta(hours=2), now, 60.0)
