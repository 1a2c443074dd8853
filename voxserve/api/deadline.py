"""Time limits on every HTTP request, as plain ASGI middleware: the request deadline
(`--request-timeout-s`) and the pace of request bodies (`--body-idle-timeout-s`,
`--min-upload-bytes-per-s`).

The deadline: no HTTP request lives longer than it. When the time is up, the request's
task is cancelled, which runs the same clean-up as a client that disconnects (admission
slots, engine work, queued ASR pieces). The answer depends on how far the request got:
- its body had not fully arrived (a client uploading too slowly): 408;
- the response had not started (the server could not finish in time): 504;
- the response was streaming: it ends without its final chunk, so the client sees a
  truncated body, the same as any other failure after the first byte.

The body pace: while the app reads a request body, no wait for the next piece may last
`body_idle_timeout_s`, and once the body has taken longer than that, its average rate
must stay at or above `min_body_bytes_per_s`. A body that breaks either rule makes
`receive()` raise `RequestTimeout`, so the handler unwinds as on any bad input (its
upload budget share goes back, it never took a slot) and the client gets 408. Every 408
here carries `connection: close`: the rest of a stalled body is never awaited.

The errors are in the OpenAI shape. Waiting for a request's headers is bounded below
the app, in the connection protocol (`voxserve.api.connection`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from voxserve.api.errors import error_response
from voxserve.errors import RequestTimeout, TimedOut

__all__ = ["RequestDeadline"]

log = logging.getLogger(__name__)

_CLOSE = (b"connection", b"close")


def _has_body(scope: dict[str, Any]) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"transfer-encoding":
            return True
        if name == b"content-length":
            return value.strip() not in (b"", b"0")
    return False


class RequestDeadline:
    def __init__(
        self,
        app: Any,
        timeout_s: float,
        body_idle_timeout_s: float | None = None,
        min_body_bytes_per_s: float = 0.0,
    ):
        if timeout_s <= 0 or (body_idle_timeout_s is not None and body_idle_timeout_s <= 0):
            raise ValueError("the request and body timeouts must be positive")
        if min_body_bytes_per_s < 0:
            raise ValueError("the minimum body rate must be >= 0")
        self.app = app
        self.timeout_s = timeout_s
        self.body_idle_timeout_s = body_idle_timeout_s
        self.min_body_bytes_per_s = min_body_bytes_per_s

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        watch = _Watch(scope, receive, send, self.body_idle_timeout_s, self.min_body_bytes_per_s)
        deadline = asyncio.timeout(self.timeout_s)
        try:
            async with deadline:
                await self.app(scope, watch.receive, watch.send)
        except TimeoutError:
            if not deadline.expired():
                raise  # some other timeout inside the app, not ours
            await self._timed_out(watch, scope, receive, send)

    async def _timed_out(
        self, watch: _Watch, scope: dict[str, Any], receive: Any, send: Any
    ) -> None:
        """Answer a request that ran past the deadline by how far it got."""
        path = scope.get("path", "?")
        if watch.started:
            log.warning(
                "%s ran past the %g s request timeout; its stream was cut off", path, self.timeout_s
            )
            return  # no final chunk: the server closes the connection
        headers: dict[str, str] = {}
        if not watch.body_done:
            error: RequestTimeout | TimedOut = RequestTimeout(
                f"the request body did not arrive within {self.timeout_s:g} s; send it faster or in a smaller file"
            )
            headers["connection"] = "close"
        else:
            error = TimedOut(
                f"the server could not answer within the {self.timeout_s:g} s request timeout"
            )
        log.warning("%s: %s", path, error.message)
        await error_response(error, headers)(scope, receive, send)


class _Watch:
    """One request's `receive` and `send` as the app sees them: the body's pace is
    checked while it arrives, and what the deadline's answer depends on is recorded
    (whether the body arrived, whether the response started)."""

    def __init__(
        self, scope: dict[str, Any], receive: Any, send: Any, idle_s: float | None, min_rate: float
    ):
        self._scope = scope
        self._receive = receive
        self._send = send
        self._idle_s = idle_s
        self._min_rate = min_rate
        self._loop = asyncio.get_running_loop()
        self.body_done = not _has_body(scope)
        self.started = False
        self.too_slow = False
        """The body broke its pace: the 408 closes the connection."""
        self._began: float | None = None
        """When the app first asked for the body."""
        self._received = 0

    def _slow(self, message: str) -> RequestTimeout:
        self.too_slow = True
        log.info("%s: %s", self._scope.get("path", "?"), message)
        return RequestTimeout(message)

    async def receive(self) -> Any:
        message = await self._receive_within_idle()
        if message["type"] == "http.request" and not self.body_done:
            if not message.get("more_body", False):
                self.body_done = True
            elif self._idle_s is not None and self._min_rate > 0:  # `_began` is set by now
                self._check_rate(len(message.get("body", b"")), self._idle_s)
        return message

    async def _receive_within_idle(self) -> Any:
        idle_s = self._idle_s
        if self.body_done or idle_s is None:
            return await self._receive()
        if self._began is None:
            self._began = self._loop.time()
        wait = asyncio.timeout(idle_s)
        try:
            async with wait:
                return await self._receive()
        except TimeoutError:
            if not wait.expired():
                raise
            raise self._slow(
                f"no byte of the request body arrived for {idle_s:g} s; send the body without pausing"
            ) from None

    def _check_rate(self, size: int, idle_s: float) -> None:
        assert self._began is not None
        self._received += size
        elapsed = self._loop.time() - self._began
        if elapsed > idle_s and self._received < self._min_rate * elapsed:
            raise self._slow(
                f"the request body arrived at {self._received / elapsed:.0f} bytes/s, below the "
                f"minimum of {self._min_rate:g} bytes/s; send it faster"
            )

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            if self.too_slow:
                message = {**message, "headers": [*message.get("headers", ()), _CLOSE]}
        await self._send(message)
