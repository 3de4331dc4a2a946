"""What the recommended fleet asks of MIG-capable GPUs, per node its pods run on now: slice demands
(``count`` x a MIG profile) and whole GPUs held by everything else on those models, the input of
:func:`policies.nodeplan.plan_nodes`. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from recommender.core.catalogue import Catalogue
from recommender.core.inventory import Sharing
from recommender.core.plan import Recommendation


@dataclass(frozen=True)
class MigDemand:
    """Slices one workload needs: ``count`` × ``profile`` of ``gpu_model``; ``profile=None`` = whole GPUs."""

    workload: str  # WorkloadRef key
    node: str | None  # where its pods run now; None when unknown
    gpu_model: str  # catalogue key
    profile: str | None
    count: int


def mig_demands(recs: Sequence[Recommendation], catalogue: Catalogue) -> tuple[MigDemand, ...]:
    """What the recommended fleet asks of MIG-capable GPUs, per node its pods run on now.

    Replicas are spread over the workload's nodes in turn (pods are per node); MIG slices become slice
    demands, everything else on a MIG-capable model holds whole GPUs there (fractional shares of one
    node rounded up together). Nothing at all when no workload gets a MIG slice: no MIG plan to make.
    """
    out: list[MigDemand] = []
    fractions: dict[tuple[str, str | None, str], float] = {}
    for r in recs:
        alloc = r.recommended or r.workload.allocation
        gpu = catalogue.get(alloc.gpu_model)
        if gpu is None or not gpu.supports_mig or alloc.replicas <= 0:
            continue
        nodes: tuple[str | None, ...] = r.workload.nodes or (None,)
        per_node: dict[str | None, int] = {}
        for i in range(alloc.replicas):
            per_node[nodes[i % len(nodes)]] = per_node.get(nodes[i % len(nodes)], 0) + 1
        for node, replicas in per_node.items():
            if alloc.sharing is Sharing.MIG and alloc.mig_profile:
                out.append(MigDemand(r.ref.key, node, gpu.key, alloc.mig_profile, alloc.mig_count * replicas))
            elif alloc.sharing is Sharing.EXCLUSIVE:
                out.append(MigDemand(r.ref.key, node, gpu.key, None, max(alloc.gpus, 1) * replicas))
            else:
                key = (r.ref.key, node, gpu.key)
                fractions[key] = fractions.get(key, 0.0) + alloc.gpu_equivalents * replicas
    if not any(d.profile for d in out):
        return ()
    out += [MigDemand(w, node, model, None, math.ceil(total - 1e-9))
            for (w, node, model), total in sorted(fractions.items(), key=str)]
    return tuple(out)
