"""The admission policy on Volcano Jobs: the controller's own task-template vGPU change and its rollback pass
(from ``plan_changes`` / ``inverse`` on a realistic job), and every other edit of a job is refused."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import jsonpatch
import pytest

from recommender.controller.changes import desired_from, inverse, plan_changes, to_patch
from recommender.core.resources import VOLCANO_JOB
from tests import vap
from tests.test_admission_allowed import _record_ops
from tests.test_controller_volcano import job_rec, volcano_job


def _job() -> dict[str, Any]:
    """The two-task job with what a real one carries: server metadata, policies, a volume, a sidecar."""
    obj = volcano_job()
    obj["metadata"] |= {"generation": 3, "resourceVersion": "77", "creationTimestamp": "2026-01-01T00:00:00Z"}
    obj["spec"] |= {"queue": "ml", "policies": [{"event": "PodEvicted", "action": "RestartJob"}]}
    worker = obj["spec"]["tasks"][1]["template"]["spec"]
    worker |= {"volumes": [{"name": "data", "emptyDir": {}}], "serviceAccountName": "trainer"}
    worker["containers"].append({"name": "logs", "image": "fluent/fluent-bit",
                                 "resources": {"limits": {"cpu": "1"}}})
    return obj


def _patched(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    return vap.served(obj, jsonpatch.apply_patch(copy.deepcopy(obj), ops))


def test_the_vgpu_change_and_its_rollback_are_allowed() -> None:
    obj = _job()
    cs = plan_changes(obj, desired_from(job_rec(), ["volcano-vgpu"]))
    assert not cs.empty
    after = _patched(obj, to_patch(cs, "77", _record_ops(obj)))
    verdict = vap.update(VOLCANO_JOB, obj, after)
    assert verdict.matched == ["gpu-rightsizer-volcano-jobs"] and verdict.allowed, verdict
    back = _patched(after, to_patch(inverse(cs), None, _record_ops(after)))
    assert vap.update(VOLCANO_JOB, after, back).allowed


def _worker(o: dict[str, Any]) -> dict[str, Any]:
    return dict(o["spec"]["tasks"][1]["template"]["spec"])


EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "task replicas": lambda o: o["spec"]["tasks"][1].update(replicas=50),
    "minAvailable": lambda o: o["spec"].update(minAvailable=1),
    "queue": lambda o: o["spec"].update(queue="prod"),
    "image": lambda o: _worker(o)["containers"][0].update(image="evil/image"),
    "cpu limit": lambda o: _worker(o)["containers"][0]["resources"]["limits"].update(cpu="64"),
    "sidecar memory": lambda o: _worker(o)["containers"][1]["resources"]["limits"].update(memory="1Ti"),
    "service account": lambda o: o["spec"]["tasks"][1]["template"]["spec"].update(serviceAccountName="admin"),
    "hostNetwork": lambda o: o["spec"]["tasks"][1]["template"]["spec"].update(hostNetwork=True),
    "a task removed": lambda o: o["spec"]["tasks"].pop(0),
    "tasks reordered": lambda o: o["spec"]["tasks"].reverse(),
    "a container added": lambda o: o["spec"]["tasks"][0]["template"]["spec"]["containers"].append(
        {"name": "x", "image": "evil"}),
    "pod labels": lambda o: o["spec"]["tasks"][1]["template"]["metadata"].update(labels={"app": "other"}),
    "job label": lambda o: o["metadata"]["labels"].update(team="other"),
    "user annotation": lambda o: o["metadata"].setdefault("annotations", {}).update({"rightsizer.io/mode": "Auto"}),
}


@pytest.mark.parametrize("case", EDITS, ids=str)
def test_a_job_edit_outside_the_task_gpu_resources_is_refused(case: str) -> None:
    obj = _job()
    edited = copy.deepcopy(obj)
    EDITS[case](edited)
    assert edited != obj
    verdict = vap.update(VOLCANO_JOB, obj, vap.served(obj, edited))
    assert not verdict.allowed, (case, verdict)


def test_it_never_creates_or_deletes_a_job() -> None:
    assert not vap.write("CREATE", VOLCANO_JOB, None, _job()).allowed
    assert not vap.write("DELETE", VOLCANO_JOB, _job(), None).allowed
