"""Run ``replay.py`` over the populations' clients, each half of issue 43's split (``replay_split.py``), and
report each population's half as one fleet.

    python benchmarks/replay_sweep.py --population reason/deepseek-r1 --half both --out sweep.jsonl --jobs 2
    python benchmarks/replay_sweep.py --all --half report --out sweep.jsonl      # and the one-hour traces
    python benchmarks/replay_sweep.py --summarise sweep.jsonl [more.jsonl]       # no replay: the table again

Each client's figures go to ``--out`` (JSON lines, one per client, appended as each ends), so a long sweep
can stop and go on: a client already there for the same code (a hash of the replay's and the product's
sources) and the same replay arguments is not run again. Prints one line per client (GPU-hours and % of
requests over the objective per policy, whether ours met the per-client goal), then a table: each population's
half as one fleet (GPU-hours summed; requests over the objective as a share of all the fleet's requests),
ours against static peak and both reactive variants, the worst client and issue 43's fleet goal. Arguments
the sweep does not know go to ``replay.py`` (``--seed 1``, ``--slice none``...). Skips with a message when
the data folder is absent. Clients run as separate processes, one thread each: ``OMP_NUM_THREADS`` and the
BLAS libraries' equivalents are 1 unless set (numpy's threads only spin when ``--jobs`` processes share the
cores). Times (benchmarks/REPLAY.md, "Replay speed"): a 14-day client's refits and start take about 70 s of
one core, plus about 7 µs a request (chunk-2, 1.1 M requests: about 80 s); a one-day client 3-8 s. A replay
holds about 110 bytes a request at the five default policies, about 35 at one or two (REPLAY.md, "Every client
replayed"): a ServeGen client whose rates add up to more than ``--max-requests`` (default 60 M: about 7 GiB, so
that two fit at ``--jobs 2`` in 23 GiB) is left out, with a ``skipped`` line, and the summary counts and names
the clients left out. Larger ones run with fewer policies (``--policies``) and the limit raised.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay_charts import ClientPoint, chart_path_problem, save, sweep_figure
from replay_fleet import FLEET_WORST_PCT, ClientResult, Figures, fleet_table, fleets
from replay_results import GOAL_TERMS
from replay_split import DATA, REPORT, TUNE, Client, all_clients

from recommender.cli import BLAS_THREAD_CAPS
from recommender.core.versions import add_files

ROOT = Path(__file__).resolve().parents[1]
REPLAY = Path(__file__).resolve().with_name("replay.py")
POLICY_LINE = re.compile(r"^policy=(\S+) (.*)$", re.M)
SHAPE = re.compile(r"^# ours, \S+ and oracle run on (.+?): ", re.M)
STATIC_PEAK = re.compile(r"^# static peak: (\d+) replicas", re.M)
GOAL_MET = f"goal met {GOAL_TERMS}"  # the end of replay_results.verdict's line when it is met
POLICIES = "static-peak,reactive,reactive-rightsized,ours,oracle"
CODE_GLOBS = ("benchmarks/replay*.py", "recommender/**/*.py", "policies/**/*.py", "policies/**/*.yaml")
NOT_RUN_BY_REPLAY = {"replay_sweep.py", "replay_split.py", "replay_fleet.py", "replay_compose.py"}
MAX_REQUESTS = 60_000_000  # per client, by default: over this a replay needs over ~7 GiB (~110 bytes a request)
WINDOW_S = 600.0  # a ServeGen trace's rate window
# thread-count variables of OpenMP and the BLAS builds numpy/scipy may use: 1 in each replay unless set
THREAD_VARS = ("OMP_NUM_THREADS", *BLAS_THREAD_CAPS, "NUMEXPR_NUM_THREADS")  # the command line's BLAS caps, and more


def code_version(root: Path = ROOT) -> str:
    """A hash of every source a replay runs (its modules, the product's recommender and policies; not the
    sweep's own): a recorded client is reused only for the same code."""
    h = hashlib.sha256()
    paths = {p for g in CODE_GLOBS for p in root.glob(g) if p.is_file() and p.name not in NOT_RUN_BY_REPLAY}
    add_files(h, ((p.relative_to(root).as_posix(), p) for p in sorted(paths)))
    return h.hexdigest()[:16]


def commit(root: Path = ROOT) -> str:
    """The checkout's commit, '+' where it has changes; '' outside git."""
    def git(*a: str) -> str:
        out = subprocess.run(["git", *a], cwd=root, capture_output=True, text=True, check=False)
        return out.stdout.strip() if out.returncode == 0 else ""
    head = git("rev-parse", "--short", "HEAD")
    return head + ("+" if head and git("status", "--porcelain", "--untracked-files=no") else "")


def parse_replay(stdout: str) -> dict[str, Any]:
    """replay.py's output as a record's figures: every field of each policy line, the shape, static peak's
    replicas, the unavoidable share and whether ours and the oracle met the per-client goal."""
    policies: dict[str, dict[str, float]] = {}
    for name, rest in POLICY_LINE.findall(stdout):
        policies[name] = {k: float(v) for k, v in (kv.split("=", 1) for kv in rest.split())}
    shape, peak = SHAPE.search(stdout), STATIC_PEAK.search(stdout)
    unavoidable = next(iter(policies.values()), {}).get("unavoidable_pct", 0.0)
    return {"policies": policies, "shape": shape[1] if shape else "", "static_peak_replicas": int(peak[1]) if peak
            else None, "unavoidable_pct": unavoidable, "goal": {w: goal_met(stdout, w) for w in ("ours", "oracle")}}


def goal_met(stdout: str, who: str) -> bool:
    """Whether replay.py's goal line for ``who`` says it met the goal (False without one). Only the goal line
    (``# <who> uses ...``) counts: other ``# <who> ...`` lines, such as a move to whole GPUs, come before it."""
    line = next((ln for ln in stdout.splitlines() if ln.startswith(f"# {who} uses ")), "")
    return line.endswith(GOAL_MET)


def child_env(environ: dict[str, str]) -> dict[str, str]:
    """A replay's environment: ``environ`` with each of ``THREAD_VARS`` the user did not set at 1."""
    return {**{v: "1" for v in THREAD_VARS}, **environ}


def replay_client(client: Client, extra: list[str]) -> dict[str, Any]:
    """Replay one client in its own process (one thread: ``child_env``); the record's figures, or ``error`` with
    replay.py's last line."""
    start = time.monotonic()
    out = subprocess.run([sys.executable, str(REPLAY), "--trace", str(client.path), "--format", client.format,
                          *extra], capture_output=True, text=True, check=False, env=child_env(dict(os.environ)))
    record: dict[str, Any] = {"wall_s": round(time.monotonic() - start, 1)}
    if out.returncode:
        why = [x for x in out.stderr.strip().splitlines() if not x.endswith("%")]  # not the progress lines
        return record | {"error": f"exit {out.returncode}: {(why or ['no message'])[-1]}"}
    parsed = parse_replay(out.stdout)
    if not parsed["policies"]:
        return record | {"error": (out.stdout.strip().splitlines() or ["no policy ran"])[-1]}
    return record | parsed


def expected_requests(client: Client) -> int | None:
    """The requests a ServeGen client's replay generates, about: its windows' rates x 600 s (``load_servegen``
    draws each window's arrivals at its rate). None for other formats (one-hour traces) and unreadable files."""
    if client.format != "servegen":
        return None
    total = 0.0
    try:
        with client.path.open() as f:
            for line in f:
                field = line.split(",", 2)
                rate = float(field[1]) if len(field) > 1 and field[1] else 0.0
                total += rate * WINDOW_S if rate > 0 else 0.0
    except (OSError, ValueError):
        return None
    return round(total)


def too_large(client: Client, limit: float) -> dict[str, Any] | None:
    """A ``skipped`` record for a client of more than ``limit`` requests, else None."""
    n = expected_requests(client)
    if n is None or n <= limit:
        return None
    return {"wall_s": 0.0, "skipped": f"about {n / 1e6:.0f} M requests, over --max-requests {limit:.3g}",
            "expected_requests": n}


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a sweep file; a line cut short (a sweep stopped mid-write) is left out with a note."""
    if not path.is_file():
        return []
    records = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            print(f"# {path}:{n}: not a whole record: left out", file=sys.stderr)
            continue
        if isinstance(record, dict) and {"population", "client", "half"} <= record.keys():
            records.append(record)
    return records


def append_record(path: Path, record: dict[str, Any]) -> None:
    """One whole line per client, written in one call and synced, so a stopped sweep leaves whole records."""
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def ran(record: dict[str, Any]) -> list[tuple[str, dict[str, float]]]:
    """The record's policies in the order its replay ran them (``--policies``)."""
    args = record.get("args", [])
    named = args[args.index("--policies") + 1].split(",") if "--policies" in args[:-1] else []
    return sorted(record["policies"].items(), key=lambda kv: named.index(kv[0]) if kv[0] in named else len(named))


def as_result(record: dict[str, Any]) -> ClientResult:
    figures = {name: Figures(f["gpu_hours"], f["ttft_violation_pct"], int(f["requests"])) for name, f in ran(record)}
    return ClientResult(record["population"], record["client"], record["half"], figures,
                        float(record.get("unavoidable_pct", 0.0)), bool(record.get("goal", {}).get("ours")))


def client_line(record: dict[str, Any]) -> str:
    where = f"{record['population']} {record['client']} ({record['half']})"
    if record.get("skipped"):
        return f"client={where} skipped: {record['skipped']}"
    if record.get("error"):
        return f"client={where} error: {record['error']}"
    cells = " ".join(f"{k}={f['gpu_hours']:.1f}h/{f['ttft_violation_pct']:.2f}%" for k, f in ran(record))
    goal = " ".join(f"{w}_goal={'met' if record['goal'][w] else 'not'}" for w in ("ours", "oracle")
                    if w in record["policies"])
    return f"client={where} shape={record.get('shape') or '?'} {cells} {goal}".rstrip()


def order(record: dict[str, Any]) -> tuple[bool, str, int, str]:
    """ServeGen populations first, by name, their clients by number; then the one-hour traces."""
    number = record["client"].removeprefix("chunk-")
    return record.get("format") != "servegen", record["population"], int(number) if number.isdigit() else -1, \
        record["client"]


def summarise(records: list[dict[str, Any]], policies: list[str], chart: Path | None) -> int:
    """The per-client lines and the fleet table of ``records`` (the last record of each client); 2 on a chart
    it cannot write."""
    last = {(r["population"], r["client"]): r for r in sorted(records, key=order)}
    versions = sorted({f"{r.get('commit') or '?'} (code {r.get('code', '?')}, args {' '.join(r.get('args', []))})"
                       for r in last.values()})
    good = [r for r in last.values() if not r.get("error") and not r.get("skipped")]
    skipped = [r for r in last.values() if r.get("skipped")]
    for r in last.values():
        print(client_line(r))
    failed = len(last) - len(good) - len(skipped)
    names = ", ".join(f"{r['population']} {r['client']}" for r in skipped)
    left_out = f" ({names})" if skipped else ""
    print(f"# {len(good)} clients replayed, {failed} failed, {len(skipped)} left out as too large{left_out}; "
          "measured at " + "; ".join(versions))
    results = [as_result(r) for r in good]
    shown = [p for p in policies if any(p in r.figures for r in results)]
    shown += [p for r in results for p in r.figures if p not in shown]
    if results:
        print("\n".join(fleet_table(fleets(results), list(dict.fromkeys(shown)))))
        with_ours = [r for r in results if "ours" in r.figures]
        if with_ours:
            met = sum(r.goal_met for r in with_ours)
            print(f"# ours met the per-client goal {GOAL_TERMS} on {met} of {len(with_ours)} clients")
        for f in fleets(results):
            if "ours" in f.above_worst:
                print(f"# {f.population}, {f.half}: ours over {FLEET_WORST_PCT:g}% on {f.above_worst['ours']} of "
                      f"{f.clients} clients (issue 43: none)")
    if chart is not None:
        points = [ClientPoint(f"{r.population.rsplit('/', 1)[-1]}/{r.client}",
                              {p: (f.gpu_hours, f.over_pct) for p, f in r.figures.items()}, r.unavoidable_pct)
                  for r in results]
        try:
            save(sweep_figure(points), chart, "sweep")
        except OSError as exc:
            print(f"error: --chart {chart}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        print(f"# chart: {chart}")
    return 0


def choose(args: argparse.Namespace, clients: list[Client]) -> list[Client] | str:
    """The clients the arguments name, or a one-line problem."""
    populations = list(dict.fromkeys(c.population for c in clients))
    wanted = populations if args.all else args.population or []
    unknown = [p for p in wanted if p not in populations]
    if unknown:
        return f"no population {unknown[0]!r} under {args.data} (found: {', '.join(populations)})"
    numbers = {f"chunk-{n.strip()}" for n in (args.clients or "").split(",") if n.strip()}
    chosen = [c for c in clients if c.population in wanted and args.half in ("both", c.half)
              and (not numbers or c.name in numbers)]
    missing = numbers - {c.name for c in clients if c.population in wanted}
    if missing:
        return f"no client {sorted(missing)[0]} in {', '.join(wanted)}"
    return chosen


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, default=DATA, help="the shared data folder (default: ../shared/data)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--population", action="append", help="a population to replay (repeatable): "
                       "language/m-mid, reason/deepseek-r1, azure/code... (replay_split.py lists them)")
    which.add_argument("--all", action="store_true", help="every population, the one-hour traces included")
    which.add_argument("--summarise", type=Path, nargs="+", metavar="FILE",
                       help="no replay: the lines and table of these sweep files")
    p.add_argument("--half", choices=[TUNE, REPORT, "both"], default="both",
                   help="the clients rules are chosen on (tune), those only reported (report), or both")
    p.add_argument("--clients", help="only these client numbers of the population (chunk-<n>)")
    p.add_argument("--out", type=Path, help="append each client's record to this JSON-lines file, and skip the "
                   "clients it already holds for the same code and replay arguments")
    p.add_argument("--policies", default=POLICIES, help="passed to replay.py")
    p.add_argument("--jobs", type=int, default=2, help="clients replayed at once, one process each")
    p.add_argument("--chart", type=Path, help="also draw every client against the goal to this .svg, .png or .pdf")
    p.add_argument("--max-requests", type=float, default=MAX_REQUESTS, help="leave out ServeGen clients whose rates "
                   "add up to more requests than this (default %(default).3g: two larger ones do not fit in memory at "
                   "--jobs 2); "
                   "they are named in the summary")
    args, extra = p.parse_known_args(argv)
    problem = chart_path_problem(args.chart)
    if problem:
        p.error(problem)
    if args.summarise is not None:
        absent = [f for f in args.summarise if not f.is_file()]
        if absent:
            print(f"error: --summarise {absent[0]}: no such file", file=sys.stderr)
            return 2
        return summarise([r for f in args.summarise for r in read_records(f)], args.policies.split(","), args.chart)
    if not (args.all or args.population):
        p.error("name --population P (repeatable), --all or --summarise FILE")
    clients = all_clients(args.data)
    if not clients:
        print(f"replay_sweep: no traces under {args.data}: skipped (see ../shared/data/README.md)")
        return 0
    chosen = choose(args, clients)
    if isinstance(chosen, str):
        print(f"error: {chosen}", file=sys.stderr)
        return 2
    replay_args = ["--policies", args.policies, *extra]
    code, at = code_version(), commit()
    done = {(r["population"], r["client"]): r for r in read_records(args.out) if not r.get("error")
            and not r.get("skipped") and r.get("code") == code and r.get("args") == replay_args} if args.out else {}
    todo = [c for c in chosen if (c.population, c.name) not in done]
    skips = [(c, skip) for c in todo if (skip := too_large(c, args.max_requests)) is not None]
    todo = [c for c in todo if all(c is not skipped for skipped, _ in skips)]
    recorded = sum((c.population, c.name) in done for c in chosen)
    print(f"# {len(chosen)} clients, {recorded} already in {args.out} for this code ({code}) and these arguments, "
          f"{len(skips)} over --max-requests; replaying {len(todo)}", file=sys.stderr)
    records = [done[(c.population, c.name)] for c in chosen if (c.population, c.name) in done]
    for c, skip in skips:
        record = {"population": c.population, "client": c.name, "half": c.half, "format": c.format,
                  "path": str(c.path), "code": code, "commit": at, "args": replay_args} | skip
        print(client_line(record), file=sys.stderr, flush=True)
        if args.out is not None:
            append_record(args.out, record)
        records.append(record)
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        running = {pool.submit(replay_client, c, replay_args): c for c in todo}
        for n, future in enumerate(as_completed(running), 1):
            c = running[future]
            record = {"population": c.population, "client": c.name, "half": c.half, "format": c.format,
                      "path": str(c.path), "code": code, "commit": at, "args": replay_args} | future.result()
            if args.out is not None:
                append_record(args.out, record)
            records.append(record)
            print(f"[{n}/{len(todo)}] {c.population} {c.name} {record['wall_s']:.0f} s", file=sys.stderr, flush=True)
    return summarise(records, args.policies.split(","), args.chart)


if __name__ == "__main__":
    sys.exit(main())
