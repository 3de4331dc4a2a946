"""KEDA external scaler (gRPC, ``externalscaler.proto``) over the latest plan.

Workload identity: the ScaledObject's namespace plus trigger metadata ``workload`` (``Kind/name`` or
``name``). The metric is the workload's ScalingPlan metric (e.g. ``request_rate_per_s``); KEDA's
``s<index>-`` prefix is accepted on GetMetrics. Floats follow KEDA's rules: ``metricValueFloat`` is
used only when > 0, so the deprecated int fields carry the same value rounded (0 stays 0), and
``targetSizeFloat`` is always > 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator

import grpc

from recommender.serve.lookup import Lookup
from recommender.serve.proto import externalscaler_pb2 as pb
from recommender.serve.proto import externalscaler_pb2_grpc as pb_grpc
from recommender.serve.ratelimit import RateLimiter, client_of_peer
from recommender.serve.targets import ErrorKind, TargetError, WorkloadTarget

GRPC_CODES = {
    ErrorKind.NOT_FOUND: grpc.StatusCode.NOT_FOUND,
    ErrorKind.INVALID: grpc.StatusCode.INVALID_ARGUMENT,
    ErrorKind.NO_SCALING: grpc.StatusCode.FAILED_PRECONDITION,
    ErrorKind.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
}
_KEDA_PREFIX = re.compile(r"^s\d+-")


class PlanSignal:
    """Wakes the open streams when a plan is published (from any thread) or the server stops.

    ``version`` counts wake-ups (changed on the loop only), so a stream that records it before
    evaluating never misses a publish that lands before it starts to wait.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop, self._event, self.closed, self.version = loop, asyncio.Event(), False, 0

    def notify_threadsafe(self) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._fire)

    def close(self) -> None:
        self.closed = True
        self._fire()

    def _fire(self) -> None:
        self.version += 1
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def wait(self, seen: int, timeout_s: float) -> None:
        """Return at the next wake-up after ``seen`` (at once if it already came), or after ``timeout_s``."""
        if self.version != seen or self.closed:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._event.wait(), timeout_s)


class ScalerServicer(pb_grpc.ExternalScalerServicer):
    """The five RPCs; every error is a status code with a one-line message."""

    def __init__(self, lookup: Lookup, signal: PlanSignal, limiter: RateLimiter) -> None:
        self.lookup, self.signal, self.limiter = lookup, signal, limiter

    async def IsActive(self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext) -> pb.IsActiveResponse:
        await self._admit(context)
        return pb.IsActiveResponse(result=(await self._target(request, context)).active)

    async def StreamIsActive(self, request: pb.ScaledObjectRef,
                             context: grpc.aio.ServicerContext) -> AsyncIterator[pb.IsActiveResponse]:
        await self._admit(context)
        last: bool | None = None
        while not self.signal.closed:
            seen = self.signal.version
            active = (await self._target(request, context)).active
            if active != last:
                yield pb.IsActiveResponse(result=active)
                last = active
            await self.signal.wait(seen, self.lookup.settings.stream_check_s)

    async def GetMetricSpec(self, request: pb.ScaledObjectRef,
                            context: grpc.aio.ServicerContext) -> pb.GetMetricSpecResponse:
        await self._admit(context)
        return metric_spec(await self._target(request, context))

    async def StreamMetricSpec(self, request: pb.ScaledObjectRef,
                               context: grpc.aio.ServicerContext) -> AsyncIterator[pb.GetMetricSpecResponse]:
        await self._admit(context)
        last: pb.GetMetricSpecResponse | None = None
        while not self.signal.closed:
            seen = self.signal.version
            spec = metric_spec(await self._target(request, context))
            if spec != last:
                yield spec
                last = spec
            await self.signal.wait(seen, self.lookup.settings.stream_check_s)

    async def GetMetrics(self, request: pb.GetMetricsRequest,
                         context: grpc.aio.ServicerContext) -> pb.GetMetricsResponse:
        await self._admit(context)
        target = await self._target(request.scaledObjectRef, context)
        asked = _KEDA_PREFIX.sub("", request.metricName)
        if asked != target.metric:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"metric {request.metricName!r} is not served for {target.ref}: "
                                f"it scales on {target.metric!r}")
        return pb.GetMetricsResponse(metricValues=[metric_value(target)])

    async def _admit(self, context: grpc.aio.ServicerContext) -> None:
        if not self.limiter.allow(client_of_peer(context.peer())):
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rate limit: too many requests from this client")

    async def _target(self, ref: pb.ScaledObjectRef, context: grpc.aio.ServicerContext) -> WorkloadTarget:
        try:
            workload = ref.scalerMetadata.get("workload", "")
            if not workload:
                raise TargetError(ErrorKind.INVALID, "trigger metadata 'workload' is required (Kind/name or name)")
            return self.lookup.target(ref.namespace, workload)
        except TargetError as exc:
            await context.abort(GRPC_CODES[exc.kind], str(exc))
            raise AssertionError from exc  # unreachable: abort raises


def metric_spec(target: WorkloadTarget) -> pb.GetMetricSpecResponse:
    size = target.target_per_replica
    spec = pb.MetricSpec(metricName=target.metric, targetSize=max(1, round(size)), targetSizeFloat=size)
    return pb.GetMetricSpecResponse(metricSpecs=[spec])


def metric_value(target: WorkloadTarget) -> pb.MetricValue:
    value = max(0.0, target.value)
    return pb.MetricValue(metricName=target.metric, metricValue=round(value), metricValueFloat=value)
