"""Table-driven tests of the pure pod-spec parsing: no server, arithmetic beside each number."""

from __future__ import annotations

from typing import Any

import pytest

from collectors.kubernetes.parse import (
    container_argv,
    parse_max_model_len,
    parse_mps_mem_limit_mib,
    parse_pod_spec,
    pod_resources,
    with_node,
)
from recommender.core.inventory import Sharing, VllmArgs


def spec(*containers: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"containers": list(containers), **extra}


def ctr(limits: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    return {"name": kw.pop("name", "main"), "image": kw.pop("image", "busybox"),
            "resources": {"limits": limits or {}}, **kw}


def env(**values: str) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in values.items()]


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("0=10G", 10_240.0),  # 10 × 1024 MiB
        ("0=1G,1=512MB", 1_024.0),  # largest of 1024 and 512 MiB
        ("0=512M", 512.0),
        ("0=2048K", 2.0),  # 2048 / 1024 MiB
        ("0=1T", 1_048_576.0),  # 1024 × 1024 MiB
        ("0=1.5g", 1_536.0),  # lower case accepted: 1.5 × 1024
        ("8G", 8_192.0),  # no device index: applies to every device
        ("0=1073741824", 1_024.0),  # no unit: bytes, 2^30 B = 1024 MiB
        ("GPU-5f8c=4G", 4_096.0),  # a device UUID instead of an index
    ],
)
def test_mps_pinned_memory_limit_to_mib(text: str, mib: float) -> None:
    assert parse_mps_mem_limit_mib(text, []) == pytest.approx(mib)


def test_mps_limit_garbage_is_a_note_not_an_exception() -> None:
    notes: list[str] = []
    assert parse_mps_mem_limit_mib("0=lots", notes) is None
    assert notes == ["could not parse CUDA_MPS_PINNED_DEVICE_MEM_LIMIT entry '0=lots'"]


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("8192", 8192),
        ("1k", 1000),  # decimal: 1 × 1000
        ("1K", 1024),  # binary: 1 × 1024
        ("32k", 32_000),
        ("32K", 32_768),  # 32 × 1024
        ("1m", 1_000_000),
        ("1M", 1_048_576),  # 1024²
        ("25.6k", 25_600),
        ("-1", None),  # "as long as fits": only vLLM knows
        ("auto", None),
    ],
)
def test_max_model_len_suffixes(text: str, tokens: int | None) -> None:
    assert parse_max_model_len(text) == tokens


@pytest.mark.parametrize("text", ["", "8x", "k", "0", "1,024"])
def test_max_model_len_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_max_model_len(text)


VLLM_IMAGE = "vllm/vllm-openai:v0.8.5"


@pytest.mark.parametrize(
    ("container", "expected", "served"),
    [
        (  # vllm serve with the model positional, mixed --flag value / --flag=value
            ctr(image=VLLM_IMAGE, command=["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"],
                args=["--gpu-memory-utilization", "0.85", "--max-model-len=8k", "--max-num-seqs", "128"]),
            VllmArgs("meta-llama/Llama-3.1-8B-Instruct", 0.85, 8000, 128, 1), "meta-llama/Llama-3.1-8B-Instruct",
        ),
        (  # the image's own ENTRYPOINT (vllm serve): args only; served name wins over the model
            ctr(image=VLLM_IMAGE, args=["Qwen/Qwen2.5-7B-Instruct", "--served-model-name", "qwen", "qwen-7b",
                                        "-tp", "2", "--max-model-len", "32K"]),
            VllmArgs("Qwen/Qwen2.5-7B-Instruct", None, 32_768, None, 2), "qwen",
        ),
        (  # the OpenAI api_server module with --model, inside sh -c, escaped newlines and $(ENV)
            ctr(image="my-registry/llm:1", command=["/bin/sh", "-c"],
                args=["pip list >/dev/null && exec python3 -m vllm.entrypoints.openai.api_server \\\n"
                      " --model $(MODEL) --tensor-parallel-size=4 --max-model-len ${MAX_LEN} && echo done"],
                env=env(MODEL="mistralai/Mistral-7B-Instruct-v0.3", MAX_LEN="16384")),
            VllmArgs("mistralai/Mistral-7B-Instruct-v0.3", None, 16_384, None, 4),
            "mistralai/Mistral-7B-Instruct-v0.3",
        ),
        (  # underscores are accepted by vLLM's parser too; -1 means "as long as fits"
            ctr(image=VLLM_IMAGE, command=["vllm", "serve"],
                args=["--model", "m", "--gpu_memory_utilization", "0.5", "--max-model-len", "-1"]),
            VllmArgs("m", 0.5, None, None, 1), "m",
        ),
    ],
)
def test_vllm_args(container: dict[str, Any], expected: VllmArgs, served: str) -> None:
    parsed = parse_pod_spec(spec(container), {})
    assert parsed.allocation.vllm == expected
    assert parsed.served_model == served
    assert parsed.notes == ()


def test_vllm_bad_values_become_notes() -> None:
    bad = ctr(image=VLLM_IMAGE, args=["m", "--gpu-memory-utilization=abc", "--max-model-len", "8x",
                                      "--max-num-seqs", "0", "--tensor-parallel-size"])
    parsed = parse_pod_spec(spec(bad), {})
    assert parsed.allocation.vllm == VllmArgs("m", None, None, None, 1)
    assert parsed.notes == (
        "could not parse --gpu-memory-utilization=abc",
        "could not parse --max-model-len=8x",
        "could not parse --max-num-seqs=0",
        "could not parse --tensor-parallel-size=",
    )


def test_not_vllm() -> None:
    assert parse_pod_spec(spec(ctr(image="nvcr.io/nvidia/tritonserver:24.08-py3", args=["--model-repo", "/m"])),
                          {}).allocation.vllm is None


def test_shell_argv_is_split_like_a_shell() -> None:
    c = ctr(command=["bash", "-ec", "vllm serve 'my model' --port 8000"])
    assert container_argv(c) == ["vllm", "serve", "my model", "--port", "8000"]


@pytest.mark.parametrize(
    ("pod_spec", "annotations", "want"),
    [
        (spec(ctr({"nvidia.com/gpu": "2"})), {}, {"sharing": Sharing.EXCLUSIVE, "gpus": 2}),
        (  # two GPU containers add up: 1 + 2
            spec(ctr({"nvidia.com/gpu": 1}, name="a"), ctr({"nvidia.com/gpu": 2}, name="b")), {},
            {"sharing": Sharing.EXCLUSIVE, "gpus": 3},
        ),
        (spec(ctr({"nvidia.com/gpu.shared": "1"})), {}, {"sharing": Sharing.TIME_SLICING, "gpus": 1}),
        (spec(ctr({"nvidia.com/mig-3g.40gb": "1"})), {},
         {"sharing": Sharing.MIG, "mig_profile": "3g.40gb", "mig_count": 1, "gpus": 0}),
        (spec(ctr({"nvidia.com/mig-1g.10gb.me": "2"})), {},  # the plugin writes + as .
         {"sharing": Sharing.MIG, "mig_profile": "1g.10gb+me", "mig_count": 2}),
        (
            spec(ctr({"nvidia.com/gpu": "1"}, env=env(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="25",
                                                       CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=10G"))), {},
            {"sharing": Sharing.MPS, "gpus": 1, "mps_active_thread_pct": 25.0, "mps_pinned_mem_mib": 10_240.0},
        ),
        (
            spec(ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000", "nvidia.com/gpucores": "30"})), {},
            {"sharing": Sharing.HAMI, "gpus": 1, "hami_gpumem_mib": 20_000.0, "hami_gpucores_pct": 30.0},
        ),
        (spec(ctr()), {"gpu-fraction": "0.5"}, {"sharing": Sharing.KAI, "kai_gpu_fraction": 0.5, "gpus": 1}),
        (spec(ctr({"cpu": "4", "memory": "16Gi"})), {}, {"sharing": Sharing.NONE, "gpus": 0}),
        (  # an init container that needs 2 GPUs alone: the pod holds max(1, 2) = 2
            spec(ctr({"nvidia.com/gpu": "1"}), initContainers=[ctr({"nvidia.com/gpu": "2"}, name="warm")]), {},
            {"sharing": Sharing.EXCLUSIVE, "gpus": 2},
        ),
        (  # a sidecar (restartPolicy Always) runs beside the app: 1 + 1 = 2
            spec(ctr({"nvidia.com/gpu": "1"}),
                 initContainers=[ctr({"nvidia.com/gpu": "1"}, name="side", restartPolicy="Always")]), {},
            {"sharing": Sharing.EXCLUSIVE, "gpus": 2},
        ),
        (  # an init container without GPUs changes nothing
            spec(ctr({"nvidia.com/gpu": "1"}), initContainers=[ctr({"cpu": "1"}, name="fetch")]), {},
            {"sharing": Sharing.EXCLUSIVE, "gpus": 1},
        ),
    ],
)
def test_sharing_from_spec(pod_spec: dict[str, Any], annotations: dict[str, str], want: dict[str, Any]) -> None:
    alloc = parse_pod_spec(pod_spec, annotations).allocation
    assert {k: getattr(alloc, k) for k in want} == want


def test_requests_alone_count_when_no_limits() -> None:
    c = {"name": "main", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
    assert pod_resources(spec(c), []) == {"nvidia.com/gpu": 1.0}


def test_bad_quantity_is_a_note() -> None:
    parsed = parse_pod_spec(spec(ctr({"nvidia.com/gpu": "one"})), {})
    assert parsed.allocation.sharing is Sharing.NONE
    assert parsed.notes == ("could not parse nvidia.com/gpu=one in container main",)


def test_replicas_pass_through() -> None:
    assert parse_pod_spec(spec(ctr({"nvidia.com/gpu": "1"})), {}, replicas=0).allocation.replicas == 0


A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.count": "8"}


@pytest.mark.parametrize(
    ("resources", "labels", "want"),
    [
        ({"nvidia.com/gpu": "1"}, A100,
         {"sharing": Sharing.EXCLUSIVE, "gpu_product": "NVIDIA-A100-SXM4-80GB", "device_memory_mib": 81_920.0}),
        (  # time-slicing: gpu.replicas is per GPU (8 GPUs × 4 replicas → capacity 32, label "4")
            {"nvidia.com/gpu": "1"}, {**A100, "nvidia.com/gpu.replicas": "4"}, {"sharing": Sharing.TIME_SLICING},
        ),
        ({"nvidia.com/gpu": "1"}, {**A100, "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none"},
         {"sharing": Sharing.EXCLUSIVE}),
        ({"nvidia.com/gpu": "1"}, {**A100, "nvidia.com/gpu.sharing-strategy": "time-slicing"},
         {"sharing": Sharing.TIME_SLICING}),
        ({"nvidia.com/gpu": "1"}, {**A100, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-SHARED"},
         {"sharing": Sharing.TIME_SLICING, "gpu_product": "NVIDIA-A100-SXM4-80GB-SHARED"}),
        (  # device plugin MPS: 4 replicas per GPU → 100 // 4 = 25 %, 81920 // 4 = 20480 MiB
            {"nvidia.com/gpu": "1"},
            {**A100, "nvidia.com/gpu.sharing-strategy": "mps", "nvidia.com/gpu.replicas": "4"},
            {"sharing": Sharing.MPS, "mps_active_thread_pct": 25, "mps_pinned_mem_mib": 20_480.0},
        ),
        (  # MIG single: the plugin hands out slices as nvidia.com/gpu; GFD rewrites product and memory
            {"nvidia.com/gpu": "2"},
            {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "nvidia.com/gpu.memory": "4864",
             "nvidia.com/mig.strategy": "single"},
            {"sharing": Sharing.MIG, "mig_profile": "1g.5gb", "mig_count": 2, "gpus": 0,
             "device_memory_mib": 4_864.0},
        ),
        (  # MIG single with a +me profile: GFD drops the "+" from the product name
            {"nvidia.com/gpu": "1"},
            {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gbme", "nvidia.com/mig.strategy": "single"},
            {"sharing": Sharing.MIG, "mig_profile": "1g.10gb+me", "mig_count": 1},
        ),
        (  # MIG mixed: the slice's own memory label, not the whole GPU's
            {"nvidia.com/mig-3g.40gb": "1"},
            {**A100, "nvidia.com/mig.strategy": "mixed", "nvidia.com/mig-3g.40gb.memory": "40192"},
            {"sharing": Sharing.MIG, "device_memory_mib": 40_192.0, "gpu_product": "NVIDIA-A100-SXM4-80GB"},
        ),
        (  # HAMi percentage: 25 % of 81920 MiB = 20480 MiB
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25"}, A100,
            {"sharing": Sharing.HAMI, "hami_gpumem_mib": 20_480.0},
        ),
        ({"nvidia.com/gpu": "1"}, {}, {"sharing": Sharing.EXCLUSIVE, "gpu_product": None}),
    ],
)
def test_with_node(resources: dict[str, str], labels: dict[str, str], want: dict[str, Any]) -> None:
    alloc = with_node(parse_pod_spec(spec(ctr(resources)), {}), labels).allocation
    assert {k: getattr(alloc, k) for k in want} == want


def test_kai_gpu_memory_becomes_a_fraction_on_a_known_device() -> None:
    parsed = with_node(parse_pod_spec(spec(ctr()), {"gpu-memory": "20480"}), A100)
    assert parsed.allocation.kai_gpu_fraction == 0.25  # 20480 / 81920
    assert parsed.allocation.sharing is Sharing.KAI


@pytest.mark.parametrize("mib", ["-5", "0"])
def test_a_kai_gpu_memory_no_pod_asks_for_is_a_note_not_a_negative_fraction(mib: str) -> None:
    """The tenant writes ``gpu-memory``: a negative fraction stopped the JSON report (its schema holds shares ≥ 0)."""
    parsed = with_node(parse_pod_spec(spec(ctr()), {"gpu-memory": mib}), A100)
    assert parsed.allocation.sharing is Sharing.KAI and parsed.allocation.kai_gpu_fraction is None
    assert f"KAI gpu-memory={float(mib):g} MiB is not a memory size: ignored" in parsed.notes, parsed.notes


def test_selected_product_from_selector_or_affinity() -> None:
    by_selector = spec(ctr({"nvidia.com/gpu": "1"}), nodeSelector={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    term = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                  "values": ["NVIDIA-L40S", "NVIDIA-L4"]}]}
    by_affinity = spec(ctr({"nvidia.com/gpu": "1"}), affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}})
    assert parse_pod_spec(by_selector, {}).selected_product == "NVIDIA-H100-80GB-HBM3"
    parsed = parse_pod_spec(by_affinity, {})
    assert parsed.selected_product == "NVIDIA-L40S"
    assert parsed.notes == ("node affinity allows GPU products NVIDIA-L40S, NVIDIA-L4; assumed NVIDIA-L40S",)


def test_magnitudes_no_engine_runs_with_become_notes_never_an_error() -> None:
    """A tenant writes its container's args: numbers too long to convert, or larger than any engine runs with
    (2^32 tokens of context or sequences, 2^16 GPUs of tensor parallelism), are notes, echoed in 40 characters."""
    huge = "9" * 400
    bad = ctr(image=VLLM_IMAGE, args=["m", "--max-model-len", huge, "--max-num-seqs", "9" * 5000,
                                      "--tensor-parallel-size", "70000", "--gpu-memory-utilization", "nan"])
    parsed = parse_pod_spec(spec(bad), {})
    assert parsed.allocation.vllm == VllmArgs("m", None, None, None, 1)
    assert parsed.notes == (
        "could not parse --gpu-memory-utilization=nan",
        f"could not parse --max-model-len={huge[:40]}…",
        f"could not parse --max-num-seqs={'9' * 40}…",
        "could not parse --tensor-parallel-size=70000",
    )
    with pytest.raises(ValueError):
        parse_max_model_len("99999999999999999999T")  # 1.1e32 tokens
    assert parse_max_model_len("10M") == 10 * 2**20  # a long context is still one


@pytest.mark.parametrize("quantity", ["1e400", "NaN", "Infinity", "1e300", "-1", "4096"])
def test_a_gpu_count_no_pod_holds_is_a_note_never_an_error(quantity: str) -> None:
    """A count a pod cannot hold (not finite, negative, beyond any node: more than 1,024 devices) is read as no
    device, with a note, not converted into an integer that overflows or counts 10^300 GPUs into the fleet."""
    parsed = parse_pod_spec(spec(ctr({"nvidia.com/gpu": quantity})), {})
    assert parsed.allocation.gpus == 0 and parsed.allocation.sharing is Sharing.NONE
    (note,) = parsed.notes
    assert note.startswith("nvidia.com/gpu=") and note.endswith("is not a device count from 0 to 1,024: ignored")


@pytest.mark.parametrize("pct", ["250", "-5", "1e300"])
def test_an_mps_thread_percentage_outside_0_to_100_is_a_note(pct: str) -> None:
    parsed = parse_pod_spec(spec(ctr({"nvidia.com/gpu": "1"}, env=env(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=pct))), {})
    assert parsed.allocation.sharing is Sharing.MPS and parsed.allocation.mps_active_thread_pct is None
    said = f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={float(pct):g} is not a percentage from 0 to 100: ignored"
    assert said in parsed.notes


@pytest.mark.parametrize("resource", ["nvidia.com/mig-3g.40gb", "nvidia.com/gpu.shared"])
def test_a_slice_count_no_pod_holds_is_no_share(resource: str) -> None:
    """10^400 MIG slices or time-sliced replicas: a note and no share, not a MIG share of 0 slices."""
    parsed = parse_pod_spec(spec(ctr({resource: "1e400"})), {})
    assert parsed.allocation.sharing is Sharing.NONE, parsed.allocation
    assert parsed.notes == (f"{resource}=inf is not a device count from 0 to 1,024: ignored",)


@pytest.mark.parametrize(("resource", "value"), [
    ("nvidia.com/gpucores", "500"),  # a valid extended resource the API accepts: the JSON report stopped on it
    ("nvidia.com/gpucores", "1e300"),
    ("nvidia.com/gpumem", "1e400"),
    ("nvidia.com/gpumem-percentage", "250"),
    ("volcano.sh/vgpu-memory", "1e400"),  # Volcano's own check took any positive size, infinity too
])
def test_a_shared_limit_no_device_has_is_a_note_and_no_limit(resource: str, value: str) -> None:
    volcano = resource.startswith("volcano.sh/")
    asked = {"volcano.sh/vgpu-number": "1"} if volcano else {"nvidia.com/gpu": "1"}
    parsed = parse_pod_spec(spec(ctr({**asked, resource: value}), schedulerName="volcano" if volcano else None), {})
    a = parsed.allocation
    assert (a.hami_gpucores_pct, a.hami_gpumem_mib, a.volcano_vgpu_memory_mib) == (None, None, None), a
    assert a.sharing is (Sharing.VOLCANO if volcano else Sharing.HAMI)
    (note,) = parsed.notes
    assert note.startswith(f"{resource}=") and (note.endswith(": ignored") or note.endswith("; ignored")), note
