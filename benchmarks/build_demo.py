"""Build the bundled demo cluster (recommender/demo/) from real public traces, reproducibly.

    python benchmarks/build_demo.py --shared ../shared/data --out recommender/demo

Demand is real: per-client 10-minute request rates from Alibaba ServeGen (language/m-mid, 14 days),
request token lengths from the Azure LLM inference 2023 traces (conv, code) and Mooncake, and a
SenseTime Helios virtual cluster's running-GPU share for the batch Job. The capacity model (demo_series.py) turns
that demand into the DCGM and vLLM series a cluster would show. Fixed seed and a fixed end time: the
same inputs give the same snapshot. Licences and commits: NOTICE; what is derived from what:
recommender/demo/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # demo_specs and demo_series, beside it
from demo_series import (
    TIME_SLICE_NEIGHBOURS,
    kv_capacity_tokens,
    load_traces,
    memory_mib,
    reranker_series,
    training_series,
    vllm_series,
)
from demo_specs import END, GPUS, MIG_3G, MODELS, SCENARIO, SEED, SPECS, STEP_S, STEPS, Spec

from collectors.files import read_snapshot, write_snapshot
from recommender.core import usage as m
from recommender.core.inventory import Allocation, GpuNode, Share, Sharing, VllmArgs, Workload, WorkloadRef
from recommender.core.usage import Snapshot
from recommender.mechanisms.dra import DraShare
from recommender.mechanisms.mig import MigShare

SOURCE = ("demo (derived from public traces: Alibaba ServeGen, Azure LLM inference 2023, Mooncake, "
          "SenseTime Helios)")

# -- Capacity model, per vLLM replica and 10-minute step (serve() below is this, line by line) ----------
#   load      = rate x prompt / prefill_tok_s + rate x output / decode_tok_s   (share of engine time)
#   TPOT      = tpot_s x (1 + TPOT_LOAD_SLOPE x load);  latency = prompt / prefill_tok_s + output x TPOT
#   running   = rate x latency (Little's law), capped by max_num_seqs and by KV capacity / context
#   KV cap    = (util x memory - weights / TP - activations) / (KV bytes per token / TP), in whole blocks
#   KV usage  = peak running x context / KV cap, context = prompt + output / 2 (max over the step)
#   waiting   = demand beyond those caps + QUEUE_HORIZON_S of backlog while load > 1
#   TTFT p95  = p95 prompt / prefill_tok_s / (1 - min(load, MAX_RHO)) + waiting / rate; NaN with no requests
#   GR_ACTIVE = min(1, load + BUSY_FLOOR_FRAC x P(any request running));  SM_ACTIVE = SM_PER_GR x GR
#   FB_USED   = util x memory + CUDA_CONTEXT_MIB, flat: vLLM pre-allocates its KV cache (the trap)
#   POWER     = idle + (max - idle) x POWER_ACTIVE_SHARE x GR, per device
# Throughputs scale with the GPU's speed (H100 = 1) and the replica's share of it (3g slice: 3/7 of the
# SMs; time-sliced: what the neighbours leave). They are round figures in line with public vLLM
# benchmarks (bf16), not measurements: the demo needs the right shapes and orders of magnitude.






# -- Real traces ------------------------------------------------------------------------------------


# -- Capacity model ---------------------------------------------------------------------------------


# -- Series per workload ----------------------------------------------------------------------------


# -- Inventory --------------------------------------------------------------------------------------

_POD_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' SafeEncodeString alphabet


def pod_names(spec: Spec, rng: np.random.Generator) -> tuple[str, ...]:
    def rand(n: int) -> str:
        return "".join(rng.choice(list(_POD_CHARS), size=n))

    if spec.kind == "StatefulSet":
        return tuple(f"{spec.name}-{i}" for i in range(spec.replicas))
    if spec.kind == "Job":
        return (f"{spec.name}-{rand(5)}",)
    if spec.kind == "PyTorchJob":  # the training operator's names: <job>-master-0, <job>-worker-<i>
        return (f"{spec.name}-master-0", *(f"{spec.name}-worker-{i}" for i in range(spec.replicas - 1)))
    template = rand(10)
    return tuple(f"{spec.name}-{template}-{rand(5)}" for _ in range(spec.replicas))


def allocation(spec: Spec) -> Allocation:
    """What one replica holds; gpu_equivalents: whole GPUs 1 each, 3g max(4/8, 3/7), time-sliced 1/pods."""
    gpu, llm = GPUS[spec.gpu], MODELS.get(spec.llm or "")
    vllm = VllmArgs(llm.hf_id, spec.util, spec.max_model_len, spec.max_num_seqs, spec.gpus) if llm else None
    gpus, profile, count, share = spec.gpus, None, 0, float(spec.gpus)
    if spec.sharing is Sharing.MIG:
        gpus, profile, count, share = 0, MIG_3G[0], 1, MIG_3G[3]
    elif spec.sharing is Sharing.TIME_SLICING:
        share = 1 / (1 + TIME_SLICE_NEIGHBOURS)
    held: Share | None = MigShare(profile, count) if profile else None
    if spec.sharing is Sharing.DRA:  # whole GPUs from the driver's gpu.nvidia.com class, one claim per pod
        held = DraShare(device_class="gpu.nvidia.com", count=spec.gpus)
    return Allocation(spec.sharing, gpus=gpus, share=held, gpu_equivalents=share,
                      gpu_model=gpu.model, gpu_product=gpu.product, device_memory_mib=memory_mib(spec), vllm=vllm,
                      replicas=spec.replicas)


# where a job's pod templates sit (collectors.kubernetes.jobs reads them there)
TEMPLATE_PATHS = {"PyTorchJob": "spec.pytorchReplicaSpecs.Master.template, spec.pytorchReplicaSpecs.Worker.template"}


def workload(spec: Spec, rng: np.random.Generator) -> Workload:
    llm = MODELS.get(spec.llm or "")
    component = "llm-server" if llm else ("training" if spec.kind in ("Job", "PyTorchJob") else "inference-server")
    notes = ((f"dcgm-exporter attributes its GPU to {1 + TIME_SLICE_NEIGHBOURS} pods: usage is per device, "
              "not per pod (time-slicing or MPS)",) if spec.sharing is Sharing.TIME_SLICING else ())
    return Workload(
        WorkloadRef(spec.ns, spec.kind, spec.name), allocation(spec), pods=pod_names(spec, rng),
        labels={"app.kubernetes.io/name": spec.name, "app.kubernetes.io/component": component, "team": spec.ns},
        annotations={SCENARIO: spec.scenario, **dict(spec.annotations)}, source="demo", notes=notes,
        kv_capacity_tokens=float(kv_capacity_tokens(spec)) if llm else None,
        served_model=llm.hf_id if llm else None, nodes=(node_of(spec),), template_path=TEMPLATE_PATHS.get(spec.kind))


# Where the demo's pods run: one 8-GPU node per product; the MIG workload on a node partitioned into
# 3g.40gb pairs (mig-parted's all-3g.40gb), so the per-node MIG plan has a current layout to keep.
NODES = (
    GpuNode("gpu-a100-0", "A100-80GB", 8),
    GpuNode("gpu-a100-mig-0", "A100-80GB", 8, "all-3g.40gb", tuple({"3g.40gb": 2} for _ in range(8))),
    GpuNode("gpu-h100-0", "H100-80GB", 8),
    GpuNode("gpu-foo-0", None, 4),
)


def node_of(spec: Spec) -> str:
    if spec.sharing is Sharing.MIG:
        return "gpu-a100-mig-0"
    return {"A100": "gpu-a100-0", "H100": "gpu-h100-0"}.get(spec.gpu, "gpu-foo-0")


# -- Build, write, report ---------------------------------------------------------------------------


def build(shared: Path) -> Snapshot:
    """The demo snapshot: every spec's workload and series; trace gaps are NaN in every series."""
    traces = load_traces(shared)
    index = pd.date_range(end=END, periods=STEPS, freq=pd.Timedelta(seconds=STEP_S), tz=UTC)
    workloads: list[Workload] = []
    columns: dict[str, dict[str, np.ndarray]] = {}
    for i, spec in enumerate(SPECS):
        rng = np.random.default_rng([SEED, i])  # one stream per workload: editing one leaves the rest alone
        workloads.append(workload(spec, rng))
        if spec.llm:
            series = vllm_series(spec, traces, rng)
        else:
            series = reranker_series(spec, traces) if spec.client is not None else training_series(spec, traces)
        for metric, values in series.items():
            columns.setdefault(metric, {})[workloads[-1].ref.key] = np.where(traces.gaps, np.nan, values)
    usage = {metric: pd.DataFrame(columns[metric], index=index) for metric in m.USAGE_METRICS if metric in columns}
    return Snapshot(tuple(workloads), usage, END - timedelta(seconds=STEP_S * STEPS), END, float(STEP_S),
                    (), SOURCE, NODES)


def _stat(snapshot: Snapshot, metric: str, ref: WorkloadRef, q: float | None) -> str:
    s = snapshot.series(metric, ref)
    return "-" if s is None else f"{s.mean() if q is None else s.quantile(q):.2f}"


def describe(snapshot: Snapshot) -> str:
    """One line per workload: what it holds and how busy it is, to eyeball each scenario."""
    lines = [f"{'workload':38} {'holds (per replica)':28} {'req/s':>6} {'kv p95':>6} {'gr p95':>6}  scenario"]
    for w in snapshot.workloads:
        a = w.allocation
        holds = f"{a.replicas}x {a.mig_profile or a.gpu_model or a.gpu_product} = {a.gpu_equivalents:.2g} GPU"
        lines.append(f"{w.ref.key:38} {holds:28} {_stat(snapshot, m.REQUEST_RATE, w.ref, None):>6} "
                     f"{_stat(snapshot, m.KV_USAGE_FRAC, w.ref, 0.95):>6} "
                     f"{_stat(snapshot, m.GR_ENGINE_ACTIVE_FRAC, w.ref, 0.95):>6}  {w.annotations[SCENARIO]}")
    return "\n".join(lines)


def default_shared() -> Path:
    """$GPU_RIGHTSIZER_SHARED (the shared folder or its data/), else ../shared/data beside the repository."""
    env = os.environ.get("GPU_RIGHTSIZER_SHARED")
    if env:
        return Path(env) / "data" if (Path(env) / "data").is_dir() else Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the bundled demo cluster from public traces.")
    parser.add_argument("--shared", type=Path, default=default_shared(),
                        help="folder holding the public traces (default: $GPU_RIGHTSIZER_SHARED or ../shared/data)")
    parser.add_argument("--out", type=Path, default=Path("recommender/demo"), help="where to write the snapshot")
    args = parser.parse_args(argv)
    if not (args.shared / "alibaba-servegen").is_dir():
        sys.exit(f"error: public traces not found under {args.shared} (need alibaba-servegen, "
                 "azure-llm-inference-2023, mooncake-traces, helios-sensetime); pass --shared DIR. "
                 "The bundled demo in recommender/demo works without them.")
    snapshot = build(args.shared)
    write_snapshot(snapshot, args.out)
    written = read_snapshot(args.out)  # what users will load (float32 values)
    print(describe(written))
    sizes = {p.name: p.stat().st_size for p in sorted(args.out.iterdir()) if p.suffix in (".json", ".parquet")}
    print(f"wrote {len(written.workloads)} workloads, {len(written.usage)} metrics, {STEPS} steps of {STEP_S} s "
          f"ending {END.isoformat()} to {args.out}: " + json.dumps(sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
