"""What stands between the port and the routes: the Host allow-list and Origin check (DNS rebinding,
cross-site POSTs), request bodies bounded in bytes and in time, request headers bounded in time,
and HTTP range checks per RFC 9110 Sec. 14 (an invalid range is ignored, an unsatisfiable one is a
416). Every refusal is the service's JSON error `{"error", "status"}`.

Written as ASGI middleware and a subclass of uvicorn's h11 protocol because neither Starlette's
`TrustedHostMiddleware` (plain-text errors, no Origin check) nor uvicorn (no header or body
timeouts) offers them.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

import h11
from starlette.exceptions import HTTPException
from starlette.responses import FileResponse, JSONResponse
from uvicorn.protocols.http.h11_impl import H11Protocol

LOCAL_NAMES = ("localhost",)
CLOSE = {"Connection": "close"}  # an answer given before the whole body was read ends the connection


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message, "status": status}, status_code=status, headers=headers)


def default_allowed_hosts(bound: str) -> tuple[str, ...]:
    """The bound address and `localhost` (`--allowed-host` adds names, e.g. the machine's)."""
    return tuple(dict.fromkeys([bound.strip("[]").lower(), *LOCAL_NAMES]))


def host_name(authority: str) -> str:
    """`name` of a Host header `name[:port]` (IPv6 literals in brackets), lower-cased."""
    authority = authority.strip().lower()
    if authority.startswith("["):
        return authority[1 : authority.find("]")] if "]" in authority else authority
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


class HostGuard:
    """ASGI middleware: answers 421 to a `Host` not in `allowed` (a DNS-rebinding page's requests carry
    its own name) and 403 to a POST whose `Origin` is not this server as named by `Host` (another
    site's page: multipart and text/plain POSTs need no CORS preflight, so the browser sends them)."""

    def __init__(self, app, allowed: Iterable[str]) -> None:
        self.app = app
        self.allowed = {a.strip("[]").lower() for a in allowed}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        if "*" not in self.allowed and host_name(host) not in self.allowed:
            message = f"Host {host!r} is not served here (allowed: {', '.join(sorted(self.allowed))}; --allowed-host)"
            return await error_response(421, message)(scope, receive, send)
        origin = headers.get(b"origin")
        if scope["method"] == "POST" and origin is not None:
            parts = urlsplit(origin.decode("latin-1"))
            if parts.scheme not in ("http", "https") or parts.netloc.lower() != host.lower():
                message = f"cross-origin POST from {origin.decode('latin-1')!r} refused"
                return await error_response(403, message)(scope, receive, send)
        return await self.app(scope, receive, send)


class BodyGuard:
    """ASGI middleware: refuses a body longer than the route's limit (declared or actually sent, 413)
    or not complete within `timeout_s` of the request's start (408)."""

    def __init__(self, app, max_json_bytes: int, max_upload_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.max_json_bytes = max_json_bytes
        self.max_upload_bytes = max_upload_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        upload = headers.get(b"content-type", b"").startswith(b"multipart/form-data")
        limit = self.max_upload_bytes + 64 * 1024 if upload else self.max_json_bytes
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limit):
            return await error_response(413, f"request body over the limit of {limit} bytes")(scope, receive, send)
        received = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s

        async def guarded_receive():
            nonlocal received
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except asyncio.TimeoutError:
                message = f"the request body did not arrive within {self.timeout_s:g} s"
                raise HTTPException(408, message, CLOSE) from None
            received += len(message.get("body", b""))
            if received > limit:
                raise HTTPException(413, f"request body over the limit of {limit} bytes", CLOSE)
            return message

        return await self.app(scope, guarded_receive, send)


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on request headers: a connection that has not sent a
    complete request line and headers `header_timeout_s` after it opened (or after its last
    response) gets a JSON 408 and is closed; malformed HTTP gets a JSON 400."""

    header_timeout_s: float = 10.0  # set per process from the serve settings

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm_header_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_header_deadline()

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:
            self._cancel_header_deadline()

    def connection_lost(self, exc) -> None:
        self._cancel_header_deadline()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        self._cancel_header_deadline()
        self._header_deadline = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _cancel_header_deadline(self) -> None:
        handle = getattr(self, "_header_deadline", None)
        if handle is not None:
            handle.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.conn.our_state is h11.IDLE:
            message = f"the request headers did not arrive within {self.header_timeout_s:g} s"
            self.transport.write(raw_json_response(408, "Request Timeout", message))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self.transport.write(raw_json_response(400, "Bad Request", msg))
        self.transport.close()


def raw_json_response(status: int, reason: str, message: str) -> bytes:
    """A complete HTTP/1.1 JSON error response, for answers given outside the ASGI app."""
    body = json.dumps({"error": message, "status": status}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


_RANGE_SPEC = re.compile(r"\s*([0-9]*)\s*-\s*([0-9]*)\s*")


def _byte_range_set(range_set: str) -> list[tuple[int | None, int | None]] | None:
    """The `(first, last)` pairs of a bytes `range-set` (RFC 9110 Sec. 14.1.1; a suffix range has
    `first` None, an open one `last` None), or None when it is syntactically invalid: no range-spec,
    one that is not `first-last` / `first-` / `-suffix` in digits, or last before first. Empty list
    elements are skipped (Sec. 5.6.1)."""
    ranges = []
    for spec in range_set.split(","):
        if not spec.strip():
            continue
        match = _RANGE_SPEC.fullmatch(spec)
        if match is None or match.groups() == ("", ""):
            return None
        first, last = (int(pos) if pos else None for pos in match.groups())
        if first is not None and last is not None and last < first:
            return None
        ranges.append((first, last))
    return ranges or None


def check_range(header: str | None, size: int) -> bool:
    """Whether to honour a `Range` header on a file of `size` bytes (RFC 9110 Sec. 14.2): absent,
    another unit than bytes or a syntactically invalid range-set -> False (ignored: the whole file,
    200); no satisfiable range -> 416 with `Content-Range: bytes */size` (Sec. 15.5.17); several
    ranges -> False (a server MAY ignore Range)."""
    if header is None:
        return False
    unit, sep, range_set = header.partition("=")
    if not sep or unit.strip().lower() != "bytes":
        return False  # an origin server must ignore a range unit it does not understand
    ranges = _byte_range_set(range_set)
    if ranges is None:
        return False  # an invalid range-set is ignored, Sec. 14.2
    if not any(_satisfiable(first, last, size) for first, last in ranges):
        message = f"no byte of the range {header[:80]!r} is in the file ({size} bytes)"
        raise HTTPException(416, message, {"Content-Range": f"bytes */{size}"})
    return len(ranges) == 1


def _satisfiable(first: int | None, last: int | None, size: int) -> bool:
    """Sec. 14.1.1: a first-pos below the size, or a non-zero suffix on a non-empty file."""
    return first < size if first is not None else last > 0 and size > 0


class WithoutRange(FileResponse):
    """A `FileResponse` that serves the whole file whatever `Range` the request sent."""

    async def __call__(self, scope, receive, send):
        headers = [(k, v) for k, v in scope["headers"] if k != b"range"]
        return await super().__call__({**scope, "headers": headers}, receive, send)
