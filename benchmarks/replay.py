"""Replay a real request trace against a vLLM service's replicas under several scaling policies.

    python benchmarks/replay.py --trace ../shared/data/azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv \
        --format azure
    python benchmarks/replay.py --trace ../shared/data/alibaba-servegen/data/language/m-mid/chunk-2-trace.csv \
        --format servegen

Prints one line per policy: ``policy=<name> gpu_hours=<x> ttft_violation_pct=<x> cold_starts=<n> ...``;
``--chart FILE.svg`` also draws them over time (``replay_charts.py``).

Capacity model (fixed, stated, every number a flag; defaults for an 8B dense model, BF16, one H100-80GB):
- prefill 15,000 tokens/s per replica; decode 4,000 tokens/s per replica in all, at most 100 tokens/s
  per sequence; each second decode of the running sequences goes first (vLLM V1 schedules running
  requests before new ones), prefill gets the rest of the replica-second;
- KV cache 400,000 tokens per replica (72 GiB at utilisation 0.9, less 16 GiB weights and 4 GiB
  activations, at 128 KiB per token); a request reserves prompt + output tokens when admitted
  (no preemption); at most 256 sequences per replica;
- a new pod is ready 120 s after it starts (image cached, weights load, CUDA graphs) and holds its GPU
  from start to removal: GPU-hours count starting pods. Requests are served FIFO by the replica pool.
TTFT = admission wait + prefill; a request still unserved at the end counts as over the objective.
- on a MIG slice (``--slice``; ``Capacity.on_slice``): prefill x SM slices / 7, decode and per-sequence
  speed x memory slices / 8 (reference.md §1: a memory slice carries 1/8 of the bandwidth), KV = the
  slice's usable memory at the same utilisation less the whole GPU's weights and activations; a pod
  counts the slice's share of a GPU (3g.40gb: 0.5). ``auto`` picks the shape as the product's MIG policy
  would, from the first hour (``choose_slice``).

Policies (every one starts with the static-peak count of warm replicas: the service ran before the trace; an
HPA, created with the trace (reactive, oracle) or with ours' first plan, records the replicas it finds at its
first sync as the controller does, so it scales in from them only after its scale-down window):
- ``static-peak``: replicas for the peak minute of the whole trace (load = prompt/prefill + output/decode
  replica-seconds per second), all the time. It sees the future: it is the provisioning baseline.
- ``reactive``: KEDA + HPA on ``vllm:num_requests_waiting`` with AverageValue 5 per replica, read at every
  HPA sync (15 s; KEDA queries afresh, ``useCachedMetrics`` false) with tolerance 0.1, scale-up at most
  max(+4 pods, x2) per 15 s, scale-down stabilisation 300 s, minReplicaCount 1 (with 0 KEDA would
  deactivate a busy service that keeps up: waiting is 0 then). ``reactive-zero`` is the same with
  minReplicaCount 0, KEDA's activation checked every 30 s (pollingInterval) and cooldownPeriod 300 s.
  Requests wait only when the pool is saturated (admission each second takes every request that arrives
  within it, up to the budget), so this metric is 0 until a replica is full: it scales on a queue, late.
  Every reactive variant has maxReplicaCount at static peak's replica count in its shape (KEDA's default
  of 100 let the queue's overshoot hold up to 12 times static peak's GPU-hours): a baseline bounded as an
  operator would bound it, which keeps its late scaling but not its runaway. ``reactive`` and
  ``reactive-zero`` run on whole GPUs, as services run today; ``reactive-rightsized`` is ``reactive`` on the
  shape ours starts on (``--slice``, chosen from the first hour), its bound the same capacity in that shape:
  reactive against reactive-rightsized is what right-sizing saves, reactive-rightsized against ours what
  ours' scaling saves. It stays on that shape where ours later moves to whole GPUs (ours' own misses decide
  that move).
- ``ours``: on the ``--slice`` shape, ``policies.replicas.scaling_plan`` refitted every ``--refit-s`` (300 s:
  the controller's default interval, so the published forecast is as old as in a cluster) on the history so
  far only (a ``recommender.analysis.forecast`` forecast of the per-minute arrival rate, the request rate the
  collector reads (finished + growth of running and waiting), capacity from the model above
  and the token means seen so far as the annotation, class from ``--class``, the previous plan; min replicas
  raised until the next refit to a rise seen at this time of day on two of the last seven days,
  ``policies.replicas.recurring``, unless ``--no-recurring-floor``); every 15 s
  the HPA sees three metrics, each proposing replicas with the HPA's 0.1 tolerance, and follows the largest:
  the forecast band over the next cold start (the external scaler, once the plan acts on a forecast: from
  ``min_forecast_history_s`` of history, two days; before, the plan's floor) and the arrival rate over the rate
  trigger's window (``rate_window_s``, 120 s: two scrapes at 60 s), per ``target_per_replica``, and, as the
  plan's second trigger, waiting / ``waiting_per_replica`` (target x the TTFT objective: 5 on a 3g.40gb slice,
  11 on the whole GPU); the ``behavior`` ``hpa_behavior`` emits: scale-up to what the triggers ask in one sync
  (a Pods policy of the plan's max replicas), scale-down stabilisation from ``scale_down_window_s``; to zero
  only when the plan allows it (real-time: only with ``--wake-budget-frac``, where its past
  wakes fit that share of the error budget, ``policies.replicas.wake_cost``, once a forecast and two days of
  history exist) and the forecast expects no
  request within a cold start, the cooldown after the last one. At zero, KEDA activates one pod at a poll
  (30 s) for the forecast or a request held at zero (a gateway such as KEDA's HTTP add-on holds it); until a
  replica serves, the rate and waiting triggers read nothing (vLLM's metrics come from serving replicas), so
  the cold start's backlog is no demand. Its
  headroom follows the TTFT error budget (``policies.replicas.error_budget_headroom``): each refit reads every
  past minute's p95 TTFT of the requests served, by first-token time as vLLM's histogram records it, and the
  minute's ready replicas. From the same history the plan measures capacity at the knee
  (``policies.replicas.locate_knee``) and keeps the model's figure while it lies within the knee's bracket, as
  the product does by default. On a slice, once a day of history exists, it moves to whole GPUs where the
  right-size policy would (``policies.mig.missed_too_often``: over 2x the error budget of the last 24 h's
  requests over the objective, read as the collector reads vLLM's TTFT histogram, ``histogram_over``), rolled
  out as :func:`simulate` describes.
- ``oracle``: reads the requests of the next cold start (not causal, not a contender): replicas for the
  busiest minute of work ahead plus the backlog, at the class's headroom, with the same HPA behaviour. It
  reads further ahead where a jump needs more HPA syncs to reach than its lead of two (x2 or +4 per 15 s:
  from 2 to 60 pods takes five), so it starts the ramp in time. Where it misses the goal, an exact forecast
  of each minute's work would not have met it with these replicas and this HPA either.
- ``past-peak`` (``replay_bound``; not a contender, not in the default set): on whole GPUs (no slice's prefill
  to wait on), never fewer replicas than the most any past minute's work needed, ours' cap in whole GPUs
  (``ours_max_replicas``) at once while requests wait. What it leaves over the objective comes from rises above
  every earlier minute: a reference for a policy that holds at most its past peak before a rise.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay_bound import PastPeak
from replay_capacity import Capacity, floor_pct
from replay_charts import chart_path_problem, replay_figure, save
from replay_hpa import Oracle, Reactive
from replay_ours import Ours
from replay_results import after_jumps, summary, verdict
from replay_sim import Policy, simulate
from replay_sizing import choose_slice, static_peak
from replay_trace import LOADERS, Trace, load_servegen

from recommender.core.catalogue import load_catalogue
from recommender.core.plan import WorkloadClass
from recommender.core.settings import ForecastSettings
from recommender.core.settings_scaling import ScalingSettings


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    d = Capacity()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trace", type=Path, required=True)
    p.add_argument("--format", choices=["azure", "mooncake", "servegen"], required=True)
    p.add_argument("--ttft-objective-s", type=float, default=2.0)
    p.add_argument("--class", dest="cls", choices=[c.value for c in WorkloadClass], default="real-time",
                   help="class 'ours' sizes the trace as (real-time: hi_95 band, 30%% headroom, never to zero unless "
                   "--wake-budget-frac)")
    p.add_argument("--refit-s", type=int, default=300, help="refit period of 'ours': the controller's interval "
                   "(its default, 300 s, publishes a new forecast every 5 minutes)")
    p.add_argument("--policies", default="static-peak,reactive,reactive-zero,reactive-rightsized,ours,oracle",
                   help="oracle reads the future: a bound on what a forecast could buy, not a contender")
    p.add_argument("--reselect-s", type=float, default=ForecastSettings().reselect_s, help="'ours' chooses its "
                   "forecast model by backtest at most this often and refits only that model in between "
                   "(forecast.reselect_s; 0: at every refit)")
    p.add_argument("--seed", type=int, default=0, help="ServeGen arrivals and token lengths")
    p.add_argument("--chart", type=Path, help="also draw demand, GPUs held and misses over time per policy to this "
                   ".svg, .png or .pdf file")
    p.add_argument("--servegen-mean-input", type=float, default=1000.0)
    p.add_argument("--servegen-mean-output", type=float, default=250.0)
    p.add_argument("--gpu", default="H100-80GB", help="GPU model (policies/data/gpus.yaml) of the capacity figures")
    p.add_argument("--slice", default="auto", help="replica shape of 'ours', 'reactive-rightsized' and 'oracle': auto "
                   "(the smallest MIG profile that fits, see choose_slice), none (whole GPU) or a profile name")
    p.add_argument("--min-kv-tokens", type=float, default=32_768.0, help="KV cache a slice must hold (auto)")
    p.add_argument("--slice-prefill-budget-pct", type=float, default=0.25, help="points of requests a slice may add "
                   "to those whose prefill alone exceeds the objective (auto; of the 1 point the goal allows)")
    p.add_argument("--slice-min-efficiency", type=float, default=0.9, help="requests/s per GPU share a slice must "
                   "keep, as a share of the whole GPU's (auto)")
    p.add_argument("--slice-clump-check", action="store_true", help="what-if, not a product rule: also refuse a "
                   "slice (auto) where over --whole-gpu-over-budget x the TTFT error budget of the first hour's "
                   "requests, served on static peak's whole GPUs, had a TTFT over the objective x the slice's SM "
                   "share (see choose_slice)")
    p.add_argument("--whole-gpu-over-budget", type=float,
                   default=ScalingSettings().whole_gpu_over_budget, help="'ours' on a slice moves to whole GPUs "
                   "past this many times its TTFT error budget (scaling.whole_gpu_over_budget; 0: never)")
    p.add_argument("--wake-budget-frac", type=float, default=ScalingSettings().wake_budget_frac,
                   help="'ours' may take a real-time service to zero where its past wakes cost at most this share "
                   "of the TTFT error budget (scaling.wake_budget_frac, opt-in; default: never)")
    p.add_argument("--hold-band", action="store_true", help="'ours' reads its scale-down hold against the forecast "
                   "band it acts on (scaling.scale_down_hold_reads_band, opt-in; default: off)")
    p.add_argument("--whole-cap", action="store_true", help="once 'ours' moves to whole GPUs, cap it at static "
                   "peak's whole-GPU count (default: the cap stays the slice's count, as the owner set it)")
    p.add_argument("--burst-floor-budget-frac", type=float, default=ScalingSettings().burst_floor_budget_frac,
                   help="'ours' keeps the replicas a late autoscaler's misses call for, to this share of the TTFT "
                   "error budget (scaling.burst_floor_budget_frac, opt-in; default: off)")
    p.add_argument("--no-recurring-floor", action="store_true",
                   help="'ours' keeps nothing ahead of a rise seen at this time of day on two of the last seven days "
                   "(default: it keeps the replicas for it until its next refit, scaling.recurring_floor_interval_s "
                   "= --refit-s)")
    for field in CAPACITY_FLAGS:
        value = getattr(d, field)
        p.add_argument(f"--{field.replace('_', '-')}", type=type(value), default=value)
    args = p.parse_args(argv)
    positive = min(getattr(args, f) for f in CAPACITY_FLAGS) > 0 and args.ttft_objective_s > 0 and args.refit_s > 0
    if not positive or args.reselect_s < 0:
        p.error("capacity figures, the TTFT objective and the refit period must be positive, --reselect-s 0 or more")
    if args.whole_gpu_over_budget is not None and args.whole_gpu_over_budget < 0:
        p.error("--whole-gpu-over-budget must be 0 (never) or more")
    if args.wake_budget_frac is not None and not 0 <= args.wake_budget_frac <= 1:
        p.error("--wake-budget-frac must lie in [0, 1]")
    if args.burst_floor_budget_frac is not None and not 0 <= args.burst_floor_budget_frac <= 1:
        p.error("--burst-floor-budget-frac must lie in [0, 1]")
    unknown = [n for n in args.policies.split(",") if n not in POLICIES]
    if unknown:
        p.error(f"unknown policy {unknown[0]!r} (known: {', '.join(POLICIES)})")
    problem = chart_path_problem(args.chart)
    if problem:
        p.error(problem)
    return args


CAPACITY_FLAGS = [f for f in vars(Capacity()) if f != "gpu_share"]
POLICIES = ("static-peak", "reactive", "reactive-zero", "reactive-rightsized", "ours", "oracle", "past-peak")


def replica_shape(args: argparse.Namespace, trace: Trace, cap: Capacity,
                  warm: Callable[[], int]) -> tuple[Capacity, str]:
    """The capacity 'ours' runs on from ``--slice``; a one-line ValueError for an unknown GPU or profile.
    ``warm``: static peak's whole GPUs, what served before the trace (asked only by ``--slice-clump-check``)."""
    if args.slice == "none":
        return cap, "whole GPU"
    gpu = load_catalogue().get(args.gpu)
    if gpu is None or not gpu.supports_mig:
        raise ValueError(f"--gpu {args.gpu}: not a MIG-capable GPU model in policies/data/gpus.yaml")
    if args.slice == "auto":
        bar = (args.whole_gpu_over_budget or 0.0) * ScalingSettings().ttft_error_budget  # 0: no check
        check = args.slice_clump_check and bar > 0
        return choose_slice(trace, cap, gpu, args.ttft_objective_s, args.min_kv_tokens, 3600.0,
                            args.slice_prefill_budget_pct, args.slice_min_efficiency,
                            clump_bar=bar if check else None, before=warm() if check else 1)
    profile = gpu.profile(args.slice)
    if profile is None:
        raise ValueError(f"--slice {args.slice}: {args.gpu} has profiles {', '.join(p.name for p in gpu.profiles)}")
    on = cap.on_slice(gpu, profile)
    if on.kv_tokens <= 0:
        raise ValueError(f"--slice {args.slice}: the model does not fit ({on.kv_tokens:.0f} KV tokens left)")
    return on, profile.name


@dataclass(frozen=True)
class Contender:
    """One policy of the replay: how to make it, the replica shape it runs on and the replicas ready at 0 (static
    peak's capacity in that shape: the service ran before the trace)."""

    make: Callable[[], Policy]
    cap: Capacity
    start: int


def same_capacity(replicas: int, trace: Trace, cap: Capacity, shape: Capacity) -> int:
    """Replicas of ``shape`` that serve the requests/s of ``replicas`` of ``cap`` at the trace's token means."""
    means = float(trace.input_tokens.mean()), float(trace.output_tokens.mean())
    return math.ceil(replicas * cap.requests_per_s(*means) / shape.requests_per_s(*means) - 1e-9)


def ours_max_replicas(on_shape: int) -> int:
    """Ours' cap: the product's default (``scaling.max_replicas``), raised to static peak's count in ours' shape
    (``on_shape``, the reactive variants' bound) where that is higher, as the owner of a service that needs
    more replicas would raise it. Every replay of ours (replay.py, replay_window.py) caps it here; with
    ``--whole-cap``, again at static peak's whole GPUs once ours moves to them (``Ours.whole_max``)."""
    return max(ScalingSettings().max_replicas, on_shape)


def contenders(args: argparse.Namespace, trace: Trace, cap: Capacity, shaped: Capacity,
               warm: int) -> dict[str, Contender]:
    """Every policy the replay knows, by name; ``warm`` is static peak's replica count on ``cap``."""
    on_shape = same_capacity(warm, trace, cap, shaped)
    settings = ScalingSettings(ttft_objective_s=args.ttft_objective_s,
                               whole_gpu_over_budget=args.whole_gpu_over_budget or None,
                               wake_budget_frac=args.wake_budget_frac,
                               burst_floor_budget_frac=args.burst_floor_budget_frac,
                               scale_down_hold_reads_band=args.hold_band,
                               recurring_floor_interval_s=None if args.no_recurring_floor else float(args.refit_s),
                               max_replicas=ours_max_replicas(on_shape))
    return {
        "static-peak": Contender(lambda: lambda obs: warm, cap, warm),
        "reactive": Contender(lambda: Reactive(min_replicas=1, max_replicas=warm), cap, warm),
        "reactive-zero": Contender(lambda: Reactive(min_replicas=0, max_replicas=warm), cap, warm),
        "reactive-rightsized": Contender(lambda: Reactive(min_replicas=1, max_replicas=on_shape), shaped, on_shape),
        "ours": Contender(lambda: Ours(shaped, WorkloadClass(args.cls), args.refit_s, settings,
                                       whole=cap if shaped != cap else None, reselect_s=args.reselect_s,
                                       whole_max=ours_max_replicas(warm) if args.whole_cap else None),
                            shaped, on_shape),
        "oracle": Contender(lambda: Oracle(trace, shaped, ScalingSettings().headroom_frac.get(args.cls, 0.0)),
                            shaped, on_shape),
        "past-peak": Contender(lambda: PastPeak(cap, ScalingSettings().headroom_frac.get(args.cls, 0.0),
                                                ours_max_replicas(warm)), cap, warm),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.trace.is_file():
        print(f"replay: trace {args.trace} not found: skipped (see ../shared/data/README.md)")
        return 0
    try:
        if args.format == "servegen":
            trace = load_servegen(args.trace, args.seed, args.servegen_mean_input, args.servegen_mean_output)
        else:
            trace = LOADERS[args.format](args.trace)
    except (ValueError, KeyError, TypeError, json.JSONDecodeError, pd.errors.ParserError) as exc:
        print(f"error: {args.trace} is not a {args.format} trace: {exc}", file=sys.stderr)
        return 2
    if trace.arrival_s.size == 0:
        print(f"replay: {args.trace} holds no requests: nothing to replay")
        return 0
    cap = Capacity(**{f: getattr(args, f) for f in CAPACITY_FLAGS})
    # every policy starts at the provisioned size; searched once, after a bad --slice is told
    peak = functools.cache(lambda: static_peak(trace, cap, args.ttft_objective_s))
    try:
        shaped, shape = replica_shape(args, trace, cap, peak)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    span = float(trace.arrival_s[-1])
    print(f"# {trace.arrival_s.size} requests over {span / 3600:.2f} h; mean tokens in {trace.input_tokens.mean():.0f} "
          f"out {trace.output_tokens.mean():.0f}; capacity {cap}; objective {args.ttft_objective_s:g} s")
    print(f"# ours, reactive-rightsized and oracle run on {shape}: {shaped}")

    warm = peak()
    print(f"# static peak: {warm} replicas on whole GPUs, {same_capacity(warm, trace, cap, shaped)} on {shape}: "
          "every policy starts there, and every reactive one scales up to it at most")
    policies = contenders(args, trace, cap, shaped, warm)
    floor = floor_pct(trace, cap, args.ttft_objective_s)
    jumps = after_jumps(trace.arrival_s, cap.cold_start_s)
    results = {}
    moves: dict[str, float] = {}  # a policy's change of shape, for the chart
    for name in args.policies.split(","):
        entry = policies[name]
        policy = entry.make()
        result = simulate(trace, entry.cap, policy, name, entry.start)
        print(summary(name, result, args.ttft_objective_s, floor, jumps), flush=True)
        if args.chart is None and name not in ("ours", "oracle"):  # no later line reads its TTFTs: 8 bytes a request
            result = dataclasses.replace(result, ttft_s=np.zeros(0))
        results[name] = result
        if isinstance(policy, Ours) and policy.escalated_s is not None:
            moves[f"{name}: {shape} → whole GPUs"] = policy.escalated_s
            print(f"# {name} moved from {shape} to whole GPUs at {policy.escalated_s / 86_400:.2f} d: over "
                  f"{policy.settings.whole_gpu_over_budget:g}x its TTFT error budget (policies.mig.missed_too_often)")
    for name in ("ours", "oracle"):
        if {name, "static-peak", "reactive"} <= results.keys():
            print(verdict(name, results, args.ttft_objective_s, floor))
    if args.chart is not None:
        fig = replay_figure(trace.arrival_s, {k: (r.gpus_per_min, r.ttft_s) for k, r in results.items()},
                            args.ttft_objective_s, f"{args.trace.name}: ours on {shape}", moves)
        try:
            save(fig, args.chart, args.trace.name)
        except OSError as exc:
            print(f"error: --chart {args.chart}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"# chart: {args.chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
