"""API access and its failures: every failure is one line that names what we tried and where."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collectors.kubernetes import discover_workloads, make_api_client, reachable, server_version
from collectors.kubernetes.client import KubernetesDenied, list_objects
from collectors.kubernetes.discover import NAMESPACED
from recommender.core.errors import KubernetesError
from recommender.core.progress import NullProgress, RecordingProgress
from recommender.core.settings import Settings
from recommender.core.settings_sources import KubernetesSettings
from tests.kubefixture import KubeEmulator, container, gpu_node, pod_from, template

PODS = NAMESPACED[-1]


def _cluster() -> list[dict[str, Any]]:
    notebook = container("jupyter", "quay.io/jupyter/pytorch-notebook:cuda12", {"nvidia.com/gpu": "1"})
    tmpl = template({"app": "nb"}, notebook)
    return [gpu_node("gpu-0", "NVIDIA-H100-80GB-HBM3", 81559), pod_from(None, "ml", "nb", tmpl, "gpu-0"),
            pod_from(None, "ml2", "nb", tmpl, "gpu-0")]


@pytest.fixture
def kube() -> Iterator[KubeEmulator]:
    """A fresh emulator per test: these tests install refusals and delays."""
    with KubeEmulator(_cluster()) as emulator:
        yield emulator


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"  # closed when the with-block ends


def _one_line(exc: pytest.ExceptionInfo[KubernetesError]) -> str:
    text = str(exc.value)
    assert "\n" not in text and text
    return text


def test_unreachable_api_is_one_line() -> None:
    url = _closed_port_url()
    settings = Settings(kubernetes=KubernetesSettings(host=url, timeout_s=2))
    with pytest.raises(KubernetesError) as exc:
        discover_workloads(settings, NullProgress())
    assert _one_line(exc) == (f"Kubernetes API at {url} is unreachable (connection refused) "
                              "to list deployments.apps in all namespaces")
    retries = make_api_client(settings.kubernetes).configuration.retries
    # two quick connect retries (0.2 s, 0.4 s of backoff), no read retries
    assert (retries.connect, retries.read, retries.backoff_factor) == (2, 0, 0.2)
    assert not reachable(settings.kubernetes)


def test_rbac_denial_names_verb_resource_and_namespace(kube: KubeEmulator) -> None:
    kube.refuse("Deployment", 403, 'deployments.apps is forbidden: User "system:serviceaccount:ops:rightsizer" '
                                   'cannot list resource "deployments" in API group "apps" in the namespace "ml"')
    with pytest.raises(KubernetesDenied) as exc:
        discover_workloads(kube.settings(["ml"]), NullProgress(), kube.api_client())
    assert _one_line(exc).startswith(
        "Kubernetes RBAC forbids us to list deployments.apps in namespace ml (403 Forbidden): "
        'deployments.apps is forbidden: User "system:serviceaccount:ops:rightsizer"'
    )


def test_unauthorized(kube: KubeEmulator) -> None:
    kube.refuse("Pod", 401)
    with pytest.raises(KubernetesDenied) as exc:
        discover_workloads(kube.settings(), NullProgress(), kube.api_client())
    assert "rejected our credentials (401 Unauthorized) to list pods in all namespaces" in _one_line(exc)


def test_server_error_is_one_line(kube: KubeEmulator) -> None:
    kube.refuse("CronJob", 500, "etcdserver: request timed out\nretry later")
    with pytest.raises(KubernetesError) as exc:
        discover_workloads(kube.settings(), NullProgress(), kube.api_client())
    assert _one_line(exc).endswith("failed to list cronjobs.batch in all namespaces: HTTP 500 Internal Server Error: "
                                   "etcdserver: request timed out retry later")


def test_timeout_is_not_retried(kube: KubeEmulator) -> None:
    kube.delay("Pod", 3.0)
    settings = kube.settings(timeout_s=0.3)
    with pytest.raises(KubernetesError) as exc:
        discover_workloads(settings, NullProgress())  # the client make_api_client builds: no read retries
    assert "did not answer within 0.3 s (timeout) to list pods in all namespaces" in _one_line(exc)
    pods = [r for r in kube.requests() if r.startswith("GET ") and r.endswith("/pods")]
    assert len(pods) == 1  # one timeout, not four


def test_nodes_forbidden_degrades_to_a_note(kube: KubeEmulator) -> None:
    kube.refuse("Node", 403, 'nodes is forbidden: User "alice" cannot list resource "nodes" at the cluster scope')
    progress = RecordingProgress()
    (w,) = discover_workloads(kube.settings(["ml"]), progress, kube.api_client())
    assert w.allocation.gpu_product is None
    assert "GPU product unknown: nodes could not be listed" in w.notes
    assert progress.messages == ["GPU products unknown where pods do not select one: Kubernetes RBAC forbids us "
                                 'to list nodes (403 Forbidden): nodes is forbidden: User "alice" cannot list '
                                 'resource "nodes" at the cluster scope']


def test_leader_worker_sets_absent_or_forbidden_are_skipped(kube: KubeEmulator) -> None:
    workloads = discover_workloads(kube.settings(["ml", "ml2"]), NullProgress(), kube.api_client())
    assert [w.ref.key for w in workloads] == ["ml/Pod/nb", "ml2/Pod/nb"]
    asked = [p for p in kube.requests() if "leaderworkersets" in p]
    assert asked == ["GET /apis/leaderworkerset.x-k8s.io/v1/namespaces/ml/leaderworkersets"]  # 404: asked once

    with KubeEmulator(_cluster(), crds=["LeaderWorkerSet"]) as other:
        other.refuse("LeaderWorkerSet", 403)
        progress = RecordingProgress()
        assert len(discover_workloads(other.settings(), progress, other.api_client())) == 2
        assert progress.messages == ["skipping LeaderWorkerSets: Kubernetes RBAC forbids us to list "
                                     "leaderworkersets.leaderworkerset.x-k8s.io in all namespaces (403 Forbidden): "
                                     "Forbidden"]


def test_lists_follow_continue_tokens(kube: KubeEmulator) -> None:
    """kmock ignores ``limit``; a reaction plays a server that pages, as real ones do past 500 objects."""
    import kmock

    def page(request: Any) -> dict[str, Any]:
        token = request.params.get("continue")
        assert request.params.get("limit") == "500"
        names = {None: (["a", "b"], "t1"), "t1": (["c"], "")}[token]
        return {"metadata": {"continue": names[1]}, "items": [{"metadata": {"name": n}} for n in names[0]]}

    kube.call(lambda km: km["list", kmock.resource("v1/pods")] << page)
    items = list_objects(kube.api_client(), PODS, None, timeout_s=5)
    assert [i["metadata"]["name"] for i in items] == ["a", "b", "c"]


def test_server_version_and_reachable(kube: KubeEmulator) -> None:
    assert server_version(kube.api_client(), 5) == "v1.30.4"
    assert reachable(kube.settings().kubernetes)


def test_kubeconfig_with_token_and_context(kube: KubeEmulator, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(f"""
apiVersion: v1
kind: Config
current-context: other
clusters:
- name: emulator
  cluster: {{server: "{kube.url}"}}
- name: elsewhere
  cluster: {{server: "{_closed_port_url()}"}}
users:
- name: rightsizer
  user: {{token: t0k3n}}
contexts:
- name: lab
  context: {{cluster: emulator, user: rightsizer}}
- name: other
  context: {{cluster: elsewhere, user: rightsizer}}
""")
    api = make_api_client(KubernetesSettings(kubeconfig=str(kubeconfig), context="lab"))
    assert len(discover_workloads(Settings(namespaces=("ml",)), NullProgress(), api)) == 1
    sent = kube.call(lambda km: [r.headers.get("Authorization") for r in km])
    assert set(sent) == {"Bearer t0k3n"}


def test_missing_kubeconfig_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(KubernetesError) as exc:
        make_api_client(KubernetesSettings(kubeconfig=str(tmp_path / "nope")))
    assert _one_line(exc).startswith("no usable Kubernetes configuration (")
    assert _one_line(exc).endswith("pass --kubeconfig/--context")
