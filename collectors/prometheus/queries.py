"""PromQL for every metric family we read. Pure: no I/O.

One range query per metric family covers every selected namespace, aggregated ``by (namespace, pod)``
so the answer has one series per pod, never one query per pod. Old and new vLLM names are selected
together with a ``__name__`` regex, so a fleet that runs both versions needs no second query. How the
window is cut into queries is ``chunks.py``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from recommender.core import usage as m
from recommender.core.settings_scaling import ScalingSettings
from recommender.core.settings_sources import TARGET_LABELS, PrometheusSettings
from recommender.core.usage import within_objective

# Names as exported. vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc in 0.9 (reference §9.1).
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent, absent on MIG: only a fallback
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
POWER = "DCGM_FI_DEV_POWER_USAGE"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
WAITING = ("vllm:num_requests_waiting",)
RUNNING = ("vllm:num_requests_running",)
REQUESTS = ("vllm:request_success_total",)
PROMPT_TOKENS = ("vllm:prompt_tokens_total",)
GENERATION_TOKENS = ("vllm:generation_tokens_total",)
PREEMPTIONS = ("vllm:num_preemptions_total", "vllm:num_preemptions")
TTFT_BUCKET = ("vllm:time_to_first_token_seconds_bucket",)
CACHE_CONFIG = "vllm:cache_config_info"

# kube-state-metrics: pod → ReplicaSet/Job → Deployment/CronJob, and the GPU resources each pod requests.
KSM_POD_OWNER = "kube_pod_owner"
KSM_REPLICASET_OWNER = "kube_replicaset_owner"
KSM_JOB_OWNER = "kube_job_owner"
KSM_REQUESTS = "kube_pod_container_resource_requests"
# kube-state-metrics' pod count per workload, by kind: (metric, the label naming the workload). It tells a step
# at zero (no pod, so no vLLM metric) from a step without metrics. A LeaderWorkerSet's groups are its leader
# StatefulSet's pods, of its name.
KSM_WORKLOAD_REPLICAS = {"Deployment": ("kube_deployment_status_replicas", "deployment"),
                         "StatefulSet": ("kube_statefulset_status_replicas", "statefulset"),
                         "LeaderWorkerSet": ("kube_statefulset_status_replicas", "statefulset")}
EXPORTER_PREFIX = "DCGM_"  # dcgm-exporter's names: the series whose pod labels a scrape may have renamed
RENAMED = "exported_"  # what a scrape that does not honour a series' labels prefixes to those it sets itself
EXPORTER_LABELS = ("namespace", "pod")  # what dcgm-exporter (and kube-state-metrics) name a pod in
RENAMED_LABELS = (RENAMED + EXPORTER_LABELS[0], RENAMED + EXPORTER_LABELS[1])  # those, renamed by a scrape


def from_exporter(names: tuple[str, ...]) -> bool:
    """Whether every one of ``names`` is dcgm-exporter's (and there is one)."""
    return bool(names) and all(n.startswith(EXPORTER_PREFIX) for n in names)


def quote(value: str) -> str:
    """A PromQL string literal of any text: PromQL reads Go's escapes, and JSON's string escapes are among them (a
    label value may hold a newline, which a literal cannot hold raw)."""
    return json.dumps(value, ensure_ascii=False)


def regex_alternatives(values: tuple[str, ...] | list[str]) -> str:
    """``a|b`` with regex metacharacters escaped (namespaces may hold '.', metric names ':')."""
    return "|".join(re.sub(r"([.\\+*?\[\]^$(){}|])", r"\\\1", v) for v in values)


@dataclass(frozen=True)
class Scope:
    """Which series a query selects: the namespaces (empty = all) and extra matchers."""

    namespaces: tuple[str, ...]
    namespace_label: str = "namespace"
    pod_label: str = "pod"
    extra: str = ""  # e.g. 'cluster="a"', added verbatim to every selector
    target_labels: tuple[str, ...] = TARGET_LABELS  # what a scrape adds: one series scraped twice differs in them
    # the labels dcgm-exporter's series name their pods in, where not namespace_label and pod_label: the renamed
    # ones (RENAMED_LABELS) where a scrape did not honour its own (then those name the exporter's pod), or its own
    # (EXPORTER_LABELS) where the scrape's pod labels are others, which then name the exporter's pod. Its series
    # are selected and grouped by them, copied into namespace_label and pod_label.
    exporter: tuple[str, str] | None = None

    @classmethod
    def of(cls, namespaces: tuple[str, ...], p: PrometheusSettings) -> Scope:
        return cls(tuple(sorted(set(namespaces))), p.namespace_label, p.pod_label, p.extra_selector.strip(" ,{}"),
                   p.target_labels)

    @property
    def by(self) -> str:
        return f"{self.namespace_label}, {self.pod_label}"

    def once(self, expr: str) -> str:
        """``expr`` with each series scraped by several jobs (the same but for ``target_labels``) once, at its
        largest value: to be summed per pod, where the copies would add up."""
        return f"max without ({', '.join(self.target_labels)}) ({expr})" if self.target_labels else expr

    def renamed(self, names: tuple[str, ...]) -> bool:
        """Whether ``names``' series name their pods in other labels than the scope's (:attr:`exporter`)."""
        return self.exporter is not None and from_exporter(names)

    def pod_labels(self, names: tuple[str, ...], renamed: bool = False) -> tuple[str, str]:
        """The labels ``names``' series name their namespace and pod in: the exporter's where :meth:`renamed`, or
        with ``renamed`` (whatever the names) the scope's as a scrape that does not honour them renames them."""
        if renamed:
            return RENAMED + self.namespace_label, RENAMED + self.pod_label
        return self.exporter if self.exporter is not None and self.renamed(names) \
            else (self.namespace_label, self.pod_label)

    def own(self, names: tuple[str, ...], expr: str) -> str:
        """``expr`` over ``names``' series with the pod labels their exporter gave them: where they are others
        (:meth:`renamed`), copied over the scope's (the exporter's own pod), so that grouping by pod is by the
        workload's."""
        if self.exporter is None or not self.renamed(names):
            return expr
        return copied(expr, zip((self.namespace_label, self.pod_label), self.exporter, strict=True))

    def either_scrape(self, names: tuple[str, ...], copied_labels: tuple[str, ...], key: tuple[str, ...], *,
                      pods: bool = True, also: str = "", over: str = "{}") -> str:
        """``names``' series whether or not their scrape honoured their labels: the honoured ones, and the renamed
        ones with ``copied_labels`` (the labels the scrape set too, the pod labels among them) set back from their
        renamed copies, for the ``key`` (e.g. namespace and pod) no honoured one has. For kube-state-metrics',
        whose every series has its namespace, so that a renamed one always has the renamed namespace: a window
        over which the scrape was changed reads whole, neither form is read as the other (its own pod, under a
        renamed scrape), and a renamed series (another target's: a tenant's exporter scraped without honouring
        its labels) says nothing of what the honoured ones say. ``over``: each selector within it, at ``{}``
        (e.g. ``max_over_time({}[1h])``)."""
        ns = RENAMED + self.namespace_label
        renamed = over.format(self.matchers(names, pods=pods, also=also, renamed=True))
        honoured = over.format(self.matchers(names, pods=pods, also=",".join(x for x in (also, f'{ns}=""') if x)))
        back = copied(renamed, ((label, RENAMED + label) for label in copied_labels))
        return f"{honoured} or on ({', '.join(key)}) {back}"

    def matchers(self, names: tuple[str, ...] | str | None = None, *, pods: bool = True, also: str = "",
                 renamed: bool = False) -> str:
        """The label matchers of one selector, e.g. ``{__name__=~"a|b",namespace=~"x",pod!=""}`` (the renamed
        pod labels where :meth:`renamed`, or ``renamed``: the exporter's own pods, and GPUs no pod uses, are then
        left out)."""
        parts = []
        if isinstance(names, str):
            names = (names,)
        if names:
            parts.append(f"__name__=~{quote(regex_alternatives(names))}" if len(names) > 1
                         else f"__name__={quote(names[0])}")
        ns, pod = self.pod_labels(names or (), renamed)
        parts.append(f"{ns}=~{quote(regex_alternatives(self.namespaces))}" if self.namespaces else f'{ns}!=""')
        if pods:
            parts.append(f'{pod}!=""')
        parts += [x for x in (self.extra, also) if x]
        return "{" + ",".join(parts) + "}"


def copied(expr: str, pairs: Iterable[tuple[str, str]]) -> str:
    """``expr`` with each (label, source) of ``pairs``: the label set from the source where a series has one."""
    for label, source in pairs:
        expr = f'label_replace({expr}, "{label}", "$1", "{source}", "(.+)")'
    return expr


@dataclass(frozen=True)
class Family:
    """One usage metric family: the canonical metric it fills and how its PromQL is formed.

    Gauges are reduced within each step (``max_over_time`` for memory and KV, ``avg_over_time`` for
    activity and queues) so a peak between two steps is not lost; counters use ``rate`` over the step.
    """

    metric: str  # canonical name from recommender.core.usage
    names: tuple[str, ...]  # exported names it reads (one __name__ regex: old and new vLLM names)
    over_time: str  # max_over_time | avg_over_time | rate
    agg: str = "max"  # how a pod's devices/engines combine: max (per device) or sum (demand)
    hint: str = ""  # what to check when no series exists at all (only families a report needs)
    fallback: tuple[str, ...] = ()  # read only where ``names`` are absent (GPU_UTIL, percent → 0-1)
    quantile: float | None = None  # for histograms: histogram_quantile of the bucket rates
    # gauges whose growth (deriv per pod) adds to a rate: requests arriving = finished + growth of running and
    # waiting, since vLLM counts no arrivals and its finished rate stops at the capacity being served
    growth: tuple[tuple[str, ...], ...] = ()
    over_objective: bool = False  # for histograms: the rate of observations above the TTFT objective

    @property
    def all_names(self) -> tuple[str, ...]:
        return self.names + self.fallback

    @property
    def read_names(self) -> tuple[str, ...]:
        """Every exported name its query selects: what sizes its chunks."""
        return self.all_names + tuple(n for g in self.growth for n in g)

    @property
    def exporter(self) -> bool:
        """Whether it reads dcgm-exporter's series only (whose pod labels a scrape may have renamed)."""
        return from_exporter(self.read_names)


FAMILIES: tuple[Family, ...] = (
    Family(m.FB_USED_MIB, (FB_USED,), "max_over_time", hint="is dcgm-exporter scraped, with pod mapping (-k)?"),
    Family(m.GR_ENGINE_ACTIVE_FRAC, (GR_ENGINE_ACTIVE,), "avg_over_time", fallback=(GPU_UTIL,),
           hint="is dcgm-exporter's DCP profiling enabled?"),
    Family(m.SM_ACTIVE_FRAC, (SM_ACTIVE,), "avg_over_time"),
    Family(m.POWER_W, (POWER,), "avg_over_time", agg="sum"),
    Family(m.KV_USAGE_FRAC, KV_USAGE, "max_over_time", hint="are the vLLM pods scraped?"),
    Family(m.REQUESTS_WAITING, WAITING, "avg_over_time", agg="sum"),
    Family(m.REQUESTS_RUNNING, RUNNING, "avg_over_time", agg="sum"),
    Family(m.REQUEST_RATE, REQUESTS, "rate", agg="sum", growth=(RUNNING, WAITING)),
    Family(m.PROMPT_TOKENS_RATE, PROMPT_TOKENS, "rate", agg="sum"),
    Family(m.GENERATION_TOKENS_RATE, GENERATION_TOKENS, "rate", agg="sum"),
    Family(m.PREEMPTIONS_RATE, PREEMPTIONS, "rate", agg="sum"),
    Family(m.TTFT_P95_S, TTFT_BUCKET, "rate", agg="sum", quantile=0.95),
    Family(m.TTFT_OVER_OBJECTIVE_RATE, TTFT_BUCKET, "rate", agg="sum", over_objective=True),
)
# FB_TOTAL_MIB is not read at full resolution: device memory does not change under a pod, so it
# comes from the coarse device query.
_BY_METRIC = {f.metric: f for f in FAMILIES}


def usage_query(metric: str, scope: Scope, window_s: int, objective_s: float | None = None) -> str:
    """The range-query expression for one canonical metric: one series per (namespace, pod). ``objective_s``:
    the TTFT objective the over-objective rate counts against (default: ``scaling.ttft_objective_s``'s)."""
    fam = _BY_METRIC.get(metric)
    if fam is None:
        raise ValueError(f"no query for metric {metric!r}")
    if fam.over_objective:
        default = ScalingSettings.model_fields["ttft_objective_s"].default
        return over_objective_query(fam, scope, window_s, default if objective_s is None else objective_s)
    by = scope.by + (", le" if fam.quantile else "")

    def reduce(names: tuple[str, ...]) -> str:
        over = scope.own(names, f"{fam.over_time}({scope.matchers(names)}[{window_s}s])")
        return f"{fam.agg} by ({by}) ({_each(fam, scope, over)})"

    query = _with_growth(fam, scope, window_s) if fam.growth else reduce(fam.names)
    if fam.quantile is not None:
        query = f"histogram_quantile({fam.quantile:g}, {query})"
    if fam.fallback:
        query += f" or {reduce(fam.fallback)} / 100"
    return query


def _le(bound: float) -> str:
    """A matcher for one bucket bound however the exporter wrote it (prometheus_client: "1.0"; Go: "1")."""
    text = "+Inf" if bound == math.inf else repr(float(bound))
    alts = {text, text.removesuffix(".0")} if text.endswith(".0") else {text}
    return f"le={quote(sorted(alts)[0])}" if len(alts) == 1 else f"le=~{quote(regex_alternatives(sorted(alts)))}"


def over_objective_query(fam: Family, scope: Scope, window_s: int, objective_s: float) -> str:
    """Observations per second above ``objective_s`` per pod: all of them (``le="+Inf"``) less those up to the
    objective (:func:`within_objective`). Clamped at 0: a restarted pod's counters fall."""
    def bucket(le: str) -> str:
        return (f"{fam.agg} by ({scope.by}) "
                f"({_each(fam, scope, f'{fam.over_time}({scope.matchers(fam.names, also=le)}[{window_s}s])')})")

    terms = [bucket(_le(b)) if w == 1.0 else f"{bucket(_le(b))} * {w:.6g}" for b, w in within_objective(objective_s)]
    within = terms[0] if len(terms) == 1 else f"({' + '.join(terms)})"
    return f"clamp_min({bucket(_le(math.inf))} - {within}, 0)"


GROWTH_LABEL = "rightsizer_term"  # tells the terms of a growth sum apart, so ``or`` keeps every one


def _with_growth(fam: Family, scope: Scope, window_s: int) -> str:
    """``fam``'s rate plus the growth (``deriv``) of its gauges, summed per pod and clamped at 0 (a restarted
    pod's gauges fall): one ``or`` of the labelled terms, so each selector is read once and a pod missing a
    gauge adds nothing for it."""
    def term(fn: str, names: tuple[str, ...], tag: str) -> str:
        return f'label_replace({fn}({scope.matchers(names)}[{window_s}s]), "{GROWTH_LABEL}", "{tag}", "", "")'

    terms = [term(fam.over_time, fam.names, "rate"), *(term("deriv", g, g[0]) for g in fam.growth)]
    return f"clamp_min({fam.agg} by ({scope.by}) ({_each(fam, scope, ' or '.join(terms))}), 0)"


def _each(fam: Family, scope: Scope, expr: str) -> str:
    """``expr``'s series as ``fam`` combines them per pod: a sum reads a series scraped twice once
    (:meth:`Scope.once`); a max is the same either way."""
    return scope.once(expr) if fam.agg == "sum" else expr


def workload_replicas_query(kind: str, names: tuple[tuple[str, str], ...], window_s: int, extra: str = "") -> str:
    """The most pods each named workload of ``kind`` had within each step (``KSM_WORKLOAD_REPLICAS``): 0 only
    where it had none throughout. ``names``: (namespace, name) pairs; one selector for all of them (namespace
    and name regexes: pairs they also select are dropped by the caller). Its namespace as kube-state-metrics
    labelled it, whether or not the scrape honoured that (:meth:`Scope.either_scrape`)."""
    metric, label = KSM_WORKLOAD_REPLICAS[kind]
    scope = Scope(tuple(sorted({ns for ns, _ in names})), extra=extra)
    expr = scope.either_scrape((metric,), ("namespace",), ("namespace", label), pods=False,
                               over=f"max_over_time({{}}[{window_s}s])",
                               also=f"{label}=~{quote(regex_alternatives(sorted({n for _, n in names})))}")
    return f"max by (namespace, {label}) ({expr})"


CENSUS_NAMES = tuple(sorted({n for f in FAMILIES for n in f.read_names} | {FB_FREE, CACHE_CONFIG}))


def census_selectors(scope: Scope, names: tuple[str, ...] = CENSUS_NAMES) -> tuple[str, ...]:
    """Every series the census counts: each exported name a family reads (recorded series have a census of
    their own: ``rules.census_query``). One selector, or two where dcgm-exporter names its pods in other labels
    (:attr:`Scope.exporter`): its names' and the others'."""
    return tuple(scope.matchers(part) for part in census_parts(scope, names))


def census_parts(scope: Scope, names: tuple[str, ...] = CENSUS_NAMES) -> tuple[tuple[str, ...], ...]:
    """``names`` in the groups one selector can pick (:func:`census_selectors`)."""
    if scope.exporter is None:
        return (names,)
    parts = (tuple(n for n in names if from_exporter((n,))), tuple(n for n in names if not from_exporter((n,))))
    return tuple(part for part in parts if part)


def census_query(selector: str) -> str:
    """How many series of each exported name ``selector`` picks at each step: the census where the server will
    not list them (``collect._census``). One query a selector: ``or`` matches label sets without the metric name,
    so it would keep one count of all."""
    return f"count by (__name__) ({selector})"


def device_query(scope: Scope, labels: tuple[str, ...]) -> str:
    """Device memory (FB_USED + FB_FREE, MiB) per pod and device, keeping the labels that name the device."""
    by = ", ".join((scope.namespace_label, scope.pod_label, *labels))
    return f"max by ({by}) ({scope.own((FB_USED, FB_FREE), f'{scope.matchers(FB_USED)} + {scope.matchers(FB_FREE)}')})"


def node_query(scope: Scope, node_labels: tuple[str, ...], window_s: int, cluster_labels: tuple[str, ...] = ()
               ) -> str:
    """MIG devices per node, GPU index and profile (one series per GPU without MIG), with or without pods:
    free GPUs count in a per-node MIG plan. A device shared by several pods is one series per pod, so
    devices are grouped by their instance ID before they are counted. Per ``cluster_labels`` too, so that
    two clusters' nodes of one name are told apart."""
    labels = ", ".join((*node_labels, "gpu", "modelName", "GPU_I_PROFILE", *cluster_labels))
    selector = "{" + ",".join([f"__name__={quote(FB_FREE)}", *([scope.extra] if scope.extra else [])]) + "}"
    return f"count by ({labels}) (group by ({labels}, GPU_I_ID) (last_over_time({selector}[{window_s}s])))"
