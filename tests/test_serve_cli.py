"""``rightsizer serve``: the APIService check against a real HTTP Kubernetes API (kmock), bad flags, and
the command end to end in a subprocess (start, answer, stop on SIGTERM)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import kmock
import pytest
import requests
from click.testing import CliRunner

from recommender.cli.main import main
from recommender.serve.apiservice import APISERVICE_NAME, read_apiservice
from recommender.serve.proto import externalscaler_pb2 as pb
from recommender.serve.proto import externalscaler_pb2_grpc as pb_grpc
from tests import servefixture as sf
from tests.kubefixture import KubeEmulator

KEY = "apiregistration.k8s.io/v1/apiservices"


def _apiservice(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": APISERVICE_NAME},
            "spec": {"service": {"name": name, "namespace": namespace, "port": 443},
                     "group": "external.metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": 100,
                     "versionPriority": 100, "insecureSkipTLSVerify": True}}


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    with KubeEmulator() as k:
        k.call(lambda km: km.resources.__setitem__(
            KEY, kmock.ResourceInfo(kind="APIService", namespaced=False, verbs={"get", "list"})))
        yield k


def _seed(kube: KubeEmulator, obj: dict[str, Any]) -> None:
    kube.call(lambda km: km.objects.__setitem__((KEY, None, APISERVICE_NAME), obj))


def test_read_apiservice_from_the_api(kube: KubeEmulator) -> None:
    assert read_apiservice(kube.api_client(), 5.0) is None  # absent: 404 → None
    _seed(kube, _apiservice("keda", "keda-metrics-apiserver"))
    assert read_apiservice(kube.api_client(), 5.0)["spec"]["service"]["namespace"] == "keda"  # type: ignore[index]
    assert f"GET /apis/{KEY}/{APISERVICE_NAME}" in kube.requests()


def _kubeconfig(tmp_path: Path, url: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "t", "cluster": {"server": url}}], "users": [{"name": "t", "user": {}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": "t"}}]}))
    return path


def _serve_args(tmp_path: Path, kube_url: str) -> list[str]:
    pki = sf.make_pki(tmp_path)
    return ["serve", "--demo", "--external-metrics", "--tls-cert", str(pki.server_cert), "--tls-key",
            str(pki.server_key), "--kubeconfig", str(_kubeconfig(tmp_path, kube_url)), "--service", "gpu/rightsizer"]


def test_serve_refuses_anothers_apiservice(kube: KubeEmulator, tmp_path: Path) -> None:
    _seed(kube, _apiservice("keda", "keda-metrics-apiserver"))
    result = CliRunner().invoke(main, _serve_args(tmp_path, kube.url))
    assert result.exit_code == 2
    assert "error: APIService v1beta1.external.metrics.k8s.io already points at keda/keda-metrics-apiserver" \
        in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("args", "needle"), [
    (["--stale-after", "2h", "--fallback-after", "1h"], "fallback_after_s must be at least stale_after_s"),
    (["--external-metrics"], "need tls_cert and tls_key"),
    (["--service", "nameonly"], "is not NAMESPACE/NAME"),
    (["--stale-after", "soon"], "is not a duration"),
])
def test_bad_flags_end_with_one_line(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(main, ["serve", "--demo", *args])
    assert result.exit_code == 2 and needle in result.output and "Traceback" not in result.output


def test_serve_demo_starts_answers_and_stops(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "from recommender.cli.main import main; main()", "serve", "--demo", "--host",
           "127.0.0.1", "--grpc-port", "0", "--http-port", "0", "--ports-file", str(tmp_path / "ports.json")]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:  # blocks until the plan is published (pytest-timeout guards it)
            seen.append(line)
            if line.startswith("serving "):
                break
        else:
            pytest.fail("serve exited before serving:\n" + "".join(seen[-15:]))
        ports = json.loads((tmp_path / "ports.json").read_text())
        base = f"http://127.0.0.1:{ports['http']}"
        assert requests.get(base + "/readyz", timeout=5).status_code == 200
        assert "rightsizer_plan_available 1.0" in requests.get(base + "/metrics", timeout=5).text
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "stopped" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the with-block ends


def test_serve_every_starts_not_ready_while_prometheus_is_down(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{_free_port()}"
    cmd = [sys.executable, "-c", "from recommender.cli.main import main; main()", "serve", "--prometheus-url", dead,
           "--no-kubernetes", "--every", "1h", "--host", "127.0.0.1", "--grpc-port", "0", "--http-port", "0",
           "--ports-file", str(tmp_path / "ports.json")]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        seen = []
        for line in proc.stderr:
            seen.append(line)
            if line.startswith("serving "):
                break
        else:
            pytest.fail(f"serve exited ({proc.wait()}) instead of serving:\n" + "".join(seen[-15:]))
        assert any("not ready" in line and dead in line for line in seen), seen
        ports = json.loads((tmp_path / "ports.json").read_text())
        base = f"http://127.0.0.1:{ports['http']}"
        assert requests.get(base + "/healthz", timeout=5).status_code == 200
        assert requests.get(base + "/readyz", timeout=5).status_code == 503
        assert "rightsizer_plan_available 0.0" in requests.get(base + "/metrics", timeout=5).text
        assert requests.get(base + "/api/v1/keda/llm/llama", timeout=5).status_code == 503
        with grpc.insecure_channel(f"127.0.0.1:{ports['grpc']}") as channel, pytest.raises(grpc.RpcError) as err:
            ref = pb.ScaledObjectRef(name="so", namespace="llm", scalerMetadata={"workload": "llama"})
            pb_grpc.ExternalScalerStub(channel).GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref,
                                                                                metricName="x"), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        _, err_text = proc.communicate(timeout=30)
        assert proc.returncode == 0 and "stopped" in err_text and "Traceback" not in err_text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
