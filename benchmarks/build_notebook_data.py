"""Copy the small subset of public traces the walk-through notebook reads into ``notebooks/data``.

    python benchmarks/build_notebook_data.py --shared ../shared/data

ServeGen client files are copied unchanged (Apache-2.0); the Helios series is reduced to 10-minute
means of ``running_gpu_num`` (CC BY 4.0, a derived file). Attribution: NOTICE. The notebook runs in
the tests, so these files are committed: a fresh clone needs no ``../shared``.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "notebooks" / "data"
SERVEGEN_CLIENTS = (36, 73, 49, 21)  # busy, busy, idle half the time, idle 85% of the time (m-mid)
HELIOS_VC = "vc8Sj"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "data")
    args = ap.parse_args()
    if not args.shared.is_dir():
        raise SystemExit(f"public traces not found at {args.shared}: pass --shared PATH")
    (OUT / "servegen").mkdir(parents=True, exist_ok=True)
    for client in SERVEGEN_CLIENTS:
        name = f"chunk-{client}-trace.csv"
        shutil.copyfile(args.shared / "alibaba-servegen/data/language/m-mid" / name, OUT / "servegen" / name)
    raw = pd.read_csv(args.shared / f"helios-sensetime/Earth_vcs/{HELIOS_VC}_cluster_sequence_vc.csv",
                      usecols=["time", "running_gpu_num", "total_gpu_num"], parse_dates=["time"])
    tenmin = raw.set_index("time").resample("10min").mean().round(3)
    tenmin.to_csv(OUT / f"helios-{HELIOS_VC}-10min.csv")
    print(f"wrote {len(SERVEGEN_CLIENTS)} ServeGen clients and {len(tenmin)} Helios rows to {OUT}")


if __name__ == "__main__":
    main()
