"""Serve under a scraper: latency of KEDA ``GetMetrics`` and ``/healthz`` while ``/metrics`` is scraped.

    python benchmarks/serve_load.py                          # this checkout's `rightsizer serve --demo`
    python benchmarks/serve_load.py --repo ../base-checkout  # another checkout's, for before/after

Starts ``rightsizer serve`` (the demo plan unless other serve arguments follow ``--``) on loopback with
ports the OS picks and a rate limit too high to refuse anything (this measures stalls, not the limit),
then, for ``--requests`` calls each, measures GetMetrics (gRPC, one channel, a workload the plan scales)
and GET /healthz (a new connection each, as the kubelet probes): first idle, then while ``--scrapers``
threads scrape /metrics back to back. Bounded: at most ``--requests`` calls per phase and endpoint and
``--max-seconds`` per phase. Prints p50/p99/max in milliseconds and the scrapes made. Not run in CI;
figures go to benchmarks/SERVE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import requests
from prometheus_client.parser import text_string_to_metric_families

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from recommender.serve.proto import externalscaler_pb2 as pb  # noqa: E402
from recommender.serve.proto import externalscaler_pb2_grpc as pb_grpc  # noqa: E402


@contextmanager
def serving(repo: Path, extra: list[str]) -> Iterator[dict[str, int]]:
    """``rightsizer serve`` from ``repo`` until the block ends; yields its bound ports."""
    with tempfile.TemporaryDirectory() as tmp:
        ports_file = Path(tmp) / "ports.json"
        cmd = [sys.executable, "-c", "from recommender.cli.main import main; main()", "serve", *(extra or ["--demo"]),
               "--host", "127.0.0.1", "--grpc-port", "0", "--http-port", "0", "--rate", "1e6", "--burst", "1000000",
               "--ports-file", str(ports_file)]
        env = {**os.environ, "PYTHONPATH": str(repo)}
        proc = subprocess.Popen(cmd, cwd=repo, env=env, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                if line.startswith("serving "):
                    break
            else:
                sys.exit(f"serve exited with {proc.wait()} before serving")
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep its pipe drained
            yield json.loads(ports_file.read_text())
        finally:
            proc.terminate()
            proc.wait(30)


def scaled_workload(base: str) -> tuple[str, str, str, str]:
    """(namespace, kind, name, metric) of the first workload /metrics shows a scaler value for."""
    for family in text_string_to_metric_families(requests.get(base + "/metrics", timeout=60).text):
        for s in family.samples:
            if s.name == "rightsizer_scaler_value":
                return s.labels["namespace"], s.labels["kind"], s.labels["workload"], s.labels["metric"]
    sys.exit("the plan scales no workload: nothing for GetMetrics to ask")


def timed(call: Callable[[], object], count: int, deadline: float) -> list[float]:
    """Milliseconds of up to ``count`` calls, stopping at ``deadline`` (monotonic seconds)."""
    out = []
    while len(out) < count and time.monotonic() < deadline:
        started = time.perf_counter()
        call()
        out.append((time.perf_counter() - started) * 1000)
    return out


def scrape_loop(base: str, stop: threading.Event, done: list[int]) -> None:
    with requests.Session() as session:
        while not stop.is_set():
            session.get(base + "/metrics", timeout=60).raise_for_status()
            done.append(1)


def phase(name: str, calls: dict[str, Callable[[], object]], args: argparse.Namespace, base: str,
          scrapers: int) -> None:
    stop, done = threading.Event(), []  # type: ignore[var-annotated]
    threads = [threading.Thread(target=scrape_loop, args=(base, stop, done), daemon=True) for _ in range(scrapers)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + args.max_seconds
        for endpoint, call in calls.items():
            ms = sorted(timed(call, args.requests, deadline))
            p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
            print(f"{name:22s} {endpoint:11s} n={len(ms):4d}  p50 {statistics.median(ms):8.1f} ms  "
                  f"p99 {p99:8.1f} ms  max {ms[-1]:8.1f} ms")
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    if scrapers:
        print(f"{name:22s} /metrics scrapes meanwhile: {len(done)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--repo", type=Path, default=REPO, help="Checkout whose `rightsizer serve` runs.")
    ap.add_argument("--requests", type=int, default=300, help="Calls per endpoint and phase.")
    ap.add_argument("--scrapers", type=int, default=1, help="Threads scraping /metrics back to back.")
    ap.add_argument("--max-seconds", type=float, default=60.0, help="Bound on each phase.")
    ap.add_argument("serve_args", nargs="*", help="After --: serve's source arguments (default --demo).")
    args = ap.parse_args()
    with serving(args.repo.resolve(), args.serve_args) as ports:
        base = f"http://127.0.0.1:{ports['http']}"
        started = time.perf_counter()
        namespace, kind, name, metric = scaled_workload(base)
        print(f"one /metrics render: {(time.perf_counter() - started) * 1000:.1f} ms (the first, uncached); "
              f"GetMetrics asks for {namespace}/{kind}/{name} {metric}")
        channel = grpc.insecure_channel(f"127.0.0.1:{ports['grpc']}")
        stub = pb_grpc.ExternalScalerStub(channel)
        ref = pb.ScaledObjectRef(name="bench", namespace=namespace, scalerMetadata={"workload": f"{kind}/{name}"})
        request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName=metric)
        calls = {"GetMetrics": lambda: stub.GetMetrics(request, timeout=60),
                 "/healthz": lambda: requests.get(base + "/healthz", timeout=60).raise_for_status()}
        phase("idle", calls, args, base, 0)
        phase(f"{args.scrapers} scraper(s)", calls, args, base, args.scrapers)
        channel.close()


if __name__ == "__main__":
    main()
