"""Plans with ScalingPlans, a fake clock and throwaway certificates for the serve tests.

The plan is tests/planfixture.py's, with a ScalingPlan on the llama workload (request rate, target 8
per replica, 3 recommended, scale to zero, 600 s cold start) and a batch workload that scales on an
idle forecast (all zeros). Certificates come from the ``openssl`` binary (``cryptography`` is not a
dependency): a CA, a server certificate for 127.0.0.1/localhost, and a client certificate it signed.
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from recommender import model as m
from recommender.model import Forecast, Plan, Recommendation, ScalingPlan
from tests import planfixture as pf

LLAMA = "llm/Deployment/llama-3-8b-chat"
EMBED = "batch/Job/nightly-embed"


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
    return replace(base, recommendations=tuple(recs))


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def make_pki(directory: Path) -> Pki:
    """A throwaway EC CA with one server and one client certificate, as PEM files in ``directory``."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl binary is needed to make test certificates")
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *key, "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "1", "-subj", "/CN=test-ca",
             cwd=directory)
    ext = {"server": "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth",
           "client": "extendedKeyUsage=clientAuth"}
    for who, extensions in ext.items():
        (directory / f"{who}.ext").write_text(extensions + "\n")
        _openssl("req", "-new", *key, "-keyout", f"{who}-key.pem", "-out", f"{who}.csr", "-subj", f"/CN={who}",
                 cwd=directory)
        _openssl("x509", "-req", "-in", f"{who}.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
                 "-out", f"{who}.pem", "-days", "1", "-extfile", f"{who}.ext", cwd=directory)
    return Pki(directory / "ca.pem", directory / "server.pem", directory / "server-key.pem",
               directory / "client.pem", directory / "client-key.pem")
