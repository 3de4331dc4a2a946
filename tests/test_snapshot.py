"""Grouping pods into workloads: ownership, aggregation rules, what each workload holds."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors.files import read_snapshot, write_snapshot
from collectors.owners import attribute_pods, infer_owner
from collectors.pods import NodeDevices, PodDevices, PodOwner, PodRequests, PodUsage, VllmInfo
from collectors.snapshot import (
    assemble,
    clusters_spanned,
    gpu_equivalents,
    nodes_spanned,
    nodes_warning,
    spanning_warning,
)
from collectors.usageframes import aggregate_usage, fill_at_zero
from recommender.core import usage as m
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import Allocation, Sharing, Workload, WorkloadRef
from recommender.mechanisms.hami import HamiShare
from recommender.mechanisms.kai import KaiShare
from recommender.mechanisms.mig import MigShare
from recommender.mechanisms.mps import MpsShare
from tests.builders import END, index

CAT = load_catalogue()


@pytest.mark.parametrize(
    ("pod", "kind", "name"),
    [
        ("chat-7d9f8b6c5d-x2k4p", "Deployment", "chat"),
        ("llama-70b-0", "StatefulSet", "llama-70b"),
        ("nightly-embed-29374520-b7x2q", "CronJob", "nightly-embed"),
        ("train-once-h4x9z", "Job", "train-once"),
        ("debug", "Pod", "debug"),
    ],
)
def test_infer_owner_from_pod_names(pod: str, kind: str, name: str) -> None:
    owner = infer_owner("ml", pod)
    assert (owner.kind, owner.name, owner.inferred) == (kind, name, True)


def test_attribution_order_current_pods_then_prefix_then_ksm_then_names() -> None:
    chat = Workload(WorkloadRef("ml", "Deployment", "chat"), Allocation(Sharing.EXCLUSIVE, gpus=1),
                    pods=("chat-5c4d6f7b8-x2k4p",))
    owners = [PodOwner("ml", "worker-x", "StatefulSet", "workers")]
    mapping, notes = attribute_pods(
        ["ml/chat-5c4d6f7b8-x2k4p", "ml/chat-66b7c8d9f-zzzzz", "ml/worker-x", "ml/solo"], [chat], owners
    )
    assert mapping["ml/chat-5c4d6f7b8-x2k4p"] == chat.ref  # current pod
    assert mapping["ml/chat-66b7c8d9f-zzzzz"] == chat.ref  # an older ReplicaSet's pod, by prefix
    assert mapping["ml/worker-x"] == WorkloadRef("ml", "StatefulSet", "workers")  # from KSM
    solo = WorkloadRef("ml", "Pod", "solo")
    assert mapping["ml/solo"] == solo
    assert any("bare pod" in n for n in notes[solo])


def test_aggregation_sums_demand_and_maxes_per_replica_metrics() -> None:
    idx = index(0.1)
    ref = WorkloadRef("ml", "Deployment", "chat")
    frame = pd.DataFrame({"ml/a": 1.0, "ml/b": 3.0}, index=idx)
    frame.iloc[0, 1] = np.nan
    mapping = {"ml/a": ref, "ml/b": ref}
    out = aggregate_usage({m.REQUESTS_WAITING: frame, m.FB_USED_MIB: frame}, mapping)
    assert out[m.REQUESTS_WAITING][ref.key].iloc[1] == 4.0  # 1 + 3
    assert out[m.REQUESTS_WAITING][ref.key].iloc[0] == 1.0  # NaN does not poison the sum
    assert out[m.FB_USED_MIB][ref.key].iloc[1] == 3.0  # max


@pytest.mark.parametrize("source", [m.REQUESTS_RUNNING, m.REQUEST_RATE])
def test_serving_replicas_count_the_pods_reporting_vllm_at_each_step(source: str) -> None:
    """Pods that come and go under an HPA: the count per step is what a replica's rate divides by."""
    idx = index(0.1)
    chat, gpu_only = WorkloadRef("ml", "Deployment", "chat"), WorkloadRef("ml", "Deployment", "trainer")
    vllm = pd.DataFrame({"ml/a": 1.0, "ml/b": 2.0, "ml/c": 0.0}, index=idx)
    vllm.iloc[: len(idx) // 2, 1] = np.nan  # b started half-way
    vllm.iloc[:3, 0] = np.nan  # a, the first replica, was not up for three steps
    vllm.iloc[:3, 2] = np.nan  # nor c, the only pod of a second service: none served then
    fb = pd.DataFrame({"ml/a": 1.0, "ml/t": 5.0}, index=idx)
    mapping = {"ml/a": chat, "ml/b": chat, "ml/c": WorkloadRef("ml", "Deployment", "embed"), "ml/t": gpu_only}
    out = aggregate_usage({source: vllm, m.FB_USED_MIB: fb}, mapping)[m.SERVING_REPLICAS]
    want = np.r_[[np.nan] * 3, [1.0] * (len(idx) // 2 - 3), [2.0] * (len(idx) - len(idx) // 2)]
    np.testing.assert_array_equal(out[chat.key].to_numpy(), want)
    assert out["ml/Deployment/embed"].iloc[:3].isna().all() and (out["ml/Deployment/embed"].iloc[3:] == 1).all()
    assert gpu_only.key not in out.columns  # no vLLM metrics: no count, the allocation's replicas stand


def test_steps_at_zero_read_no_demand_and_only_those() -> None:
    idx = index(0.1)
    chat, embed, trainer = "ml/Deployment/chat", "ml/Deployment/embed", "ml/Deployment/trainer"
    rate = pd.DataFrame({chat: 2.0, embed: 1.0}, index=idx)
    rate.iloc[2:6, 0] = np.nan  # chat: at zero at 2-4 (below), no metrics at 5 (its count says 1)
    rate.iloc[2:6, 1] = np.nan  # embed: no replica count at all
    rate.iloc[7, 0] = 0.5  # a pod's last scrape within a step whose count is 0: its value stands
    fb = rate.copy()
    replicas = pd.DataFrame({chat: 1.0, trainer: 0.0}, index=idx)
    replicas.iloc[[2, 3, 4, 7], 0] = 0.0
    replicas.iloc[3, 0] = np.nan  # kube-state-metrics missed a step too
    usage = {m.REQUEST_RATE: rate, m.FB_USED_MIB: fb}
    out = fill_at_zero(usage, replicas)
    got = out[m.REQUEST_RATE][chat].to_numpy()
    np.testing.assert_array_equal(got[:8], [2.0, 2.0, 0.0, np.nan, 0.0, np.nan, 2.0, 0.5])
    assert out[m.REQUEST_RATE][embed].iloc[2:6].isna().all()
    assert trainer not in out[m.REQUEST_RATE].columns  # no column of its own: none added
    assert out[m.FB_USED_MIB] is fb  # per device: no device at zero, still unknown
    assert rate[chat].iloc[2:6].isna().all()  # the input is left as it was


@pytest.mark.parametrize(
    ("alloc", "share", "caveat"),
    [
        (Allocation(Sharing.EXCLUSIVE, gpus=2, gpu_model="A100-80GB"), 2.0, False),
        # 3g.40gb: max(4/8 memory, 3/7 SM) = 0.5
        (Allocation(Sharing.MIG, share=MigShare("3g.40gb", 1), gpu_model="A100-80GB"), 0.5, False),
        (Allocation(Sharing.MIG, share=MigShare("2g.20gb", 2), gpu_model="H100-80GB"), 4 / 7, False),  # 2 × 2/7
        (Allocation(Sharing.MIG, share=MigShare("3g.99gb", 1), gpu_model=None), 3 / 7, True),  # guessed
        (Allocation(Sharing.MPS, gpus=1, share=MpsShare(25.0)), 0.25, False),
        (Allocation(Sharing.HAMI, gpus=1, share=HamiShare(20480, 30), device_memory_mib=81920),
         0.3, False),  # max(20,480/81,920=0.25, 0.30)
        (Allocation(Sharing.KAI, share=KaiShare(0.5)), 0.5, False),
        (Allocation(Sharing.TIME_SLICING, gpus=1), 1.0, True),  # share unknown: whole GPU, said so
    ],
)
def test_gpu_equivalents(alloc: Allocation, share: float, caveat: bool) -> None:
    got, why = gpu_equivalents(alloc, CAT)
    assert got == pytest.approx(share)
    assert (why is not None) == caveat


def test_assemble_without_cluster_derives_workloads_from_metrics() -> None:
    idx = index(1)
    fb = pd.DataFrame({"ml/chat-5c4d6f7b8-x2k4p": 70000.0, "ml/chat-5c4d6f7b8-fghjk": 71000.0,
                       "batch/embed-0": 9000.0}, index=idx)
    usage = PodUsage(
        series={m.FB_USED_MIB: fb},
        devices=(PodDevices("ml", "chat-5c4d6f7b8-x2k4p", "NVIDIA A100-SXM4-80GB", 1, None, 81920.0),
                 PodDevices("batch", "embed-0", "NVIDIA H100 80GB HBM3", 1, "1g.10gb", 9984.0)),
        owners=(PodOwner("batch", "embed-0", "StatefulSet", "embed"),),
        requests=(PodRequests("ml", "chat-5c4d6f7b8-x2k4p", (("nvidia.com/gpu", 1.0),)),),
        vllm=(VllmInfo("ml", "chat-5c4d6f7b8-fghjk", "llama-3-8b", 300_000.0, 0.9),),
    )
    snap = assemble(usage, None, idx[0].to_pydatetime(), END, 600.0, CAT, "test")
    by = {w.ref.key: w for w in snap.workloads}
    chat = by["ml/Deployment/chat"]
    assert chat.allocation.sharing is Sharing.EXCLUSIVE and chat.allocation.replicas == 2
    assert chat.allocation.gpu_model == "A100-80GB" and chat.kv_capacity_tokens == 300_000.0
    assert chat.allocation.vllm is not None and chat.allocation.vllm.gpu_memory_utilization == 0.9
    embed = by["batch/StatefulSet/embed"]
    assert embed.allocation.mig_profile == "1g.10gb" and embed.allocation.gpu_model == "H100-80GB"
    assert embed.allocation.gpu_equivalents == pytest.approx(1 / 7)
    assert snap.usage[m.FB_USED_MIB]["ml/Deployment/chat"].iloc[0] == 71000.0



def test_a_leader_worker_set_without_the_api_is_one_workload_of_groups() -> None:
    """Its pods (kube-state-metrics' owners resolved to it, ``parse.owners``) make one workload whose replica is a
    group, GPUs added up over the group's pods, as the API's LeaderWorkerSet spec reads; its replicas are the
    groups with a pod at the window's end."""
    idx = index(3)
    pods = ("big-0", "big-0-1", "big-1", "big-1-1")
    fb = pd.DataFrame({f"ml/{p}": [70000.0, 70000.0, np.nan if p.startswith("big-1") else 70000.0] for p in pods},
                      index=idx[:3])
    gpu = "NVIDIA A100-SXM4-80GB"
    usage = PodUsage(
        series={m.FB_USED_MIB: fb},
        devices=tuple(PodDevices("ml", p, gpu, 4, None, 81920.0) for p in pods),
        owners=tuple(PodOwner("ml", p, "LeaderWorkerSet", "big") for p in pods),
        requests=tuple(PodRequests("ml", p, (("nvidia.com/gpu", 4.0),)) for p in pods),
    )
    snap = assemble(usage, None, idx[0].to_pydatetime(), END, 600.0, CAT, "test")
    (big,) = snap.workloads
    assert big.ref.key == "ml/LeaderWorkerSet/big" and sorted(big.pods) == sorted(pods)
    assert (big.allocation.gpus, big.allocation.replicas) == (8, 1)  # group 1 gone by the end
    assert big.allocation.gpu_equivalents == 8.0
    assert any(n.startswith("LeaderWorkerSet: one replica is a group of 2 pods (") for n in big.notes)
    both = assemble(replace(usage, series={m.FB_USED_MIB: fb.fillna(1.0)}), None, idx[0].to_pydatetime(), END,
                    600.0, CAT, "test")
    assert both.workloads[0].allocation.replicas == 2


def test_a_leader_worker_sets_replica_is_a_group_at_the_windows_end() -> None:
    """Its groups were three pods before a rollout made them two: the replica is a running group's."""
    idx = index(1)[-2:]
    gone, live = ("big-0", "big-0-1", "big-0-2"), ("big-1", "big-1-1")
    fb = pd.DataFrame({**{f"ml/{p}": [1.0, np.nan] for p in gone}, **{f"ml/{p}": [np.nan, 1.0] for p in live}},
                      index=idx)
    usage = PodUsage(series={m.FB_USED_MIB: fb},
                     owners=tuple(PodOwner("ml", p, "LeaderWorkerSet", "big") for p in gone + live),
                     requests=tuple(PodRequests("ml", p, (("nvidia.com/gpu", 4.0),)) for p in gone + live))
    (big,) = assemble(usage, None, idx[0].to_pydatetime(), END, 600.0, CAT, "test").workloads
    assert (big.allocation.gpus, big.allocation.replicas) == (8, 1)
    assert any(n.startswith("LeaderWorkerSet: one replica is a group of 2 pods (") for n in big.notes)


def test_a_leader_worker_set_of_mig_slices_adds_its_groups_slices() -> None:
    idx = index(1)
    pods = ("big-0", "big-0-1", "big-0-2")
    usage = PodUsage(
        series={m.FB_USED_MIB: pd.DataFrame({f"ml/{p}": 30000.0 for p in pods}, index=idx)},
        owners=tuple(PodOwner("ml", p, "LeaderWorkerSet", "big") for p in pods),
        requests=tuple(PodRequests("ml", p, (("nvidia.com/mig-3g.40gb", 1.0),)) for p in pods),
    )
    (big,) = assemble(usage, None, idx[0].to_pydatetime(), END, 600.0, CAT, "test").workloads
    assert (big.allocation.mig_profile, big.allocation.mig_count, big.allocation.replicas) == ("3g.40gb", 3, 1)


def test_a_gpu_request_on_a_mig_device_is_the_mig_single_strategys_slice() -> None:
    """Under the device plugin's MIG ``single`` strategy a pod requests ``nvidia.com/gpu`` and gets a MIG device:
    kube-state-metrics says one GPU, dcgm-exporter the slice. It holds the slice, not a whole GPU."""
    idx = index(1)
    usage = PodUsage(
        series={m.FB_USED_MIB: pd.DataFrame({"ml/small-0": 5000.0, "ml/big-0": 50000.0}, index=idx)},
        devices=(PodDevices("ml", "small-0", "NVIDIA A100-SXM4-80GB", 1, "1g.10gb", 9984.0),
                 PodDevices("ml", "big-0", "NVIDIA A100-SXM4-80GB", 1, None, 81920.0)),
        owners=(PodOwner("ml", "small-0", "StatefulSet", "small"), PodOwner("ml", "big-0", "StatefulSet", "big")),
        requests=(PodRequests("ml", "small-0", (("nvidia.com/gpu", 1.0),)),
                  PodRequests("ml", "big-0", (("nvidia.com/gpu", 1.0),))),
    )
    by = {w.ref.name: w for w in assemble(usage, None, idx[0].to_pydatetime(), END, 600.0, CAT, "t").workloads}
    small, big = by["small"].allocation, by["big"].allocation
    assert (small.sharing, small.mig_profile, small.mig_count) == (Sharing.MIG, "1g.10gb", 1)
    assert small.gpu_equivalents == pytest.approx(1 / 7)
    assert any("single" in n for n in by["small"].notes)
    assert (big.sharing, big.gpus, big.gpu_equivalents) == (Sharing.EXCLUSIVE, 1, 1.0)


def test_without_the_api_a_workload_holds_what_its_pods_at_the_end_hold() -> None:
    """A Deployment rolled out from two GPUs a pod to one within the window: kube-state-metrics still has the old
    pods' requests (their last values), but the workload holds what its pods at the window's end hold."""
    idx = index(1)[-4:]
    old, new = "ml/chat-5c4d6f7b8-aaaaa", "ml/chat-7d8f9b6c5-bbbbb"
    fb = pd.DataFrame({old: [70000.0, 70000.0, np.nan, np.nan], new: [np.nan, np.nan, 30000.0, 30000.0]},
                      index=idx)
    usage = PodUsage(
        series={m.FB_USED_MIB: fb},
        devices=(PodDevices("ml", old.split("/")[1], "NVIDIA A100-SXM4-80GB", 2, None, 81920.0),
                 PodDevices("ml", new.split("/")[1], "NVIDIA A100-SXM4-80GB", 1, "3g.40gb", 40192.0)),
        requests=(PodRequests("ml", old.split("/")[1], (("nvidia.com/gpu", 2.0),)),
                  PodRequests("ml", new.split("/")[1], (("nvidia.com/mig-3g.40gb", 1.0),))),
        owners=tuple(PodOwner("ml", p.split("/")[1], "Deployment", "chat") for p in (old, new)),
    )
    (chat,) = assemble(usage, None, idx[0].to_pydatetime(), END, 600.0, CAT, "t").workloads
    assert (chat.allocation.sharing, chat.allocation.mig_profile, chat.allocation.replicas) == \
        (Sharing.MIG, "3g.40gb", 1)
    assert chat.allocation.device_memory_mib == 40192.0


def test_a_gpu_request_on_a_device_pods_share_is_a_share_of_it() -> None:
    """Time-slicing (or MPS) that does not rename the resource: each pod requests ``nvidia.com/gpu: 1``, and
    dcgm-exporter sees several on one GPU at once, which an exclusive GPU never has. Each holds its share, not a
    whole GPU, so the fleet's GPUs are not counted once per pod."""
    idx = index(1)
    pods = ("embed-5c4d6f7b8-bcdfg", "embed-5c4d6f7b8-hjklm")
    usage = PodUsage(
        series={m.FB_USED_MIB: pd.DataFrame({f"ml/{p}": 20000.0 for p in pods}, index=idx)},
        devices=tuple(PodDevices("ml", p, "NVIDIA A100-SXM4-80GB", 1, None, 81920.0, shared_with=2) for p in pods),
        owners=tuple(PodOwner("ml", p, "Deployment", "embed") for p in pods),
        requests=tuple(PodRequests("ml", p, (("nvidia.com/gpu", 1.0),)) for p in pods),
    )
    (embed,) = assemble(usage, None, idx[0].to_pydatetime(), END, 600.0, CAT, "t").workloads
    assert (embed.allocation.sharing, embed.allocation.replicas) == (Sharing.TIME_SLICING, 2)
    assert embed.allocation.gpu_equivalents == pytest.approx(0.5)
    assert embed.device_shared_with == 2


def test_without_dcgm_a_workloads_replicas_are_its_pods_with_vllm_series_at_the_end() -> None:
    """dcgm-exporter without its pod mapping: no framebuffer per pod, only vLLM's series. A Deployment whose pods a
    rollout replaced twice holds one replica at the window's end, not one per pod name the window saw."""
    idx = index(1)[-3:]
    pods = ("chat-5c4d6f7b8-bcdfg", "chat-6d7f8b9c5-hjklm", "chat-7f8b9c5d6-npqrs")
    running = pd.DataFrame({f"ml/{p}": [4.0 if i == k else np.nan for i in range(3)] for k, p in enumerate(pods)},
                           index=idx)
    usage = PodUsage(series={m.REQUESTS_RUNNING: running},
                     owners=tuple(PodOwner("ml", p, "Deployment", "chat") for p in pods),
                     requests=tuple(PodRequests("ml", p, (("nvidia.com/gpu", 1.0),)) for p in pods))
    (chat,) = assemble(usage, None, idx[0].to_pydatetime(), END, 600.0, CAT, "t").workloads
    assert chat.allocation.replicas == 1

def test_assemble_with_cluster_warns_about_deleted_workloads() -> None:
    idx = index(1)
    fb = pd.DataFrame({"ml/chat-5c4d6f7b8-x2k4p": 1.0, "ml/gone-5c4d6f7b8-x2k4p": 2.0}, index=idx)
    chat = Workload(WorkloadRef("ml", "Deployment", "chat"),
                    Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_product="NVIDIA A100-SXM4-80GB"),
                    pods=("chat-5c4d6f7b8-x2k4p",))
    snap = assemble(PodUsage({m.FB_USED_MIB: fb}), [chat], idx[0].to_pydatetime(), END, 600.0, CAT, "t")
    assert [w.ref.name for w in snap.workloads] == ["chat"]
    assert any("not in the cluster now" in w and "gone" in w for w in snap.warnings)
    assert list(snap.usage[m.FB_USED_MIB].columns) == ["ml/Deployment/chat"]


def test_a_gpu_dcgm_attributes_to_several_pods_is_marked_shared_and_round_trips(tmp_path: Path) -> None:
    """The API says a whole GPU, DCGM saw 3 pods on it: the workload carries that, so the policy reads its figures
    as the device's (policies.attribution); a snapshot file keeps it, and leaves it out where there is none."""
    idx = index(1)
    fb = pd.DataFrame({"ml/chat-5c4d6f7b8-x2k4p": 70000.0, "ml/solo-5c4d6f7b8-x2k4p": 1.0}, index=idx)
    spec = Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_product="NVIDIA A100-SXM4-80GB")
    chat = Workload(WorkloadRef("ml", "Deployment", "chat"), spec, pods=("chat-5c4d6f7b8-x2k4p",))
    solo = Workload(WorkloadRef("ml", "Deployment", "solo"), spec, pods=("solo-5c4d6f7b8-x2k4p",))
    devices = (PodDevices("ml", "chat-5c4d6f7b8-x2k4p", "NVIDIA A100-SXM4-80GB", 1, None, 81920.0, shared_with=3),
               PodDevices("ml", "solo-5c4d6f7b8-x2k4p", "NVIDIA A100-SXM4-80GB", 1, None, 81920.0))
    snap = assemble(PodUsage({m.FB_USED_MIB: fb}, devices=devices), [chat, solo], idx[0].to_pydatetime(), END,
                    600.0, CAT, "t")
    by = {w.ref.name: w for w in snap.workloads}
    assert (by["chat"].device_shared_with, by["solo"].device_shared_with) == (3, None)
    write_snapshot(snap, tmp_path)
    assert [w.device_shared_with for w in read_snapshot(tmp_path).workloads] == [3, None]
    assert (tmp_path / "snapshot.json").read_text().count("device_shared_with") == 1


# --- one name in several clusters behind one API (PodUsage.clusters) --------------------------------------------

def _two_clusters() -> PodUsage:
    fb = pd.DataFrame({"ml/chat-5c4d6f7b8-x2k4p": 70000.0, "ml/chat-5c4d6f7b8-zzzzz": 71000.0,
                       "ml/embed-0": 9000.0, "ml/solo-5c4d6f7b8-bcdfg": 5000.0}, index=index(1))
    a, b = ("cluster", "a"), ("cluster", "b")
    return PodUsage({m.FB_USED_MIB: fb},
                    devices=(PodDevices("ml", "embed-0", "NVIDIA A100-SXM4-80GB", 1, None, 81920.0),
                             PodDevices("ml", "solo-5c4d6f7b8-bcdfg", "NVIDIA A100-SXM4-80GB", 1, None, 81920.0)),
                    clusters={"ml/chat-5c4d6f7b8-x2k4p": (a,), "ml/chat-5c4d6f7b8-zzzzz": (b,),
                              "ml/embed-0": (a, b), "ml/solo-5c4d6f7b8-bcdfg": (b,)})


def test_a_workload_with_pods_in_two_clusters_is_left_out_and_named() -> None:
    usage = _two_clusters()
    snap = assemble(usage, None, index(1)[0].to_pydatetime(), END, 600.0, CAT, "test")
    assert [w.ref.key for w in snap.workloads] == ["ml/Deployment/solo"]  # all of its pods in one cluster
    assert list(snap.usage[m.FB_USED_MIB].columns) == ["ml/Deployment/solo"]
    (line,) = snap.warnings
    assert line.startswith("2 workloads have pods in more than one cluster (cluster: a, b): ml/Deployment/chat, "
                           "ml/StatefulSet/embed left out")
    plain = assemble(replace(usage, clusters={}), None, index(1)[0].to_pydatetime(), END, 600.0, CAT, "test")
    assert len(plain.workloads) == 3 and not plain.warnings  # the check is what leaves them out


def test_the_api_listed_workload_stays_with_a_reason_and_no_usage() -> None:
    chat = Workload(WorkloadRef("ml", "Deployment", "chat"),
                    Allocation(Sharing.EXCLUSIVE, gpus=1, gpu_product="NVIDIA A100-SXM4-80GB"),
                    pods=("chat-5c4d6f7b8-x2k4p",))
    snap = assemble(_two_clusters(), [chat], index(1)[0].to_pydatetime(), END, 600.0, CAT, "t")
    (got,) = snap.workloads
    assert any(n.startswith("its pods' series come from more than one cluster (cluster: a, b)") for n in got.notes)
    assert all("ml/Deployment/chat" not in frame.columns for frame in snap.usage.values())


@pytest.mark.parametrize("hostile", ["a\nb", "\x1b[2Jx", "x" * 5000, "é\u202e"])
def test_label_values_a_tenant_wrote_stay_one_short_line(hostile: str) -> None:
    ref = WorkloadRef("ml", "StatefulSet", "s")
    spanning = clusters_spanned({"ml/s-0": ref}, {"ml/s-0": (("cluster", hostile), ("cluster", "z"))})
    node = NodeDevices(hostile, "NVIDIA A100-SXM4-80GB", ((),), (("cluster", hostile), ("cluster", "z")))
    for line in (spanning_warning(spanning), nodes_warning(nodes_spanned([node]))):
        assert "\n" not in line and "\x1b" not in line and "\u202e" not in line and len(line) < 1000


def test_gpu_nodes_of_one_name_in_two_clusters_are_left_out_and_named() -> None:
    """Without the API the nodes are DCGM's, one per node name: two clusters' of one name are left out of the
    snapshot's nodes (the MIG plan's), one value of each of two labels is one cluster."""
    gpu = ((("3g.40gb", 2),),)
    nodes = (NodeDevices("n-0", "NVIDIA A100-SXM4-80GB", gpu, (("cluster", "a"), ("cluster", "b"))),
             NodeDevices("n-1", "NVIDIA A100-SXM4-80GB", gpu, (("cluster", "a"), ("region", "x"))),
             NodeDevices("n-2", "NVIDIA A100-SXM4-80GB", gpu))
    usage = replace(_two_clusters(), gpu_nodes=nodes)
    snap = assemble(usage, None, index(1)[0].to_pydatetime(), END, 600.0, CAT, "test")
    assert [n.name for n in snap.nodes] == ["n-1", "n-2"]
    assert [w for w in snap.warnings if "GPU node" in w] == [
        '1 GPU node has one name in more than one cluster (cluster: a, b): n-0 left out of the per-node MIG plan, '
        'since its GPUs would add up across clusters; to size one cluster, set prometheus.extra_selector, e.g. '
        'cluster="a" (or, where one cluster\'s cluster was renamed within the window, prometheus.cluster_labels: [])']


def test_many_workloads_are_counted_not_all_named() -> None:
    refs = [WorkloadRef("ml", "StatefulSet", f"s{i}") for i in range(5)]
    mapping = {f"ml/s{i}-0": r for i, r in enumerate(refs)}
    clusters = {k: (("cluster", "a"), ("cluster", "b")) for k in mapping}
    assert set(clusters_spanned(mapping, clusters)) == set(refs)
    assert "ml/StatefulSet/s0, ml/StatefulSet/s1, ml/StatefulSet/s2 and 2 more left out" in \
        spanning_warning(clusters_spanned(mapping, clusters))
    assert clusters_spanned(mapping, {k: (("cluster", "a"),) for k in mapping}) == {}
