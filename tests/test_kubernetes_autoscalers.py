"""The report says which autoscaler owns a workload's replicas: HPAs and KEDA ScaledObjects listed once per
namespace scope (never per workload), KEDA's own HPA folded into its ScaledObject, KEDA not installed skipped
quietly; the field survives a snapshot round trip and old snapshots without it still load."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collectors.files import SNAPSHOT_FILE, read_snapshot, write_snapshot
from collectors.kubernetes import discover_workloads
from recommender.core.progress import NullProgress, RecordingProgress
from recommender.core.usage import Snapshot
from tests.kubefixture import KubeEmulator, container, gpu_node, manifest, pod_from, template

A100 = "NVIDIA-A100-SXM4-80GB"
GPU1 = {"nvidia.com/gpu": "1"}
HPA = "HorizontalPodAutoscaler"


def served(ns: str, name: str) -> list[dict[str, Any]]:
    """A one-replica GPU Deployment and its pod."""
    tmpl = template({"app": name}, container("vllm", "vllm/vllm-openai:v0.8.5", GPU1, args=["m"]))
    dep = manifest("Deployment", ns, name, {"replicas": 1, "template": tmpl}, {"app": name})
    return [dep, pod_from(dep, ns, f"{name}-0", tmpl, "gpu-0")]


def hpa(ns: str, name: str, target: str, owner: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}, "maxReplicas": 4}
    return manifest(HPA, ns, name, spec, owner=owner)


def scaled_object(ns: str, name: str, target: str) -> dict[str, Any]:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}"},
            "spec": {"scaleTargetRef": {"name": target}, "triggers": []}}


def cluster() -> list[dict[str, Any]]:
    so = scaled_object("b", "keda-chat", "chat")
    return [gpu_node("gpu-0", A100, 81920), *served("a", "plain"), *served("a", "hpa-scaled"),
            *served("a", "twice"), *served("b", "chat"),
            hpa("a", "hpa-scaled", "hpa-scaled"), hpa("a", "ghost", "deleted-long-ago"),
            hpa("a", "one", "twice"), hpa("a", "two", "twice"),
            so, hpa("b", "keda-hpa-keda-chat", "chat", owner=so)]


def owners_by_name(emulator: KubeEmulator, namespaces: list[str]) -> dict[str, str | None]:
    found = discover_workloads(emulator.settings(namespaces), NullProgress(), emulator.api_client())
    return {w.ref.name: w.autoscaler for w in found}


def test_the_autoscaler_of_each_workload_from_one_list_of_each_per_namespace() -> None:
    with KubeEmulator(cluster(), crds=["ScaledObject"]) as emulator:
        assert owners_by_name(emulator, ["a", "b"]) == {
            "plain": None, "hpa-scaled": f"{HPA}/hpa-scaled", "twice": f"{HPA}/one, {HPA}/two",
            "chat": "ScaledObject/keda-chat"}  # KEDA's HPA is the ScaledObject's; the ghost's target is gone
        asked = [p for p in emulator.requests() if p.endswith(("horizontalpodautoscalers", "scaledobjects"))]
        assert sorted(asked) == [
            "GET /apis/autoscaling/v2/namespaces/a/horizontalpodautoscalers",
            "GET /apis/autoscaling/v2/namespaces/b/horizontalpodautoscalers",
            "GET /apis/keda.sh/v1alpha1/namespaces/a/scaledobjects",
            "GET /apis/keda.sh/v1alpha1/namespaces/b/scaledobjects"]


def test_keda_not_installed_is_skipped_quietly_and_a_refused_hpa_list_is_said_once() -> None:
    objs = [o for o in cluster() if o["kind"] != "ScaledObject"]
    with KubeEmulator(objs) as emulator:
        progress = RecordingProgress()
        found = discover_workloads(emulator.settings(["a", "b"]), progress, emulator.api_client())
        assert {w.ref.name: w.autoscaler for w in found}["hpa-scaled"] == f"{HPA}/hpa-scaled"
        assert {w.ref.name: w.autoscaler for w in found}["chat"] == f"{HPA}/keda-hpa-keda-chat"  # its owner is gone
        assert progress.messages == []
        assert len([p for p in emulator.requests() if p.endswith("scaledobjects")]) == 1  # 404: asked once
    with KubeEmulator(cluster(), crds=["ScaledObject"]) as emulator:
        emulator.refuse(HPA, 403)
        progress = RecordingProgress()
        found = discover_workloads(emulator.settings(["a", "b"]), progress, emulator.api_client())
        assert {w.ref.name: w.autoscaler for w in found}["chat"] == "ScaledObject/keda-chat"
        assert [m.split(":")[0] for m in progress.messages] == ["skipping HorizontalPodAutoscalers"]


def test_the_autoscaler_round_trips_a_snapshot_and_old_snapshots_load_without_it(tmp_path: Path) -> None:
    with KubeEmulator(cluster(), crds=["ScaledObject"]) as emulator:
        workloads = discover_workloads(emulator.settings(["a", "b"]), NullProgress(), emulator.api_client())
    snap = Snapshot(workloads, {}, datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC), 60.0)
    write_snapshot(snap, tmp_path)
    assert read_snapshot(tmp_path).workloads == workloads
    text = (tmp_path / SNAPSHOT_FILE).read_text()
    assert text.count('"autoscaler"') == 3  # written only where there is one: old readers' bytes unchanged
    old = replace(snap, workloads=tuple(replace(w, autoscaler=None) for w in workloads))
    write_snapshot(old, tmp_path / "old")
    assert '"autoscaler"' not in (tmp_path / "old" / SNAPSHOT_FILE).read_text()
    assert all(w.autoscaler is None for w in read_snapshot(tmp_path / "old").workloads)

