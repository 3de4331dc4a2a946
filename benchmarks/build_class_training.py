"""Build the classifier's committed training table, ``recommender/data/class_training.csv``, from public traces.

    python benchmarks/build_class_training.py --shared ../shared/data

Every row is one window of one real demand series, reduced by ``recommender.analysis.shape.series_shape`` (the
function that measures live workloads: one code path), with a WEAK label taken from what the data
set says it is, never from its shape and never from the classifier:

| source | series (step) | windows | weak label |
|---|---|---|---|
| helios | Helios Earth VC ``running_gpu_num`` (1 min) | 1 d, 7 d | batch |
| servegen-language | ServeGen language m-small + m-mid, per-client requests/s (10 min) | 1 d, 7 d | real-time |
| servegen-reason | ServeGen reason deepseek-r1, per-client requests/s (10 min) | 1 d | near-real-time |
| azure-conv | Azure LLM inference 2023, conversation: requests/s per 10 s | 10 min | real-time |
| azure-code | Azure LLM inference 2023, code: requests/s per 10 s | 10 min | real-time |
| mooncake | Mooncake (Kimi) conversation trace: requests/s per 10 s | 10 min | real-time |

Why, from each data set's own description:
- helios: SenseTime's deep-learning *training* clusters (SC'21): jobs queue, run for hours and finish;
  nobody waits on a response.
- servegen-language: Model Studio chat-completion API clients of general language models: interactive,
  served against TTFT and TPOT objectives (the paper's own framing).
- servegen-reason: DeepSeek-R1 reasoning requests with long, bimodal outputs (thousands of thinking
  tokens): answers take tens of seconds to minutes, so seconds of queueing before the first token are
  tolerated.
- azure-conv, mooncake: interactive chat (Splitwise ISCA'24; Kimi FAST'25).
- azure-code: code completion in an editor, the most latency-sensitive use there is.

Not used: ServeGen multimodal mm-image (interactive image chat or document pipelines: the data does not
say which), ParvaGPU (profiles, no demand series), and the Alibaba GPU-2023 and GenAI-2026 traces
(research-only licences: read by ``benchmarks/classify.py`` from ``../shared`` only, never copied).

Held out for ``benchmarks/classify.py`` and never written here (:func:`held_out`): ServeGen clients whose
number is 3 mod 4, Helios VCs ``vc6YE`` and ``vccaA`` (every third VC in name order, from the second), and
the last 20 minutes of the Azure and Mooncake traces. Windows are non-overlapping and whole; a window
with no demand at all says nothing about its shape and is dropped. The output is sorted and rounded to
6 significant digits, so rebuilding from the same traces gives the same bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from recommender.analysis.shape import series_shape  # noqa: E402

OUT = REPO / "recommender" / "data" / "class_training.csv"
DAY_S = 86_400.0
LABELS = {
    "helios": "batch",
    "servegen-language": "real-time",
    "servegen-reason": "near-real-time",
    "azure-conv": "real-time",
    "azure-code": "real-time",
    "mooncake": "real-time",
}
HELIOS_HELD_OUT = ("vc6YE", "vccaA")
SERVEGEN_HELD_OUT_MOD = (4, 3)  # client number % 4 == 3
SHORT_TRACE_STEP_S = 10.0  # request traces of one hour: counted per 10 s ...
SHORT_TRACE_WINDOW_S = 600.0  # ... and cut into 10-minute windows
SHORT_TRACE_HELD_OUT_FROM_S = 2400.0  # windows starting at or after 40 min are held out


@dataclass(frozen=True)
class Piece:
    """One real demand series of one unit (client, VC, trace) with its weak label."""

    source: str
    group: str  # client, VC or trace name
    step_s: float
    values: np.ndarray  # demand per step (req/s or GPUs running)
    waiting: np.ndarray | None = None  # queued work per step when the data has it (Helios pending jobs)

    @property
    def label(self) -> str:
        return LABELS[self.source]


def held_out(source: str, group: str, window_start_s: float) -> bool:
    """True for the windows the benchmark keeps for itself (never in the training table)."""
    if source == "helios":
        return group in HELIOS_HELD_OUT
    if source.startswith("servegen"):
        number = int(re.sub(r"\D", "", group.rsplit("/", 1)[-1]) or 0)
        return number % SERVEGEN_HELD_OUT_MOD[0] == SERVEGEN_HELD_OUT_MOD[1]
    return window_start_s >= SHORT_TRACE_HELD_OUT_FROM_S


def helios(shared: Path) -> Iterator[Piece]:
    for path in sorted((shared / "helios-sensetime" / "Earth_vcs").glob("*_cluster_sequence_vc.csv")):
        frame = pd.read_csv(path, usecols=["time", "running_gpu_num", "pending_job_num"])
        yield Piece("helios", path.name.split("_")[0], 60.0, frame["running_gpu_num"].to_numpy(float),
                    frame["pending_job_num"].to_numpy(float))


def servegen(shared: Path) -> Iterator[Piece]:
    root = shared / "alibaba-servegen" / "data"
    folders = (("servegen-language", "language/m-small"), ("servegen-language", "language/m-mid"),
               ("servegen-reason", "reason/deepseek-r1"))
    for source, folder in folders:
        files = sorted((root / folder).glob("chunk-*-trace.csv"), key=lambda p: int(p.name.split("-")[1]))
        for path in files:
            frame = pd.read_csv(path, header=None, usecols=[0, 1], names=["start_s", "rate"])
            yield Piece(source, f"{folder}/{path.name.split('-')[1]}", 600.0, frame["rate"].to_numpy(float))


def _counts(seconds: np.ndarray) -> np.ndarray:
    """Requests per second in SHORT_TRACE_STEP_S bins from request times in seconds since the first."""
    seconds = seconds - seconds.min()
    bins = np.floor(seconds / SHORT_TRACE_STEP_S).astype(int)
    return np.bincount(bins).astype(float) / SHORT_TRACE_STEP_S


def azure(shared: Path) -> Iterator[Piece]:
    for kind in ("conv", "code"):
        path = shared / "azure-llm-inference-2023" / f"AzureLLMInferenceTrace_{kind}.csv"
        stamps = pd.to_datetime(pd.read_csv(path, usecols=["TIMESTAMP"])["TIMESTAMP"], format="mixed")
        seconds = (stamps - stamps.min()).dt.total_seconds().to_numpy()
        yield Piece(f"azure-{kind}", kind, SHORT_TRACE_STEP_S, _counts(seconds))


def mooncake(shared: Path) -> Iterator[Piece]:
    with (shared / "mooncake-traces" / "conversation_trace.jsonl").open() as f:
        ms = np.array([json.loads(line)["timestamp"] for line in f], dtype=float)
    yield Piece("mooncake", "conversation", SHORT_TRACE_STEP_S, _counts(ms / 1000.0))


LOADERS = (("helios-sensetime", helios), ("alibaba-servegen", servegen),
           ("azure-llm-inference-2023", azure), ("mooncake-traces", mooncake))


def pieces(shared: Path) -> Iterator[Piece]:
    """Every labelled series of every data set present under ``shared`` (absent folders are skipped)."""
    for folder, loader in LOADERS:
        if (shared / folder).is_dir():
            yield from loader(shared)
        else:
            print(f"skipped {folder}: not found under {shared}", file=sys.stderr)


def window_lengths_s(piece: Piece) -> tuple[float, ...]:
    """1 day, and 7 days where the series is long enough; 10 minutes for the one-hour request traces."""
    span_s = piece.values.size * piece.step_s
    if span_s < DAY_S:
        return (SHORT_TRACE_WINDOW_S,)
    return (DAY_S, 7 * DAY_S) if span_s >= 7 * DAY_S else (DAY_S,)


def windows(piece: Piece) -> Iterator[tuple[float, float, slice]]:
    """(start s, length s, index slice) of each whole, non-overlapping window of every length."""
    for length_s in window_lengths_s(piece):
        n = round(length_s / piece.step_s)
        for i in range(piece.values.size // n):
            yield i * n * piece.step_s, length_s, slice(i * n, (i + 1) * n)


def rows(pieces_: Iterator[Piece], keep_held_out: bool = False) -> Iterator[dict[str, object]]:
    """Training rows: one per window with demand in it (held-out windows only when asked)."""
    for piece in pieces_:
        for start_s, length_s, cut in windows(piece):
            if held_out(piece.source, piece.group, start_s) != keep_held_out:
                continue
            values = piece.values[cut]
            if not np.nanmax(values, initial=0.0) > 0:
                continue
            shape = series_shape(values, piece.step_s)
            yield {"source": piece.source, "group": piece.group, "window_start_s": start_s,
                   "window_s": length_s, "label": piece.label, **asdict(shape)}


def build(shared: Path) -> pd.DataFrame:
    table = pd.DataFrame(list(rows(pieces(shared))))
    return table.sort_values(["source", "group", "window_s", "window_start_s"]).reset_index(drop=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--shared", type=Path,
                    default=Path(os.environ.get("GPU_RIGHTSIZER_SHARED", REPO.parent / "shared" / "data")))
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if not args.shared.is_dir():
        raise SystemExit(f"public traces not found at {args.shared}: pass --shared PATH")
    table = build(args.shared)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False, float_format="%.6g")
    counts = table.groupby(["source", "label"]).size().to_string()
    print(f"wrote {len(table)} rows to {args.out}\n{counts}")


if __name__ == "__main__":
    main()
