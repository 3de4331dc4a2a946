"""Records with every policy's column from sweeps that ran different policies on the same clients: static peak and
ours from today's records, reactive, reactive-rightsized and the oracle from earlier ones (same trace and seed).
Their code does not read ours' rules, so a later sweep would give them again; ``replay_sweep.py --summarise``
then prints the full table.

    python benchmarks/replay_compose.py OUT.jsonl --current A.jsonl [B.jsonl ...] --baselines C.jsonl [...]

A client is composed only where both sides have it, with the same static-peak count and shape (else it is named
and left out); each record says which file and commit each side came from. Ours' goal is judged again on the
composed figures (``replay_results.goal_met``, on the records' rounded figures).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_results import goal_met
from replay_sweep import read_records

OURS = ("static-peak", "ours")
BASELINES = ("reactive", "reactive-rightsized", "oracle")
ORDER = ("static-peak", "reactive", "reactive-rightsized", "ours", "oracle")


def latest(paths: list[Path], need: tuple[str, ...]) -> dict[tuple[str, str], tuple[dict[str, Any], str]]:
    """The last record of each client holding every policy of ``need``, with its file's name."""
    out = {}
    for path in paths:
        for r in read_records(path):
            if need and set(need) <= r.get("policies", {}).keys():
                out[(r["population"], r["client"])] = (r, path.name)
    return out


def ours_goal(policies: dict[str, dict[str, float]], unavoidable_pct: float) -> bool:
    """``replay_results.goal_met`` on the record's (rounded) figures."""
    ours = policies["ours"]["gpu_hours"]
    return goal_met(100 * (1 - ours / policies["static-peak"]["gpu_hours"]),
                    100 * (1 - ours / policies["reactive"]["gpu_hours"]),
                    policies["ours"]["ttft_violation_pct"] - unavoidable_pct)


def compose(current: dict[tuple[str, str], tuple[dict[str, Any], str]],
            baselines: dict[tuple[str, str], tuple[dict[str, Any], str]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The composed records, and a line for each client left out."""
    records, left = [], []
    for key, (r, name) in sorted(current.items()):
        if key not in baselines:
            left.append(f"{key[0]} {key[1]}: no baselines")
            continue
        b, base_name = baselines[key]
        if (r.get("static_peak_replicas"), r.get("shape")) != (b.get("static_peak_replicas"), b.get("shape")):
            left.append(f"{key[0]} {key[1]}: static peak or shape differ")
            continue
        both = {**{p: r["policies"][p] for p in OURS}, **{p: b["policies"][p] for p in BASELINES}}
        policies = {p: both[p] for p in ORDER}
        records.append(r | {
            "policies": policies, "args": ["--policies", ",".join(ORDER)],
            "ours_from": f"{name} ({r.get('commit')}, code {r.get('code')})",
            "baselines_from": f"{base_name} ({b.get('commit')}, code {b.get('code')})",
            "goal": {"ours": ours_goal(policies, float(r.get("unavoidable_pct", 0.0))),
                     "oracle": bool(b.get("goal", {}).get("oracle"))}})
    return records, left


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--current", type=Path, nargs="+", required=True, help="records with static peak and ours")
    p.add_argument("--baselines", type=Path, nargs="+", required=True,
                   help="records with reactive, reactive-rightsized and the oracle")
    args = p.parse_args(argv)
    absent = [f for f in (*args.current, *args.baselines) if not f.is_file()]
    if absent:
        print(f"error: {absent[0]}: no such file", file=sys.stderr)
        return 2
    records, left = compose(latest(args.current, OURS), latest(args.baselines, BASELINES))
    for line in left:
        print(f"# left out: {line}")
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
    tmp.replace(args.out)  # whole or not at all
    print(f"# {len(records)} clients composed into {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
