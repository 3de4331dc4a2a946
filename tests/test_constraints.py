"""A policy's classOverride and MIG profile bounds, as the plan applies them (no cluster): how a bound's
name is read on each GPU model, how bounds raise or refuse a profile, and run_once with constraints."""

from __future__ import annotations

from dataclasses import replace

import pytest

from policies.bounds import within_replica_bounds
from policies.mig import bounded_profile, resolve_bound
from recommender.controller.constraints import resolve_constraints
from recommender.controller.policy import parse_policy
from recommender.core import usage as m
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import Sharing
from recommender.core.plan import Classification, Recommendation, ScalingPlan, WorkloadClass, WorkloadConstraints
from recommender.core.settings import Settings
from recommender.pipeline.run import run_once
from tests.builders import END, snapshot, whole_gpu, workload

CAT = load_catalogue()
BY = "policy ml/p"


@pytest.mark.parametrize(
    ("gpu", "name", "read_as", "note"),
    [
        ("A100-80GB", "1g.10gb", "1g.10gb", ""),  # the model's own name: itself, nothing to say
        ("A100-40GB", "1g.10gb", "1g.10gb", ""),  # also an A100-40GB name (2 memory slices there): itself
        ("A100-80GB", "1g.5gb", "1g.10gb", "read as 1g.10gb"),  # 1g: |10-5|=5 < |20-5|=15
        ("A100-80GB", "1g.24gb", "1g.20gb", "read as 1g.20gb"),  # 1g: |20-24|=4 < |10-24|=14
        ("A100-40GB", "2g.20gb", "2g.10gb", "read as 2g.10gb"),  # the only 2g profile of an A100-40GB
        ("H100-94GB", "3g.40gb", "3g.47gb", "read as 3g.47gb"),  # the only 3g profile of an H100-94GB
        ("A30", "3g.40gb", None, "no A30 counterpart (no 3-compute-slice profile)"),  # A30: 1g, 2g, 4g
        ("A30", "7g.80gb", None, "no A30 counterpart"),
    ],
)
def test_a_bound_is_read_as_the_gpu_models_profile_of_the_same_compute_slices(
        gpu: str, name: str, read_as: str | None, note: str) -> None:
    g = CAT.get(gpu)
    assert g is not None
    found = resolve_bound(g, name, "bounds.smallestProfile")
    assert (found.profile.name if found.profile else None) == read_as
    assert note in found.note and bool(found.note) == bool(note)


@pytest.mark.parametrize(
    ("gpu", "mem_mib", "compute", "smallest", "largest", "profile", "says"),
    [
        # 8,000 MiB, 0.10 GPU fits 1g.10gb (9,728 usable, 1/7 = 0.14 of the SMs); raised to the bound
        ("A100-80GB", 8000, 0.10, "2g.20gb", None, "2g.20gb", "raised from 1g.10gb to 2g.20gb by bounds.smallest"),
        # raised by memory at the same compute: 1g.20gb ranks (1 SM, 2 memory slices) above 1g.10gb (1, 1)
        ("A100-80GB", 8000, 0.10, "1g.20gb", None, "1g.20gb", "raised from 1g.10gb to 1g.20gb"),
        # already above the bound: 0.30 > 2/7 = 0.29 needs 3 SM slices, so 3g.40gb, not raised
        ("A100-80GB", 8000, 0.30, "1g.10gb", None, "3g.40gb", "within the bounds 1g.10gb..any"),
        # another model's name: 1g.5gb reads as this model's 1g.10gb; the need fits it
        ("A100-80GB", 8000, 0.10, "1g.5gb", None, "1g.10gb", "read as 1g.10gb"),
        # A100-40GB: 4,000 MiB fits 1g.5gb (4,864); its own 1g.10gb is (1 SM, 2 memory slices): raised
        ("A100-40GB", 4000, 0.10, "1g.10gb", None, "1g.10gb", "raised from 1g.5gb to 1g.10gb"),
        # 30,000 MiB > 19,968 (2g.20gb) takes 3g.40gb (40,192): above the largest bound, no slice
        ("A100-80GB", 30000, 0.10, None, "2g.20gb", None, "3g.40gb, above bounds.largestProfile 2g.20gb"),
        ("A100-80GB", 30000, 0.10, None, "3g.40gb", "3g.40gb", "within the bounds any..3g.40gb"),
        # both bounds on another model's names: 2g.10gb and 4g.20gb read as 2g.20gb and 4g.40gb
        ("A100-80GB", 8000, 0.10, "2g.10gb", "4g.20gb", "2g.20gb", "raised from 1g.10gb to 2g.20gb"),
        # a bound with no counterpart is not guessed: no slice at all
        ("A30", 5000, 0.20, "3g.40gb", None, None, "no A30 counterpart"),
    ],
)
def test_bounds_raise_to_the_smallest_and_refuse_above_the_largest(
        gpu: str, mem_mib: float, compute: float, smallest: str | None, largest: str | None,
        profile: str | None, says: str) -> None:
    g = CAT.get(gpu)
    assert g is not None
    bounds = WorkloadConstraints(smallest_profile=smallest, largest_profile=largest, source=BY)
    choice = bounded_profile(g, mem_mib, compute, bounds)
    assert (choice.profile.name if choice.profile else None) == profile
    assert any(says in r and BY in r for r in choice.reasons), choice.reasons


def test_without_bounds_the_smallest_fitting_profile_and_no_reason() -> None:
    g = CAT.get("A100-80GB")
    assert g is not None
    for bounds in (None, WorkloadConstraints(WorkloadClass.BATCH, source=BY)):
        choice = bounded_profile(g, 8000, 0.10, bounds)
        assert choice.profile is not None and choice.profile.name == "1g.10gb" and choice.reasons == ()


# --- run_once with constraints -----------------------------------------------------------------

def _small() -> m.Snapshot:
    """Real-time by annotation; 7,000 MiB × 1.15 = 8,050 MiB and 5% of the SMs: a 1g.10gb slice."""
    w = workload("s", whole_gpu(), annotations={"rightsizer.io/class": "real-time"})
    return snapshot([w], {m.FB_USED_MIB: {"s": 7000.0}, m.GR_ENGINE_ACTIVE_FRAC: {"s": 0.05}})


def _plan(snap: m.Snapshot, c: WorkloadConstraints | None) -> Recommendation:
    fixed = {snap.workloads[0].ref.key: c} if c else None
    return run_once(snap, Settings(), END, constraints=fixed).recommendations[0]


def test_class_override_wins_over_the_annotation_and_the_sizing_follows_it() -> None:
    before, after = _plan(_small(), None), _plan(_small(), WorkloadConstraints(WorkloadClass.BATCH, source=BY))
    assert before.classification is not None and before.classification.source == "annotation"
    assert before.recommended is not None and before.recommended.sharing is Sharing.MIG  # real-time: mig → exclusive
    c = after.classification
    assert c is not None and (c.workload_class, c.confidence, c.source) == (WorkloadClass.BATCH, 1.0, "policy")
    assert any(BY in e and "classOverride batch" in e for e in c.evidence)
    # batch tries the fraction backend first: an MPS share of 0.05 × 1.2 margin → 10% of the SMs
    assert after.recommended is not None and after.recommended.sharing is Sharing.MPS
    assert after.recommended.mps_active_thread_pct == 10.0
    assert any(r.startswith("batch: tries mps") for r in after.reasons)


def test_smallest_profile_raises_the_slice_in_the_plan() -> None:
    rec = _plan(_small(), WorkloadConstraints(smallest_profile="2g.20gb", source=BY))
    assert rec.recommended is not None and rec.recommended.mig_profile == "2g.20gb"
    assert rec.gpus_needed == pytest.approx(2 / 7)  # 2g.20gb = max(2/8, 2/7) of an A100
    assert any("raised from 1g.10gb to 2g.20gb" in r and BY in r for r in rec.reasons), rec.reasons


def test_a_need_above_largest_profile_gets_no_slice_but_what_the_class_falls_back_to() -> None:
    w = workload("s", whole_gpu(), annotations={"rightsizer.io/class": "real-time"})
    snap = snapshot([w], {m.FB_USED_MIB: {"s": 30000.0}, m.GR_ENGINE_ACTIVE_FRAC: {"s": 0.05}})
    assert _plan(snap, None).recommended.mig_profile == "3g.40gb"  # type: ignore[union-attr]  # 34,500 MiB
    rec = _plan(snap, WorkloadConstraints(largest_profile="2g.20gb", source=BY))
    # real-time tries mig → exclusive: MIG refused by the bound, so the whole GPU it holds
    assert rec.recommended is not None and rec.recommended.sharing is Sharing.EXCLUSIVE
    assert rec.recommended.mig_profile is None
    assert any("above bounds.largestProfile 2g.20gb" in r and BY in r for r in rec.reasons), rec.reasons


# --- which policy's constraints a workload gets ------------------------------------------------

def _policy(name: str, **spec: object) -> dict[str, object]:
    return {"metadata": {"namespace": "ml", "name": name},
            "spec": {"target": {"selector": {"matchLabels": {"app": "s"}}}, **spec}}


def test_two_policies_with_different_constraints_the_first_by_name_wins_and_the_other_is_told() -> None:
    w = workload("s", whole_gpu(), labels={"app": "s"})
    policies = [parse_policy(_policy(n, **s)) for n, s in (
        ("zeta", {"classOverride": "batch"}), ("alpha", {"classOverride": "real-time"}),
        ("same", {"classOverride": "real-time"}),  # agrees with alpha: no conflict
        ("off", {"classOverride": "near-real-time", "mode": "Off"}),  # Off does nothing
        ("none", {}),  # sets nothing: no conflict
        ("objective", {"latencyObjectives": {"ttftSeconds": 0.5}}))]  # differs from alpha's (none)
    got = resolve_constraints(policies, [w])
    c = got.constraints[w.ref.key]
    assert (c.class_override, c.ttft_objective_s, c.source) == (WorkloadClass.REAL_TIME, None, "policy ml/alpha")
    assert set(got.conflicts) == {"ml/zeta", "ml/objective"}
    alone = resolve_constraints(policies[-1:], [w]).constraints[w.ref.key]
    assert (alone.ttft_objective_s, alone.source) == (0.5, "policy ml/objective")
    assert w.ref.key in got.conflicts["ml/zeta"] and "policy ml/alpha" in got.conflicts["ml/zeta"]


def test_a_policy_class_is_in_the_json_contract() -> None:
    """The controller serves its plans as the report's JSON: ``source: policy`` must validate."""
    import json
    from pathlib import Path

    from jsonschema import Draft202012Validator

    from recommender.outputs import get_formatter

    snap = _small()
    plan = run_once(snap, Settings(), END, constraints={snap.workloads[0].ref.key: WorkloadConstraints(
        WorkloadClass.BATCH, source=BY)})
    doc = json.loads(get_formatter("json")(plan, snap))
    schema = json.loads((Path(__file__).parents[1] / "recommender" / "outputs" / "schema.json").read_text())
    Draft202012Validator(schema).validate(doc)
    assert doc["workloads"][0]["class"]["source"] == "policy"


# --- latencyObjectives.ttftSeconds: the objective the plan sizes for -------------------------------

def test_a_policy_objective_is_what_the_headroom_is_judged_against() -> None:
    from policies.replicas import ReplicaHistory, scaling_plan
    from recommender.core.settings import ScalingSettings
    from tests.test_replicas import DAY_ONLY, FC, series, with_capacity

    # one replica at its configured 10 req/s; 4 of 100 steps at TTFT 3 s, the rest at 1 s
    h = ReplicaHistory(60.0, series([10.0] * 100), series([3.0] * 4 + [1.0] * 96))
    rt = Classification(WorkloadClass.REAL_TIME, 1.0, ("test",), "annotation")
    assert ScalingSettings().ttft_objective_s < 3.0
    default = scaling_plan(with_capacity(), h, rt, (FC,), DAY_ONLY)
    policy = scaling_plan(with_capacity(), h, rt, (FC,), DAY_ONLY, constraints=WorkloadConstraints(
        ttft_objective_s=5.0, source=BY))
    assert isinstance(default, ScalingPlan) and isinstance(policy, ScalingPlan)
    # default objective: 4 misses of 100 = 4x the 1% budget → 30% + 2 doublings x 10 points = 50%
    assert default.headroom_frac == pytest.approx(0.50)
    # 5 s: no step missed it → the class's 30%; target 10 x 0.7 = 7 → ceil(35 / 7) = 5 replicas
    assert policy.headroom_frac == pytest.approx(0.30) and policy.recommended_replicas == 5
    assert any(f"TTFT objective 5 s from latencyObjectives.ttftSeconds ({BY})" in r for r in policy.reasons)


@pytest.mark.parametrize(("ttft", "problem"), [
    (0.0009, "greater than or equal to 0.001"), (1e-320, "greater than or equal to 0.001"),
    (3601, "less than or equal to 3600"), (0.001, None), (3600, None)])
def test_a_policy_objective_no_ttft_histogram_can_tell_is_refused(ttft: float, problem: str | None) -> None:
    """As the CRD refuses it (tests/test_deploy.py): under the 1 ms vLLM's TTFT histogram starts at, every request
    would count as over it and the replicas come out at the most allowed."""
    p = parse_policy({"metadata": {"namespace": "ml", "name": "p"},
                      "spec": {"target": {"workloadRef": {"kind": "Deployment", "name": "w"}},
                               "latencyObjectives": {"ttftSeconds": ttft}}})
    assert (p.spec is None) == (problem is not None)
    assert problem is None or (p.problem is not None and problem in p.problem), p.problem


def test_a_policy_objective_classifies_over_the_annotation() -> None:
    w = workload("s", whole_gpu(), annotations={"rightsizer.io/ttft-slo-seconds": "2"})
    snap = snapshot([w], {m.FB_USED_MIB: {"s": 7000.0}, m.GR_ENGINE_ACTIVE_FRAC: {"s": 0.05}})
    before = _plan(snap, None).classification
    after = _plan(snap, WorkloadConstraints(ttft_objective_s=30.0, source=BY)).classification
    assert before is not None and before.workload_class is WorkloadClass.REAL_TIME  # 2 s ≤ 10 s: real-time
    assert after is not None and after.workload_class is WorkloadClass.NEAR_REAL_TIME  # 30 s > 10 s
    assert any("TTFT p95 <= 30 s" in e for e in after.evidence)


@pytest.mark.parametrize(("kind", "api_version", "problem"), [
    ("Deployment", "apps/v1", None),
    ("Job", None, None),  # optional: kind and name select
    ("Job", "batch/v1", None),
    ("LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", None),
    ("Job", "apps/v1", "apiVersion apps/v1 does not serve Job (its group is batch)"),
    ("Deployment", "v1", "apiVersion v1 does not serve Deployment (its group is apps)"),  # the core group
])
def test_a_workload_refs_api_version_must_serve_its_kind(kind: str, api_version: str | None,
                                                         problem: str | None) -> None:
    ref = {"kind": kind, "name": "w"} | ({"apiVersion": api_version} if api_version else {})
    p = parse_policy({"metadata": {"namespace": "ml", "name": "p"}, "spec": {"target": {"workloadRef": ref}}})
    assert (p.spec is None) == (problem is not None)
    assert problem is None or (p.problem is not None and problem in p.problem), p.problem


# --- bounds.minReplicas / maxReplicas: what the scaling advice stays within ------------------------

PLAN = ScalingPlan("request_rate_per_s", 10.0, 7.0, 1, 6, 4, 0.0, 300, False, 0.3, None)  # min 1, max 6, 4
TO_ZERO = replace(PLAN, min_replicas=0, scale_to_zero=True)


@pytest.mark.parametrize(("plan", "lo", "hi", "expect", "says"), [
    (PLAN, None, 3, (1, 3, 3, False), "recommended 4 → 3, max 6 → 3"),  # clamp(4) = 3; max(1, 1, clamp(6)) = 3
    (PLAN, 2, None, (2, 4, 6, False), "min 1 → 2"),  # only the minimum moves
    (PLAN, 5, 8, (5, 5, 6, False), "recommended 4 → 5, min 1 → 5"),  # max: max(5, 1, clamp(6) = 6) = 6
    (PLAN, 0, 10, (1, 4, 6, False), "within bounds.minReplicas/maxReplicas 0..10"),
    (TO_ZERO, 1, None, (1, 4, 6, False), "min 0 → 1, no scale to zero"),  # minReplicas ≥ 1 rules zero out
    (TO_ZERO, 0, 2, (0, 2, 2, True), "recommended 4 → 2, max 6 → 2"),  # 0 allows scale-to-zero
])
def test_replica_bounds_clamp_the_scaling_advice(plan: ScalingPlan, lo: int | None, hi: int | None,
                                                 expect: tuple[int, int, int, bool], says: str) -> None:
    got = within_replica_bounds(plan, WorkloadConstraints(min_replicas=lo, max_replicas=hi, source=BY))
    assert (got.min_replicas, got.recommended_replicas, got.max_replicas, got.scale_to_zero) == expect
    assert got.reasons[-1].startswith("replicas ") and says in got.reasons[-1] and BY in got.reasons[-1]
    assert within_replica_bounds(plan, WorkloadConstraints(class_override=WorkloadClass.BATCH)) == plan
