"""What could go wrong if a recommended allocation is applied: a risk level (low, medium, high) and every
finding behind it in words, from the memory upper bound (MiB) against what one replica sees, requests already
waiting and the recommendation's confidence. Pure: no I/O.
"""

from __future__ import annotations

from recommender.core.catalogue import MigProfile
from recommender.core.inventory import Allocation, Sharing
from recommender.core.plan import Bound

Risk = tuple[str, tuple[str, ...]]  # level (low | medium | high) and why, in words


def assess_risk(mem: Bound, alloc: Allocation, device_mib: float, waiting: float, conf: float,
                prof: MigProfile | None) -> Risk:
    """What could go wrong if ``alloc`` is applied, and why: high when the memory upper bound (MiB) exceeds
    ``device_mib``, what one replica sees, or requests were already waiting (``waiting``: p95 of requests
    waiting); medium on confidence below 0.5 or a MIG profile whose usable memory is unverified. Every
    finding is a reason; none found says what was checked."""
    seen = f"the {device_mib:,.0f} MiB one replica sees on {_held_text(alloc)}"
    high = ([f"memory upper bound {mem.upper:,.0f} MiB exceeds {seen}: a peak above the target could run out of "
             "memory"] if mem.upper > device_mib else [])
    high += [f"requests waiting p95 {waiting:,.3g}: the service already queues"] if waiting > 0 else []
    medium = [f"confidence {conf:.0%} is below 50%"] if conf < 0.5 else []
    medium += ([f"MIG {prof.name}'s usable memory is estimated from its name (unverified)"]
               if prof is not None and not prof.usable_verified else [])
    if high or medium:
        return ("high" if high else "medium"), (*high, *medium)
    return "low", (f"memory upper bound {mem.upper:,.0f} MiB fits {seen}; no requests waiting; confidence "
                   f"{conf:.0%}",)


def _held_text(a: Allocation) -> str:
    """``MIG 3g.40gb``, ``one A100-80GB``, ``its mps share of one H100-80GB``: the device (memory is per device)."""
    if a.sharing is Sharing.MIG:
        return f"MIG {a.mig_profile}"
    if a.sharing is Sharing.EXCLUSIVE:
        return f"one {a.gpu_model}"
    return f"its {a.sharing.value} share of one {a.gpu_model}"
