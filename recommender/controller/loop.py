"""One reconcile = collect → plan (``plan_fn``: ``rightsizer controller``'s ``Cycle`` runs ``run_cycle``, which
carries each workload's forecast model choices to the next cycle) → per policy object: Off nothing; Recommend:
status, annotation, Event; Auto: regression check of the last change, then guardrails → dry-run diff → guarded
patch. Next, workloads no policy targets but annotated ``rightsizer.io/mode`` are handled as if one did. Then
MIG node changes in flight are advanced (so a restart resumes them). ``schedule.run_scheduled`` calls
:meth:`Controller.reconcile` every interval; only the Lease holder acts, and each write is fenced (sent only
while the lease is held, else :class:`~recommender.controller.kube.NotLeader`). A failure in one policy (RBAC
denial, timeout, conflict, a lost lease) is reported on that policy and the loop goes on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from recommender.controller import records as rec
from recommender.controller.actuator import Actuator
from recommender.controller.changeset import ACTUATED_KINDS, ObjectRef
from recommender.controller.constraints import Constrain, resolve_constraints
from recommender.controller.devplugin import step as device_plugin_step
from recommender.controller.devplugin import wanted as device_plugin_wanted
from recommender.controller.kube import Kube, KubeFailure, NotFound
from recommender.controller.leader import LeaderElector
from recommender.controller.mig import MigSettings, advance
from recommender.controller.modes import WorkloadModes
from recommender.controller.modes import summary as _summary
from recommender.controller.outcome import Outcome
from recommender.controller.policy import Mode, Policy, annotation_policy, parse_policy
from recommender.controller.signing import KeySource, SecretKeys, SigningKeyError
from recommender.core.annotations import MODE_ANNOTATION, STATE_ANNOTATION
from recommender.core.errors import RightsizerError
from recommender.core.plan import Plan, Recommendation
from recommender.core.settings import MechanismSettings
from recommender.core.settings_sources import KubernetesSettings
from recommender.core.usage import Snapshot
from recommender.pipeline.planstore import PlanStore

log = logging.getLogger("rightsizer.controller")
PlanFn = Callable[[datetime, Constrain], tuple[Plan, Snapshot]]  # now, the policies' constraints → plan
MAX_ACTIONS = 10  # lastActions kept in a policy's status
DEFAULT_NAMESPACE = "gpu-rightsizer"  # the controller's own (deploy/base/namespace.yaml)


@dataclass
class Report:
    """What one reconcile did; ``errors`` are one line each, never exceptions."""

    at: datetime
    leader: bool = False
    outcomes: list[Outcome] = field(default_factory=list)
    mig: list[str] = field(default_factory=list)
    device_plugin: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Controller:
    def __init__(self, kube: Kube, plan_fn: PlanFn, *, clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 elector: LeaderElector | None = None, store: PlanStore | None = None, dry_run: bool = False,
                 namespaces: tuple[str, ...] = (), mig: MigSettings | None = None,
                 max_mode: Mode = Mode.AUTO, exclusive_nodes: Mapping[str, str] | None = None,
                 keys: KeySource | None = None, annotation_mode: Mode = Mode.RECOMMEND,
                 device_plugin_configmap: tuple[str, str] | None = None) -> None:
        self.plan_fn, self.clock, self.elector = plan_fn, clock, elector
        # every write checks the lease first (the elector keeps the raw client for the Lease itself)
        self.kube = kube if elector is None else kube.fenced(elector.fence, elector.timing.api_timeout_s)
        self.store, self.namespaces, self.mig = store, namespaces, mig or MigSettings()
        # where the device plugin's ConfigMap is when no plan says (a cycle without a plan still finishes changes)
        k = KubernetesSettings()
        self.device_plugin_configmap = device_plugin_configmap or (k.device_plugin_namespace,
                                                                   k.device_plugin_configmap_name)
        self.max_mode = max_mode  # the most any policy may ask for (controller ConfigMap ``mode``)
        # the most a workload's own rightsizer.io/mode annotation may ask for (ConfigMap ``annotation_mode``):
        # whoever may edit a workload may write it, so Auto through it is the platform team's decision
        self.annotation_mode = annotation_mode
        # nodes with unshared GPUs (mechanisms.exclusive_node_selector): where whole GPUs off MPS/time-slicing go
        self.exclusive_nodes = dict(MechanismSettings().exclusive_node_selector if exclusive_nodes is None
                                    else exclusive_nodes)
        # the change records' signing keys; by default a Secret in the controller's namespace, made on first use
        self.keys = keys or SecretKeys(self.kube, DEFAULT_NAMESPACE, create=not dry_run)
        self.actuator = Actuator(self.kube, dry_run=dry_run, selector_keys=tuple(sorted(self.exclusive_nodes)))
        self.modes = WorkloadModes(self.kube, self.actuator, self.exclusive_nodes)
        self.last: Report | None = None
        self._warned: set[tuple[str, str]] = set()  # (workload key, invalid mode value) already sent as an Event

    def reconcile(self) -> Report:
        """One pass; never raises for an expected failure (each ends up in ``Report.errors``)."""
        report = Report(self.clock())
        self.last = report
        if self.elector is not None and not self.elector.holds():  # renewed on its own thread (elector.start)
            if self.elector.last_error:
                report.errors.append(self.elector.last_error)
            return report
        report.leader = True
        self._load_keys(report)
        objs = self._policies(report)  # before planning: their class, objective and bounds shape the plan
        policies = [parse_policy(o) for o in objs]
        try:
            plan, snap = self.plan_fn(report.at, lambda ws: resolve_constraints(policies, ws).constraints)
        except RightsizerError as exc:
            report.errors.append(f"no plan this cycle: {exc}")
            self._mig(None, [], report)  # MIG changes in flight still finish or revert by their deadline
            self._device_plugin(None, [], report)
            for line in report.errors:
                log.warning("%s", line)
            return report
        if self.store is not None:
            self.store.publish(plan)
        recs = list(plan.recommendations)
        lost = resolve_constraints(policies, [r.workload for r in recs]).conflicts
        for obj, policy in zip(objs, policies, strict=True):
            try:
                self._policy(obj, policy, recs, snap, report, lost.get(policy.key))
            except KubeFailure as exc:
                report.errors.append(f"policy {_key(obj)}: {exc}")
        untargeted = [r for r in recs if not any(p.selects(r.ref, r.workload.labels) for p in policies)]
        self._opted_in(untargeted, snap, report)
        self._mig(plan, policies, report)
        self._device_plugin(plan, policies, report)
        for line in report.errors:
            log.warning("%s", line)
        return report

    def _load_keys(self, report: Report) -> None:
        """The signing keys for this cycle (re-read, so a rotated Secret counts from the next cycle). Only an
        install that may act needs them: without them Auto writes nothing and no record is trusted."""
        self.actuator.signer = None
        if self.max_mode != Mode.AUTO:
            return
        try:
            self.actuator.signer = self.keys.load()
        except SigningKeyError as exc:
            self.actuator.no_signer = str(exc)
            report.errors.append(f"Auto changes and rollbacks are off this cycle: {exc}")

    def _policies(self, report: Report) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for ns in self.namespaces or (None,):
            try:
                out += self.kube.list("GPURightsizingPolicy", ns)
            except NotFound:
                report.errors.append("the GPURightsizingPolicy CRD is not installed (apply deploy/): "
                                     "nothing to reconcile")
            except KubeFailure as exc:
                report.errors.append(str(exc))
        return out

    def _policy(self, obj: dict[str, Any], policy: Policy, recs: list[Recommendation], snap: Snapshot,
                report: Report, lost: str | None = None) -> None:
        now = report.at
        status: dict[str, Any] = {"observedGeneration": policy.generation}
        if policy.spec is None:
            status["conditions"] = [rec.condition("Valid", False, "InvalidSpec", policy.problem or "", now)]
            report.errors.append(f"policy {policy.key}: {policy.problem}")
            rec.write_policy_status(self.kube, policy.namespace, policy.name, status)
            return
        mode = _capped(policy.spec.mode, self.max_mode)
        if mode == Mode.OFF:
            return
        targets = [r for r in recs if policy.selects(r.ref, r.workload.labels)]
        status["recommendations"] = [_summary(r) for r in targets]
        old = (obj.get("status") or {}).get("recommendations") or []
        shown = {s.get("workload"): s for s in old if isinstance(s, dict)}  # what the last cycle recommended
        actions = list((obj.get("status") or {}).get("lastActions") or [])
        for r in targets:
            self._note(self._act(policy, mode, r, snap, now, shown.get(r.ref.key)), report, actions)
        found = "no workload matches the target" if not targets else f"{len(targets)} workload(s) targeted"
        if lost:  # another policy's constraints won for a workload both select
            found += f"; {lost}"
            report.errors.append(f"policy {policy.key}: {lost}")
        status["conditions"] = [rec.condition("Valid", True, "Accepted", found, now)]
        status["lastActions"] = actions[-MAX_ACTIONS:]
        rec.write_policy_status(self.kube, policy.namespace, policy.name, status)

    def _opted_in(self, recs: list[Recommendation], snap: Snapshot, report: Report) -> None:
        """Workloads no policy object targets but annotated ``rightsizer.io/mode``: each as if a policy of
        that mode with default settings targeted it. There is no status: the last recommendation shown
        is kept in memory instead."""
        recs = [r for r in recs if r.ref.kind in ACTUATED_KINDS]
        if not recs or self.max_mode == Mode.OFF:
            return
        found = self._mode_annotations({r.ref.kind for r in recs}, report)
        for r in recs:
            if r.ref.key not in found:
                continue
            value, uid = found[r.ref.key]
            policy = annotation_policy(r.ref, value)
            if policy.spec is None:
                self._invalid_annotation(r, value, uid, policy.problem or "", report)
                continue
            if _capped(policy.spec.mode, self.annotation_mode) != policy.spec.mode:
                self._invalid_annotation(r, value, uid, f"annotation {MODE_ANNOTATION}={value} asks for more than a "
                                         f"workload's own annotation may ({self.annotation_mode.value}: the "
                                         "controller config's annotation_mode); refused, nothing written", report,
                                         reason="RightsizerOptInRefused")
                continue
            mode = _capped(policy.spec.mode, self.max_mode)
            if mode == Mode.OFF:
                continue
            try:
                self._note(self._act(policy, mode, r, snap, report.at, self.modes.shown.get(r.ref.key)), report)
            except KubeFailure as exc:
                report.errors.append(f"{r.ref.key} ({MODE_ANNOTATION}): {exc}")

    def _mode_annotations(self, kinds: set[str], report: Report) -> dict[str, tuple[str, str | None]]:
        """WorkloadRef key → (its ``rightsizer.io/mode`` value, uid), for the workload kinds asked about."""
        out: dict[str, tuple[str, str | None]] = {}
        for ns in self.namespaces or (None,):
            for kind in sorted(kinds):
                try:
                    items = self.kube.list(kind, ns)
                except KubeFailure as exc:
                    report.errors.append(f"{MODE_ANNOTATION} opt-in not read: {exc}")
                    continue
                for o in items:
                    meta = o.get("metadata") or {}
                    value = (meta.get("annotations") or {}).get(MODE_ANNOTATION)
                    if value is not None:
                        out[f"{meta.get('namespace')}/{kind}/{meta.get('name')}"] = (str(value), meta.get("uid"))
        return out

    def _invalid_annotation(self, r: Recommendation, value: str, uid: str | None, problem: str,
                            report: Report, reason: str = "RightsizerInvalidMode") -> None:
        """A log line every cycle, a Warning Event once per value (this process), no action."""
        report.errors.append(f"{r.ref.key}: {problem}")
        if (r.ref.key, value) not in self._warned:
            self._warned.add((r.ref.key, value))
            rec.emit_event(self.kube, ObjectRef(r.ref.kind, r.ref.namespace, r.ref.name), reason,
                           problem, report.at, warning=True, uid=uid)

    def _act(self, policy: Policy, mode: Mode, r: Recommendation, snap: Snapshot, now: datetime,
             shown: Mapping[str, Any] | None) -> Outcome:
        return self.modes.recommend(r, now, shown) if mode == Mode.RECOMMEND else self.modes.auto(policy, r, snap, now)

    def _note(self, outcome: Outcome, report: Report, actions: list[dict[str, Any]] | None = None) -> None:
        report.outcomes.append(outcome)
        if actions is not None and outcome.status not in ("no-change", "recommended"):
            actions.append({"time": rec.ts(report.at), "workload": outcome.workload, "result": outcome.status,
                            "message": outcome.message[:500]})
        if not outcome.ok:
            report.errors.append(f"{outcome.workload}: {outcome.status}: {outcome.message}")

    def _mig(self, plan: Plan | None, policies: list[Policy], report: Report) -> None:
        """Advance node MIG changes in flight; start new ones only for Auto policies allowing mig-node (never
        without a plan)."""
        try:
            nodes = {n["metadata"]["name"]: n for n in self.kube.list("Node")}
        except KubeFailure as exc:
            report.errors.append(str(exc))
            return
        wanted: dict[str, tuple[str, bool]] = {}
        for m in plan.mig_nodes if plan is not None else ():
            owners = [p for p in policies if p.spec is not None and _capped(p.spec.mode, self.max_mode) == Mode.AUTO
                      and "mig-node" in p.spec.allowed_mechanisms and p.spec.maintenance_windows
                      and any(w.split("/")[0] == p.namespace for w in m.workloads)]
            if owners and m.node in nodes:
                assert owners[0].spec is not None
                wanted[m.node] = (m.config_name, owners[0].spec.in_window(report.at))
        in_flight = [n for n, o in nodes.items() if STATE_ANNOTATION in ((o.get("metadata") or {}).get("annotations")
                                                                         or {})]
        for name in sorted(set(in_flight) | set(wanted)):
            target, open_ = wanted.get(name, (None, False))
            layout = plan.mig_parted_config or None if plan is not None else None
            out = advance(self.kube, name, target, report.at, open_, self.mig, layout)
            report.mig.append(f"{out.node}: {out.phase}: {out.message}")
            if out.phase in ("failed", "conflict", "reverted"):
                report.errors.append(f"node {out.node}: {out.phase}: {out.message}")

    def _device_plugin(self, plan: Plan | None, policies: list[Policy], report: Report) -> None:
        """Advance device-plugin config changes in flight; start one for an Auto policy allowing
        device-plugin-node (recommender/controller/devplugin.py)."""
        dp = plan.device_plugin if plan is not None else None
        where = (dp.namespace, dp.configmap) if dp is not None else self.device_plugin_configmap
        try:
            nodes = {n["metadata"]["name"]: n for n in self.kube.list("Node")}
            want = device_plugin_wanted(dp, policies, lambda p: p.spec is not None and _capped(
                p.spec.mode, self.max_mode) == Mode.AUTO, report.at)
            outcomes = device_plugin_step(self.kube, dp, where, nodes, want, report.at, self.mig)
        except KubeFailure as exc:
            report.errors.append(f"device-plugin configs: {exc}")
            return
        for out in outcomes:
            report.device_plugin.append(f"{out.node}: {out.phase}: {out.message}")
            if out.phase in ("failed", "conflict", "reverted", "not-applied"):
                report.errors.append(f"node {out.node}: {out.phase}: {out.message}")


def _capped(asked: Mode, cap: Mode) -> Mode:
    order = (Mode.OFF, Mode.RECOMMEND, Mode.AUTO)
    return order[min(order.index(asked), order.index(cap))]


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"
