"""Fraction packing on the Alibaba GPU-sharing pods, and optimal vs first-fit MIG packing on random mixes.

    python benchmarks/packing_alibaba.py                  # data from ../shared/data (or GPU_RIGHTSIZER_SHARED)
    python benchmarks/packing_alibaba.py --shared DIR --mig-trials 200 --seed 7

Part 1 reads ``alibaba-gpu-v2023/openb_pod_list_default.csv`` (Alibaba cluster-trace-gpu-v2023, the
FGD paper's "openb" trace; research-only licence, so it is read in place from ../shared and never
copied into the repository). The GPU-sharing pods are those asking for one GPU with 0 < ``gpu_milli``
< 1000: 3,078 of the 8,152 pods (checked at run time). Each becomes a compute share ``gpu_milli/1000``
packed 1-D: the trace's ``memory_mib`` is *host* memory, and it has no GPU-memory column, so GPU
memory per pod cannot be derived and there is no 2-D run. Printed per method, one ``key=value`` line:
GPUs needed, the lower bound ceil(Σ shares), one pod per GPU (what Kubernetes' integer
``nvidia.com/gpu`` gives them), and the solve time. The MPS limit of 48 clients per GPU never binds
here (the smallest share is 50 milli, so at most 20 pods fit a GPU).

Comparability with the FGD paper (Weng et al., ATC'23): its "GPU allocation rate" is measured online,
pods arriving one at a time onto a fixed heterogeneous cluster (1,213 GPU nodes, 6,212 GPUs of several
models) under CPU, host-memory and GPU-type constraints, until arrivals start failing; it counts the
share of all GPU capacity allocated at that point for *all* pods, whole-GPU ones included. Here the
sharing pods alone are packed offline, all at once, on as many identical GPUs as needed, with no CPU,
memory or GPU-type constraint. The numbers answer a different question (how many GPUs would these
shares need at best, and how close a simple heuristic gets) and are not comparable to FGD's or
BestFit's published rates.

Part 2 draws seeded random MIG demand mixes per GPU model and packs each with first-fit decreasing
(``policies.packing.pack``) and the exact pattern MILP (``policies.packing.solve_mig``): GPUs used by
each, GPUs saved, and solve times; every optimal layout is checked with ``validate_layout``.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from policies.fractions import Share, best_fit_decreasing, lower_bound, pack_exact_1d  # noqa: E402
from policies.miglayout import validate_layout  # noqa: E402
from policies.packing import pack, solve_mig  # noqa: E402
from recommender.core.catalogue import load_catalogue  # noqa: E402

EXPECTED_SHARING_PODS = 3078


def read_sharing_pods(path: Path) -> list[Share]:
    """One share per pod with num_gpu == 1 and 0 < gpu_milli < 1000."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return [Share(r["name"], int(r["gpu_milli"]) / 1000) for r in rows
            if int(r["num_gpu"] or 0) == 1 and 0 < int(r["gpu_milli"] or 0) < 1000]


def alibaba(shares: list[Share]) -> None:
    if len(shares) != EXPECTED_SHARING_PODS:
        print(f"warning: {len(shares)} sharing pods, expected {EXPECTED_SHARING_PODS}")
    lb = lower_bound(shares)
    total = sum(s.compute_frac for s in shares)
    print(f"dataset=alibaba-gpu-v2023 pods={len(shares)} distinct_shares={len({s.compute_frac for s in shares})} "
          f"sum_shares={total:.3f} lower_bound={lb} one_pod_per_gpu={len(shares)}")
    for name, fn in (("best-fit-decreasing", best_fit_decreasing), ("arc-flow-milp", pack_exact_1d)):
        t0 = time.perf_counter()
        res = fn(shares)
        dt = time.perf_counter() - t0
        placed = sum(len(g) for g in res.gpus)
        print(f"method={name} gpus={res.n_gpus} lower_bound={lb} one_pod_per_gpu={len(shares)} "
              f"over_bound={res.n_gpus - lb} saved_vs_one_per_gpu={len(shares) - res.n_gpus} "
              f"optimal={str(res.optimal).lower()} pods_placed={placed} solve_s={dt:.3f}")


def mig_mixes(trials: int, seed: int, max_slices: int) -> None:
    cat = load_catalogue()
    rng = random.Random(seed)
    for key in ("A100-80GB", "H100-80GB", "A30"):
        gpu = cat.gpus[key]
        ffd_total = opt_total = better = 0
        ffd_s = opt_s = worst_s = 0.0
        for _ in range(trials):
            profs = [rng.choice(gpu.profiles) for _ in range(rng.randint(1, max_slices))]
            t0 = time.perf_counter()
            ffd = pack(gpu, profs)
            t1 = time.perf_counter()
            opt = solve_mig(gpu, profs)
            t2 = time.perf_counter()
            assert all(validate_layout(gpu, lay.placed) == [] for lay in opt.layouts)
            ffd_total += len(ffd)
            opt_total += len(opt.layouts)
            better += len(opt.layouts) < len(ffd)
            ffd_s += t1 - t0
            opt_s += t2 - t1
            worst_s = max(worst_s, t2 - t1)
        print(f"mig_gpu={key} trials={trials} seed={seed} max_slices={max_slices} ffd_gpus={ffd_total} "
              f"optimal_gpus={opt_total} gpus_saved={ffd_total - opt_total} mixes_improved={better} "
              f"ffd_mean_ms={1000 * ffd_s / trials:.2f} optimal_mean_ms={1000 * opt_s / trials:.2f} "
              f"optimal_max_ms={1000 * worst_s:.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path,
                    default=Path(os.environ.get("GPU_RIGHTSIZER_SHARED", REPO.parent / "shared" / "data")))
    ap.add_argument("--mig-trials", type=int, default=200)
    ap.add_argument("--mig-max-slices", type=int, default=30)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    pods = args.shared / "alibaba-gpu-v2023" / "openb_pod_list_default.csv"
    if pods.exists():
        alibaba(read_sharing_pods(pods))
    else:
        print(f"skipped: {pods} not found (set --shared or GPU_RIGHTSIZER_SHARED); the trace is research-only "
              "and is not shipped with the repository")
    mig_mixes(args.mig_trials, args.seed, args.mig_max_slices)
    return 0


if __name__ == "__main__":
    sys.exit(main())
