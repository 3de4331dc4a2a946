"""Which ServeGen clients choose the replay's rules (TUNE) and which only report them (REPORT), fixed for
everyone (issue 43): a client file ``<data>/<category>/<model>/chunk-<n>-trace.csv`` belongs to population
``<category>/<model>`` and is TUNE iff the first byte of sha256("<population>/chunk-<n>") is even. Every client
of every population under the data folder, not a chosen few. The one-hour Azure and Mooncake traces report only.

    python benchmarks/replay_split.py                       # every population: its clients in each half
    python benchmarks/replay_split.py --population reason/deepseek-r1 --half report --names
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

DATA = Path(os.path.normpath(Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
SERVEGEN = DATA / "alibaba-servegen" / "data"
TUNE, REPORT = "tune", "report"
CLIENT_FILE = re.compile(r"chunk-(\d+)-trace\.csv")


@dataclass(frozen=True)
class Client:
    """One trace the sweep replays: its population, its name in it, its half, the file and its format."""

    population: str  # "<category>/<model>" for ServeGen; "azure/conv" and the like for the one-hour traces
    name: str  # "chunk-<n>" for ServeGen
    half: str  # TUNE or REPORT
    path: Path
    format: str  # replay.py's --format


def half_of(population: str, chunk: int) -> str:
    """TUNE iff sha256("<population>/chunk-<n>")'s first byte is even, else REPORT."""
    return TUNE if hashlib.sha256(f"{population}/chunk-{chunk}".encode()).digest()[0] % 2 == 0 else REPORT


def servegen_clients(root: Path) -> list[Client]:
    """Every ``chunk-<n>-trace.csv`` under ``root`` (the ServeGen data folder), by population then chunk number;
    its population is its folder relative to ``root``. Empty when ``root`` is absent."""
    found = []
    for path in root.rglob("chunk-*-trace.csv") if root.is_dir() else ():
        m = CLIENT_FILE.fullmatch(path.name)
        if m is None:
            continue
        population, chunk = path.parent.relative_to(root).as_posix(), int(m[1])
        found.append((population, chunk, Client(population, f"chunk-{chunk}", half_of(population, chunk), path,
                                                "servegen")))
    return [c for _, _, c in sorted(found, key=lambda x: (x[0], x[1]))]


def one_hour_traces(data: Path) -> list[Client]:
    """The Azure LLM inference (conversation, code) and Mooncake traces found under ``data``: report only."""
    known = [("azure/conv", "conv", data / "azure-llm-inference-2023" / "AzureLLMInferenceTrace_conv.csv", "azure"),
             ("azure/code", "code", data / "azure-llm-inference-2023" / "AzureLLMInferenceTrace_code.csv", "azure"),
             ("mooncake/conversation", "conversation", data / "mooncake-traces" / "conversation_trace.jsonl",
              "mooncake")]
    return [Client(pop, name, REPORT, path, fmt) for pop, name, path, fmt in known if path.is_file()]


def all_clients(data: Path) -> list[Client]:
    """Every ServeGen client under ``data/alibaba-servegen/data`` and the one-hour traces, populations in order."""
    return servegen_clients(data / "alibaba-servegen" / "data") + one_hour_traces(data)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, default=DATA, help="the shared data folder (default: ../shared/data)")
    p.add_argument("--population", action="append", help="only this population (repeatable)")
    p.add_argument("--half", choices=[TUNE, REPORT, "both"], default="both")
    p.add_argument("--names", action="store_true", help="one line per client: population, name, half, file")
    args = p.parse_args(argv)
    clients = all_clients(args.data)
    if not clients:
        print(f"replay_split: no traces under {args.data}: nothing to list (see ../shared/data/README.md)")
        return 0
    populations = list(dict.fromkeys(c.population for c in clients))
    unknown = [x for x in args.population or [] if x not in populations]
    if unknown:
        print(f"error: no population {unknown[0]!r} under {args.data} (found: {', '.join(populations)})",
              file=sys.stderr)
        return 2
    chosen = [c for c in clients if c.population in (args.population or populations)
              and args.half in ("both", c.half)]
    if args.names:
        for c in chosen:
            print(f"{c.population} {c.name} {c.half} {c.path}")
        return 0
    for population in dict.fromkeys(c.population for c in chosen):
        mine = [c for c in clients if c.population == population]
        for half in (TUNE, REPORT):
            names = [c.name.removeprefix("chunk-") for c in mine if c.half == half]
            if args.half in ("both", half):
                print(f"{population} {half} {len(names)} of {len(mine)}: {','.join(names) or '-'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
