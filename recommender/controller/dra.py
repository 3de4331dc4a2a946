"""Applying a DRA recommendation: a claim object of our own and the pod template's reference switched to it.

The claim is :func:`~recommender.mechanisms.dra.how_to_apply_claim`'s (a ResourceClaimTemplate for devices of each
pod's own, one ResourceClaim the replicas share for MPS or time-slicing), labelled ours
(``app.kubernetes.io/managed-by=gpu-rightsizer``) and owned by the workload, so it is garbage-collected with it.
The reference is the one ``spec.template.spec.resourceClaims`` entry whose claim asks for an NVIDIA GPU class;
it is switched only where the object it names now is the workload's own (an ownerReference to it) or ours, and
only template for template or claim for claim. The switch is one :class:`Change` on the workload, guarded by a
``test`` op on the old name, written with the signed change record, so ``rightsizer rollback`` and the automatic
revert restore the old name.

The claim object is created before the workload's patch and deleted again when that patch fails, so a failed or
raced apply leaves nothing. A rollback leaves it: it is ours, owned by the workload (collected with it), reused
as it is when the change is applied again, and a shared ResourceClaim may still be held by the pods of the
rollout being undone. Never written: an object of that name that is not ours and the workload's.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from recommender.controller.changeset import Change, ChangeSet
from recommender.controller.kube import Kube, KubeFailure, NotFound
from recommender.core.annotations import MANAGED_BY, MANAGED_BY_LABEL
from recommender.core.inventory import Allocation
from recommender.mechanisms.dra import GPU_CLASSES, REQUEST, how_to_apply_claim

CLAIMS = "/spec/template/spec/resourceClaims"
KEYS = {"resourceClaimTemplateName": "ResourceClaimTemplate", "resourceClaimName": "ResourceClaim"}
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


@dataclass(frozen=True)
class ClaimSwitch:
    """The claim object to create (``exists``: it is there already, ours, as wanted) and the reference change."""

    body: dict[str, Any]
    exists: bool
    change: Change | None  # None: the reference names it already

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


def prefix(workload: str) -> str:
    """How every claim name the controller makes for ``workload`` begins (``claim_name``)."""
    return f"{workload}-gpu-"


def ours(obj: Mapping[str, Any], workload: Mapping[str, Any] | None = None) -> bool:
    """Whether ``obj`` carries our label (and, given ``workload``, is owned by it too)."""
    meta = obj.get("metadata") or {}
    labelled = (meta.get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY
    return labelled and (workload is None or owned_by(obj, workload))


def owned_by(obj: Mapping[str, Any], workload: Mapping[str, Any]) -> bool:
    """Whether one of ``obj``'s ownerReferences is ``workload`` (by uid, kind and name)."""
    meta = workload.get("metadata") or {}
    uid = meta.get("uid")
    return bool(uid) and any(
        isinstance(o, Mapping) and o.get("uid") == uid and o.get("kind") == workload.get("kind")
        and o.get("name") == meta.get("name")
        for o in (obj.get("metadata") or {}).get("ownerReferences") or [])


def claim_switch(kube: Kube, workload: Mapping[str, Any], alloc: Allocation) -> ClaimSwitch | str:
    """What applying ``alloc``'s claim to ``workload`` (a Deployment or StatefulSet as read) writes, or why nothing
    is (one line, starting ``dra:``). Reads the claim objects the pod template names; writes nothing."""
    meta = workload.get("metadata") or {}
    name, ns = str(meta.get("name", "")), str(meta.get("namespace", ""))
    how = how_to_apply_claim(alloc, name, ns)
    if not how:
        return "dra: no claim to write for this share"
    (ref,) = how["pod_resource_claims"]
    key = next(k for k in KEYS if k in ref)
    body = _ours(how["claim"], workload)
    template = ((workload.get("spec") or {}).get("template") or {}).get("spec") or {}
    try:
        found = _gpu_entry(kube, ns, template)
        if isinstance(found, str):
            return found
        i, entry, old_obj = found
        old_key = next(k for k in KEYS if k in entry)
        if entry[old_key] == body["metadata"]["name"]:
            return ClaimSwitch(body, True, None) if ours(old_obj, workload) else (
                f"dra: {KEYS[old_key]} {ns}/{entry[old_key]} has our claim's name but is not ours; not changed")
        why = _may_switch(workload, template, entry, old_key, key, old_obj)
        if why is not None:
            return why
        exists = _existing(kube, body, workload)
    except KubeFailure as exc:
        return f"dra: the claim objects could not be read ({exc}); nothing written"
    if isinstance(exists, str):
        return exists
    what = f"resourceClaims {entry['name']} {'template' if key == 'resourceClaimTemplateName' else 'claim'}"
    return ClaimSwitch(body, exists, Change(f"{CLAIMS}/{i}/{key}", what, entry[key], body["metadata"]["name"]))


def _ours(claim: Mapping[str, Any], workload: Mapping[str, Any]) -> dict[str, Any]:
    """``claim`` labelled ours and owned by ``workload``."""
    body = copy.deepcopy(dict(claim))
    meta = workload.get("metadata") or {}
    body["metadata"]["labels"] = {MANAGED_BY_LABEL: MANAGED_BY}
    body["metadata"]["ownerReferences"] = [{
        "apiVersion": workload.get("apiVersion") or "apps/v1", "kind": workload.get("kind"), "name": meta.get("name"),
        "uid": meta.get("uid"), "controller": False, "blockOwnerDeletion": False}]
    return body


def _gpu_entry(kube: Kube, ns: str, pod: Mapping[str, Any]
               ) -> tuple[int, Mapping[str, Any], Mapping[str, Any]] | str:
    """The one ``resourceClaims`` entry whose claim asks for an NVIDIA GPU class, with its index and that claim
    object; or why there is none to switch."""
    hits = []
    for i, entry in enumerate(pod.get("resourceClaims") or []):
        if not isinstance(entry, Mapping):
            continue
        key = next((k for k in KEYS if isinstance(entry.get(k), str)), None)
        if key is None:
            continue
        try:
            obj = kube.get(KEYS[key], ns, entry[key])
        except NotFound:
            return f"dra: {KEYS[key]} {ns}/{entry[key]} the pod template names does not exist; nothing written"
        if _asks_gpu(obj):
            hits.append((i, entry, obj))
    if not hits:
        return "dra: no resourceClaims entry of the pod template names a claim for an NVIDIA GPU; nothing written"
    if len(hits) > 1:
        return f"dra: {len(hits)} resourceClaims entries ask for GPUs; which one to change is not told; nothing written"
    return hits[0]


def _asks_gpu(obj: Mapping[str, Any]) -> bool:
    """Whether a ResourceClaim(Template) requests a device of an NVIDIA GPU class (v1 ``exactly`` or the flat
    v1beta1 request)."""
    spec = obj.get("spec") or {}
    if obj.get("kind") == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
    for request in (spec.get("devices") or {}).get("requests") or []:
        if isinstance(request, Mapping):
            exactly = request.get("exactly")
            body: Mapping[str, Any] = exactly if isinstance(exactly, Mapping) else request
            if str(body.get("deviceClassName")) in GPU_CLASSES:
                return True
    return False


def _may_switch(workload: Mapping[str, Any], pod: Mapping[str, Any], entry: Mapping[str, Any], old_key: str,
                key: str, old_obj: Mapping[str, Any]) -> str | None:
    """Why the reference in ``entry`` may not move to our claim: the object it names is neither the workload's nor
    ours, the claim changes kind, or a container asks for one request of it by a name ours has not."""
    meta = old_obj.get("metadata") or {}
    where = f"{KEYS[old_key]} {meta.get('namespace', '')}/{meta.get('name', '')}"
    if not (owned_by(old_obj, workload) or ours(old_obj)):
        return (f"dra: {where} is not owned by {workload.get('kind')} {(workload.get('metadata') or {}).get('name')} "
                "(shared or someone else's): the controller switches only a claim the workload owns; apply the "
                "claim in how_to_apply by hand")
    if old_key != key:
        return (f"dra: the pod template names a {KEYS[old_key]}, the recommendation a {KEYS[key]} (each pod its own "
                "devices, or one claim its replicas share): that change is left to a person")
    if not DNS_SUBDOMAIN.fullmatch(str(entry.get(old_key))):
        return f"dra: {where} is not a valid object name; nothing written"
    for c in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
        for use in ((c.get("resources") or {}).get("claims") or []) if isinstance(c, Mapping) else []:
            if isinstance(use, Mapping) and use.get("name") == entry.get("name") and use.get("request") not in (
                    None, REQUEST):
                return (f"dra: container {c.get('name')} asks for request {use.get('request')!r} of claim "
                        f"{entry.get('name')}; ours names its request {REQUEST!r}; nothing written")
    return None


def _existing(kube: Kube, body: Mapping[str, Any], workload: Mapping[str, Any]) -> bool | str:
    """Whether our claim object is there already (ours, owned by the workload and asking what we ask: reused), or
    why an object of its name blocks it (never overwritten)."""
    kind, meta = str(body["kind"]), body["metadata"]
    try:
        have = kube.get(kind, meta["namespace"], meta["name"])
    except NotFound:
        return False
    where = f"{kind} {meta['namespace']}/{meta['name']}"
    if not ours(have, workload):
        return f"dra: a {where} exists and is not ours (not overwritten); nothing written"
    if not covers(have.get("spec"), body["spec"]):
        return f"dra: our {where} asks for other devices than the recommendation (claim specs are immutable)"
    return True


def covers(have: Any, want: Any) -> bool:
    """Whether ``have`` holds everything ``want`` says (fields the API server defaults may be added)."""
    if isinstance(want, Mapping):
        return isinstance(have, Mapping) and all(covers(have.get(k), v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(have, list) and len(have) == len(want) and all(map(covers, have, want))
    return bool(have == want)


def with_switch(sets: Sequence[ChangeSet], switch: ClaimSwitch) -> list[ChangeSet]:
    """``sets`` with the reference change on the workload's set (the last), guarded by the old name."""
    out = list(sets)
    if switch.change is not None:
        c, last = switch.change, out[-1]
        out[-1] = replace(last, changes=(*last.changes, c), guards=(*last.guards, (c.path, c.old)))
    return out


def create(kube: Kube, switch: ClaimSwitch | None) -> bool:
    """Create the claim object where it is not there yet; whether it was created."""
    if switch is None or switch.exists or switch.change is None:
        return False
    kube.create(switch.kind, switch.body["metadata"]["namespace"], switch.body)
    return True


def remove(kube: Kube, switch: ClaimSwitch) -> str | None:
    """Delete the claim object created for a write that then failed; the error line where that fails too."""
    try:
        kube.delete(switch.kind, switch.body["metadata"]["namespace"], switch.name)
    except KubeFailure as exc:
        return str(exc)
    return None


def managed_ref(path: str, old: Any, new: Any, workload: Mapping[str, Any]) -> bool | None:
    """The allow-list's rule for a reference change (``managed.py``): None where ``path`` is no claim reference;
    else whether both names are valid and the new one is a claim the controller makes for this workload."""
    if not re.fullmatch(CLAIMS + r"/\d+/(resourceClaimTemplateName|resourceClaimName)", path):
        return None
    name = str((workload.get("metadata") or {}).get("name", ""))
    return all(isinstance(v, str) and DNS_SUBDOMAIN.fullmatch(v) for v in (old, new)) and bool(name) \
        and str(new).startswith(prefix(name))
