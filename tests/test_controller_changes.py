"""Pure change planning: every change has an exact inverse, and guards cover what is about to change."""

from __future__ import annotations

import jsonpatch
import pytest

from recommender.controller.changes import Desired, apply_local, inverse, plan_changes, to_patch
from recommender.core.inventory import Allocation, Sharing
from recommender.mechanisms import MECHANISMS
from recommender.mechanisms.mig import MigShare
from recommender.mechanisms.mps import MpsShare
from tests.controllerfixture import deployment
from tests.kubefixture import container, manifest, template


def mps_deployment() -> dict:
    c = container("worker", "cuda-app:1", {"nvidia.com/gpu": "1"}, env={"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50"})
    return manifest("Deployment", "ml", "w", {"replicas": 1, "template": template({"app": "w"}, c)})


# the pod edits of an MPS share (30 %, 20480 MiB) and of a 1g.10gb+me slice, from their mechanisms
MPS_30 = MECHANISMS.get("mps").pod_edits(Allocation(Sharing.MPS, 1, share=MpsShare(30.0, 20480.0)))
MIG_1G = MECHANISMS.get("mig").pod_edits(Allocation(Sharing.MIG, share=MigShare("1g.10gb+me")))


@pytest.mark.parametrize(("obj", "desired", "expect"), [
    (deployment(args=["--model", "m", "--gpu-memory-utilization=0.9"]), Desired(gpu_memory_utilization=0.5,
     max_num_seqs=64), {"args": ["--model", "m", "--gpu-memory-utilization=0.5", "--max-num-seqs=64"]}),
    (mps_deployment(), Desired(edits=MPS_30),
     {"env": [{"name": "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "value": "30"},
              {"name": "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "value": "0=20480M"}]}),
    (deployment(), Desired(edits=MIG_1G),
     {"resources": {"limits": {"nvidia.com/mig-1g.10gb.me": "1"}, "requests": {"nvidia.com/mig-1g.10gb.me": "1"}}}),
])
def test_changes_apply_and_invert_exactly(obj: dict, desired: Desired, expect: dict) -> None:
    cs = plan_changes(obj, desired)
    changed = apply_local(obj, cs)
    c = changed["spec"]["template"]["spec"]["containers"][0]
    assert {k: c[k] for k in expect} == expect
    assert apply_local(changed, inverse(cs)) == obj


def test_guards_reject_a_patch_when_the_value_moved() -> None:
    obj = deployment()
    cs = plan_changes(obj, Desired(replicas=3, gpu_memory_utilization=0.8))
    moved = {**obj, "spec": {**obj["spec"], "replicas": 5}}
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(moved, to_patch(cs))
    assert to_patch(cs, "42")[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "42"}


def test_what_cannot_be_changed_safely_is_skipped_with_a_reason() -> None:
    shell = container("vllm", "vllm/vllm-openai", {"nvidia.com/gpu": "1"}, command=["sh", "-c"],
                      args=["vllm serve m --gpu-memory-utilization 0.9"])
    obj = manifest("Deployment", "llm", "s", {"replicas": 1, "template": template({}, shell)})
    cs = plan_changes(obj, Desired(gpu_memory_utilization=0.5))
    assert cs.empty and "shell command string" in cs.skipped[0]
    job = manifest("Job", "b", "j", {"template": template({}, shell)})
    assert "not actuated" in plan_changes(job, Desired(replicas=2)).skipped[0]
