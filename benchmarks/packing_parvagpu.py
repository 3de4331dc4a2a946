"""MIG × MPS packing against ParvaGPU (SC'24): its A100-80GB profiles, its SLO scenarios, its GPU counts.

    python benchmarks/packing_parvagpu.py                       # data from ../shared/data (or GPU_RIGHTSIZER_SHARED)
    python benchmarks/packing_parvagpu.py --shared ../shared/data
    python benchmarks/packing_parvagpu.py --profiles DIR --rates FILE --latency FILE

``--profiles`` holds ``<model>.csv`` (MIG GPCs, batch size, MPS processes, per-process throughput req/s,
latency s). ``--rates`` and ``--latency`` hold one scenario per row, one column per model in alphabetical
order of the profile files (request rate in req/s; latency objective in ms; ``N/A``: the model is absent).
Any files of that format work.

Prints one line per scenario, ``scenario=<i> gpus=<n> slo_met=<true|false> gpcs_used=<n>``, then one
comparison line per scenario against ParvaGPU's own deployment (``deployment/SLO<i>/*.csv`` when it is
there, else the 2, 3, 5 A100s its paper reports for scenarios 1-3). The goal: no more GPUs than
ParvaGPU, with every objective met. ``--latency-fraction 0.5`` asks every batch to fit in half the
objective (the other half left for a request to wait for its batch), a stricter reading.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slo_packing import Demand, SloPackingResult, plan  # noqa: E402
from slo_packing_mixes import A100_80GB_PROFILE_FOR_GPCS, ProfileRow  # noqa: E402

from recommender.core.catalogue import load_catalogue  # noqa: E402

PARVAGPU_REPORTED = {1: 2, 2: 3, 3: 5}  # A100s in ParvaGPU's own deployments, scenarios 1-3


def read_profiles(folder: Path) -> dict[str, list[ProfileRow]]:
    """``<model>.csv`` -> rows; the header is skipped, columns taken by position."""
    out: dict[str, list[ProfileRow]] = {}
    for path in sorted(folder.glob("*.csv")):
        with path.open(newline="") as f:
            rows = list(csv.reader(f))
        out[path.stem] = [
            ProfileRow(int(float(r[0])), int(float(r[1])), int(float(r[2])), float(r[3]), float(r[4]))
            for r in rows[1:]
            if len(r) >= 5
        ]
    return out


def read_scenarios(path: Path) -> list[list[float | None]]:
    """One row per scenario; ``N/A`` (or empty) -> None."""
    with path.open(newline="") as f:
        return [
            [None if c.strip().upper() in ("N/A", "NA", "") else float(c) for c in row]
            for row in csv.reader(f)
            if any(c.strip() for c in row)
        ]


def parvagpu_gpus(deployment: Path | None, scenario: int) -> tuple[int | None, str]:
    """GPUs in ParvaGPU's deployment file for a scenario (distinct ``Num GPU``), else the reported count."""
    if deployment is not None:
        for path in sorted((deployment / f"SLO{scenario}").glob("*.csv")):
            try:
                with path.open(newline="") as f:
                    gpus = {(r["Num instance"], r["Num GPU"]) for r in csv.DictReader(f)}
                if gpus:
                    return len(gpus), str(path.relative_to(deployment.parent))
            except (KeyError, OSError, csv.Error):
                continue
    reported = PARVAGPU_REPORTED.get(scenario)
    return reported, "reported in the paper" if reported is not None else "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", type=Path,
                    default=Path(os.environ.get("GPU_RIGHTSIZER_SHARED", REPO.parent / "shared" / "data")))
    ap.add_argument("--profiles", type=Path, help="folder of <model>.csv profiles")
    ap.add_argument("--rates", type=Path, help="scenario file: request rate req/s per model")
    ap.add_argument("--latency", type=Path, help="scenario file: latency objective ms per model")
    ap.add_argument("--deployment", type=Path, help="ParvaGPU's deployment folder (SLO<i>/*.csv)")
    ap.add_argument("--latency-fraction", type=float, default=1.0)
    ap.add_argument("--verbose", "-v", action="store_true", help="print each plan and layout")
    args = ap.parse_args(argv)

    root = args.shared / "parvagpu-sc24"
    profiles_dir = args.profiles or root / "prof_data"
    rates_file = args.rates or root / "SLO" / "SLO_req_rate.csv"
    latency_file = args.latency or root / "SLO" / "SLO_latency.csv"
    deployment = args.deployment or (root / "deployment" if (root / "deployment").is_dir() else None)
    missing = [p for p in (profiles_dir, rates_file, latency_file) if not p.exists()]
    if missing:
        print(f"skipped: {', '.join(map(str, missing))} not found (set --shared, GPU_RIGHTSIZER_SHARED, "
              "or --profiles/--rates/--latency)")
        return 0

    profiles = read_profiles(profiles_dir)
    models = sorted(profiles)
    rates, latencies = read_scenarios(rates_file), read_scenarios(latency_file)
    if len(rates) != len(latencies):
        print(f"error: {rates_file} has {len(rates)} scenarios, {latency_file} has {len(latencies)}", file=sys.stderr)
        return 2
    gpu = load_catalogue().gpus["A100-80GB"]
    results: list[SloPackingResult] = []
    for i, (rate_row, lat_row) in enumerate(zip(rates, latencies, strict=True), start=1):
        if len(rate_row) != len(models) or len(lat_row) != len(models):
            print(f"error: scenario {i} has {len(rate_row)}/{len(lat_row)} columns for {len(models)} models",
                  file=sys.stderr)
            return 2
        demands = {
            m: Demand(r, lat / 1000.0)
            for m, r, lat in zip(models, rate_row, lat_row, strict=True)
            if r is not None and lat is not None
        }
        res = plan(profiles, demands, gpu, profile_for_gpcs=A100_80GB_PROFILE_FOR_GPCS,
                   latency_fraction=args.latency_fraction)
        results.append(res)
        print(f"scenario={i} gpus={res.gpus} slo_met={str(res.slo_met).lower()} gpcs_used={res.gpcs}")
        if args.verbose:
            for p in res.plans.values():
                cfgs = ", ".join(f"{c.gpcs}g b{c.batch} p{c.mps_processes}" for c in p.instances)
                print(f"  {p.model}: [{cfgs}] met={p.slo_met}: {p.reason}")
            for pl in res.placements:
                print(f"  gpu{pl.gpu_index} start={pl.start} {pl.profile} {pl.model} "
                      f"b{pl.config.batch} p{pl.config.mps_processes}")
    for i, res in enumerate(results, start=1):
        theirs, source = parvagpu_gpus(deployment, i)
        if theirs is None:
            verdict = "no ParvaGPU count to compare"
        else:
            verdict = "goal met" if res.slo_met and res.gpus <= theirs else "goal NOT met"
        print(f"scenario={i} ours_gpus={res.gpus} parvagpu_gpus={theirs if theirs is not None else 'n/a'} "
              f"({source}) slo_met={str(res.slo_met).lower()}: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
