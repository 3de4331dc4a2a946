"""``yaml``: the JSON document (:func:`recommender.outputs.jsondoc.document`) as YAML, for kubectl habits
(``-o yaml``); ``yaml.safe_load`` of it gives what ``json.loads`` gives of the JSON report."""

from __future__ import annotations

import yaml

from recommender.core.plan import Plan
from recommender.core.usage import Snapshot
from recommender.outputs.jsondoc import document
from recommender.outputs.registry import register_formatter


@register_formatter("yaml")
def render_yaml(plan: Plan, snapshot: Snapshot | None = None) -> str:
    """Block-style YAML in the JSON document's key order, UTF-8 as is; strings that read as other types quoted."""
    return yaml.safe_dump(document(plan), sort_keys=False, allow_unicode=True, default_flow_style=False, width=120)
