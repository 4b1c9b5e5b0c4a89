"""What one client may hold of the service before any handler runs: connections, their time, their bodies.

uvicorn and h11 give a connection cap (``limit_concurrency``, ``max_connections``), a keep-alive timer,
a head size limit and the proxy headers; none of them bounds a request's time once its head has
arrived. uvicorn cancels its keep-alive timer on any byte, and a request that announces a body the
handler never reads (``GET /healthz`` with ``Content-Length: 1000000000``, one byte now and then)
keeps its connection after the answer, for as long as the client likes. Starlette and FastAPI see a
request only when its head is whole and never its connection. So the rules that need a clock live
here, in uvicorn's own h11 protocol class (:class:`Guarded`), and the rules about requests in an ASGI
middleware (:class:`Gate`):

* a request head must arrive within ``header_timeout_s`` of the connection's start or its last
  answer (else the connection is closed);
* a request body, whoever sends it and whether or not anyone reads it, must arrive within
  ``upload_timeout_s + header_timeout_s`` in all and, after ``header_timeout_s``, at an average of at
  least ``min_body_rate_kib_s`` (else 408 and the connection is closed);
* at most ``connections_per_ip`` connections are open from one address (a trusted proxy's excepted:
  the proxy limits its clients, and uvicorn reads the client's address from its X-Forwarded-For);
* a GET or HEAD that announces a body is refused (400) and its connection closed;
* requests that carry no credentials (the pages, the queue, a wrong Authorization header until it is
  refused) are capped per address: ``anonymous_per_ip`` in progress and
  ``anonymous_per_ip_per_minute`` begun (429, closed). A request that authenticates stops counting;
  a trusted proxy's own address (one that did not name its client) is not capped.

Every refusal here is the service's JSON (``{"error": ...}``) with ``Connection: close``.
"""
from __future__ import annotations

import json
import logging
import time
from collections import Counter, deque
from collections.abc import Callable

import h11
import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from grader.serve.settings import Settings

log = logging.getLogger("grader.serve")
TICK_S = 1.0  # how often a connection's clock is read
LINGER_S = 2.0  # a refused connection is half-closed, and what the client still sends discarded, this long
AUTHENTICATED = "grader.authenticated"  # in a request's scope: call it once the request has authenticated
NO_BODY_METHODS = frozenset({"GET", "HEAD"})
PHRASES = {400: "Bad Request", 408: "Request Timeout", 429: "Too Many Requests", 503: "Service Unavailable"}


def raw_error(status: int, message: str, retry_after: int | None = None) -> bytes:
    """A whole HTTP/1.1 answer with the service's JSON error and ``Connection: close``, for a
    connection no handler answers."""
    body = json.dumps({"error": message}).encode()
    head = [f"HTTP/1.1 {status} {PHRASES.get(status, 'Error')}", "content-type: application/json",
            f"content-length: {len(body)}", "connection: close"]
    if retry_after is not None:
        head.append(f"retry-after: {retry_after}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Guarded(H11Protocol):
    """uvicorn's h11 protocol with a clock per connection (see the module docstring). The class
    attributes are set per server by :func:`server_config`; ``open_by_ip`` is that server's count."""

    head_timeout_s = 10.0
    body_timeout_s = 130.0
    min_rate = 16 * 1024.0  # bytes per second
    per_ip = 0
    trusted: frozenset[str] = frozenset()
    open_by_ip: Counter[str] = Counter()

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._ip = self.client[0] if self.client else ""
        self._counted = False
        self._received = 0
        self._phase: tuple[object, int] = (h11.IDLE, 0)
        self._phase_since, self._phase_bytes = self.loop.time(), 0
        self._timer = None
        self._draining = False
        if self.per_ip and self._ip not in self.trusted and self.open_by_ip[self._ip] >= self.per_ip:
            log.warning("refused a connection from %s: it has %d open already", self._ip, self.open_by_ip[self._ip])
            self._refuse(503, f"too many connections from your address: at most {self.per_ip} at once; close "
                              "some and try again", retry_after=5)
            return
        self.open_by_ip[self._ip] += 1
        self._counted = True
        self._timer = self.loop.call_later(TICK_S, self._tick)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._counted:
            self._counted = False
            self.open_by_ip[self._ip] -= 1
            if self.open_by_ip[self._ip] <= 0:
                del self.open_by_ip[self._ip]
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._draining:
            return
        self._received += len(data)
        super().data_received(data)
        self._observe()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._observe()

    def _observe(self) -> None:
        """Start the clock of a new phase: waiting for a head (IDLE) or receiving a body (SEND_BODY)."""
        phase = (self.conn.their_state, id(self.cycle))
        if phase != self._phase:
            self._phase, self._phase_since, self._phase_bytes = phase, self.loop.time(), self._received

    def _tick(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        self._observe()
        state, elapsed = self.conn.their_state, self.loop.time() - self._phase_since
        if state is h11.IDLE and elapsed > self.head_timeout_s:
            self.transport.close()  # no whole head in time: nothing to answer
            return
        if state is h11.SEND_BODY:
            got = self._received - self._phase_bytes
            if elapsed > self.body_timeout_s:
                log.info("closed a connection from %s: its body took over %g s (%d bytes)", self._ip,
                         self.body_timeout_s, got)
                self._refuse(408, f"the request's body took longer than {self.body_timeout_s:g} s and was "
                                  "stopped; send it again over a faster connection")
                return
            # Paused reading (the handler has not taken what came) is the service's wait, not the client's.
            if elapsed > self.head_timeout_s and not self.flow.read_paused and got < self.min_rate * elapsed:
                log.info("closed a connection from %s: its body came too slow (%.1f KiB/s, under the %g KiB/s minimum)",
                         self._ip, got / elapsed / 1024, self.min_rate / 1024)
                self._refuse(408, f"the request's body arrived slower than {self.min_rate / 1024:g} KiB/s and "
                                  "was stopped; send it again over a faster connection")
                return
        self._timer = self.loop.call_later(TICK_S, self._tick)

    def _refuse(self, status: int, message: str, retry_after: int | None = None) -> None:
        cycle = self.cycle
        if cycle is None or not cycle.response_started:
            self.transport.write(raw_error(status, message, retry_after))
        if cycle is not None:
            cycle.disconnected = True  # the handler's reads end and its answer goes nowhere
            cycle.message_event.set()
        # A lingering close: the answer, then our end's FIN, while what the client is still sending is read and
        # dropped; closing at once with unread bytes would reset the connection and lose the answer.
        self._draining = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


def _announces_body(headers: list[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"", b"0")):
            return True
    return False


class Gate:
    """The per-request rules of the module docstring, before routing (so a 404 counts too)."""

    def __init__(self, app: ASGIApp, settings: Settings, clock: Callable[[], float] = time.monotonic) -> None:
        self.app, self.settings, self.clock = app, settings, clock
        self.in_progress: Counter[str] = Counter()
        self.begun: dict[str, deque[float]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        if scope.get("method") in NO_BODY_METHODS and _announces_body(headers):
            await _answer(send, 400, f"a {scope['method']} request carries no body, and this one announced one; "
                                     "send it without Content-Length or Transfer-Encoding")
            return
        ip = (scope.get("client") or ("", 0))[0]
        s = self.settings
        if ip in s.trusted_proxies:  # a proxy that did not name its client: the proxy limits its clients
            await self.app(scope, receive, send)
            return
        now = self.clock()
        begun = self.begun.setdefault(ip, deque())
        while begun and begun[0] < now - 60:
            begun.popleft()
        if not begun:
            del self.begun[ip]
        if ip not in self.begun and len(self.begun) > 100_000:  # a flood of addresses: forget the oldest
            self.begun.pop(next(iter(self.begun)))
        if s.anonymous_per_ip and self.in_progress[ip] >= s.anonymous_per_ip:
            await _answer(send, 429, f"too many requests without credentials from your address in progress "
                                     f"(at most {s.anonymous_per_ip}); try again in a few seconds", 5)
            return
        if s.anonymous_per_ip_per_minute and len(self.begun.get(ip, ())) >= s.anonymous_per_ip_per_minute:
            await _answer(send, 429, f"too many requests without credentials from your address (at most "
                                     f"{s.anonymous_per_ip_per_minute} a minute); try again in a minute", 60)
            return
        counted = True
        self.in_progress[ip] += 1
        self.begun.setdefault(ip, deque()).append(now)
        mine = self.begun[ip]

        def authenticated() -> None:  # the request proved its credentials: it stops counting as anonymous
            nonlocal counted
            if counted:
                counted = False
                self._release(ip)
                if mine:
                    mine.pop()

        scope[AUTHENTICATED] = authenticated
        try:
            await self.app(scope, receive, send)
        finally:
            if counted:
                self._release(ip)

    def _release(self, ip: str) -> None:
        self.in_progress[ip] -= 1
        if self.in_progress[ip] <= 0:
            del self.in_progress[ip]


async def _answer(send: Send, status: int, message: str, retry_after: int | None = None) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    if retry_after is not None:
        headers.append((b"retry-after", str(retry_after).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def server_config(app, settings: Settings) -> uvicorn.Config:
    """uvicorn's configuration for the service: the clocks and caps above, the connection cap, and the
    client's address from a trusted proxy's X-Forwarded-For."""
    s = settings
    protocol = type("GuardedHere", (Guarded,), {
        "head_timeout_s": s.header_timeout_s, "body_timeout_s": s.upload_timeout_s + s.header_timeout_s,
        "min_rate": s.min_body_rate_kib_s * 1024, "per_ip": s.connections_per_ip,
        "trusted": frozenset(s.trusted_proxies), "open_by_ip": Counter()})
    return uvicorn.Config(app, host=s.host, port=s.port, log_level="warning", access_log=False, http=protocol,
                          limit_concurrency=s.max_connections, proxy_headers=True,
                          forwarded_allow_ips=list(s.trusted_proxies) or None)
