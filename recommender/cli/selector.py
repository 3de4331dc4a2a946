"""``-l/--selector``: kubectl's label-selector syntax (``app=x,tier!=y``, ``env in (a,b)``, ``env notin (c)``,
``gpu``, ``!gpu``) parsed into the controller's :class:`LabelSelector`, and a snapshot cut to the workloads
whose labels it matches. Pure: text in, typed data out."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from recommender.controller.policy import LabelSelector
from recommender.core.errors import ConfigError
from recommender.core.usage import Snapshot

_KEY = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9.]*[A-Za-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_TERM = re.compile(rf"\s*(?:(?P<not>!)\s*(?P<absent>{_KEY})"
                   rf"|(?P<key>{_KEY})\s*(?:(?P<op>==|!=|=)\s*(?P<value>{_VALUE})"
                   rf"|\s+(?P<set>in|notin)\s*\((?P<values>[^()]*)\))?)\s*(?:,|$)")
MAX_SELECTOR_CHARS = 4096  # a selector is typed by a person; longer is a mistake


def parse_selector(text: str) -> LabelSelector:
    """kubectl's selector syntax → LabelSelector; a :class:`ConfigError` naming the first bad term otherwise."""
    if not text.strip() or text.rstrip().endswith(",") or len(text) > MAX_SELECTOR_CHARS:
        raise ConfigError(f"-l {text[:60]!r}: a selector is key=value terms joined by commas, e.g. app=chat,tier!=web")
    labels: dict[str, str] = {}
    exprs: list[dict[str, Any]] = []
    pos = 0
    while pos < len(text):
        m = _TERM.match(text, pos)
        if not m or m.end() == pos:
            raise ConfigError(f"-l {text!r}: cannot read {text[pos:pos + 40]!r}; terms are k=v, k!=v, k in (a,b), "
                              "k notin (a,b), k or !k, joined by commas")
        exprs_or_labels(m, labels, exprs, text)
        pos = m.end()
    return LabelSelector.model_validate({"matchLabels": labels, "matchExpressions": tuple(exprs)})


def exprs_or_labels(m: re.Match[str], labels: dict[str, str], exprs: list[dict[str, Any]], text: str) -> None:
    """Add one parsed term: equality to ``labels``, everything else to ``exprs`` (matchExpressions)."""
    if m["absent"]:
        exprs.append({"key": m["absent"], "operator": "DoesNotExist"})
    elif m["op"] in ("=", "=="):
        if labels.get(m["key"], m["value"]) != m["value"]:
            exprs.append({"key": m["key"], "operator": "In", "values": [m["value"]]})  # k=a,k=b matches nothing
        labels[m["key"]] = m["value"]
    elif m["op"] == "!=":
        exprs.append({"key": m["key"], "operator": "NotIn", "values": [m["value"]]})
    elif m["set"]:
        values = [v.strip() for v in m["values"].split(",")]
        if not all(re.fullmatch(_VALUE, v) for v in values):
            raise ConfigError(f"-l {text!r}: {m['values']!r} is not a list of label values")
        exprs.append({"key": m["key"], "operator": "In" if m["set"] == "in" else "NotIn", "values": values})
    else:
        exprs.append({"key": m["key"], "operator": "Exists"})


def select_labels(snapshot: Snapshot, selector: LabelSelector) -> Snapshot:
    """The snapshot with only the workloads whose labels match (their usage series with them)."""
    keep = tuple(w for w in snapshot.workloads if selector.matches(w.labels))
    keys = {w.ref.key for w in keep}
    usage = {m: f[[c for c in f.columns if c in keys]] for m, f in snapshot.usage.items()}
    return replace(snapshot, workloads=keep, usage=usage)
