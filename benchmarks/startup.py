"""Startup benchmark: how long ``rightsizer --help``, each subcommand's ``--help`` and ``rightsizer report --demo``
take from a fresh process, and which modules ``import recommender.cli.main`` spends its time in.

    python benchmarks/startup.py                 # a fresh venv over this interpreter's packages, 5 runs each
    python benchmarks/startup.py --runs 9 --top 20
    python benchmarks/startup.py --python .venv/bin/python   # an existing interpreter instead of a fresh venv

No network: the fresh venv (``python -m venv --without-pip``) gets a ``.pth`` file naming this checkout and
the site-packages of the interpreter that runs the benchmark, so it sees the same packages and this
checkout's code, and none of the caller's environment (``PYTHONPATH`` is dropped). Each command runs in a
new process; its wall time is taken around the whole process (interpreter start included), and the median
of ``--runs`` runs is printed against the goals of issue 42: ``--help`` <= 0.5 s, the demo report <= 5 s.

Then ``python -X importtime -c "import recommender.cli.main"`` (and the same for the demo report's
modules, ``--demo-imports``), ``--runs`` times: the modules with the largest median cumulative import time.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("report", "snapshot", "forecast", "controller", "rollback", "serve")
HELP_GOAL_S = 0.5
DEMO_GOAL_S = 5.0
RUN = "import sys; from recommender.cli.main import main; sys.exit(main(prog_name='rightsizer'))"
LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)")


def fresh_venv(folder: Path) -> Path:
    """A venv without pip whose one ``.pth`` names this checkout, then the running interpreter's
    site-packages; the checkout comes first, so ``recommender`` is this checkout's, never an editable
    install's of another one."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (Path(site) / "rightsizer-checkout.pth").write_text("\n".join([str(ROOT), *sorted(ours)]) + "\n")
    return python


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["COLUMNS"] = "100"  # the demo table's width does not follow the terminal
    return env


def wall_times(python: Path, args: list[str], runs: int, cwd: Path) -> list[float]:
    """Seconds each of ``runs`` fresh ``rightsizer ARGS`` processes took, start to exit."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        done = subprocess.run([str(python), "-c", RUN, *args], cwd=cwd, env=clean_env(), capture_output=True,
                              text=True, check=False)
        times.append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise SystemExit(f"rightsizer {' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return times


def import_times(python: Path, code: list[str], runs: int, cwd: Path) -> dict[str, tuple[float, float, int]]:
    """Module -> (median cumulative ms, median self ms, nesting depth) over ``runs`` ``-X importtime`` runs."""
    cumulative: dict[str, list[float]] = {}
    own: dict[str, list[float]] = {}
    depth: dict[str, int] = {}
    for _ in range(runs):
        done = subprocess.run([str(python), "-X", "importtime", "-c", *code], cwd=cwd, env=clean_env(),
                              capture_output=True, text=True, check=False)
        for m in LINE.finditer(done.stderr):
            name = m.group(4)
            own.setdefault(name, []).append(int(m.group(1)) / 1000)
            cumulative.setdefault(name, []).append(int(m.group(2)) / 1000)
            depth[name] = len(m.group(3)) // 2
    return {n: (statistics.median(c), statistics.median(own[n]), depth[n]) for n, c in cumulative.items()}


def print_imports(title: str, times: dict[str, tuple[float, float, int]], top: int) -> None:
    print(f"\n{title}: {len(times)} modules; the {top} with the largest cumulative time (median ms)")
    print("| module | cumulative ms | self ms |")
    print("|---|---:|---:|")
    for name, (cum, own, _) in sorted(times.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"| `{name}` | {cum:.1f} | {own:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="processes per command (median)")
    ap.add_argument("--top", type=int, default=15, help="modules listed by cumulative import time")
    ap.add_argument("--python", type=Path, help="run this interpreter instead of a fresh venv")
    ap.add_argument("--demo-imports", action="store_true", help="also list the demo report's slowest imports")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="rightsizer-startup-") as tmp:
        python = args.python or fresh_venv(Path(tmp) / "venv")
        where = subprocess.run([str(python), "-c", "import recommender; print(recommender.__file__)"], cwd=tmp,
                               env=clean_env(), capture_output=True, text=True, check=True).stdout.strip()
        print(f"python {python} (recommender from {Path(where).parent}); {args.runs} runs each, "
              f"{os.cpu_count()} CPUs")
        print("| command | median s | min–max s | goal |")
        print("|---|---:|---:|---|")
        for cmd in ([], *([c] for c in COMMANDS)):
            t = wall_times(python, [*cmd, "--help"], args.runs, Path(tmp))
            med = statistics.median(t)
            print(f"| rightsizer {' '.join([*cmd, '--help'])} | {med:.2f} | {min(t):.2f}–{max(t):.2f} | "
                  f"≤ {HELP_GOAL_S} s: {'met' if med <= HELP_GOAL_S else 'MISSED'} |")
        t = wall_times(python, ["report", "--demo"], args.runs, Path(tmp))
        med = statistics.median(t)
        print(f"| rightsizer report --demo | {med:.2f} | {min(t):.2f}–{max(t):.2f} | "
              f"≤ {DEMO_GOAL_S} s: {'met' if med <= DEMO_GOAL_S else 'MISSED'} |")

        print_imports("import recommender.cli.main",
                      import_times(python, ["import recommender.cli.main"], args.runs, Path(tmp)), args.top)
        if args.demo_imports:
            demo = "import sys; from recommender.cli.main import main; main(['report', '--demo'])"
            print_imports("rightsizer report --demo", import_times(python, [demo], args.runs, Path(tmp)), args.top)


if __name__ == "__main__":
    main()
