"""Pod spec → Allocation, as pure functions over the API's JSON dicts (camelCase, as in manifests).

No API calls here, so every rule tests table-driven without a server. What the spec cannot say (the GPU
model, whether a node time-slices its GPUs) comes from the node's GPU feature discovery (GFD) labels in
:func:`with_node`. Nothing raises on odd input: what cannot be parsed becomes a note on the workload.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from recommender.core.annotations import cut
from recommender.core.inventory import MAX_TOKENS, Allocation, Sharing, VllmArgs
from recommender.mechanisms import for_sharing, in_read_order
from recommender.mechanisms.base import GPU, MIG_PREFIX, Claim, PodView, ReadBack
from recommender.mechanisms.base import count as _count
from recommender.mechanisms.base import number as _number
from recommender.mechanisms.mig import MigShare
from recommender.mechanisms.mps import MpsShare, parse_mps_mem_limit_mib
from recommender.mechanisms.volcano import VOLCANO_RESOURCES

READ_RESOURCES = frozenset(VOLCANO_RESOURCES)  # GPU resources outside nvidia.com/ that a mechanism reads

__all__ = ["parse_mps_mem_limit_mib"]
PRODUCT_LABEL = "nvidia.com/gpu.product"

_VLLM_FLAGS = {  # spelling on the command line → canonical flag
    **{f: f for f in ("--model", "--gpu-memory-utilization", "--max-model-len", "--max-num-seqs",
                      "--tensor-parallel-size", "--served-model-name")},
    "-tp": "--tensor-parallel-size",
}
_SHELLS = {"sh", "bash", "dash", "ash", "zsh"}
_COMMAND_ENDS = {"&&", "||", ";", "|", "&"}
# GPUs of tensor parallelism, far above any engine's (tokens: MAX_TOKENS); a tenant's larger number is a note.
MAX_TENSOR_PARALLEL = 2**16
_ENV_REF = re.compile(r"\$\((\w+)\)|\$\{(\w+)\}|\$(\w+)")  # $(K8S_STYLE), ${SHELL}, $SHELL


@dataclass(frozen=True)
class ParsedSpec:
    """What one replica's pod spec says, plus what only a node can finish (see :func:`with_node`)."""

    allocation: Allocation
    served_model: str | None = None
    notes: tuple[str, ...] = ()
    selected_product: str | None = None  # nvidia.com/gpu.product asked for by nodeSelector/affinity
    read: ReadBack | None = None  # the share as read, with what only a node's device memory can finish
    template_path: str | None = None  # where in its owner the template sits, when not spec.template


def parse_pod_spec(spec: Mapping[str, Any], annotations: Mapping[str, str], replicas: int = 1,
                   claims: Sequence[Claim] = ()) -> ParsedSpec:
    """One replica's GPU allocation from a pod spec, the pod's (template's) annotations and its DRA claims as
    resolved (``collectors.kubernetes.claims``)."""
    notes: list[str] = []
    res = {name: float(n) for name, n in pod_resources(spec, notes).items()}
    vllm, served = parse_vllm(spec.get("containers") or [], notes)
    pod = PodView(res, _count(res.get(GPU, 0.0), GPU, notes), spec.get("containers") or [], annotations, notes,
                  claims=claims, scheduler_name=str(spec.get("schedulerName") or "") or None)
    alloc, read = Allocation(sharing=Sharing.NONE, replicas=replicas, vllm=vllm), None
    for mechanism in in_read_order():  # the first that finds its share wins (MIG, KAI, HAMi, MPS, ...)
        read = mechanism.read(pod)
        if read is not None:
            alloc = replace(alloc, sharing=mechanism.sharing, gpus=read.gpus, share=read.share)
            break
    if alloc.sharing is Sharing.MIG and pod.gpus:
        notes.append(f"requests both {GPU} and MIG slices; sized by the MIG slices")
    product = selected_product(spec, notes)
    return ParsedSpec(alloc, served, tuple(notes), product, read)


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
    return (name.startswith("nvidia.com/") and name != "nvidia.com/priority") or name in READ_RESOURCES


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
                notes.append(f"could not parse {name}={cut(value)} in {where}")
    return out


def _sum(dicts: Iterable[Mapping[str, Decimal]]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = {}
    for d in dicts:
        for name, n in d.items():
            total[name] = total.get(name, Decimal(0)) + n
    return total


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
        return replace(alloc, sharing=Sharing.MIG, share=MigShare(profile, alloc.gpus), gpus=0)
    strategy = labels.get("nvidia.com/gpu.sharing-strategy", "")
    per_gpu = int(_number(labels, "nvidia.com/gpu.replicas", notes) or 1)
    if strategy == "mps":  # the device plugin's MPS daemon splits each GPU evenly between replicas
        return replace(alloc, sharing=Sharing.MPS, share=MpsShare(
            alloc.mps_active_thread_pct or float(100 // max(per_gpu, 1)),
            alloc.mps_pinned_mem_mib or (memory_mib // max(per_gpu, 1) if memory_mib else None)))
    if strategy == "time-slicing" or per_gpu > 1 or product.endswith("-SHARED"):
        return replace(alloc, sharing=Sharing.TIME_SLICING)
    return alloc


def _fill_fractions(parsed: ParsedSpec, memory_mib: float | None) -> ParsedSpec:
    """What only the device memory finishes (HAMi's memory percentage, KAI's gpu-memory) by the share's
    mechanism, once a node tells it."""
    mechanism = for_sharing(parsed.allocation.sharing)
    if parsed.read is None or mechanism is None or parsed.read.pending is None:
        return parsed
    notes = list(parsed.notes)
    read = mechanism.finish(parsed.read, memory_mib, notes)
    alloc = replace(parsed.allocation, share=read.share) if read.share is not None else parsed.allocation
    return replace(parsed, allocation=alloc, notes=tuple(notes), read=read)


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
        max_num_seqs=_arg(found, "--max-num-seqs", lambda t: _positive_int(t, MAX_TOKENS), notes),
        tensor_parallel_size=_arg(found, "--tensor-parallel-size", lambda t: _positive_int(t, MAX_TENSOR_PARALLEL),
                                  notes) or 1,
    )
    return args, found.get("--served-model-name") or args.model


def _arg(found: Mapping[str, str], flag: str, convert: Any, notes: list[str]) -> Any:
    if flag not in found:
        return None
    try:
        return convert(found[flag])
    except (ValueError, OverflowError):
        raw = found[flag]
        notes.append(f"could not parse {flag}={cut(raw)}")
        return None


def _fraction(text: str) -> float:
    value = float(text)
    if not 0 < value <= 1:
        raise ValueError(text)
    return value


def _positive_int(text: str, most: int) -> int:
    value = int(text)
    if not 1 <= value <= most:
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
    tokens = float(m.group(1)) * (1000 if m.group(2).islower() else 1024) ** power  # inf past 1e308: refused below
    if tokens > MAX_TOKENS or round(tokens) < 1:
        raise ValueError(text)
    return round(tokens)


def unresolved(parsed: ParsedSpec) -> ParsedSpec:
    """Say what stayed unknown because no node told us the device memory."""
    mechanism = for_sharing(parsed.allocation.sharing)
    if parsed.read is None or mechanism is None or parsed.allocation.share is not parsed.read.share:
        return parsed
    extra = mechanism.unresolved(parsed.read)
    return replace(parsed, notes=(*parsed.notes, extra)) if extra else parsed
