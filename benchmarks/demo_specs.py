"""What the demo cluster holds: its GPUs, its models and one spec per workload (what it runs, on what, fed by
which public trace), and the window it covers. Read by build_demo.py.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from recommender.core.inventory import Sharing

MIG_3G = ("3g.40gb", 40192, 3 / 7, 0.5)  # profile, usable MiB (catalogue), SM share, gpu-equivalents max(4/8, 3/7)

# -- Window: 14 days at 10 minutes, stamped at each step's end (as a Prometheus range query is). --------
END = datetime(2026, 11, 1, tzinfo=UTC)


STEP_S = 600  # ServeGen's own window


STEPS = 2016  # 14 days


SEED = 20261101


SCENARIO = "demo.gpu-rightsizer.io/scenario"  # annotation saying what each workload is there to show


@dataclass(frozen=True)
class Gpu:
    product: str  # DCGM modelName / GFD nvidia.com/gpu.product
    model: str | None  # canonical catalogue key; None = not in the catalogue
    memory_mib: float  # FB_USED + FB_FREE of the whole device
    speed: float  # serving throughput relative to one H100 SXM (A100: ~0.55 by FLOPs and bandwidth)
    idle_w: float
    max_w: float
    dcp_sm_active: bool  # DCGM_FI_PROF_SM_ACTIVE enabled on this node pool


GPUS = {
    "A100": Gpu("NVIDIA A100-SXM4-80GB", "A100-80GB", 81920, 0.55, 60, 400, False),
    "H100": Gpu("NVIDIA H100 80GB HBM3", "H100-80GB", 81559, 1.0, 75, 700, True),
    "FOO": Gpu("NVIDIA Foo-9000", None, 49152, 0.45, 40, 300, False),  # a product the catalogue lacks
}


@dataclass(frozen=True)
class Llm:
    hf_id: str
    weights_gib: float  # bf16 weights (policies/data/models.yaml)
    kv_bytes_per_token: int  # 2 (K,V) x layers x KV heads x head dim x 2 bytes, whole model (TP splits it)
    activation_gib: float  # vLLM's profiled activation peak per GPU
    prefill_tok_s: float  # prompt tokens/s at full activity on one H100 (70B: on its TP pair)
    decode_tok_s: float  # generated tokens/s at full batch on one H100 (70B: on its TP pair)
    tpot_s: float  # time per output token at batch 1 on one H100 (weights / HBM bandwidth + overhead)


MODELS = {
    "llama-3-8b": Llm("meta-llama/Meta-Llama-3-8B-Instruct", 14.96, 2 * 32 * 8 * 128 * 2, 1.5, 40000, 10000, 0.010),
    "qwen2.5-7b": Llm("Qwen/Qwen2.5-7B-Instruct", 14.19, 2 * 28 * 4 * 128 * 2, 1.5, 42000, 10500, 0.009),
    "qwen2.5-coder-7b": Llm("Qwen/Qwen2.5-Coder-7B-Instruct", 14.19, 2 * 28 * 4 * 128 * 2, 1.5, 42000, 10500, 0.009),
    "mistral-7b": Llm("mistralai/Mistral-7B-Instruct-v0.3", 13.49, 2 * 32 * 8 * 128 * 2, 1.5, 42000, 10500, 0.009),
    "llama-3.2-3b": Llm("meta-llama/Llama-3.2-3B-Instruct", 5.98, 2 * 28 * 8 * 128 * 2, 1.0, 90000, 20000, 0.005),
    "llama-3-70b": Llm("meta-llama/Meta-Llama-3-70B-Instruct", 131.4, 2 * 80 * 8 * 128 * 2, 2.0, 8000, 2000, 0.028),
}


GAP_CLIENTS = (36, 60, 73, 23)  # steady ServeGen clients: steps where all are zero are trace gaps -> NaN


@dataclass(frozen=True)
class Spec:
    """One demo workload: where it runs, what it serves, whose demand it replays, what it shows."""

    ns: str
    name: str
    scenario: str
    gpu: str
    llm: str | None  # None: not a vLLM server (DCGM only)
    client: int | None  # ServeGen m-mid client id (None: the Helios batch Job)
    tokens: str = "conv"  # conv | code | long (Azure conv, Azure code, Mooncake)
    rate_scale: float = 1.0  # the client's rate times this (shape kept, level fitted to the service)
    kind: str = "Deployment"
    sharing: Sharing = Sharing.EXCLUSIVE
    gpus: int = 1  # devices per replica (tensor parallel size for vLLM)
    replicas: int = 1
    util: float = 0.9  # --gpu-memory-utilization
    max_model_len: int = 8192
    annotations: tuple[tuple[str, str], ...] = ()  # set by the user on the workload (e.g. its class)
    max_num_seqs: int = 256


SPECS = (
    Spec("chat", "assistant", "over-provisioned: 8B model on a whole H100 at ~1.5 req/s", "H100", "llama-3-8b", 61),
    Spec("chat", "support-bot", "over-provisioned and intermittent: half the steps idle", "A100", "mistral-7b", 91,
         max_model_len=32768),
    Spec("chat", "qwen-chat", "well-sized and busy: long prompts keep 2 H100 replicas working", "H100",
         "qwen2.5-7b", 43, tokens="long", rate_scale=0.8, replicas=2, max_model_len=32768, max_num_seqs=512),
    Spec("chat", "assistant-70b", "70B on 2 H100 tensor-parallel: KV cache tight at peaks", "H100", "llama-3-70b", 2,
         rate_scale=0.6, kind="StatefulSet", gpus=2, util=0.95, max_num_seqs=64),
    Spec("chat", "translate", "too many replicas: 3 whole A100s for ~4 req/s; its team load-tested 5 req/s per "
         "replica", "A100", "qwen2.5-7b", 99, replicas=3, max_model_len=32768,
         annotations=(("rightsizer.io/replica-capacity", "5"),)),
    Spec("devtools", "code-complete", "over-provisioned: prefill-heavy completions at ~0.5 req/s", "A100",
         "qwen2.5-coder-7b", 85, tokens="code", max_model_len=32768),
    Spec("devtools", "code-review", "already on a MIG 3g.40gb slice", "A100", "mistral-7b", 69, tokens="code",
         sharing=Sharing.MIG, max_model_len=16384),
    Spec("devtools", "docs-qa", "idle for days: scale-to-zero candidate", "A100", "llama-3-8b", 75),
    Spec("search", "query-expander", "time-sliced: 1 of 4 pods on a shared A100 (DCGM sees the device)", "A100",
         "llama-3.2-3b", 87, sharing=Sharing.TIME_SLICING, util=0.2),
    Spec("search", "reranker", "no vLLM metrics: a Triton service seen only through DCGM", "A100", None, 18),
    Spec("search", "query-rewrite", "unknown GPU product (not in the catalogue)", "FOO", "llama-3-8b", 56),
    Spec("research", "train-ranker", "batch Job (Helios-shaped): busier by day, often idle at night", "A100",
         None, None, kind="Job", gpus=2),
    Spec("research", "eval-harness", "bursty evaluation runs that fill the GPU, idle in between; its team "
         "annotated it batch", "H100", "llama-3-8b", 26, rate_scale=0.6,
         annotations=(("rightsizer.io/class", "batch"),)),
    Spec("research", "summarizer", "long documents at ~0.3 req/s: KV need, not compute, sets its size; a 30 s "
         "time-to-first-token objective", "H100", "mistral-7b", 68, tokens="long", max_model_len=32768,
         annotations=(("rightsizer.io/ttft-slo-seconds", "30"),)),
    Spec("search", "caption", "DRA: its pods get a whole H100 through a ResourceClaimTemplate (gpu.nvidia.com) "
         "for a 3B model at ~1 req/s", "H100", "llama-3.2-3b", 51, rate_scale=1.5, sharing=Sharing.DRA),
    Spec("research", "finetune", "Kubeflow PyTorchJob: a master and 3 workers on whole A100s, Helios-shaped runs",
         "A100", None, None, kind="PyTorchJob", replicas=4),
)
