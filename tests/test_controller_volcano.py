"""Auto on batch jobs: a Volcano Job's vGPU resources are written on the task template that holds them (guarded
JSON patch at ``spec.tasks[i].template``, recorded, rolled back), never its replicas; a Kubeflow PyTorchJob stays
report-only with a reason; a batch/v1 Job of the same name is never touched; a tenant-written record naming
another path is refused."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import jsonpatch
import pytest
from click.testing import CliRunner

from recommender.cli.main import main
from recommender.controller import records as rec
from recommender.controller.changes import apply_local, desired_from, inverse, plan_changes, to_patch
from recommender.controller.changeset import Change
from recommender.controller.loop import Controller
from recommender.controller.managed import unmanaged
from recommender.controller.policy import parse_policy
from recommender.controller.signing import Signer, subject_of
from recommender.core.annotations import LAST_CHANGE, SIGNATURE
from recommender.core.inventory import Sharing, WorkloadRef
from recommender.core.plan import Recommendation, ScalingPlan
from recommender.core.resources import VOLCANO_JOB
from recommender.mechanisms.volcano import VolcanoShare
from tests import planfixture as pf
from tests.controllerfixture import plan, policy, snapshot
from tests.kubefixture import container, manifest, template
from tests.kubewrite import WriteCluster

NOW = pf.END
NS, NAME = "train", "finetune"
KEY = f"{NS}/{VOLCANO_JOB}/{NAME}"
VGPU = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "40960", "volcano.sh/vgpu-cores": "50"}
VGPU_NEW = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": "20480", "volcano.sh/vgpu-cores": "30"}
CRDS = (VOLCANO_JOB, "PyTorchJob")


def volcano_job(limits: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """Two tasks as in test_kubernetes_batch: a CPU parameter server (task 0), two vGPU workers (task 1)."""
    worker = template({"app": NAME}, container("trainer", "pytorch/pytorch", limits or VGPU),
                      schedulerName="volcano")
    worker["spec"]["containers"][0]["resources"]["requests"] = dict(limits or VGPU)
    ps = template({"app": NAME}, container("ps", "pytorch/pytorch"), schedulerName="volcano")
    return manifest(VOLCANO_JOB, NS, NAME, {
        "schedulerName": "volcano", "minAvailable": 3,
        "tasks": [{"name": "ps", "replicas": 1, "template": ps},
                  {"name": "worker", "replicas": 2, "template": worker}]},
        labels={"team": "ml"}, annotations=annotations)


def batch_job() -> dict[str, Any]:
    """A batch/v1 Job of the same name and namespace, holding a whole GPU."""
    return manifest("Job", NS, NAME, {"template": template({"app": NAME}, container(
        "t", "pytorch/pytorch", {"nvidia.com/gpu": "1"}))}, labels={"team": "ml"})


def pytorch_job() -> dict[str, Any]:
    tmpl = template({"app": "bert"}, container("pytorch", "pytorch/pytorch", VGPU))
    return manifest("PyTorchJob", NS, "bert", {"pytorchReplicaSpecs": {
        "Master": {"replicas": 1, "template": tmpl}, "Worker": {"replicas": 3, "template": tmpl}}},
        labels={"team": "ml"})


def job_rec(kind: str = VOLCANO_JOB, name: str = NAME, path: str | None = "spec.tasks[1].template",
            share: VolcanoShare | None = None) -> Recommendation:
    """A Volcano vGPU recommendation (40960 MiB 50 % → 20480 MiB 30 %) for the job, with 4 replicas wanted."""
    base = pf.llama()
    held = replace(base.workload.allocation, sharing=Sharing.VOLCANO, gpus=1, share=VolcanoShare(40960.0, 50.0),
                   vllm=None)
    wl = replace(base.workload, ref=WorkloadRef(NS, kind, name), labels={"team": "ml"}, allocation=held,
                 template_path=path)
    assert base.recommended is not None
    recommended = replace(base.recommended, sharing=Sharing.VOLCANO, gpus=1, vllm=None,
                          share=share or VolcanoShare(20480.0, 30.0))
    scaling = ScalingPlan("request_rate_per_s", 10.0, 7.0, 1, 6, 4, 0.0, 300, False, 0.3, None)
    return replace(base, workload=wl, recommended=recommended, scaling=scaling)


def auto(*mechanisms: str) -> dict[str, Any]:
    return {"target": {"selector": {"matchLabels": {"team": "ml"}}}, "mode": "Auto",
            "allowedMechanisms": list(mechanisms or ("volcano-vgpu", "replicas", "vllm"))}


def task(obj: dict[str, Any], i: int = 1) -> dict[str, Any]:
    return dict(obj["spec"]["tasks"][i]["template"]["spec"]["containers"][0])


def reconcile(cluster: WriteCluster, *recs: Recommendation) -> Any:
    return Controller(cluster.kube(), lambda now, _: (plan(*recs, now=now), snapshot(now, .3, .3)),
                      clock=lambda: NOW).reconcile()


def test_task_template_vgpu_changes_are_guarded_and_invert_exactly() -> None:
    obj = volcano_job()
    desired = desired_from(job_rec(), ["volcano-vgpu", "replicas", "vllm"])
    assert desired.replicas is None and desired.templates == ("/spec/tasks/1/template",)
    assert any("not scaled" in r for r in desired.reasons) and any("created after" in r for r in desired.reasons)
    cs = plan_changes(obj, desired)
    assert cs.target.kind == VOLCANO_JOB
    assert {c.path for c in cs.changes} == {
        f"/spec/tasks/1/template/spec/containers/0/resources/{s}/volcano.sh~1vgpu-{k}"
        for s in ("limits", "requests") for k in ("memory", "cores")}
    ops = to_patch(cs)
    tests = [o for o in ops if o["op"] == "test"]
    assert ops[:len(tests)] == tests and {o["path"] for o in tests} >= {
        "/spec/tasks/1/name", "/spec/tasks/1/template/spec/containers/0/name",
        "/spec/tasks/1/template/spec/containers/0/resources/limits"}
    after = apply_local(obj, cs)
    assert task(after)["resources"] == {"limits": VGPU_NEW, "requests": VGPU_NEW}
    assert after["spec"]["tasks"][0] == obj["spec"]["tasks"][0]  # the parameter server's task untouched
    assert {k: v for k, v in after["spec"].items() if k != "tasks"} == \
        {k: v for k, v in obj["spec"].items() if k != "tasks"}  # minAvailable, no replicas written
    assert apply_local(after, inverse(cs)) == obj
    assert plan_changes(after, desired).empty  # idempotent
    assert unmanaged(VOLCANO_JOB, cs.changes, obj) is None
    moved = json.loads(json.dumps(obj))  # a tenant edited the limits since they were read: the patch fails
    task(moved)["resources"]["limits"]["volcano.sh/vgpu-cores"] = "70"
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(moved, to_patch(cs))


@pytest.mark.parametrize(("path", "why"), [
    ("spec.pytorchReplicaSpecs.Worker.template", "names no task"),
    ("spec.tasks[1].template, spec.replicatedJobs[0].template.spec.template", "names no task"),
])
def test_a_template_path_that_is_not_a_task_writes_nothing(path: str, why: str) -> None:
    desired = desired_from(job_rec(path=path), ["volcano-vgpu"])
    assert plan_changes(volcano_job(), desired).empty and any(why in r for r in desired.reasons)


def test_a_task_index_the_job_does_not_have_is_skipped() -> None:
    cs = plan_changes(volcano_job(), desired_from(job_rec(path="spec.tasks[7].template"), ["volcano-vgpu"]))
    assert cs.empty and "spec.tasks[7]" in cs.skipped[0]


def test_only_volcano_vgpu_is_written_on_a_volcano_job() -> None:
    whole = replace(job_rec(), recommended=replace(job_rec().recommended, sharing=Sharing.EXCLUSIVE, share=None))
    desired = desired_from(whole, ["exclusive", "volcano-vgpu", "replicas"])
    assert desired.edits.empty and desired.replicas is None
    assert any("only Volcano vGPU" in r for r in desired.reasons)


@pytest.mark.parametrize("path", [
    "/spec/tasks/1/replicas", "/spec/minAvailable", "/spec/tasks/1/template/spec/containers/0/image",
    "/spec/tasks/1/template/spec/containers/0/resources/limits/cpu",
    "/spec/tasks/1/template/spec/containers/0/env/0/value", "/spec/template/spec/containers/0/resources/limits/"
    "volcano.sh~1vgpu-memory",
])
def test_the_allow_list_takes_only_task_template_gpu_resources(path: str) -> None:
    assert unmanaged(VOLCANO_JOB, [Change(path, "x", "1", "2")], volcano_job()) is not None


def test_auto_patches_the_task_template_and_rollback_restores_it() -> None:
    objs = [volcano_job(), batch_job(), policy("vgpu", auto(), namespace=NS)]
    with WriteCluster(objs, crds=CRDS) as cluster:
        report = reconcile(cluster, job_rec())
        assert [(o.workload, o.status) for o in report.outcomes] == [(KEY, "applied")], report
        job = cluster.obj(VOLCANO_JOB, NS, NAME)
        assert task(job)["resources"] == {"limits": VGPU_NEW, "requests": VGPU_NEW}
        assert [t["replicas"] for t in job["spec"]["tasks"]] == [1, 2] and job["spec"]["minAvailable"] == 3
        record = json.loads(job["metadata"]["annotations"][LAST_CHANGE])
        assert record["workload"] == KEY and record["sets"][0]["kind"] == VOLCANO_JOB
        olds = {what: old for _, what, old, _new in record["sets"][0]["changes"]}
        assert olds["limits volcano.sh/vgpu-memory"] == "40960" and olds["requests volcano.sh/vgpu-cores"] == "50"
        assert cluster.obj("Job", NS, NAME) == batch_job()  # the batch/v1 Job of the same name: never touched
        events = [e for e in cluster.events(NS) if e["reason"] == "RightsizerApplied"]
        assert events and events[0]["involvedObject"]["apiVersion"] == "batch.volcano.sh/v1alpha1"
        assert events[0]["involvedObject"]["kind"] == "Job"

        again = reconcile(cluster, job_rec())  # as recommended now: nothing more, the cooldown not even asked
        assert [o.status for o in again.outcomes] == ["no-change"], again

        out = CliRunner().invoke(main, ["rollback", KEY, "--server", cluster.url])
        assert out.exit_code == 0, out.output
        back = cluster.obj(VOLCANO_JOB, NS, NAME)
        assert back["spec"] == volcano_job()["spec"]
        assert json.loads(back["metadata"]["annotations"][LAST_CHANGE])["status"] == "rolled-back"
        assert cluster.obj("Job", NS, NAME) == batch_job()


def test_pytorchjob_is_not_applied_with_a_reason() -> None:
    objs = [pytorch_job(), policy("vgpu", auto(), namespace=NS)]
    with WriteCluster(objs, crds=CRDS) as cluster:
        report = reconcile(cluster, job_rec("PyTorchJob", "bert", "spec.pytorchReplicaSpecs.Master.template, "
                                            "spec.pytorchReplicaSpecs.Worker.template"))
        [outcome] = report.outcomes
        assert outcome.status == "blocked" and "PyTorchJob" in outcome.message
        assert "spec.pytorchReplicaSpecs.Worker.template" in outcome.message
        assert cluster.obj("PyTorchJob", NS, "bert") == pytorch_job()


def test_a_batch_job_recommendation_is_never_applied() -> None:
    objs = [volcano_job(), batch_job(), policy("vgpu", auto(), namespace=NS)]
    with WriteCluster(objs, crds=CRDS) as cluster:
        report = reconcile(cluster, job_rec("Job", NAME, None))
        [outcome] = report.outcomes
        assert outcome.status == "blocked" and "Job" in outcome.message
        assert cluster.obj("Job", NS, NAME) == batch_job() and cluster.obj(VOLCANO_JOB, NS, NAME) == volcano_job()


def _forged(obj: dict[str, Any], path: str, key: bytes) -> dict[str, Any]:
    """``obj`` with a record (signed with ``key``) changing ``path`` from 1 to 2."""
    record = {"workload": KEY, "at": NOW.isoformat(), "sets": [{"kind": VOLCANO_JOB, "namespace": NS, "name": NAME,
                                                                 "changes": [[path, "x", "1", "2"]]}]}
    text = json.dumps(record)
    signature = Signer({"k": key}, "k").sign(subject_of(obj), text)
    out = json.loads(json.dumps(obj))
    out["metadata"]["annotations"] = {LAST_CHANGE: text, SIGNATURE: signature}
    return out


@pytest.mark.parametrize("path", ["/spec/tasks/1/replicas", "/spec/tasks/1/template/spec/containers/0/image"])
def test_a_record_naming_another_path_is_refused(path: str) -> None:
    obj = _forged(volcano_job(), path, b"0" * 32)
    with pytest.raises(rec.RecordError, match="not a field the controller manages"):
        rec.read_record(obj, Signer({"k": b"0" * 32}, "k"))
    ok = _forged(volcano_job(), "/spec/tasks/1/template/spec/containers/0/resources/limits/volcano.sh~1vgpu-memory",
                 b"0" * 32)
    assert rec.read_record(ok, Signer({"k": b"0" * 32}, "k")) is not None


def test_a_tenant_record_on_the_job_is_refused_in_auto() -> None:
    forged = volcano_job(annotations={LAST_CHANGE: json.dumps({
        "workload": KEY, "at": NOW.isoformat(), "sets": [{"kind": VOLCANO_JOB, "namespace": NS, "name": NAME,
                                                          "changes": [["/spec/tasks/1/replicas", "x", 2, 50]]}]}),
        SIGNATURE: "v1:forged"})
    with WriteCluster([forged, policy("vgpu", auto(), namespace=NS)], crds=CRDS) as cluster:
        report = reconcile(cluster, job_rec())
        [outcome] = report.outcomes
        assert outcome.status == "refused"
        assert cluster.obj(VOLCANO_JOB, NS, NAME)["spec"] == volcano_job()["spec"]


@pytest.mark.parametrize(("api_version", "kind", "selects"), [
    ("batch.volcano.sh/v1alpha1", "Job", VOLCANO_JOB),  # the Volcano Job, by its group
    ("batch/v1", "Job", "Job"),  # the batch/v1 Job of the same name, never the Volcano one
    (None, "Job", "Job"),
])
def test_a_workload_ref_names_a_volcano_job_by_its_group(api_version: str | None, kind: str, selects: str) -> None:
    ref = {"kind": kind, "name": "train", **({"apiVersion": api_version} if api_version else {})}
    policy = parse_policy({"metadata": {"namespace": "ml", "name": "p"},
                           "spec": {"target": {"workloadRef": ref}, "mode": "Auto"}})
    assert policy.spec is not None, policy.problem
    for key in (VOLCANO_JOB, "Job"):
        assert policy.selects(WorkloadRef("ml", key, "train"), {}) is (key == selects)


def test_a_workload_ref_whose_group_serves_no_such_kind_is_invalid() -> None:
    policy = parse_policy({"metadata": {"namespace": "ml", "name": "p"},
                           "spec": {"target": {"workloadRef": {"apiVersion": "kubeflow.org/v1", "kind": "Job",
                                                               "name": "train"}}, "mode": "Auto"}})
    assert policy.spec is None and "does not serve Job" in (policy.problem or "")
