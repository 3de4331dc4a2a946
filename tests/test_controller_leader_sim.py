"""Two controller replicas on one fake timeline (tests/leasesim.py): never two writers.

Each replica's lease renewal ticks every ``retry_period_s`` (as its thread would) and its reconcile every
``interval_s``; planning takes ``plan_s`` of fake time, during which both replicas' due ticks run, and so
does each write (``Ledger.write_s``). The invariant, asserted at every write any replica sends (a spy in
its ApiClient, below the fence): the Lease on the server names that replica as holder and does not
expire within the API timeout. Timing is the shipped one (deploy/overlays/auto/controller-config.yaml).
The Lease lives on an in-process fake (two replicas renewing every 5 s make thousands of Lease calls per
scenario; tests/leasesim.py says how it keeps the API's semantics, and tests/test_controller_leader.py
runs the elector on it and on kmock alike); the workloads, and so every fenced write, on kmock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from recommender.controller.kube import Kube
from recommender.controller.leader import LeaderElector
from recommender.controller.lease import LeaseTiming
from recommender.controller.loop import Controller, Report
from recommender.core import usage as m
from recommender.core.plan import Plan
from recommender.core.timestamps import parse_time
from tests import planfixture as pf
from tests.controllerfixture import NAME, NS, auto_spec, deployment, plan, policy, recommendation, snapshot
from tests.kubewrite import WriteCluster
from tests.leasesim import LeaseServer, Ledger, SpyApi, Timeline

START = pf.END
LEASE = "gpu-rightsizer-leader"
CYCLES = 21
DEPLOY = Path(__file__).parents[1] / "deploy"
SHIPPED = yaml.safe_load((DEPLOY / "overlays/auto/controller-config.yaml").read_text())
TIMING = LeaseTiming.model_validate({k: v for k, v in SHIPPED["leader_election"].items()
                                     if k in LeaseTiming.model_fields})
INTERVAL_S = float(SHIPPED["interval_s"])
OTHERS = ("mistral", "qwen")  # Recommend policies: a new recommendation (annotation, Event, status) each cycle


def _objects() -> list[dict[str, Any]]:
    out = [deployment(), policy("auto", auto_spec())]
    for name in OTHERS:
        out += [deployment(name), policy(name, auto_spec(mode="Recommend", target={"workloadRef": {
            "apiVersion": "apps/v1", "kind": "Deployment", "name": name}}))]
    return out


def _plan(now: datetime) -> Plan:
    cycle = int((now - START).total_seconds() // INTERVAL_S)
    return plan(recommendation(), *(recommendation(n, replicas=2 + (cycle + i) % 3) for i, n in enumerate(OTHERS)),
                now=now)


class Replica:
    """One controller process: its elector's ticks, its reconciles, and what may go wrong with them."""

    def __init__(self, sim: Sim, name: str, plan_s: float) -> None:
        self.sim, self.name, self.plan_s = sim, name, plan_s
        self.elector = LeaderElector(sim.server.client(name), NS, LEASE, name, TIMING, clock=sim.timeline.clock)
        kube = Kube(SpyApi(sim.cluster.url, name, sim.ledger), 5.0)
        self.controller = Controller(kube, self._plan_fn, clock=sim.timeline.clock, elector=self.elector)
        self.reports: list[Report] = []
        self.frozen_until = START  # a stalled process (a long GC pause, a throttled CPU): no ticks either
        self.during_plan: dict[int, Callable[[Replica], None]] = {}  # cycle → what happens mid-planning
        self.running = False

    def tick(self) -> None:
        if self.sim.timeline.now >= self.frozen_until:
            self.elector.tick()

    def reconcile(self) -> None:
        if self.running or self.sim.timeline.now < self.frozen_until:
            return  # max_instances=1, as apscheduler's job
        self.running = True
        try:
            self.reports.append(self.controller.reconcile())
        finally:
            self.running = False
            # kmock keeps every request and gets slower with each one kept; these tests never read them
            self.sim.cluster.call(lambda km: km._requests.clear())

    def _plan_fn(self, now: datetime, _: object) -> tuple[Plan, m.Snapshot]:
        event = self.during_plan.get(len(self.reports))
        if event is not None:
            event(self)
        self.sim.timeline.advance(self.plan_s)
        return _plan(now), snapshot(now, 0.3, 0.3)


class Sim:
    def __init__(self, cluster: WriteCluster, plan_s: float, write_s: float = 1.0) -> None:
        self.cluster, self.timeline = cluster, Timeline(START)
        self.server = LeaseServer(self.timeline.clock)
        self.ledger = Ledger(self.timeline, self.server, TIMING.api_timeout_s, write_s)
        self.a, self.b = Replica(self, "a", plan_s), Replica(self, "b", plan_s)
        # b starts 2.5 s after a; its first reconcile is half an interval after a's
        for replica, tick_s, reconcile_s in ((self.a, 0.0, 0.0), (self.b, 2.5, 2.5 + INTERVAL_S / 2)):
            self.timeline.every(START + timedelta(seconds=tick_s), TIMING.retry_period_s, replica.tick,
                                after_end=True)
            self.timeline.every(START + timedelta(seconds=reconcile_s), INTERVAL_S, replica.reconcile,
                                after_end=False)

    def run(self, cycles: int = CYCLES) -> None:
        self.timeline.run_until(START + timedelta(seconds=cycles * INTERVAL_S - 1))

    def transitions(self) -> int:
        return int(self.server.spec()["leaseTransitions"])

    def renewals(self, who: str) -> list[datetime]:
        """When ``who``'s lease writes (create, renew, take over) were applied."""
        return [at for at, by, spec in self.server.log if by == who and spec.get("holderIdentity") == who]

    def acquired(self, who: str) -> datetime:
        return next(at for at, by, spec in self.server.log if by == who and spec.get("holderIdentity") == who)


def _refused(reports: list[Report]) -> int:
    return sum("not sent" in e for r in reports for e in r.errors)


@pytest.mark.parametrize("path", sorted(DEPLOY.glob("**/controller-config.yaml")), ids=lambda p: p.parent.name)
def test_every_shipped_config_has_the_same_timing_and_it_holds_the_invariant(path: Path) -> None:
    config = yaml.safe_load(path.read_text())
    timing = LeaseTiming.model_validate({k: v for k, v in config["leader_election"].items()
                                         if k in LeaseTiming.model_fields})  # the controller's own check
    assert timing == TIMING == LeaseTiming() and set(config["leader_election"]) >= set(LeaseTiming.model_fields)
    assert timing.renew_deadline_s + timing.api_timeout_s < timing.lease_duration_s < config["interval_s"]


@pytest.mark.parametrize("plan_s", [30.0, 90.0])  # planning as long as the lease, then three times longer
def test_two_replicas_at_the_shipped_timing_one_leader_no_flapping(plan_s: float) -> None:
    with WriteCluster(_objects()) as cluster:
        sim = Sim(cluster, plan_s)
        sim.run()
        assert sim.ledger.violations() == []
        assert [r.leader for r in sim.a.reports] == [True] * CYCLES
        assert len(sim.b.reports) >= CYCLES - 1 and not any(r.leader for r in sim.b.reports)
        assert sim.ledger.by("b") == [] and len(sim.ledger.by("a")) >= 3 * CYCLES
        assert (sim.server.spec()["holderIdentity"], sim.transitions()) == ("a", 0)
        assert _refused(sim.a.reports) == 0
        assert cluster.obj("Deployment", NS, NAME)["spec"]["replicas"] == 4  # a's two steps, 2 → 3 → 4


def test_a_leader_stalled_longer_than_the_lease_mid_planning_never_writes_beside_the_new_one() -> None:
    def stall(r: Replica) -> None:  # 20 s into planning, 60 s frozen: no renewals meanwhile
        r.sim.timeline.advance(20)
        r.frozen_until = r.sim.timeline.now + timedelta(seconds=60)

    with WriteCluster(_objects()) as cluster:
        sim = Sim(cluster, plan_s=90.0)
        sim.a.during_plan[2] = stall
        sim.run()
        assert sim.ledger.violations() == []
        assert sim.transitions() == 1 and sim.server.spec()["holderIdentity"] == "b"
        last_a = max(sim.renewals("a"))
        assert sim.acquired("b") >= last_a + timedelta(seconds=TIMING.lease_duration_s)
        assert _refused(sim.a.reports[2:3]) > 0  # its whole cycle's writes, after waking up
        assert max(w.at for w in sim.ledger.by("a")) < min(w.at for w in sim.ledger.by("b"))
        assert [r.leader for r in sim.a.reports[3:]] == [False] * (len(sim.a.reports) - 3)
        assert any(r.leader for r in sim.b.reports) and len(sim.ledger.by("b")) >= 3 * 10


@pytest.mark.parametrize(("outage_s", "taken_over"), [(100.0, True), (18.0, False)])
def test_renewals_failing_mid_cycle_stop_the_writes_before_the_lease_can_expire(outage_s: float,
                                                                                taken_over: bool) -> None:
    """The Lease patches of ``a`` answer 500 from 82 s into its 90 s of planning; writes take 3 s each, so
    the fence closes in the middle of the cycle's writes. The long outage outlasts the lease (``b`` takes
    over after expiry), the short one does not (``a`` renews again and keeps the lease)."""
    closed: list[tuple[float, bool]] = []

    def outage(r: Replica) -> None:
        tl, server = r.sim.timeline, r.sim.server
        start = tl.now + timedelta(seconds=82)
        tl.at(start, lambda: server.failing.add(("a", "patch")))
        tl.at(start + timedelta(seconds=outage_s), lambda: server.failing.discard(("a", "patch")))
        for after_s in (0.0, TIMING.renew_deadline_s + 0.1):  # just before, and after the deadline ran out
            tl.at(start + timedelta(seconds=after_s), lambda s=after_s: closed.append((s, r.elector.holds())))

    with WriteCluster(_objects()) as cluster:
        sim = Sim(cluster, plan_s=90.0, write_s=3.0)
        sim.a.during_plan[2] = outage
        sim.run()
        assert sim.ledger.violations() == []
        assert [h for _, h in closed] == [True, False]  # a failing renewal closes the fence at the deadline
        if not taken_over:
            assert (sim.server.spec()["holderIdentity"], sim.transitions()) == ("a", 0)
            assert sim.ledger.by("b") == [] and all(r.leader for r in sim.a.reports)
            return
        last_ok = max(at for at in sim.renewals("a") if at < sim.acquired("b"))
        deadline = last_ok + timedelta(seconds=TIMING.renew_deadline_s)
        cycle2 = [w for w in sim.ledger.by("a") if w.at >= sim.a.reports[2].at]
        assert cycle2 and max(w.at for w in cycle2) < deadline  # some writes went, then the fence closed
        assert _refused(sim.a.reports[2:3]) > 0
        assert sim.acquired("b") >= last_ok + timedelta(seconds=TIMING.lease_duration_s)  # only after expiry
        assert (sim.server.spec()["holderIdentity"], sim.transitions()) == ("b", 1)
        assert min(w.at for w in sim.ledger.by("b")) > max(w.at for w in sim.ledger.by("a"))
        renewed = parse_time(sim.server.spec()["renewTime"])  # b renews on to the end
        assert renewed is not None and sim.timeline.now - renewed <= timedelta(seconds=TIMING.retry_period_s)
