"""Prometheus HTTP access on prometheus-api-client: auth, TLS, timeouts, retries, and one-line errors.

prometheus-api-client holds the session (bearer token and extra headers, basic auth, CA bundle,
client certificate) and makes the instant queries. Range queries use the same session but decode the
answer with msgspec against its schema, each series' samples left undecoded and parsed straight into float
arrays (``points.py``): answers run to hundreds of thousands of points, ``json.loads`` of them was the largest
CPU cost of a fleet report, and a whole answer decoded as Python objects (about 130 bytes a point) was the
largest part of the client's memory while querying. The library's urllib3 retries are
switched off so that tenacity alone retries, with exponential backoff, what is worth retrying
(connection failures, timeouts, 429 and 5xx). Answers that retrying cannot fix (401/403, a bad query,
a query over the server's limits) fail at once, each as one line that says what to do. Every query is
counted in :class:`QueryStats`.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import msgspec
import requests
from prometheus_api_client import PrometheusApiClientException, PrometheusConnect
from urllib3.util.retry import Retry

from collectors.prometheus.encoding import IDENTITY, Encodings
from recommender.core.errors import PrometheusError
from recommender.core.settings_sources import PrometheusSettings

# Prometheus' data.result: [{"metric": {...}, "values": [[ts, "v"], ...]}] as an instant query answers it; a range
# query's "values" are Points, a sequence of (ts, value) float pairs backed by two arrays
Result = list[dict[str, Any]]
_LIMIT = re.compile(r"too many samples|maximum resolution|exceeded|max.?samples|limit", re.IGNORECASE)
_MESSAGE_CHARS = 240


class _Series(TypedDict):
    metric: dict[str, str]
    values: NotRequired[msgspec.Raw]  # [[ts, "v"], ...] undecoded, for points.decode


class _Samples(TypedDict):
    totalQueryableSamples: NotRequired[int]
    peakSamples: NotRequired[int]


class _Stats(TypedDict):
    samples: NotRequired[_Samples]


class _Data(TypedDict):
    result: list[_Series]
    stats: NotRequired[_Stats]  # with stats=all (Prometheus 2.35+; other servers may send none)


class _Answer(TypedDict):
    data: _Data


_RANGE_ANSWER = msgspec.json.Decoder(_Answer)


class _SeriesAnswer(TypedDict):
    data: list[dict[str, str]]  # /api/v1/series: each series' label set


_SERIES_ANSWER = msgspec.json.Decoder(_SeriesAnswer)


class Answer(list[dict[str, Any]]):
    """A range query's :data:`Result`, with the most samples the server said it held at once while evaluating it
    (Prometheus' ``peakSamples``; None where the server does not say)."""

    peak_samples: int | None = None


class PrometheusLimitError(PrometheusError):
    """The server refused a query as too large (samples, points, series): a smaller query may pass."""


class NoSeriesListing(PrometheusError):
    """The server (or a gateway in front of it) has no ``/api/v1/series``: only the query endpoints."""


class _Transient(PrometheusError):
    """A failure worth retrying (connection, timeout, 429, 5xx); re-raised as PrometheusError at the end."""


@dataclass
class QueryStats:
    """What one collection cost the server: printed by the CLI and the scale benchmark."""

    queries: int = 0
    retries: int = 0
    splits: int = 0  # queries halved after the server found them too large
    recuts: int = 0  # times a family's chunks not yet sent were cut again from what its answers cost (Measured)
    series: int = 0
    points: int = 0
    max_points_per_query: int = 0
    max_points_per_series: int = 0
    seconds: float = 0.0
    samples: int = 0  # samples the server loaded for our range queries, as it reports them (stats=all)
    peak_samples: int = 0  # the most samples one query held at once, as the server reports it
    sources: str = ""  # which families were read from recording rules and which raw (rules.RulePlan.line)
    uncompressed: int = 0  # range answers asked without compression (encoding.Encodings)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def record(self, result: Result, seconds: float) -> None:
        sizes = [len(r.get("values") or ()) or 1 for r in result]
        with self._lock:
            self.queries += 1
            self.series += len(sizes)
            self.points += sum(sizes)
            self.max_points_per_query = max(self.max_points_per_query, sum(sizes))
            self.max_points_per_series = max(self.max_points_per_series, max(sizes, default=0))
            self.seconds += seconds

    def loaded(self, samples: int, peak: int) -> None:
        """What the server said one query loaded (all of it) and held (at most at once)."""
        with self._lock:
            self.samples += samples
            self.peak_samples = max(self.peak_samples, peak)

    def count(self, field: str) -> None:
        with self._lock:
            setattr(self, field, getattr(self, field) + 1)

    def line(self) -> str:
        return (f"prometheus: {self.queries} queries ({self.retries} retried, {self.splits} split, "
                f"{self.recuts} re-cut), "
                f"{self.series:,} series, {self.points:,} points; largest answer {self.max_points_per_query:,} "
                f"points, {self.max_points_per_series:,} per series"
                + (f"; {self.samples:,} samples loaded, at most {self.peak_samples:,} held by one query"
                   if self.samples else "")
                + (f"; {self.uncompressed} answers uncompressed" if self.uncompressed else "")
                + (f"; {self.sources}" if self.sources else ""))


def _session(p: PrometheusSettings) -> requests.Session:
    s = requests.Session()
    s.verify = False if p.insecure_skip_verify else (p.ca_file or True)
    if p.client_cert:
        s.cert = (p.client_cert, p.client_key) if p.client_key else p.client_cert
    return s


class PromClient:
    """A Prometheus-compatible API (Prometheus, Thanos, Mimir, VictoriaMetrics) as we query it."""

    def __init__(self, p: PrometheusSettings, stats: QueryStats | None = None) -> None:
        if not p.url:
            raise PrometheusError("no Prometheus URL: pass --prometheus-url or set PROMETHEUS_URL")
        self.settings = p
        self.url = p.url.rstrip("/")
        self.stats = stats or QueryStats()
        headers = dict(p.headers)
        if p.bearer_token:
            headers["Authorization"] = f"Bearer {p.bearer_token}"
        auth = (p.username, p.password or "") if p.username else None
        if p.insecure_skip_verify:
            import urllib3

            urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        self._headers, self._auth, self._session = headers or None, auth, _session(p)
        # an Accept-Encoding the user set is sent as given; otherwise each range query's is chosen by measure
        given = any(k.lower() == "accept-encoding" for k in headers)
        self.encodings: Encodings | None = None if given else Encodings(p.compression)
        self._prom = PrometheusConnect(url=self.url, headers=self._headers, auth=auth, session=self._session,
                                       retry=Retry(total=0, raise_on_status=False), timeout=p.timeout_s)
        self._lock = threading.Lock()
        self._promised: dict[str, Future[Result]] = {}  # request -> its answer, sent ahead (``promise``)
        self._in_flight: int | None = None
        self._cores: tuple[int | None] | None = None  # the runtime page's answer, once asked

    def check(self) -> None:
        """One cheap query, so a wrong URL or credentials fail before any real work starts."""
        self._call(lambda: self._prom.custom_query("vector(1)"), "check the connection")

    @property
    def in_flight(self) -> int:
        """Queries to send at once: ``max_workers``, or the server's cores where fewer (``match_server_cores``);
        the server is asked on first use, once."""
        if self._in_flight is None:
            cores = self.server_cores() if self.settings.match_server_cores else None
            self._in_flight = min(self.settings.max_workers, cores or self.settings.max_workers)
        return self._in_flight

    def server_cores(self) -> int | None:
        """The cores the server says its queries run on (Prometheus' GOMAXPROCS), or None where it does not say:
        Thanos, Mimir and VictoriaMetrics have no such page, and a proxy may refuse it. Asked once, not retried."""
        if self._cores is None:
            self._cores = (self._ask_cores(),)
        return self._cores[0]

    @property
    def is_prometheus(self) -> bool:
        """Whether the server is Prometheus itself (it answers Prometheus' runtime page). Its series listings name a
        series only where a chunk of its samples reaches into the span asked; another server's may name every
        series of a block or a day in it."""
        return self.server_cores() is not None

    def _ask_cores(self) -> int | None:
        try:
            r = self._get("status/runtimeinfo")
            cores = r.json()["data"]["GOMAXPROCS"] if r.status_code == 200 else None
        except (requests.exceptions.RequestException, ValueError, KeyError, TypeError):
            return None
        return cores if isinstance(cores, int) and not isinstance(cores, bool) and cores > 0 else None

    def query(self, promql: str, at_s: float) -> Result:
        """An instant query at ``at_s`` (unix seconds)."""
        return self._answer("query", {"query": promql, "time": at_s})

    def query_range(self, promql: str, start_s: float, end_s: float, step_s: float) -> Result:
        """A range query; ``start_s``/``end_s`` are on the step grid, so chunks join without gaps."""
        return self._answer("query_range", range_params(promql, start_s, end_s, step_s))

    def promise(self, endpoint: str, params: dict[str, Any]) -> Future[Result]:
        """A future answer to the request ``endpoint`` (``query`` or ``query_range``) with ``params`` (as
        :func:`range_params` makes them), which that request, when made, waits for instead of asking the server
        again; whoever promised it sets its result or exception (``ahead``: sent before the collector imports)."""
        future: Future[Result] = Future()
        with self._lock:
            self._promised[_request_key(endpoint, params)] = future
        return future

    @property
    def promised(self) -> int:
        """Requests promised (:meth:`promise`) that no request has taken yet."""
        with self._lock:
            return len(self._promised)

    def send(self, endpoint: str, params: dict[str, Any]) -> Result:
        """Ask the server now, whatever was promised."""
        promql = str(params["query"])
        if endpoint == "query":
            _log_query(endpoint, params)
            return self._call(lambda: self._prom.custom_query(promql, params={"time": params["time"]}), promql)
        way = self.encodings.pick() if self.encodings is not None else None
        _log_query(endpoint, params, way)
        return self._call(lambda: self._range(params, way), promql)

    def _answer(self, endpoint: str, params: dict[str, Any]) -> Result:
        if self._promised:
            with self._lock:
                promised = self._promised.pop(_request_key(endpoint, params), None)
            if promised is not None:
                return promised.result()
        return self.send(endpoint, params)

    def series(self, match: str, start_s: float, end_s: float) -> Result:
        """The series ``match`` selects with a chunk of samples within ``start_s``–``end_s``, each as ``{"metric":
        labels}``: from the server's index alone (``/api/v1/series``), so no sample is read or decoded."""
        params = {"match[]": match, "start": round(start_s), "end": round(end_s)}
        _log_query("series", params)
        return self._call(lambda: self._get_series(params), match)

    def _get_series(self, params: dict[str, Any]) -> Result:
        r = self._get("series", params)
        if r.status_code in (403, 404, 405, 501):  # 403: a proxy that allows queries only (they passed check())
            raise NoSeriesListing(f"{self.url} lists no series (HTTP {r.status_code} from /api/v1/series)")
        if r.status_code != 200:
            raise self._status_error(r.status_code, _server_message(r.text), str(params["match[]"]))
        return [{"metric": labels} for labels in _SERIES_ANSWER.decode(r.content)["data"]]

    def _range(self, params: dict[str, Any], way: str | None = None) -> Result:
        """A range answer decoded; ``way``: the encoding asked (:class:`Encodings`), told how fast the answer came."""
        t0 = time.perf_counter()
        r = self._get("query_range", params, way)
        if r.status_code != 200:
            raise self._status_error(r.status_code, _server_message(r.text), str(params["query"]))
        if way is not None and self.encodings is not None:  # the body's time: after the headers, which came
            # once the server had evaluated the query and encoded its JSON, whichever way was asked
            self.encodings.saw(way, len(r.content), time.perf_counter() - t0 - r.elapsed.total_seconds())
            if way == IDENTITY:
                self.stats.count("uncompressed")
        data = _RANGE_ANSWER.decode(r.content)["data"]
        samples = data.get("stats", {}).get("samples", {})
        if samples:
            self.stats.loaded(samples.get("totalQueryableSamples", 0), samples.get("peakSamples", 0))
        result = data["result"]
        from collectors.prometheus.points import decode_many  # numpy: imported by then, or while the answer came

        points = iter(decode_many([item["values"] for item in result if "values" in item]))
        answer = Answer({"metric": item["metric"], "values": next(points)} if "values" in item
                        else {"metric": item["metric"]} for item in result)
        answer.peak_samples = samples.get("peakSamples")
        return answer

    def _get(self, endpoint: str, params: dict[str, Any] | None = None, way: str | None = None) -> requests.Response:
        """One GET of ``/api/v1/<endpoint>`` on our session, with its headers, auth and timeout; ``way``
        ``identity`` asks for the answer uncompressed (otherwise as requests asks: gzip, deflate)."""
        s = self._session  # verify and cert passed again, as the library does: REQUESTS_CA_BUNDLE would win otherwise
        headers = {**(self._headers or {}), "Accept-Encoding": IDENTITY} if way == IDENTITY else self._headers
        return s.get(f"{self.url}/api/v1/{endpoint}", params=params, headers=headers, auth=self._auth,
                     verify=s.verify, cert=s.cert, timeout=self.settings.timeout_s)

    def _call(self, fn: Any, what: str) -> Result:
        """``fn``'s answer; what is worth retrying (:class:`_Transient`) is tried ``retries`` more times by tenacity,
        0.5 s doubling (at most 8 s) between tries. Tenacity is imported only once a try has failed: its import
        (with asyncio) cost every report ~0.1 s, and most never retry."""
        try:
            return self._timed(fn, what)
        except _Transient as exc:
            failed: _Transient | None = exc

        from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

        def again() -> Result:  # the try that failed above counts as tenacity's first
            nonlocal failed
            if failed is not None:
                exc, failed = failed, None
                raise exc
            return self._timed(fn, what)

        p = self.settings
        retrying = Retrying(
            stop=stop_after_attempt(p.retries + 1), wait=wait_exponential(multiplier=0.5, max=8),
            retry=retry_if_exception(lambda e: isinstance(e, _Transient)), reraise=True,
            before_sleep=lambda _state: self.stats.count("retries"),
        )
        try:
            return retrying(again)
        except _Transient as exc:
            raise PrometheusError(f"{exc} (after {p.retries + 1} attempts)") from None

    def _timed(self, fn: Any, what: str) -> Result:
        t0 = time.perf_counter()
        result = self._once(fn, what)
        self.stats.record(result, time.perf_counter() - t0)
        return result

    def _once(self, fn: Any, what: str) -> Result:
        try:
            result = fn()
        except PrometheusApiClientException as exc:
            raise self._http_error(str(exc), what) from None
        except requests.exceptions.SSLError as exc:
            raise PrometheusError(f"TLS with Prometheus at {self.url} failed: {_short(exc)}; "
                                  "check --ca-file, --client-cert/--client-key or --insecure") from None
        except requests.exceptions.Timeout:
            raise _Transient(f"Prometheus at {self.url} did not answer within "
                             f"{self.settings.timeout_s:g} s") from None
        except requests.exceptions.ConnectionError as exc:
            why = "connection refused" if "refused" in str(exc).lower() else _short(exc)
            raise _Transient(f"cannot reach Prometheus at {self.url} ({why})") from None
        except (ValueError, KeyError, TypeError) as exc:  # 200 but not a Prometheus API answer (msgspec's too)
            raise PrometheusError(f"{self.url} did not answer like a Prometheus API ({_short(exc)}); "
                                  "is --prometheus-url the server's base URL?") from None
        if not isinstance(result, list):
            raise PrometheusError(f"{self.url} sent an unexpected answer to {_short(what)}")
        return result

    def _http_error(self, text: str, what: str) -> PrometheusError:
        """prometheus-api-client's ``HTTP Status Code N (b'body')`` as our error."""
        hit = re.match(r"HTTP Status Code (\d+) \((.*)\)$", text, re.DOTALL)
        return self._status_error(int(hit.group(1)) if hit else 0, _server_message(hit.group(2) if hit else text),
                                  what)

    def _status_error(self, status: int, detail: str, what: str) -> PrometheusError:
        where = f"Prometheus at {self.url}"
        if status in (401, 403):
            return PrometheusError(f"{where} refused our credentials (HTTP {status}); check --bearer-token "
                                   "(PROMETHEUS_TOKEN) or --username/--password")
        if status == 404:
            return PrometheusError(f"{where} has no query API (HTTP 404); is --prometheus-url the base URL "
                                   "(without /api/v1)?")
        if status == 429:
            return _Transient(f"{where} is rate-limiting us (HTTP 429): {detail}")
        if _LIMIT.search(detail) or "timed out" in detail:  # smaller queries pass both
            return PrometheusLimitError(f"{where} refused a query as too large (HTTP {status}): {detail}")
        if status >= 500:
            return _Transient(f"{where} failed (HTTP {status}): {detail}")
        return PrometheusError(f"{where} rejected a query (HTTP {status}): {detail} — query: {_short(what)}")


def range_params(promql: str, start_s: float, end_s: float, step_s: float) -> dict[str, Any]:
    """A range query's parameters as the server gets them (``stats``: the samples it loaded and held, for the
    cost line)."""
    return {"query": promql, "start": round(start_s), "end": round(end_s), "step": f"{step_s:g}s", "stats": "all"}


def _request_key(endpoint: str, params: dict[str, Any]) -> str:
    return json.dumps([endpoint, params], sort_keys=True)


QUERY_LOG_ENV = "RIGHTSIZER_QUERY_LOG"  # a file: each query appended as a JSON line (benchmarks/scale.py)
_LOG_LOCK = threading.Lock()


def _log_query(endpoint: str, params: dict[str, Any], way: str | None = None) -> None:
    """Note the query in ``$RIGHTSIZER_QUERY_LOG`` when it is set, so the same queries can be replayed (``way``: the
    encoding a range query asked, where chosen)."""
    path = os.environ.get(QUERY_LOG_ENV)
    if path:
        line = json.dumps({"endpoint": endpoint, "params": params} | ({"encoding": way} if way else {})) + "\n"
        with _LOG_LOCK, open(path, "a", encoding="utf-8") as fh:
            fh.write(line)


def _server_message(raw: str) -> str:
    """The ``error`` field of Prometheus' JSON error body (given as the repr of bytes), on one line."""
    text = raw
    if raw[:2] in ("b'", 'b"'):
        try:
            text = bytes(raw[2:-1], "utf-8").decode("unicode_escape")
        except (UnicodeDecodeError, ValueError):
            text = raw[2:-1]
    try:
        body = json.loads(text)
        text = str(body.get("error") or body) if isinstance(body, dict) else text
    except ValueError:
        pass
    return _short(text)


def _short(thing: object) -> str:
    flat = " ".join(str(thing).split())
    return flat if len(flat) <= _MESSAGE_CHARS else flat[: _MESSAGE_CHARS - 1] + "…"
