"""GPU sharing mechanisms as plugins: one module each, one protocol (:class:`base.Mechanism`), one registry.

Built-ins register on import of their module; third parties add one through the entry-point group
``gpu_rightsizer.mechanisms`` (an object implementing the protocol). :func:`for_sharing` finds the mechanism
of an allocation's tag, :func:`in_read_order` every mechanism in the order read-back tries them.
"""

from __future__ import annotations

from recommender.core.inventory import Sharing
from recommender.core.registry import Registry
from recommender.mechanisms.base import Mechanism

MECHANISMS: Registry[Mechanism] = Registry(
    "sharing mechanism", "gpu_rightsizer.mechanisms",
    builtins={"exclusive": "recommender.mechanisms.exclusive", "mig": "recommender.mechanisms.mig",
              "mps": "recommender.mechanisms.mps", "hami": "recommender.mechanisms.hami",
              "kai": "recommender.mechanisms.kai", "time-slicing": "recommender.mechanisms.time_slicing",
              "dra": "recommender.mechanisms.dra",
              "volcano-vgpu": "recommender.mechanisms.volcano", "runai": "recommender.mechanisms.runai"},
    known="known mechanisms")


def in_read_order() -> list[Mechanism]:
    """Every registered mechanism, the one read-back tries first first."""
    return sorted(MECHANISMS.loaded().values(), key=lambda m: (m.read_rank, m.name))


def for_sharing(sharing: Sharing) -> Mechanism | None:
    """The mechanism whose allocations carry ``sharing``; None for :attr:`Sharing.NONE` (no GPU)."""
    return next((m for m in MECHANISMS.loaded().values() if m.sharing is sharing), None)
