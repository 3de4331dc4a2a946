"""One contract every sharing mechanism passes: size a need, count its GPU-equivalents, write it on a pod,
read it back from that pod, say how to apply it, and say why a need does not fit.

A new mechanism is covered by registering it: the parameters come from the registry.
"""

from __future__ import annotations

import json

import pytest

from collectors.kubernetes.claims import DraObjects, resolve
from collectors.kubernetes.parse import parse_pod_spec
from recommender.core.catalogue import load_catalogue
from recommender.core.inventory import Allocation
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.base import Claim, Mechanism, Need, NoFit, PodEdits, Sized
from recommender.mechanisms.dra import how_to_apply_claim

GPU = load_catalogue().gpus["A100-80GB"]
NEED = Need(memory_mib=10_000, compute_frac=0.2)  # fits every mechanism on an A100-80GB
TOO_BIG = Need(memory_mib=GPU.memory_mib * 2, compute_frac=1.0)  # fits no share of one GPU


def pod(edits: PodEdits, scheduler: str | None = None) -> tuple[dict, dict[str, str]]:
    """A pod spec and annotations with nothing but ``edits`` on it (and the scheduler that reads them)."""
    container = {"name": "main", "image": "app", "resources": {"limits": dict(edits.resources)},
                 "env": [{"name": k, "value": v} for k, v in edits.env]}
    return {"containers": [container], **({"schedulerName": scheduler} if scheduler else {})}, dict(edits.annotations)


def written(m: Mechanism, alloc: Allocation) -> tuple[dict, dict[str, str]]:
    """The pod that holds ``alloc``: the mechanism's edits; for a report-only one (nothing is ever written), what
    its how_to_apply tells a person to write: the annotations and the scheduler."""
    if not getattr(m, "report_only", False):
        return pod(m.pod_edits(alloc), (m.how_to_apply(alloc) or {}).get("scheduler_name"))
    how = m.how_to_apply(alloc)
    return pod(PodEdits(annotations=tuple(how["annotations"].items())), how["scheduler_name"])


@pytest.fixture(params=sorted(MECHANISMS.loaded()))
def mechanism(request: pytest.FixtureRequest) -> Mechanism:
    return MECHANISMS.get(request.param)


def sized(m: Mechanism) -> tuple[Sized, Allocation]:
    got = m.size(NEED, GPU)
    assert isinstance(got, Sized), got
    return got, Allocation(m.sharing, gpus=got.gpus, share=got.share, gpu_equivalents=got.gpu_equivalents,
                           gpu_model=GPU.key, device_memory_mib=got.device_memory_mib)


def claims(mechanism: Mechanism, alloc: Allocation) -> list[Claim]:
    """DRA writes no pod edits but a claim object: the claims the collector reads back from the one it writes."""
    if mechanism.name != "dra":
        return []
    obj = how_to_apply_claim(alloc, "w", "ns")["claim"]
    dra = DraObjects()
    dra.add(obj["kind"], [obj])
    key = "resourceClaimName" if obj["kind"] == "ResourceClaim" else "resourceClaimTemplateName"
    return resolve("ns", {"spec": {"resourceClaims": [{"name": "gpu", key: obj["metadata"]["name"]}]}}, [], dra)[0]


def test_sized_share_counts_and_reads_back_as_sized(mechanism: Mechanism) -> None:
    got, alloc = sized(mechanism)
    assert got.share is None or got.share.sharing is mechanism.sharing
    held = mechanism.gpu_equivalents(alloc, GPU)
    assert held is not None and 0 < held[0] <= max(alloc.gpus, 1)
    spec, annotations = written(mechanism, alloc)
    back = parse_pod_spec(spec, annotations, claims=claims(mechanism, alloc)).allocation
    assert (back.sharing, back.share) == (mechanism.sharing, alloc.share)


def test_sized_share_holds_some_of_the_sms(mechanism: Mechanism) -> None:
    _, alloc = sized(mechanism)
    share, caveat = mechanism.sm_share(alloc, GPU)
    assert 0 < share <= 1 and (caveat is None or caveat.strip())
    held = mechanism.compute_held(alloc, GPU)
    assert held is None or 0 < held <= max(alloc.gpus, 1)


def test_the_controller_applies_a_sized_share_or_says_why_not(mechanism: Mechanism) -> None:
    _, alloc = sized(mechanism)
    why = mechanism.not_applied(alloc)
    assert why is None or why.startswith(f"{mechanism.name}: ")


def test_leaving_for_whole_gpus_asks_for_them(mechanism: Mechanism) -> None:
    """Whole GPUs in place of the share; only a mechanism whose share is set elsewhere leaves nothing on the pod:
    one the controller does not write says why, DRA's whole GPUs are a claim the controller writes."""
    edits = mechanism.leave(2)
    if edits.empty:
        assert mechanism.not_applied(sized(mechanism)[1]) is not None or getattr(mechanism, "writes_claims", False)
        return
    assert dict(edits.resources)["nvidia.com/gpu"] == "2" and not edits.drops("nvidia.com/gpu")
    assert edits.drops("nvidia.com/mig-1g.10gb")  # a MIG slice is no whole GPU


def test_a_need_that_does_not_fit_says_why(mechanism: Mechanism) -> None:
    got = mechanism.size(TOO_BIG, GPU)
    if isinstance(got, Sized):  # only whole GPUs always fit (DRA's too): as many devices as the need takes
        assert mechanism.name in ("exclusive", "dra") and got.gpus >= 2
    else:
        assert isinstance(got, NoFit) and got.reason.strip()


def test_how_to_apply_is_text(mechanism: Mechanism) -> None:
    _, alloc = sized(mechanism)
    how = mechanism.how_to_apply(alloc)
    assert how and json.dumps(how)


def test_a_report_only_mechanism_writes_nothing_and_says_so(mechanism: Mechanism) -> None:
    _, alloc = sized(mechanism)
    if getattr(mechanism, "report_only", False):
        assert mechanism.pod_edits(alloc).empty and "report-only" in mechanism.how_to_apply(alloc)["report_only"]
    else:  # a share the controller does not write on pods (time-slicing's device plugin) says why; DRA's is a claim
        assert not mechanism.pod_edits(alloc).empty or mechanism.not_applied(alloc) is not None \
            or getattr(mechanism, "writes_claims", False)


def test_every_mechanism_has_its_own_sharing_tag() -> None:
    tags = [m.sharing for m in MECHANISMS.loaded().values()]
    assert len(tags) == len(set(tags))


def test_label_names_the_share_in_a_few_words(mechanism: Mechanism) -> None:
    """What the table shows: non-empty, one line, and different for two different sizes of one mechanism."""
    _, alloc = sized(mechanism)
    label = mechanism.label(alloc)
    assert label.strip() and "\n" not in label and len(label) <= 40
    bigger = mechanism.size(Need(memory_mib=GPU.memory_mib * 0.7, compute_frac=0.7), GPU)
    if isinstance(bigger, Sized) and bigger.share != alloc.share:
        other = Allocation(mechanism.sharing, gpus=bigger.gpus, share=bigger.share,
                           gpu_equivalents=bigger.gpu_equivalents, gpu_model=GPU.key)
        assert mechanism.label(other) != label


def test_every_mechanism_says_whether_it_isolates_memory_and_faults(mechanism: Mechanism) -> None:
    """Tenancy packs a mechanism's clients across tenants only when it isolates both (mechanisms.tenancy)."""
    assert isinstance(mechanism.isolates_memory, bool) and isinstance(mechanism.isolates_faults, bool)
