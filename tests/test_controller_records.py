"""Change records a tenant cannot forge: whoever may edit a workload may write its annotations, so the
controller acts only on records it signed, for that very object, changing only fields it manages, and
undoes each change with every op guarded. Each attack ends in a refusal, a Warning Event and no write."""

from __future__ import annotations

import base64
import json
from datetime import timedelta
from typing import Any

import pytest
from click.testing import CliRunner

from recommender.cli.main import main
from recommender.controller.actuator import Actuator
from recommender.controller.changes import Change, ChangeSet, ObjectRef, apply_local, inverse, removed_parents, to_patch
from recommender.controller.loop import Controller
from recommender.controller.records import ChangeRecord, RecordedSet, record_annotations
from recommender.controller.signing import SIGNING_SECRET, Signer, StaticKeys, key_id, subject_of
from recommender.core.annotations import LAST_CHANGE, SIGNATURE
from tests import planfixture as pf
from tests.controllerfixture import KEY, NAME, NS, auto_spec, deployment, plan, policy, snapshot
from tests.kubefixture import container, manifest, template
from tests.kubewrite import WriteCluster

NOW = pf.END
KEY_BYTES = b"k" * 32
SIGNER = Signer({"current": KEY_BYTES})
MPS_ENV = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=20480M"}


def coredns() -> dict[str, Any]:
    tmpl = template({"k8s-app": "kube-dns"}, container("coredns", "registry.k8s.io/coredns/coredns:v1.11.1"))
    return manifest("Deployment", "kube-system", "coredns", {"replicas": 2, "template": tmpl})


def forged(workload: str, sets: list[dict[str, Any]], **over: Any) -> str:
    """A record as a hostile tenant writes it: a regression baseline no real service meets, watched for ever."""
    return json.dumps({"workload": workload, "at": (NOW - timedelta(minutes=5)).isoformat(), "policy": "llm/auto",
                       "sets": sets, "baseline": {"ttft_p95_s": 0.001}, "status": "applied",
                       "watch_until": (NOW + timedelta(days=365)).isoformat(), **over})


IMAGE_SWAP = {"kind": "Deployment", "namespace": "kube-system", "name": "coredns",
              "changes": [["/spec/template/spec/containers/0/image", "image", "evil/coredns:latest",
                           "registry.k8s.io/coredns/coredns:v1.11.1"]]}


def controller(cluster: WriteCluster, at: list[Any], **kw: Any) -> Controller:
    return Controller(cluster.kube(), lambda now, _: (plan(now=now), snapshot(now, 0.3, 0.3)), clock=lambda: at[0],
                      keys=StaticKeys(SIGNER), **kw)


def signed_on(obj: dict[str, Any], text: str, signer: Signer = SIGNER) -> dict[str, Any]:
    """``obj`` carrying ``text`` as its record, signed with ``signer`` for ``obj`` itself."""
    out = json.loads(json.dumps(obj))
    out["metadata"].setdefault("annotations", {}).update(
        {LAST_CHANGE: text, SIGNATURE: signer.sign(subject_of(obj), text)})
    return out


def refused(cluster: WriteCluster) -> list[dict[str, Any]]:
    return [e for e in cluster.events(NS) if e["reason"] == "RightsizerRecordRefused"]


@pytest.mark.parametrize("case", ["unsigned", "foreign signature", "edited after signing", "oversized"])
def test_a_forged_record_naming_another_object_is_refused_by_the_loop_and_by_rollback(case: str) -> None:
    """The attack of issue 37: a record on the tenant's Deployment that names kube-system/coredns and its
    image, with a baseline TTFT low enough that the next cycle sees a 'regression' and rolls it 'back'."""
    text = forged("kube-system/Deployment/coredns", [IMAGE_SWAP])
    victim = deployment(annotations={LAST_CHANGE: text})
    if case == "foreign signature":
        victim = signed_on(victim, text, Signer({"current": b"tenant-guessed-key-0000"}))
    elif case == "edited after signing":  # a genuine-looking signature over a harmless text, then the text swapped
        victim = signed_on(victim, forged(KEY, []))
        victim["metadata"]["annotations"][LAST_CHANGE] = text
    elif case == "oversized":
        victim = signed_on(victim, forged(KEY, [], reason="x" * 70_000))
    before_dns, before = coredns(), json.loads(json.dumps(victim))
    with WriteCluster([victim, coredns(), policy("auto", auto_spec(latencyObjectives={"ttftSeconds": 1.0}))]) as c:
        at = [NOW]
        ctl = controller(c, at)
        report = ctl.reconcile()
        assert [o.status for o in report.outcomes] == ["refused"]
        assert any("not acted on" in line for line in report.errors)
        (event,) = refused(c)
        assert event["type"] == "Warning" and event["involvedObject"]["name"] == NAME
        at[0] += timedelta(minutes=5)
        assert [o.status for o in ctl.reconcile().outcomes] == ["refused"] and len(refused(c)) == 1  # one Event
        out = CliRunner().invoke(main, ["rollback", KEY, "--server", c.url,
                                        "--signing-secret", f"gpu-rightsizer/{SIGNING_SECRET}"])
        assert out.exit_code == 2 and "error:" in out.output  # no Secret here: nothing to verify with
        assert c.obj("Deployment", "kube-system", "coredns") == before_dns
        assert c.obj("Deployment", NS, NAME) == before  # not one byte written


def test_rollback_cli_refuses_a_forged_record_with_the_real_key_at_hand() -> None:
    text = forged("kube-system/Deployment/coredns", [IMAGE_SWAP])
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SIGNING_SECRET, "namespace": "gpu-rightsizer"},
              "data": {"current": base64.b64encode(KEY_BYTES).decode()}}
    with WriteCluster([deployment(annotations={LAST_CHANGE: text}), coredns(), secret]) as c:
        out = CliRunner().invoke(main, ["rollback", KEY, "--server", c.url])
        assert out.exit_code == 2 and "refused" in out.output and "not signed" in out.output
        assert c.obj("Deployment", "kube-system", "coredns") == coredns()
        assert [e["type"] for e in refused(c)] == ["Warning"]


@pytest.mark.parametrize(("workload", "sets", "why"), [
    ("kube-system/Deployment/coredns", [IMAGE_SWAP], f"not of {KEY}"),
    (KEY, [{**IMAGE_SWAP, "namespace": NS, "name": NAME}], "containers/0/image on a Deployment is not a field"),
    (KEY, [{"kind": "Deployment", "namespace": NS, "name": NAME, "changes": [
        ["/spec/template/spec/serviceAccountName", "sa", "cluster-admin", None]]}], "serviceAccountName"),
    (KEY, [{"kind": "Deployment", "namespace": NS, "name": NAME, "changes": [  # the unguarded-add attack
        ["/spec/template/spec/volumes", "volumes", [{"name": "host", "hostPath": {"path": "/"}}], None]]}],
     "volumes on a Deployment"),
    (KEY, [{"kind": "Deployment", "namespace": NS, "name": NAME, "changes": [
        ["/spec/template/spec/containers/0/env/0", "env", {"name": "LD_PRELOAD", "value": "/x.so"}, None]]}],
     "env/0 on a Deployment"),
    (KEY, [{"kind": "Secret", "namespace": NS, "name": "db", "changes": [["/data/p", "p", "a", "b"]]}],
     "only the workload and its autoscaler"),
])
def test_even_a_validly_signed_record_only_ever_touches_managed_fields_of_its_own_workload(
        workload: str, sets: list[dict[str, Any]], why: str) -> None:
    """Defence in depth (a leaked key, a bug): a signed record outside the allow-list is refused too."""
    victim = signed_on(deployment(), forged(workload, sets))
    with WriteCluster([victim, coredns()]) as c:
        out = Actuator(c.kube(), signer=SIGNER).rollback(ObjectRef("Deployment", NS, NAME), NOW, "test")
        assert out.status == "refused" and why in out.message, out.message
        assert c.obj("Deployment", NS, NAME) == victim and c.obj("Deployment", "kube-system", "coredns") == coredns()
        assert len(refused(c)) == 1


def test_a_record_copied_from_another_workload_does_not_verify() -> None:
    with WriteCluster([deployment(), deployment("other"), policy("auto", auto_spec())]) as c:
        assert [o.status for o in controller(c, [NOW]).reconcile().outcomes] == ["applied"]
        genuine = c.obj("Deployment", NS, NAME)["metadata"]["annotations"]
        copied = {k: genuine[k] for k in (LAST_CHANGE, SIGNATURE)}
        c.edit("Deployment", NS, "other", {"metadata": {"annotations": copied}})
        before = c.obj("Deployment", NS, "other")
        out = Actuator(c.kube(), signer=SIGNER).rollback(ObjectRef("Deployment", NS, "other"), NOW, "test")
        assert out.status == "refused" and "copied from another object" in out.message
        assert c.obj("Deployment", NS, "other") == before


def test_a_rotated_key_refuses_old_records_until_the_old_key_is_kept_beside_it() -> None:
    with WriteCluster([deployment(), policy("auto", auto_spec())]) as c:
        assert [o.status for o in controller(c, [NOW]).reconcile().outcomes] == ["applied"]
        ref = ObjectRef("Deployment", NS, NAME)
        rotated = Signer({"current": b"n" * 32})
        assert Actuator(c.kube(), signer=rotated).rollback(ref, NOW, "t").status == "refused"
        assert c.obj("Deployment", NS, NAME)["spec"]["replicas"] == 3  # still as applied
        kept = Signer({"current": b"n" * 32, "previous": KEY_BYTES})
        out = Actuator(c.kube(), signer=kept).rollback(ref, NOW, "t")
        assert out.status == "rolled-back" and c.obj("Deployment", NS, NAME)["spec"]["replicas"] == 2
        sig = c.obj("Deployment", NS, NAME)["metadata"]["annotations"][SIGNATURE]
        assert sig.startswith(f"hmac-sha256:{key_id(b'n' * 32)}:")  # the rollback's record: signed with the new key


def test_without_a_signing_key_auto_writes_nothing_and_says_so_once_a_cycle() -> None:
    with WriteCluster([deployment(), policy("auto", auto_spec())]) as c:
        c.fail("POST", "/secrets$", 403)
        ctl = Controller(c.kube(), lambda now, _: (plan(now=now), snapshot(now, 0.3, 0.3)), clock=lambda: NOW)
        report = ctl.reconcile()
        assert [o.status for o in report.outcomes] == ["failed"] and "never written without its signed record" \
            in report.outcomes[0].message
        assert any(line.startswith("Auto changes and rollbacks are off this cycle: signing Secret") for line in
                   report.errors)
        assert c.obj("Deployment", NS, NAME) == deployment()


def test_the_controller_makes_its_key_once_and_never_echoes_it() -> None:
    with WriteCluster([deployment(), policy("auto", auto_spec())]) as c:
        report = Controller(c.kube(), lambda now, _: (plan(now=now), snapshot(now, 0.3, 0.3)),
                            clock=lambda: NOW).reconcile()
        assert [o.status for o in report.outcomes] == ["applied"]
        data = c.obj("Secret", "gpu-rightsizer", SIGNING_SECRET)["data"]
        key = base64.b64decode(data["current"])
        assert len(key) == 32
        shown = json.dumps([vars(o) | {"obj": None, "record": None} for o in report.outcomes]) + repr(report)
        assert data["current"] not in shown and key.hex() not in shown and repr(Signer({"current": key})).find(
            data["current"]) < 0


# --- every undo op is guarded ------------------------------------------------------------------------

def mps_deployment() -> dict[str, Any]:
    tmpl = template({"app": NAME}, container("vllm", "vllm/vllm-openai:v0.6.3", {"nvidia.com/gpu.shared": "1"},
                                             env=MPS_ENV))
    return manifest("Deployment", NS, NAME, {"replicas": 1, "template": tmpl})


def test_an_undo_that_adds_back_what_the_change_removed_tests_the_parent_first() -> None:
    """The unguarded-add defect: the controller removed the MPS env entries; their undo is an ``add``, which
    JSON patch cannot guard by value, so it tests the list as the change left it."""
    obj = mps_deployment()
    base = "/spec/template/spec/containers/0"
    cs = ChangeSet(ObjectRef("Deployment", NS, NAME), (
        Change(f"{base}/env/1", "env", {"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": "0=20480M"}, None),
        Change(f"{base}/env/0", "env", {"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "25"}, None)))
    after = removed_parents(obj, cs)
    assert after == [(f"{base}/env", [])]
    ops = to_patch(inverse(cs, after))
    adds = [o for o in ops if o["op"] == "add"]
    tested = {o["path"] for o in ops if o["op"] == "test"}
    assert adds and all(o["path"].rsplit("/", 1)[0] in tested or o["path"] in tested for o in adds)
    changed = apply_local(obj, cs)
    assert apply_local(changed, inverse(cs, after)) == obj  # the undo is exact
    tampered = json.loads(json.dumps(changed))
    tampered["spec"]["template"]["spec"]["containers"][0]["env"] = [{"name": "LD_PRELOAD", "value": "/x.so"}]
    with pytest.raises(Exception, match="test"):  # jsonpatch's failed test: a real server answers 422
        apply_local(tampered, inverse(cs, after))


def test_a_signed_record_of_a_removal_is_undone_only_while_nobody_touched_the_parent() -> None:
    base = "/spec/template/spec/containers/0"
    obj = mps_deployment()
    cs = ChangeSet(ObjectRef("Deployment", NS, NAME), (
        Change(f"{base}/env/1", "env", {"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": "0=20480M"}, None),))
    changed = apply_local(obj, cs)
    record = ChangeRecord(workload=KEY, at=NOW, sets=[RecordedSet.of(cs, removed_parents(obj, cs))])
    changed["metadata"]["annotations"] = record_annotations(changed, record, SIGNER)
    changed["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "EXTRA", "value": "tenant's"})
    with WriteCluster([changed]) as c:
        out = Actuator(c.kube(), signer=SIGNER).rollback(ObjectRef("Deployment", NS, NAME), NOW, "test")
        assert out.status == "conflict"
        assert c.obj("Deployment", NS, NAME) == changed
