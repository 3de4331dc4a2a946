"""Pod spec → Allocation, as pure functions over the API's JSON dicts (camelCase, as in manifests).

No API calls here, so every rule tests table-driven without a server. What the spec cannot say (the GPU
model, whether a node time-slices its GPUs) comes from the node's GPU feature discovery (GFD) labels in
:func:`with_node`. Nothing raises on odd input: what cannot be parsed becomes a note on the workload.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from recommender.core.inventory import Allocation, Sharing, VllmArgs

GPU = "nvidia.com/gpu"
GPU_SHARED = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
HAMI_MEM_MIB = "nvidia.com/gpumem"
HAMI_MEM_PCT = "nvidia.com/gpumem-percentage"
HAMI_CORES_PCT = "nvidia.com/gpucores"
KAI_FRACTION = "gpu-fraction"
KAI_MEMORY_MIB = "gpu-memory"
KAI_NUM_DEVICES = "gpu-fraction-num-devices"
MPS_THREADS_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
MPS_MEM_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
PRODUCT_LABEL = "nvidia.com/gpu.product"

_MIB_PER_UNIT = {"": 1 / 2**20, "K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2}  # MPS units are binary
_VLLM_FLAGS = {  # spelling on the command line → canonical flag
    **{f: f for f in ("--model", "--gpu-memory-utilization", "--max-model-len", "--max-num-seqs",
                      "--tensor-parallel-size", "--served-model-name")},
    "-tp": "--tensor-parallel-size",
}
_SHELLS = {"sh", "bash", "dash", "ash", "zsh"}
_COMMAND_ENDS = {"&&", "||", ";", "|", "&"}
_ENV_REF = re.compile(r"\$\((\w+)\)|\$\{(\w+)\}|\$(\w+)")  # $(K8S_STYLE), ${SHELL}, $SHELL
_MPS_LIMIT = re.compile(r"^\s*(?:(\w[\w-]*)\s*=)?\s*(\d+(?:\.\d+)?)\s*([KMGT]?)B?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedSpec:
    """What one replica's pod spec says, plus what only a node can finish (see :func:`with_node`)."""

    allocation: Allocation
    served_model: str | None = None
    notes: tuple[str, ...] = ()
    selected_product: str | None = None  # nvidia.com/gpu.product asked for by nodeSelector/affinity
    hami_gpumem_pct: float | None = None  # converted to MiB once the device memory is known
    kai_gpu_memory_mib: float | None = None  # converted to a fraction once the device memory is known


def parse_pod_spec(spec: Mapping[str, Any], annotations: Mapping[str, str], replicas: int = 1) -> ParsedSpec:
    """One replica's GPU allocation from a pod spec and the pod's (template's) annotations."""
    notes: list[str] = []
    res = {name: float(n) for name, n in pod_resources(spec, notes).items()}
    mig = {name[len(MIG_PREFIX):]: n for name, n in res.items() if name.startswith(MIG_PREFIX) and n > 0}
    mps_pct, mps_mib = _mps_env(spec.get("containers") or [], notes)
    kai = _kai(annotations, notes)
    vllm, served = parse_vllm(spec.get("containers") or [], notes)
    base = Allocation(sharing=Sharing.NONE, replicas=replicas, vllm=vllm,
                      mps_active_thread_pct=mps_pct, mps_pinned_mem_mib=mps_mib)
    gpus = _count(res.get(GPU, 0.0), GPU, notes)
    if mig:
        alloc = _mig(base, mig, notes)
        if gpus:
            notes.append(f"requests both {GPU} and MIG slices; sized by the MIG slices")
    elif kai is not None:
        alloc = replace(base, sharing=Sharing.KAI, gpus=kai[1], kai_gpu_fraction=kai[0])
    elif any(k in res for k in (HAMI_MEM_MIB, HAMI_MEM_PCT, HAMI_CORES_PCT)):
        alloc = replace(base, sharing=Sharing.HAMI, gpus=gpus or 1, hami_gpumem_mib=res.get(HAMI_MEM_MIB),
                        hami_gpucores_pct=res.get(HAMI_CORES_PCT))
    elif mps_pct is not None or mps_mib is not None:
        alloc = replace(base, sharing=Sharing.MPS, gpus=gpus)
    elif res.get(GPU_SHARED, 0) > 0:
        alloc = replace(base, sharing=Sharing.TIME_SLICING, gpus=_count(res[GPU_SHARED], GPU_SHARED, notes))
    else:
        alloc = replace(base, sharing=Sharing.EXCLUSIVE if gpus else Sharing.NONE, gpus=gpus)
    product = selected_product(spec, notes)
    return ParsedSpec(alloc, served, tuple(notes), product, res.get(HAMI_MEM_PCT), kai[2] if kai else None)


def pod_resources(spec: Mapping[str, Any], notes: list[str], keep: Callable[[str], bool] | None = None
                  ) -> dict[str, Decimal]:
    """The resources one pod holds, by the scheduler's rule: app containers and sidecars add up, an ordinary
    init container runs alone, so the pod holds the larger of the two, plus its overhead. Only the resources
    ``keep`` names (default: the GPU-ish ones we understand); a quantity that does not parse is a note."""
    wanted = keep or _gpu_ish
    inits = spec.get("initContainers") or []
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    app = _sum(_container_resources(c, notes, wanted) for c in [*(spec.get("containers") or []), *sidecars])
    for c in inits:
        if c.get("restartPolicy") != "Always":
            for name, n in _container_resources(c, notes, wanted).items():
                app[name] = max(app.get(name, Decimal(0)), n)
    overhead = _parsed(spec.get("overhead") or {}, "the pod's overhead", notes, wanted)
    return _sum([app, overhead])


def _gpu_ish(name: str) -> bool:
    return name.startswith("nvidia.com/") and name != "nvidia.com/priority"


def _container_resources(container: Mapping[str, Any], notes: list[str], keep: Callable[[str], bool]
                         ) -> dict[str, Decimal]:
    """Requests, else limits (a request defaults to its limit; extended resources must have equal ones)."""
    res = container.get("resources") or {}
    merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
    return _parsed(merged, f"container {container.get('name', '?')}", notes, keep)


def _parsed(raw: Mapping[str, Any], where: str, notes: list[str], keep: Callable[[str], bool]) -> dict[str, Decimal]:
    out: dict[str, Decimal] = {}
    for name, value in raw.items():
        if keep(name):
            try:
                out[name] = Decimal(parse_quantity(value))
            except (ValueError, ArithmeticError):
                notes.append(f"could not parse {name}={value} in {where}")
    return out


def _sum(dicts: Iterable[Mapping[str, Decimal]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for d in dicts:
        for name, n in d.items():
            total[name] = total.get(name, Decimal(0)) + n
    return total


def _count(n: float, name: str, notes: list[str]) -> int:
    if n != int(n):
        notes.append(f"{name}={n:g} is not a whole number; rounded up")
    return math.ceil(n)


def _mig(base: Allocation, mig: Mapping[str, float], notes: list[str]) -> Allocation:
    """``nvidia.com/mig-1g.10gb.me`` names the profile ``1g.10gb+me`` (the device plugin turns + into .)."""
    name, n = max(mig.items(), key=lambda kv: kv[1])
    if len(mig) > 1:
        notes.append(f"requests several MIG profiles ({', '.join(sorted(mig))}); sized by {name}")
    profile = name[: -len(".me")] + "+me" if name.endswith(".me") else name
    return replace(base, sharing=Sharing.MIG, mig_profile=profile, mig_count=_count(n, MIG_PREFIX + name, notes))


def _kai(annotations: Mapping[str, str], notes: list[str]) -> tuple[float | None, int, float | None] | None:
    """KAI scheduler's (gpu-fraction, devices, gpu-memory MiB), or None when the pod asks for neither."""
    if KAI_FRACTION not in annotations and KAI_MEMORY_MIB not in annotations:
        return None
    fraction = _number(annotations, KAI_FRACTION, notes)
    if fraction is not None and not 0 < fraction <= 1:
        notes.append(f"{KAI_FRACTION}={fraction:g} is outside (0, 1]; ignored")
        fraction = None
    devices = _number(annotations, KAI_NUM_DEVICES, notes) or 1.0
    return fraction, math.ceil(devices), _number(annotations, KAI_MEMORY_MIB, notes)


def _number(values: Mapping[str, Any], key: str, notes: list[str]) -> float | None:
    raw = values.get(key)
    if raw is None:
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        notes.append(f"could not parse {key}={raw}")
        return None
    return value if math.isfinite(value) else None


def _mps_env(containers: Iterable[Mapping[str, Any]], notes: list[str]) -> tuple[float | None, float | None]:
    """MPS client limits from the first container that sets them (literal ``value`` only)."""
    for c in containers:
        env = {e.get("name"): e.get("value") for e in c.get("env") or [] if "value" in e}
        if MPS_THREADS_ENV in env or MPS_MEM_ENV in env:
            pct = _number(env, MPS_THREADS_ENV, notes)
            raw = env.get(MPS_MEM_ENV)
            return pct, parse_mps_mem_limit_mib(raw, notes) if raw is not None else None
    return None, None


def parse_mps_mem_limit_mib(text: str, notes: list[str]) -> float | None:
    """``"0=10G,1=512M"`` → the largest per-device limit in MiB (units K/M/G/T, optional B, binary).

    The largest bounds what one device may hold; differing limits per device are noted. A value with no
    unit is read as bytes (inferred: NVIDIA's docs show only suffixed values).
    """
    limits: list[float] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = _MPS_LIMIT.match(part)
        if not m:
            notes.append(f"could not parse {MPS_MEM_ENV} entry {part!r}")
            continue
        limits.append(float(m.group(2)) * _MIB_PER_UNIT[m.group(3).upper()])
    if len(set(limits)) > 1:
        notes.append(f"{MPS_MEM_ENV}={text} differs per device; using the largest")
    return max(limits) if limits else None


def selected_product(spec: Mapping[str, Any], notes: list[str]) -> str | None:
    """The GPU product a pod asks for by nodeSelector or required node affinity (``In``), if any."""
    product = (spec.get("nodeSelector") or {}).get(PRODUCT_LABEL)
    if product:
        return str(product)
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            values = expr.get("values") or []
            if expr.get("key") == PRODUCT_LABEL and expr.get("operator") == "In" and values:
                if len(values) > 1:
                    notes.append(f"node affinity allows GPU products {', '.join(values)}; assumed {values[0]}")
                return str(values[0])
    return None


def with_node(parsed: ParsedSpec, labels: Mapping[str, str] | None) -> ParsedSpec:
    """Finish an allocation with what the node's GFD labels say: product, device memory, and the
    sharing the spec cannot show (time-slicing or MPS of ``nvidia.com/gpu``, a MIG-single node)."""
    if not labels:
        return parsed
    notes = list(parsed.notes)
    alloc = parsed.allocation
    product = labels.get(PRODUCT_LABEL)
    memory_mib = _number(labels, "nvidia.com/gpu.memory", notes)
    if alloc.sharing is Sharing.MIG and alloc.mig_profile:
        resource = f"{MIG_PREFIX}{alloc.mig_profile.replace('+', '.')}"
        memory_mib = _number(labels, f"{resource}.memory", notes) or memory_mib
        if (_number(labels, f"{resource}.replicas", notes) or 1) > 1:
            notes.append(f"{resource} slices are time-sliced {labels[resource + '.replicas']} ways on this node")
    elif alloc.sharing is Sharing.EXCLUSIVE:
        alloc = _node_sharing(alloc, labels, product or "", memory_mib, notes)
    alloc = replace(alloc, gpu_product=product or alloc.gpu_product, device_memory_mib=memory_mib)
    return _fill_fractions(replace(parsed, allocation=alloc, notes=tuple(notes)), memory_mib)


def _node_sharing(
    alloc: Allocation, labels: Mapping[str, str], product: str, memory_mib: float | None, notes: list[str]
) -> Allocation:
    """``nvidia.com/gpu`` on a MIG-single, time-slicing or MPS node is not a whole GPU.

    GFD writes ``gpu.replicas`` = replicas per GPU (1 unshared), ``gpu.count`` = physical GPUs, and
    ``-SHARED`` after the product unless the resource is renamed (k8s-device-plugin internal/lm/resource.go).
    """
    mig = re.search(r"-MIG-(\d+g\.\d+gb)(\+?me)?", product)  # GFD strips "+": 1g.10gb+me → 1g.10gbme
    if labels.get("nvidia.com/mig.strategy") == "single" and mig:
        profile = mig.group(1) + ("+me" if mig.group(2) else "")
        return replace(alloc, sharing=Sharing.MIG, mig_profile=profile, mig_count=alloc.gpus, gpus=0)
    strategy = labels.get("nvidia.com/gpu.sharing-strategy", "")
    per_gpu = int(_number(labels, "nvidia.com/gpu.replicas", notes) or 1)
    if strategy == "mps":  # the device plugin's MPS daemon splits each GPU evenly between replicas
        return replace(alloc, sharing=Sharing.MPS,
                       mps_active_thread_pct=alloc.mps_active_thread_pct or float(100 // max(per_gpu, 1)),
                       mps_pinned_mem_mib=alloc.mps_pinned_mem_mib
                       or (memory_mib // max(per_gpu, 1) if memory_mib else None))
    if strategy == "time-slicing" or per_gpu > 1 or product.endswith("-SHARED"):
        return replace(alloc, sharing=Sharing.TIME_SLICING)
    return alloc


def _fill_fractions(parsed: ParsedSpec, memory_mib: float | None) -> ParsedSpec:
    """HAMi's memory percentage and KAI's gpu-memory become MiB / a fraction once the device is known."""
    alloc, notes = parsed.allocation, list(parsed.notes)
    if parsed.hami_gpumem_pct is not None and alloc.hami_gpumem_mib is None and memory_mib:
        alloc = replace(alloc, hami_gpumem_mib=memory_mib * parsed.hami_gpumem_pct / 100)
    if parsed.kai_gpu_memory_mib is not None and alloc.kai_gpu_fraction is None and memory_mib:
        alloc = replace(alloc, kai_gpu_fraction=min(1.0, parsed.kai_gpu_memory_mib / memory_mib))
        notes.append(f"KAI {KAI_MEMORY_MIB}={parsed.kai_gpu_memory_mib:g} MiB of {memory_mib:g} MiB read as a fraction")
    return replace(parsed, allocation=alloc, notes=tuple(notes))


def parse_vllm(containers: Iterable[Mapping[str, Any]], notes: list[str]) -> tuple[VllmArgs | None, str | None]:
    """vLLM engine args and served model name from the first container that runs vLLM."""
    for c in containers:
        argv = container_argv(c)
        start = _vllm_start(argv, str(c.get("image", "")), bool(c.get("command")))
        if start is not None:
            return _vllm_args(argv[start[0]:], start[1], notes)
    return None, None


def container_argv(container: Mapping[str, Any]) -> list[str]:
    """command + args as the process sees them: ``sh -c "..."`` split like a shell would, and
    ``$(VAR)``/``${VAR}``/``$VAR`` replaced from the container's literal env (Kubernetes and the shell do)."""
    tokens = [str(t) for t in [*(container.get("command") or []), *(container.get("args") or [])]]
    if tokens and os.path.basename(tokens[0]) in _SHELLS:
        for i, tok in enumerate(tokens[1:-1], start=1):
            if re.fullmatch(r"-[a-z]*c[a-z]*", tok):
                try:
                    tokens = shlex.split(tokens[i + 1])
                except ValueError:  # unbalanced quotes: words are still better than nothing
                    tokens = tokens[i + 1].split()
                break
    env = {e.get("name"): str(e["value"]) for e in container.get("env") or [] if "value" in e}
    expand = lambda m: env.get(m.group(1) or m.group(2) or m.group(3), m.group(0))  # noqa: E731
    return [_ENV_REF.sub(expand, t) for t in tokens if t.strip()]  # shlex keeps escaped newlines


def _vllm_start(argv: list[str], image: str, has_command: bool) -> tuple[int, bool] | None:
    """Where vLLM's own arguments begin, and whether a positional model may come first (``vllm serve``)."""
    for i, tok in enumerate(argv):
        if os.path.basename(tok) == "vllm" and argv[i + 1 : i + 2] == ["serve"]:
            return i + 2, True
        if tok.startswith("vllm.entrypoints."):
            return i + 1, False
    if not has_command and "vllm" in image.lower():  # vllm/vllm-openai: ENTRYPOINT is the server
        return 0, True
    return None


def _vllm_args(argv: list[str], positional: bool, notes: list[str]) -> tuple[VllmArgs, str | None]:
    found: dict[str, str] = {}
    if positional and argv and not argv[0].startswith("-"):
        found["--model"] = argv[0]
    i = 0
    while i < len(argv) and argv[i] not in _COMMAND_ENDS:
        name, eq, value = argv[i].partition("=")
        flag = _VLLM_FLAGS.get(name.replace("_", "-") if name.startswith("--") else name)
        if flag and not eq:
            i += 1
            value = argv[i] if i < len(argv) else ""
        if flag:
            found[flag] = value
        i += 1
    args = VllmArgs(
        model=found.get("--model") or None,
        gpu_memory_utilization=_arg(found, "--gpu-memory-utilization", _fraction, notes),
        max_model_len=_arg(found, "--max-model-len", parse_max_model_len, notes),
        max_num_seqs=_arg(found, "--max-num-seqs", _positive_int, notes),
        tensor_parallel_size=_arg(found, "--tensor-parallel-size", _positive_int, notes) or 1,
    )
    return args, found.get("--served-model-name") or args.model


def _arg(found: Mapping[str, str], flag: str, convert: Any, notes: list[str]) -> Any:
    if flag not in found:
        return None
    try:
        return convert(found[flag])
    except ValueError:
        notes.append(f"could not parse {flag}={found[flag]}")
        return None


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise ValueError(text)
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def parse_max_model_len(text: str) -> int | None:
    """vLLM's ``--max-model-len``: ``1k`` = 1000 and ``1K`` = 1024 (k/m/g decimal, K/M/G binary);
    ``-1``/``auto`` mean "as long as fits", which only vLLM knows: None."""
    text = text.strip()
    if text.lower() in ("-1", "auto"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT]?)", text)
    if not m:
        raise ValueError(text)
    power = "kmgt".find(m.group(2).lower()) + 1 if m.group(2) else 0
    value = round(float(m.group(1)) * (1000 if m.group(2).islower() else 1024) ** power)
    if value < 1:
        raise ValueError(text)
    return value


def unresolved(parsed: ParsedSpec) -> ParsedSpec:
    """Say what stayed unknown because no node told us the device memory."""
    alloc, extra = parsed.allocation, []
    if parsed.hami_gpumem_pct is not None and alloc.hami_gpumem_mib is None:
        extra.append(f"HAMi {HAMI_MEM_PCT}={parsed.hami_gpumem_pct:g}: MiB unknown without GPU memory")
    if parsed.kai_gpu_memory_mib is not None and alloc.kai_gpu_fraction is None:
        extra.append(f"KAI {KAI_MEMORY_MIB}={parsed.kai_gpu_memory_mib:g} MiB: fraction unknown without GPU memory")
    return replace(parsed, notes=(*parsed.notes, *extra)) if extra else parsed
