"""Where an aiohttp app meets the network: idle and header timeouts, a cap on open connections, and
malformed or oversized requests answered and logged in one line.

aiohttp's ``keepalive_timeout`` runs from the moment a connection opens until a whole request has
arrived (and again after each response), so it is both the idle and the header timeout; TCPSite sets
no TLS handshake timeout and no connection cap, so the listening socket is opened here with the
runner's server behind a protocol factory that counts what is open.
"""

from __future__ import annotations

import asyncio
import ssl
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong

from recommender.serve.lookup import log
from recommender.serve.settings import ServeSettings

BACKLOG = 128
_HEADERS_TOO_LARGE = ("Too many headers", "Got more than")  # aiohttp's messages for the header limits


def too_large(exc: BaseException | None) -> bool:
    """Whether a parse error is a header limit (size of a line, number of fields): 431, not 400."""
    return isinstance(exc, LineTooLong) or (isinstance(exc, BadHttpMessage) and
                                            str(exc.message).startswith(_HEADERS_TOO_LARGE))


def one_line(exc: BaseException | None) -> str:
    text = str(getattr(exc, "message", "") or exc or "").strip()
    return " ".join(text.split())[:200]


class _Handler(web.RequestHandler):
    """aiohttp's protocol, with parse errors logged as one line (the client's fault, not ours) and
    header limits answered 431 Request Header Fields Too Large."""

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status == HTTPStatus.BAD_REQUEST and too_large(exc):
            status, message = HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "request header fields too large"
        return super().handle_error(request, status, exc, message)

    def log_exception(self, *args: Any, **kw: Any) -> None:
        exc = kw.get("exc_info")
        if isinstance(exc, BadHttpMessage):
            status = HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE if too_large(exc) else HTTPStatus.BAD_REQUEST
            peer = args[1] if len(args) > 1 else "?"
            log.info("refused a malformed request from %s (%d): %s", peer, status, one_line(exc))
            return
        super().log_exception(*args, **kw)


class _Closing(asyncio.Protocol):
    """What a connection beyond the cap gets: closed as soon as it opens."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


class Gate:
    """Protocol factory: aiohttp's handler while fewer than ``limit`` connections are open, else a
    closing one; the first refusal of each full spell is logged (a flood would flood the log)."""

    def __init__(self, server: web.Server, settings: ServeSettings) -> None:
        self.server, self.limit, self.full = server, settings.max_connections, False
        self.idle_timeout_s = settings.idle_timeout_s

    def __call__(self) -> asyncio.Protocol:
        if len(self.server.connections) >= self.limit:
            if not self.full:
                log.warning("connection limit (%d) reached: closing new connections until some end", self.limit)
            self.full = True
            return _Closing()
        self.full = False
        return _Handler(self.server, loop=asyncio.get_running_loop(), keepalive_timeout=self.idle_timeout_s,
                        access_log=None)  # type: ignore[arg-type]  # None: no access log, as AppRunner passes it


async def listen(runner: web.AppRunner, host: str, port: int, tls: ssl.SSLContext | None,
                 settings: ServeSettings) -> asyncio.Server:
    """Open ``host:port`` for ``runner``'s app (set up already); OSError when it cannot listen."""
    assert runner.server is not None, "set up the runner first"
    handshake_s = settings.idle_timeout_s if tls is not None else None  # asyncio refuses one without TLS
    return await asyncio.get_running_loop().create_server(Gate(runner.server, settings), host, port, ssl=tls,
                                                          backlog=BACKLOG, ssl_handshake_timeout=handshake_s)
