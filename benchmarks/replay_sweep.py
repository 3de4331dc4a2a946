"""Run ``replay.py`` over many ServeGen clients and say on how many the replica goal is met.

    python benchmarks/replay_sweep.py --dir ../shared/data/alibaba-servegen/data/language/m-mid \\
        --clients 2,9,17,38,43,88,0,10,62,90 --jobs 2

One line per client (GPU-hours and TTFT violations per policy, and the verdict for ours and the oracle),
then a summary and the clients together as one fleet (GPU-hours summed, violations weighted by requests).
Clients run as separate processes. A 14-day client takes about 4 minutes of one core (ours' refits, at any
rate) and 7 µs more per request (chunk-2, 1.1 M requests: 4 minutes; a 13 M-request client: about 5); a
one-day client 5-30 s. Clients of over 100 M requests do not fit in memory (benchmarks/REPLAY.md, "Replay
speed"). Skips with a message when the data folder is absent.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay_charts import ClientPoint, chart_path_problem, save, sweep_figure
from replay_results import GOAL_TERMS

REPLAY = Path(__file__).resolve().with_name("replay.py")
LINE = re.compile(r"policy=(\S+) gpu_hours=(\S+) ttft_violation_pct=(\S+)")
UNAVOIDABLE = re.compile(r"unavoidable_pct=(\S+)")
REQUESTS = re.compile(r"policy=(\S+) .*?\brequests=(\d+)")
GOAL_MET = f"goal met {GOAL_TERMS}"  # the end of replay_results.verdict's line when it is met


Rows = dict[str, tuple[float, float]]  # policy → (GPU-hours, % of requests over the objective)


def run(path: Path, extra: list[str]) -> tuple[str, Rows, dict[str, bool], str, float, dict[str, int]]:
    """(client, rows, {ours/oracle: goal met}, error line or '', unavoidable %, {policy: requests})."""
    out = subprocess.run([sys.executable, str(REPLAY), "--trace", str(path), "--format", "servegen", *extra],
                         capture_output=True, text=True, check=False)
    name = path.name.removesuffix("-trace.csv")
    if out.returncode:
        return name, {}, {}, (out.stderr.strip().splitlines() or ["failed"])[-1], 0.0, {}
    rows = {m[1]: (float(m[2]), float(m[3])) for m in LINE.finditer(out.stdout)}
    requests = {m[1]: int(m[2]) for m in REQUESTS.finditer(out.stdout)}
    floor = UNAVOIDABLE.search(out.stdout)
    return name, rows, {who: goal_met(out.stdout, who) for who in ("ours", "oracle")}, "", \
        float(floor[1]) if floor else 0.0, requests


def fleet_line(clients: list[tuple[Rows, dict[str, int]]]) -> str | None:
    """The clients as one fleet, for the policies every client ran: GPU-hours summed, the share of all requests
    over the objective, and ours against static peak and reactive. None without a policy every client ran."""
    common = [p for p in (clients[0][0] if clients else {}) if all(p in rows and p in req for rows, req in clients)]
    if not common:
        return None
    hours = {p: sum(rows[p][0] for rows, _ in clients) for p in common}
    served = {p: sum(req[p] for _, req in clients) for p in common}
    over = {p: sum(rows[p][1] / 100 * req[p] for rows, req in clients) for p in common}
    cells = ", ".join(f"{p} {hours[p]:,.0f} GPU-h / {100 * over[p] / max(served[p], 1):.2f}%" for p in common)
    vs = [f"{100 * (1 - hours['ours'] / hours[b]):.0f}% fewer GPU-hours than {b}" for b in ("static-peak", "reactive")
          if "ours" in hours and hours.get(b)]
    return f"# all {len(clients)} clients as one fleet: {cells}" + (f" (ours: {', '.join(vs)})" if vs else "")


def goal_met(stdout: str, who: str) -> bool:
    """Whether replay.py's goal line for ``who`` says it met the goal (False without one). Only the goal line
    (``# <who> uses ...``) counts: other ``# <who> ...`` lines, such as a move to whole GPUs, come before it."""
    line = next((ln for ln in stdout.splitlines() if ln.startswith(f"# {who} uses ")), "")
    return line.endswith(GOAL_MET)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dir", type=Path, default=Path("../shared/data/alibaba-servegen/data/language/m-mid"))
    p.add_argument("--clients", default="2,9,17,38,43,88,0,10,62,90",
                   help="client numbers (chunk-<n>-trace.csv): steady and intermittent ones by default")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--chart", type=Path, help="also draw every client against the goal to this .svg, .png or .pdf")
    args, extra = p.parse_known_args(argv)
    problem = chart_path_problem(args.chart)
    if problem:
        p.error(problem)
    if not args.dir.is_dir():
        print(f"replay_sweep: {args.dir} not found: skipped (see ../shared/data/README.md)")
        return 0
    paths = [args.dir / f"chunk-{c.strip()}-trace.csv" for c in args.clients.split(",") if c.strip()]
    missing = [str(x) for x in paths if not x.is_file()]
    if missing:
        print(f"error: no such client trace: {missing[0]}", file=sys.stderr)
        return 2
    met = {"ours": 0, "oracle": 0}
    done = 0
    points, fleet = [], []
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for name, rows, goals, err, floor, requests in pool.map(lambda x: run(x, extra), paths):
            done += 1
            print(f"[{done}/{len(paths)}] ", end="", file=sys.stderr, flush=True)
            if err:
                print(f"client={name} error: {err}")
                continue
            cells = " ".join(f"{k}={g:.0f}h/{v:.2f}%" for k, (g, v) in rows.items())
            print(f"client={name} {cells} ours_goal={'met' if goals['ours'] else 'not'} "
                  f"oracle_goal={'met' if goals['oracle'] else 'not'}", flush=True)
            for who in met:
                met[who] += goals[who]
            points.append(ClientPoint(name, rows, floor))
            fleet.append((rows, requests))
    print(f"# goal met on {met['ours']} of {len(paths)} clients by ours, {met['oracle']} by the oracle "
          "(which reads the future)")
    line = fleet_line(fleet)
    if line:
        print(line)
    if args.chart is not None:
        try:
            save(sweep_figure(points), args.chart, "sweep")
        except OSError as exc:
            print(f"error: --chart {args.chart}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"# chart: {args.chart}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
