"""The elector's rules on one Lease, injected clock: races, hand-edited Leases, release, the renewal thread,
and the fence in front of every write.

The rules run against both Lease backends the tests use: kmock over HTTP and tests/leasesim.py's
in-process server (the one the long simulations use), so the fake is held to what kmock does.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from recommender.cli.main import main
from recommender.controller.kube import Kube, NotLeader
from recommender.controller.leader import LeaderElector
from recommender.controller.lease import LeaseTiming
from recommender.controller.loop import Controller
from tests import planfixture as pf
from tests.controllerfixture import NAME, NS, auto_spec, deployment, plan, policy, snapshot
from tests.kubewrite import WriteCluster
from tests.leasesim import LeaseServer

NOW = pf.END
LEASE_NS, LEASE = "gpu-rightsizer", "leader"
TIMING = LeaseTiming()


class Backend:
    """One Lease server: clients for candidates, seeding, and the stored spec."""

    def __init__(self, kind: str, cluster: WriteCluster | None, clock: Callable[[], datetime]) -> None:
        self.kind, self.cluster, self.fake = kind, cluster, LeaseServer(clock)

    def client(self, who: str) -> Kube:
        return self.cluster.kube() if self.cluster is not None else self.fake.client(who)

    def seed(self, spec: Any, *, has_spec: bool = True) -> None:
        obj: dict[str, Any] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                               "metadata": {"name": LEASE, "namespace": LEASE_NS}}
        if has_spec:
            obj["spec"] = spec
        if self.cluster is not None:
            self.cluster.add(obj)
        else:
            self.fake.seed(obj)

    def obj(self) -> dict[str, Any]:
        if self.cluster is not None:
            return self.cluster.obj("Lease", LEASE_NS, LEASE)
        assert self.fake.obj is not None
        return self.fake.obj

    def delete(self) -> None:
        if self.cluster is not None:
            key = ("coordination.k8s.io/v1/leases", LEASE_NS, LEASE)
            self.cluster.call(lambda km: km.objects[key].delete())
        else:
            self.fake.obj = None

    def edit_spec(self, **fields: Any) -> None:
        """Someone else's write (the holder renewing, or a person editing by hand)."""
        if self.cluster is not None:
            self.cluster.edit("Lease", LEASE_NS, LEASE, {"spec": fields})
        else:
            assert self.fake.obj is not None
            self.fake.obj["spec"].update(fields)


@pytest.fixture(params=["kmock", "fake"])
def lease(request: pytest.FixtureRequest) -> Iterator[tuple[Backend, list[datetime]]]:
    at = [NOW]
    if request.param == "fake":
        yield Backend("fake", None, lambda: at[0]), at
        return
    with WriteCluster() as cluster:
        yield Backend("kmock", cluster, lambda: at[0]), at


def _elector(backend: Backend, at: list[datetime], who: str) -> LeaderElector:
    return LeaderElector(backend.client(who), LEASE_NS, LEASE, who, TIMING, clock=lambda: at[0])


def _micro(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_renewal_keeps_the_lease_and_a_silent_holder_loses_it_after_the_duration(lease: Any) -> None:
    backend, at = lease
    a, b = _elector(backend, at, "a"), _elector(backend, at, "b")
    assert (a.tick(), b.tick()) == (True, False)
    for _ in range(20):  # 100 s of renewals every 5 s: b never sees the lease unchanged for 30 s
        at[0] += timedelta(seconds=5)
        assert (a.tick(), b.tick()) == (True, False)
    at[0] += timedelta(seconds=TIMING.lease_duration_s - 1)  # a went silent: 29 s unchanged
    assert b.tick() is False and a.holds() is False  # a's own fence closed 15 s after its last renewal
    at[0] += timedelta(seconds=1)
    assert b.tick() is True and a.tick() is False
    spec = backend.obj()["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 1)
    b.release()
    assert b.holds() is False and a.tick() is True  # released: no need to wait for expiry
    assert backend.obj()["spec"]["leaseTransitions"] == 2


def test_a_lease_deleted_under_the_leader_stops_it_and_is_recreated_only_after_the_duration(lease: Any) -> None:
    backend, at = lease
    a, b = _elector(backend, at, "a"), _elector(backend, at, "b")
    assert (a.tick(), b.tick()) == (True, False)
    backend.delete()
    at[0] += timedelta(seconds=5)
    assert (a.tick(), b.tick()) == (False, False) and a.holds() is False  # a stops writing at once
    for _ in range(5):  # 25 s more: nobody creates it (a's fence could have been open when it went)
        at[0] += timedelta(seconds=5)
        assert (a.tick(), b.tick()) == (False, False)
    at[0] += timedelta(seconds=5)
    assert (a.tick(), b.tick()) == (True, False)  # 30 s gone: recreated, by exactly one
    assert backend.obj()["spec"]["holderIdentity"] == "a"


@pytest.mark.parametrize("expired", [True, False])
def test_two_candidates_racing_for_a_lease_exactly_one_wins(lease: Any, expired: bool) -> None:
    """Both read the same Lease before either writes (b's whole tick runs inside a's, between a's read and
    a's patch): the guarded patch lets exactly one win; with no Lease at all, the create does."""
    backend, at = lease
    if expired:
        backend.seed({"holderIdentity": "gone", "leaseDurationSeconds": 30, "renewTime": _micro(NOW),
                      "leaseTransitions": 4})
    a, b = _elector(backend, at, "a"), _elector(backend, at, "b")
    if expired:
        assert (a.tick(), b.tick()) == (False, False)  # both first see it...
        at[0] += timedelta(seconds=TIMING.lease_duration_s)  # ...then unchanged for the lease duration
    read = a.kube.get

    def get_then_race(kind: str, namespace: str | None, name: str) -> dict[str, Any]:
        try:
            return read(kind, namespace, name)
        finally:
            a.kube.get = read  # type: ignore[method-assign]
            assert b.tick() is True  # b wins in the gap

    a.kube.get = get_then_race  # type: ignore[method-assign]
    assert a.tick() is False
    assert (a.holds(), b.holds()) == (False, True)
    spec = backend.obj()["spec"]
    assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("b", 5 if expired else 0)
    assert (a.tick(), b.tick()) == (False, True)  # and it stays so


BAD_SPECS = [
    pytest.param({"holderIdentity": 42}, "holderIdentity 42 is not a string", id="holder-number"),
    pytest.param({"holderIdentity": {"x": 1}}, "holderIdentity", id="holder-mapping"),
    pytest.param({"holderIdentity": "c", "renewTime": "yesterday"}, "renewTime \"yesterday\"", id="renew-text"),
    pytest.param({"holderIdentity": "c", "renewTime": "2026-11-01T00:00:00"}, "renewTime", id="renew-no-zone"),
    pytest.param({"holderIdentity": "c", "renewTime": 1762000000}, "renewTime", id="renew-number"),
    pytest.param({"holderIdentity": "c", "leaseDurationSeconds": 0}, "leaseDurationSeconds 0", id="duration-0"),
    pytest.param({"holderIdentity": "c", "leaseDurationSeconds": -5}, "leaseDurationSeconds -5", id="duration-neg"),
    pytest.param({"holderIdentity": "c", "leaseDurationSeconds": "30"}, "leaseDurationSeconds", id="duration-text"),
    pytest.param({"holderIdentity": "", "leaseTransitions": "many"}, "leaseTransitions", id="transitions-text"),
    pytest.param("garbage", "spec is str", id="spec-text"),
    pytest.param(None, "spec is NoneType", id="spec-null"),
    pytest.param(..., "has no spec", id="spec-missing"),
]


@pytest.mark.parametrize(("spec", "problem"), BAD_SPECS)
def test_a_lease_edited_by_hand_is_one_log_line_no_leader_and_taken_over_only_after_expiry(
        lease: Any, spec: Any, problem: str, caplog: pytest.LogCaptureFixture) -> None:
    backend, at = lease
    backend.seed(spec, has_spec=spec is not ...)
    a = _elector(backend, at, "a")
    with caplog.at_level(logging.INFO, logger="rightsizer.leader"):
        for _ in range(5):  # 20 s: not expired, whatever the Lease says
            assert a.tick() is False and a.holds() is False
            at[0] += timedelta(seconds=5)
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and problem in lines[0].getMessage() and lines[0].exc_info is None
    assert "\n" not in lines[0].getMessage() and a.last_error is not None and problem in a.last_error
    for _ in range(12):  # 60 s more: a non-mapping spec is first repaired to {}, then waited out once more
        at[0] += timedelta(seconds=5)
        if a.tick():
            break
    assert a.holds() is True
    clean = backend.obj()["spec"]
    assert clean["holderIdentity"] == "a" and clean["leaseDurationSeconds"] == TIMING.lease_duration_s
    assert isinstance(clean["leaseTransitions"], int) and clean["renewTime"].endswith("Z")


@pytest.mark.parametrize("duration", [0, "30", 5])
def test_a_holder_that_keeps_renewing_is_never_taken_over_whatever_its_duration_says(lease: Any,
                                                                                     duration: Any) -> None:
    backend, at = lease
    backend.seed({"holderIdentity": "c", "leaseDurationSeconds": duration, "renewTime": _micro(NOW)})
    a = _elector(backend, at, "a")
    for _ in range(40):  # 200 s; c renews every 5 s
        at[0] += timedelta(seconds=5)
        backend.edit_spec(renewTime=_micro(at[0]))
        assert a.tick() is False
    assert backend.obj()["spec"]["holderIdentity"] == "c"


def test_the_renewal_thread_renews_on_its_own_and_stop_releases() -> None:
    """Real threads and clock, tiny timing; bounded waits only, no timing assertion."""
    server = LeaseServer(lambda: datetime.now(NOW.tzinfo))
    timing = LeaseTiming(lease_duration_s=2, renew_deadline_s=1.0, retry_period_s=0.01, api_timeout_s=0.5)
    a = LeaderElector(server.client("a"), LEASE_NS, LEASE, "a", timing)
    renewed = threading.Event()
    store = server._store

    def counting(obj: dict[str, Any], who: str) -> None:
        store(obj, who)
        if len(server.log) >= 5:
            renewed.set()

    server._store = counting  # type: ignore[method-assign]
    a.start()
    assert a.holds() is True  # acquired before start() returns: the first reconcile may act
    assert renewed.wait(10.0)  # create + 4 renewals, with no reconcile at all
    thread = a._thread
    a.stop()
    assert thread is not None and not thread.is_alive()  # nothing renews after stop...
    assert server.spec()["holderIdentity"] == "" and a.holds() is False  # ...and the lease is handed over


def test_the_fence_refuses_every_write_before_it_is_sent_and_lets_reads_through() -> None:
    at = [NOW]
    with WriteCluster([deployment()]) as cluster:
        elector = LeaderElector(cluster.kube(), LEASE_NS, LEASE, "a", TIMING, clock=lambda: at[0])
        kube = cluster.kube().fenced(elector.fence, TIMING.api_timeout_s)
        assert kube.get("Deployment", NS, NAME)["metadata"]["name"] == NAME
        writes: list[Callable[[], Any]] = [
            lambda: kube.patch("Deployment", NS, NAME, {"spec": {"replicas": 9}}, merge=True),
            lambda: kube.create("ConfigMap", NS, {"metadata": {"name": "x", "namespace": NS}}),
            lambda: kube.delete("Deployment", NS, NAME),
            lambda: kube.evict(NS, "pod-0"),
        ]
        for write in writes:
            with pytest.raises(NotLeader, match="not sent, this replica does not hold lease"):
                write()
        assert not [r for r in cluster.requests() if not r.startswith("GET")]
        assert elector.tick() is True
        kube.patch("Deployment", NS, NAME, {"spec": {"replicas": 9}}, merge=True)
        at[0] += timedelta(seconds=TIMING.renew_deadline_s)  # no renewal for the renew deadline: closed
        with pytest.raises(NotLeader):
            kube.patch("Deployment", NS, NAME, {"spec": {"replicas": 1}}, merge=True)
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 9


def test_a_lease_lost_mid_cycle_ends_the_cycles_writes_as_one_line_errors() -> None:
    at = [NOW]
    with WriteCluster([deployment(), policy("auto", auto_spec())]) as cluster:
        elector = LeaderElector(cluster.kube(), LEASE_NS, LEASE, "a", TIMING, clock=lambda: at[0])

        def slow_plan(now: datetime, _: object) -> Any:
            at[0] += timedelta(seconds=TIMING.renew_deadline_s)  # planning outlasts the fence, no renewal
            return plan(now=now), snapshot(now, 0.3, 0.3)

        assert elector.tick() is True
        report = Controller(cluster.kube(), slow_plan, clock=lambda: at[0], elector=elector).reconcile()
        assert report.leader is True and report.errors
        assert all("not sent" in e and "\n" not in e for e in report.errors)
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 2  # nothing written
        # the signing key was made at the start of the cycle, while the lease was still held
        assert not [r for r in cluster.requests() if not r.startswith("GET") and "leases" not in r
                    and "secrets" not in r]


@pytest.mark.parametrize(("section", "line"), [
    ("{enabled: true, renew_deadline_s: 25}", "renew_deadline_s 25 + api_timeout_s 10 must be less than"),
    ("{enabled: true, retry_period_s: 20}", "retry_period_s 20 must be less than renew_deadline_s 15"),
    ("{enabled: true, lease_duration: 30}", "leader_election setting lease_duration: Extra inputs"),
    ("{enabled: true, lease_duration_s: -1}", "lease_duration_s: Input should be greater than 0"),
])
def test_bad_leader_election_timing_is_one_line_before_the_cluster_is_asked(tmp_path: Path, section: str,
                                                                           line: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"mode: Recommend\nleader_election: {section}\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["controller", "--config", str(path), "--demo", "--once", "--no-serve"])
    assert result.exit_code == 2 and line in result.output and len(result.output.strip().splitlines()) == 1, \
        result.output


def test_controller_once_with_election_takes_the_lease_first_and_hands_it_over_after(tmp_path: Path) -> None:
    """The CLI's wiring: the elector (its own client) acquires before the pass and releases after it."""
    with WriteCluster() as cluster:
        kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "k",
                      "clusters": [{"name": "k", "cluster": {"server": cluster.url}}],
                      "users": [{"name": "u", "user": {"token": "t"}}],
                      "contexts": [{"name": "k", "context": {"cluster": "k", "user": "u"}}]}
        (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig), encoding="utf-8")
        (tmp_path / "config.yaml").write_text("mode: Recommend\nleader_election: {enabled: true, lease_name: l, "
                                              f"lease_namespace: {LEASE_NS}}}\n", encoding="utf-8")
        result = CliRunner().invoke(main, ["controller", "--config", str(tmp_path / "config.yaml"), "--demo", "--once",
                                           "--no-serve", "--kubeconfig", str(tmp_path / "kubeconfig"),
                                           "--identity", "me"])
        assert result.exit_code == 0, result.output
        leases = [r for r in cluster.requests() if "/leases" in r]
        assert leases[:2] == [f"GET /apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/l",
                              f"POST /apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases"]
        spec = cluster.obj("Lease", LEASE_NS, "l")["spec"]
        assert (spec["holderIdentity"], spec["renewTime"]) == ("", "1970-01-01T00:00:00.000000Z")  # released
        policies = cluster.requests().index("GET /apis/rightsizer.io/v1alpha1/gpurightsizingpolicies")
        assert policies > cluster.requests().index(leases[1])  # the pass ran after the lease was taken
