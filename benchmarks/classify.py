"""Classification benchmark: accuracy and confusion matrices against weak labels from real traces.

    python benchmarks/classify.py --shared ../shared/data      # or GPU_RIGHTSIZER_SHARED=...

Every case goes through the product's own path: a Workload and a Snapshot are built from the data, then
``demand_shape`` and ``classify`` (the model trained from the committed table). Workload kinds are the
data's own units (``HeliosVC``, ``ServeGenClient``, ...), which no rule knows, so the owner rule never
fires by construction; the strong-evidence rules that can fire are the ones the data itself feeds
(requests left waiting, scheduled bursts). Labels are weak, taken from what each data set is, never from
the classifier:

| data set | unit: series -> metric | weak label (classes counted correct) | why not in training |
|---|---|---|---|
| helios | VC-day / VC-week of vc6YE, vccaA: running GPUs -> GR activity, pending jobs -> waiting | batch | held out |
| servegen-language | client-day / -week, clients 3 mod 4: requests/s | real-time | held out |
| servegen-reason | client-day, clients 3 mod 4: requests/s | near-real-time | held out |
| azure-conv, azure-code, mooncake | 10 minutes of the last 20 of each trace: requests/s | real-time | held out |
| genai-pods | GenAI 2026 pod, 22.8 h at 57 s: GPU duty cycle -> GR activity | serving (rt or nrt) | research only |
| genai-service | GenAI 2026 service-day / -week, lora_request_trace: req/s | serving (rt or nrt) | research only |
| openb-LS, openb-BE | GPU 2023 pod: GPU share while alive, then 0, for a day | LS: serving; BE: batch | research only |

GenAI 2026 is production text-to-image serving (users wait ~30 s for an image): interactive, and it
tolerates seconds of queueing, so either of the two serving classes counts. Alibaba GPU 2023 has no
usage series at all: only requests and creation/deletion times, so the shape is of the pod's lifetime
(on, then off) and ``qos`` LS (latency-sensitive) vs BE (best-effort) is the weak label; expect little.

The same public series' windows that did go into the training table are scored too ("public tuned-on"),
with the same labels, so each data set's figures show both halves: what the model does on the series it
was fit and tuned on, and on the held-out ones. Nothing is retrained or retuned for it.

Printed per data set: cases, accuracy on strong-evidence cases (annotation or rule) and on the rest
(model), cases with no usable shape (too few points or no demand at all: answered with the safe
default and left out of both), the confusion matrix of weak label x predicted class, then each weak
label's recall (strong and model cases). A data set whose folder is absent is skipped with a message.
Goal: >= 90% on strong-evidence cases; the rest is reported as it is.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.build_class_training import held_out, pieces, windows  # noqa: E402
from recommender.analysis.classify import (  # noqa: E402
    MIN_POINTS,
    classify,
    load_class_model,
    load_training_table,
    train_model,
)
from recommender.analysis.shape import demand_shape  # noqa: E402
from recommender.core import usage as m  # noqa: E402
from recommender.core.inventory import Allocation, Sharing, Workload, WorkloadRef  # noqa: E402
from recommender.core.plan import WorkloadClass  # noqa: E402
from recommender.core.usage import Snapshot  # noqa: E402

RT, NRT, BATCH = WorkloadClass.REAL_TIME, WorkloadClass.NEAR_REAL_TIME, WorkloadClass.BATCH
SERVING = frozenset({RT, NRT})
ACCEPT = {"batch": frozenset({BATCH}), "real-time": frozenset({RT}), "near-real-time": frozenset({NRT}),
          "serving (rt or nrt)": SERVING}
KIND = {"helios": "HeliosVC", "servegen-language": "ServeGenClient", "servegen-reason": "ServeGenClient",
        "azure-conv": "TraceReplay", "azure-code": "TraceReplay", "mooncake": "TraceReplay"}
T0 = datetime(2026, 1, 5, tzinfo=UTC)  # a Monday; the traces' own clocks are anonymised anyway


@dataclass(frozen=True)
class Case:
    dataset: str
    label: str  # key of ACCEPT
    workload: Workload
    snapshot: Snapshot


def case(dataset: str, label: str, kind: str, name: str, step_s: float, series: dict[str, np.ndarray]) -> Case:
    """One workload with its series (all of one length), as a collector would hand them over."""
    n = len(next(iter(series.values())))
    idx = pd.date_range(T0, periods=n, freq=pd.Timedelta(seconds=step_s))
    ref = WorkloadRef(dataset, kind, name)
    usage = {metric: pd.DataFrame({ref.key: values}, index=idx) for metric, values in series.items()}
    snap = Snapshot((Workload(ref, Allocation(Sharing.EXCLUSIVE, gpus=1)),), usage, T0 - timedelta(seconds=step_s),
                    idx[-1].to_pydatetime(), step_s, (), dataset)
    return Case(dataset, label, snap.workloads[0], snap)


def public_held_out(shared: Path) -> Iterator[Case]:
    """The windows benchmarks/build_class_training.py kept out of the training table."""
    return public_windows(shared, held=True)


def public_tuned_on(shared: Path) -> Iterator[Case]:
    """The windows the training table was built from: the half the model was fit and tuned on, for contrast."""
    return public_windows(shared, held=False)


def public_windows(shared: Path, held: bool) -> Iterator[Case]:
    """The public series' windows on one side of ``build_class_training.held_out``."""
    for piece in pieces(shared):
        peak = np.nanmax(piece.values, initial=0.0) or 1.0
        for start_s, length_s, cut in windows(piece):
            if held_out(piece.source, piece.group, start_s) != held:
                continue
            name = f"{piece.group}@{start_s / 3600:g}h+{length_s / 3600:g}h"
            if piece.source == "helios":
                series = {m.GR_ENGINE_ACTIVE_FRAC: piece.values[cut] / peak}
                if piece.waiting is not None:
                    series[m.REQUESTS_WAITING] = piece.waiting[cut]
            else:
                series = {m.REQUEST_RATE: piece.values[cut]}
            yield case(piece.source, piece.label, KIND[piece.source], name, piece.step_s, series)


def genai_pods(shared: Path) -> Iterator[Case]:
    frame = pd.read_csv(shared / "alibaba-genai-v2026" / "pod_gpu_duty_cycle_anon.csv")
    wide = frame.pivot_table(index="timestamp_anon", columns="container_ip", values="value", aggfunc="mean")
    grid = np.arange(wide.index.min(), wide.index.max() + 1, 57.0)
    wide = wide.reindex(grid, method="nearest", tolerance=10)
    for pod in wide.columns:
        yield case("genai-pods", "serving (rt or nrt)", "GenAIPod", pod[:12], 57.0,
                   {m.GR_ENGINE_ACTIVE_FRAC: wide[pod].to_numpy(float) / 100.0})


def genai_service(shared: Path) -> Iterator[Case]:
    log = pd.read_csv(shared / "alibaba-genai-v2026" / "lora_request_trace.csv", usecols=["gmt_create"],
                      parse_dates=["gmt_create"])
    rate = log.set_index("gmt_create").resample("10min").size().to_numpy(float) / 600.0
    for days in (1, 7):
        n = days * 144
        for i in range(rate.size // n):
            yield case("genai-service", "serving (rt or nrt)", "GenAIService", f"day{i * days}+{days}d", 600.0,
                       {m.REQUEST_RATE: rate[i * n:(i + 1) * n]})


def openb(shared: Path) -> Iterator[Case]:
    pods = pd.read_csv(shared / "alibaba-gpu-v2023" / "openb_pod_list_default.csv")
    pods = pods[pods["qos"].isin(["LS", "BE"]) & (pods["num_gpu"] > 0)]
    life_s = (pods["deletion_time"] - pods["creation_time"]).clip(lower=1).to_numpy(float)
    share = np.where(pods["num_gpu"] > 1, pods["num_gpu"], pods["gpu_milli"] / 1000.0).astype(float)
    steps_s = np.arange(144) * 600.0
    for name, qos, life, gpus in zip(pods["name"].astype(str), pods["qos"].astype(str), life_s, share, strict=True):
        label = "serving (rt or nrt)" if qos == "LS" else "batch"
        yield case(f"openb-{qos}", label, "OpenbPod", name, 600.0,
                   {m.GR_ENGINE_ACTIVE_FRAC: np.where(steps_s < life, gpus, 0.0)})


PUBLIC = ("helios-sensetime", "alibaba-servegen", "azure-llm-inference-2023", "mooncake-traces")
SOURCES = (("public held-out", PUBLIC, public_held_out),
           ("public tuned-on", PUBLIC, public_tuned_on),
           ("genai pods", ("alibaba-genai-v2026",), genai_pods),
           ("genai service", ("alibaba-genai-v2026",), genai_service),
           ("alibaba gpu 2023", ("alibaba-gpu-v2023",), openb))


@dataclass
class Tally:
    """Outcomes of one data set: per decision kind, counts; and the confusion of label x predicted."""

    counts: Counter[str]
    confusion: defaultdict[str, Counter[str]]


def score(cases: Iterator[Case]) -> dict[str, Tally]:
    model = load_class_model()
    out: dict[str, Tally] = {}
    for c in cases:
        shape = demand_shape(c.snapshot, c.workload)
        got = classify(c.workload, shape, model)
        tally = out.setdefault(c.dataset, Tally(Counter(), defaultdict(Counter)))
        if shape.series.points < MIN_POINTS or (shape.series.idle_frac or 0) >= 1:
            tally.counts["default"] += 1
            continue
        kind = "model" if got.source == "model" else "strong"
        ok = got.workload_class in ACCEPT[c.label]
        tally.counts[f"{kind}_n"] += 1
        tally.counts[f"{kind}_ok"] += int(ok)
        tally.confusion[c.label][got.workload_class.value] += 1
    return out


def _pct(ok: int, n: int) -> str:
    return f"{ok / n:6.1%} ({ok}/{n})" if n else "     - (0)"


def show(name: str, tally: Tally) -> None:
    c = tally.counts
    print(f"\n{name}: strong evidence {_pct(c['strong_ok'], c['strong_n'])}   model {_pct(c['model_ok'], c['model_n'])}"
          f"   no usable shape {c['default']}")
    cols = [w.value for w in WorkloadClass]
    print(f"  {'weak label':22s}" + "".join(f"{col:>16s}" for col in cols))
    for label, row in sorted(tally.confusion.items()):
        print(f"  {label:22s}" + "".join(f"{row[col]:16d}" for col in cols))
    for label, row in sorted(tally.confusion.items()):
        ok = sum(row[w.value] for w in ACCEPT[label])
        print(f"  recall of {label}: {_pct(ok, sum(row.values())).strip()} (model and strong evidence together)")


def lifetime_ceiling(shared: Path) -> str:
    """Best balanced accuracy any single threshold on pod lifetime reaches for LS vs BE: what the
    lifetime shape could at most carry (context for the openb figures, not a classifier)."""
    pods = pd.read_csv(shared / "alibaba-gpu-v2023" / "openb_pod_list_default.csv")
    pods = pods[pods["qos"].isin(["LS", "BE"]) & (pods["num_gpu"] > 0)]
    life = (pods["deletion_time"] - pods["creation_time"]).to_numpy(float)
    is_ls = (pods["qos"] == "LS").to_numpy()
    best = 0.0
    for cut in np.unique(np.quantile(life, np.linspace(0.01, 0.99, 99))):
        longer = life >= cut
        recall_ls, recall_be = (longer & is_ls).sum() / is_ls.sum(), (~longer & ~is_ls).sum() / (~is_ls).sum()
        best = max(best, (recall_ls + recall_be) / 2, 1 - (recall_ls + recall_be) / 2)
    return f"  context: the best single threshold on pod lifetime separates LS from BE at {best:.0%} balanced accuracy"


def training_time(repeats: int = 3) -> str:
    """Seconds to train the model from the committed table (best of ``repeats``): the speed the tests no
    longer assert, since a wall-clock bound fails on a loaded machine (goal: under 1 s)."""
    table = load_training_table()
    best_s = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        train_model(table)
        best_s = min(best_s, time.perf_counter() - started)
    return f"training on the committed table ({len(table)} rows): {best_s:.2f} s, best of {repeats} (goal < 1 s)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--shared", type=Path,
                    default=Path(os.environ.get("GPU_RIGHTSIZER_SHARED", REPO.parent / "shared" / "data")))
    args = ap.parse_args()
    print(training_time())
    started = time.perf_counter()
    totals: dict[str, Counter[str]] = {}
    for title, folders, loader in SOURCES:
        missing = [f for f in folders if not (args.shared / f).is_dir()]
        if len(missing) == len(folders):
            print(f"\n[{title}] skipped: {', '.join(missing)} not found under {args.shared}")
            continue
        print(f"\n[{title}]")
        total = totals.setdefault(title, Counter())
        for name, tally in score(loader(args.shared)).items():
            show(name, tally)
            total.update(tally.counts)
        if loader is openb:
            print(lifetime_ceiling(args.shared))
    print("\nsummary")
    for title, c in totals.items():
        print(f"  {title:18s} strong evidence {_pct(c['strong_ok'], c['strong_n'])}   "
              f"model {_pct(c['model_ok'], c['model_n'])}   no usable shape {c['default']}")
    every = sum((c for title, c in totals.items() if title != "public tuned-on"), Counter())  # the goal: unseen
    print(f"  {'all but tuned-on':18s} strong evidence {_pct(every['strong_ok'], every['strong_n'])} (goal >= 90%)   "
          f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
