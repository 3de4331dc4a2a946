"""Plans with ScalingPlans, a fake clock and throwaway certificates for the serve tests.

The plan is tests/planfixture.py's, with a ScalingPlan on the llama workload (request rate, target 8
per replica, 3 recommended, scale to zero, 600 s cold start) and a batch workload that scales on an
idle forecast (all zeros). Certificates come from the ``openssl`` binary (``cryptography`` is not a
dependency): a CA, a server certificate for 127.0.0.1/localhost, and a client certificate it signed;
and, for the external metrics API, a separate requestheader (front-proxy) CA and its client certificates.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import numpy as np
import pandas as pd
import pytest
import requests

from recommender.core import usage as m
from recommender.core.plan import Forecast, Plan, Recommendation, ScalingPlan
from tests import planfixture as pf

LLAMA = "llm/Deployment/llama-3-8b-chat"
EMBED = "batch/Job/nightly-embed"


def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Poll ``check`` until it holds or ``timeout_s`` passes; a connection refused or a handshake that
    fails meanwhile (requests, gRPC) counts as not yet."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        with contextlib.suppress(requests.exceptions.ConnectionError, grpc.RpcError):
            if check():
                return True
        time.sleep(0.05)
    return False


class FakeClock:
    """A clock tests move by hand (seconds)."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def scaling(**kw: object) -> ScalingPlan:
    base = ScalingPlan(metric=m.REQUEST_RATE, per_replica_capacity=10.0, target_per_replica=8.0, min_replicas=0,
                       max_replicas=10, recommended_replicas=3, activation_threshold=0.5, cooldown_s=300,
                       scale_to_zero=True, headroom_frac=0.2, cold_start_s=600.0)
    return replace(base, **kw)  # type: ignore[arg-type]


def idle_forecast() -> Forecast:
    """24 hourly zeros after the window (a workload with nothing to do)."""
    idx = pd.date_range(pf.END + dt.timedelta(hours=1), periods=24, freq="1h", tz=dt.UTC)
    zeros = np.zeros(24)
    frame = pd.DataFrame({c: zeros for c in ("mean", "lo_80", "hi_80", "lo_95", "hi_95")}, index=idx)
    return Forecast(m.REQUEST_RATE, "zero", frame)


def plan(**llama_scaling: object) -> Plan:
    """The five-workload plan; llama and nightly-embed carry ScalingPlans, the others none."""
    base = pf.plan()
    recs: list[Recommendation] = []
    for rec in base.recommendations:
        if rec.ref.key == LLAMA:
            rec = replace(rec, scaling=scaling(**llama_scaling))
        elif rec.ref.key == EMBED:
            rec = replace(rec, scaling=scaling(recommended_replicas=1, cold_start_s=None), forecasts=(idle_forecast(),))
        recs.append(rec)
    return pf.advised(replace(base, recommendations=tuple(recs)), pf.snapshot())


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
_EXT = {"server": "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth",
        "client": "extendedKeyUsage=clientAuth"}


def _ca(directory: Path, name: str) -> None:
    """A self-signed CA: ``<name>.pem`` and ``<name>-key.pem``."""
    _openssl("req", "-x509", *_KEY, "-keyout", f"{name}-key.pem", "-out", f"{name}.pem", "-days", "1",
             "-subj", f"/CN=test-{name}", cwd=directory)


def _leaf(directory: Path, ca: str, who: str, cn: str, usage: str) -> tuple[Path, Path]:
    """``<who>.pem``/``<who>-key.pem`` with subject CN ``cn``, signed by CA ``ca``; usage server or client."""
    (directory / f"{who}.ext").write_text(_EXT[usage] + "\n")
    _openssl("req", "-new", *_KEY, "-keyout", f"{who}-key.pem", "-out", f"{who}.csr", "-subj", f"/CN={cn}",
             cwd=directory)
    _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}-key.pem", "-CAcreateserial",
             "-out", f"{who}.pem", "-days", "1", "-extfile", f"{who}.ext", cwd=directory)
    return directory / f"{who}.pem", directory / f"{who}-key.pem"


def _need_openssl() -> None:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl binary is needed to make test certificates")


def make_pki(directory: Path) -> Pki:
    """A throwaway EC CA with one server and one client certificate, as PEM files in ``directory``."""
    _need_openssl()
    _ca(directory, "ca")
    _leaf(directory, "ca", "server", "server", "server")
    _leaf(directory, "ca", "client", "client", "client")
    return Pki(directory / "ca.pem", directory / "server.pem", directory / "server-key.pem",
               directory / "client.pem", directory / "client-key.pem")


FRONT_PROXY_CN = "front-proxy-client"  # kubeadm's CN for the API server's proxy client certificate


@dataclass(frozen=True)
class FrontProxyPki:
    """The aggregation layer's certificates, apart from the serving CA (as kubeadm keeps them).

    ``proxy``: CN front-proxy-client, signed by ``ca`` (the requestheader client CA); ``stranger``:
    CN someone-else, signed by ``ca`` too; ``rogue``: CN front-proxy-client, signed by another CA.
    Each is a (certificate, key) pair for ``requests``' ``cert=``."""

    ca: Path
    proxy: tuple[str, str]
    stranger: tuple[str, str]
    rogue: tuple[str, str]


def make_front_proxy_pki(directory: Path) -> FrontProxyPki:
    _need_openssl()
    _ca(directory, "front-proxy-ca")
    _ca(directory, "rogue-ca")
    pairs = {who: _leaf(directory, ca, who, cn, "client") for who, ca, cn in (
        ("proxy", "front-proxy-ca", FRONT_PROXY_CN), ("stranger", "front-proxy-ca", "someone-else"),
        ("rogue", "rogue-ca", FRONT_PROXY_CN))}
    cert_key = {who: (str(c), str(k)) for who, (c, k) in pairs.items()}
    return FrontProxyPki(directory / "front-proxy-ca.pem", cert_key["proxy"], cert_key["stranger"],
                         cert_key["rogue"])
