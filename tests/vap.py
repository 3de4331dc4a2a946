"""A ValidatingAdmissionPolicy evaluator for the tests: what the API server does with the shipped policies.

The expressions run in cel-expr-python (Google's CEL runtime, cel-cpp) with the strings extension, which is
what they use of the Kubernetes CEL environment besides standard CEL: ``split``, ``join``, ``indexOf``,
``substring`` (cel-go's ext.Strings, in Kubernetes since 1.0, version 2 since 1.29), ``matches`` (RE2 in
both) and the standard macros. No Kubernetes-only function (quantity, IP, URL, authz) is used, so none
is emulated. As in the API server, ``object`` and ``oldObject`` are untyped (``dyn``) JSON, so a map's
macros iterate its keys; ``variables`` are evaluated in order and may use earlier ones; a false
validation denies with its ``messageExpression``; an error applies ``failurePolicy`` (the shipped policies
all Fail: deny).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pytest

cel = pytest.importorskip("cel_expr_python.cel", reason="cel-expr-python not installed (test extra)")
ext_strings = pytest.importorskip("cel_expr_python.ext.ext_strings")

ENV = cel.NewEnv(variables={n: cel.Type.DYN for n in ("object", "oldObject", "request", "variables")},
                 extensions=[ext_strings.ExtStrings(2)])
CONTROLLER = "system:serviceaccount:gpu-rightsizer:gpu-rightsizer"


@dataclass(frozen=True)
class Request:
    """The admission request, as the policies' ``request`` sees it."""

    operation: str  # CREATE, UPDATE (what a PATCH is), DELETE
    group: str
    resource: str  # plural, e.g. "deployments"
    kind: str
    name: str
    namespace: str = ""
    username: str = CONTROLLER
    version: str = "v1"

    def as_cel(self) -> dict[str, Any]:
        return {"operation": self.operation, "name": self.name, "namespace": self.namespace, "subResource": "",
                "resource": {"group": self.group, "version": self.version, "resource": self.resource},
                "kind": {"group": self.group, "version": self.version, "kind": self.kind},
                "userInfo": {"username": self.username, "groups": ["system:serviceaccounts"]}}


@dataclass(frozen=True)
class Policy:
    """One ValidatingAdmissionPolicy with its compiled expressions."""

    name: str
    rules: tuple[Mapping[str, Any], ...]
    conditions: tuple[Any, ...]
    validations: tuple[tuple[str, Any, Any], ...]  # (expression text, program, message program or None)
    fail_closed: bool = True

    def matches(self, req: Request) -> bool:
        return any(_has(r.get("apiGroups"), req.group) and _has(r.get("apiVersions"), req.version)
                   and _has(r.get("operations"), req.operation) and _has(r.get("resources"), req.resource)
                   for r in self.rules)


@dataclass
class Verdict:
    """What the API server answers: which policies matched and, where any denied, why."""

    matched: list[str] = field(default_factory=list)
    denials: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.denials


def _has(allowed: Sequence[str] | None, value: str) -> bool:
    return allowed is not None and ("*" in allowed or value in allowed)


def _inline(text: str, variables: Mapping[str, str]) -> str:
    """``text`` with each ``variables.NAME`` replaced by that variable's (inlined) expression. Variables are
    pure, so this is what lazy evaluation computes; it keeps every value inside CEL (cel-expr-python cuts
    a string passed in from Python at its first NUL, so values must not round-trip through Python)."""
    def one(m: re.Match[str]) -> str:
        return f"({variables[m.group(1)]})" if m.group(1) in variables else m.group(0)

    return re.sub(r"\bvariables\.(\w+)\b", one, text)


def load(docs: Sequence[Mapping[str, Any]]) -> list[Policy]:
    """Every bound, Deny-enforced policy among ``docs`` (rendered manifests), compiled."""
    bound = {d["spec"]["policyName"] for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"
             and "Deny" in d["spec"]["validationActions"]}
    out = []
    for d in docs:
        if d["kind"] != "ValidatingAdmissionPolicy" or d["metadata"]["name"] not in bound:
            continue
        spec = d["spec"]
        variables: dict[str, str] = {}
        for v in spec.get("variables", []):  # in order: each may use the ones before it
            variables[v["name"]] = _inline(v["expression"], variables)
            ENV.compile(variables[v["name"]])  # compiles alone, as the API server checks it
        out.append(Policy(
            d["metadata"]["name"], tuple(spec["matchConstraints"]["resourceRules"]),
            tuple(ENV.compile(c["expression"]) for c in spec.get("matchConditions", [])),
            tuple((v["expression"], ENV.compile(_inline(v["expression"], variables)),
                   ENV.compile(_inline(v["messageExpression"], variables)) if "messageExpression" in v else None)
                  for v in spec["validations"]),
            spec.get("failurePolicy", "Fail") == "Fail"))
    return out


def review(policies: Sequence[Policy], req: Request, obj: Mapping[str, Any] | None,
           old: Mapping[str, Any] | None) -> Verdict:
    """Run every policy that matches ``req`` on the new and the old object."""
    verdict = Verdict()
    data: dict[str, Any] = {"object": obj, "oldObject": old, "request": req.as_cel(), "variables": {}}
    for p in policies:
        if not p.matches(req) or not all(c.eval(data=data).plain_value() is True for c in p.conditions):
            continue
        verdict.matched.append(p.name)
        verdict.denials += [f"{p.name}: {why}" for why in _validate(p, data)]
    return verdict


def _validate(p: Policy, data: dict[str, Any]) -> list[str]:
    """The message of each validation that is false, or that fails (``failurePolicy: Fail``)."""
    out = []
    for text, prog, message in p.validations:
        try:
            ok = prog.eval(data=data).plain_value()
        except Exception as exc:  # an evaluation error: the request is denied (Fail)
            out.append(f"expression failed ({exc}): {text}")
            continue
        if ok is not True:
            out.append(_message(message, data, text))
    return out


def _message(message: Any, data: dict[str, Any], text: str) -> str:
    if message is not None:
        try:
            return str(message.eval(data=data).plain_value())
        except Exception as exc:
            return f"messageExpression failed ({exc}); failed expression: {text}"
    return f"failed expression: {text}"


@cache
def shipped() -> tuple[Policy, ...]:
    """The policies as ``kubectl kustomize deploy/overlays/auto`` renders them (not a copy)."""
    from tests.test_deploy import _render

    return tuple(load(_render("auto")))


def write(operation: str, kind: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None,
          username: str = CONTROLLER) -> Verdict:
    """The verdict on a write of ``kind`` by ``username``: CREATE (``old`` None), UPDATE (what a PATCH is) or
    DELETE (``new`` None)."""
    group, version, resource = RESOURCES[kind]
    meta = (new or old or {}).get("metadata") or {}
    req = Request(operation, group, resource, kind, meta.get("name", ""), meta.get("namespace", ""), username, version)
    return review(shipped(), req, new, old)


def update(kind: str, old: Mapping[str, Any], new: Mapping[str, Any], username: str = CONTROLLER) -> Verdict:
    """The verdict on a PATCH of ``old`` into ``new`` (an UPDATE for admission) by ``username``."""
    return write("UPDATE", kind, old, new, username)


def served(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``new`` as admission sees it after the API server's own changes: a new generation when the spec moved,
    and the write's managedFields entry."""
    out = copy.deepcopy(dict(new))
    meta = out.setdefault("metadata", {})
    if out.get("spec") != old.get("spec"):
        meta["generation"] = int((old.get("metadata") or {}).get("generation", 1)) + 1
    meta["managedFields"] = [{"manager": "gpu-rightsizer", "operation": "Update", "time": "2026-11-26T00:00:00Z"}]
    return out


RESOURCES = {  # kind → (group, version, plural) as the policies' resourceRules name them
    "Deployment": ("apps", "v1", "deployments"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "Job.batch.volcano.sh": ("batch.volcano.sh", "v1alpha1", "jobs"),
    "ScaledObject": ("keda.sh", "v1alpha1", "scaledobjects"),
    "HorizontalPodAutoscaler": ("autoscaling", "v2", "horizontalpodautoscalers"),
    "Node": ("", "v1", "nodes"),
    "ConfigMap": ("", "v1", "configmaps"),
    "Secret": ("", "v1", "secrets"),
    "ResourceClaimTemplate": ("resource.k8s.io", "v1", "resourceclaimtemplates"),
    "ResourceClaim": ("resource.k8s.io", "v1", "resourceclaims"),
}
