"""Runs the app under uvicorn so that SIGTERM and SIGINT end it promptly and cleanly.

uvicorn's graceful shutdown closes the listening sockets, then waits for open responses
up to `timeout_graceful_shutdown` before it cancels them; a TTS stream can run for
minutes, so every live stream would hold the exit until that timeout. `Server` adds one
step before the sockets close: `AppState.drain()`, which refuses new work with 503 and
fails every live stream and transcription, so their responses end at once. The worker
threads are joined afterwards, in the app's lifespan.

uvicorn also re-raises the signal that stopped it once its handlers are removed, which
for SIGTERM would kill the process (status 143) after a clean shutdown; `Server.run`
keeps the exit status at 0. Nothing here knows about the engine's internals.

`uvicorn_config` is the one place uvicorn's settings come from: the connection limits
(`voxserve.api.connection`: header timeout, header size, send stall), `limit_concurrency`
(connections past it get 503 at once), the listen backlog and the WebSocket message size.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from types import FrameType
from typing import Any

import uvicorn
from starlette.applications import Starlette

from voxserve.api.connection import connection_protocol
from voxserve.config import ServerConfig

__all__ = ["GRACEFUL_SHUTDOWN_S", "Server", "serve", "uvicorn_config"]

log = logging.getLogger(__name__)

GRACEFUL_SHUTDOWN_S = 1
"""Longest wait for responses still open after the drain (uploads still being read, say)
before uvicorn cancels them. Live streams do not wait for it: the drain ends them."""

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _already_handled(signum: int, frame: FrameType | None) -> None:
    """uvicorn re-raises the signal that stopped it; the server has shut down for it."""


class Server(uvicorn.Server):
    """uvicorn's server, plus a drain of the app's live work when shutdown begins."""

    def __init__(self, config: uvicorn.Config, app: Starlette):
        super().__init__(config)
        self.app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        state = getattr(self.app.state, "vox", None)  # set once the lifespan started
        if state is not None:
            try:
                state.drain()
            except Exception:  # the rest of the shutdown must still run
                log.exception("draining live work failed")
        await super().shutdown(sockets)

    def run(self, sockets: list[socket.socket] | None = None) -> None:
        if threading.current_thread() is not threading.main_thread():
            super().run(sockets)  # no signals off the main thread (tests)
            return
        previous = {sig: signal.signal(sig, _already_handled) for sig in _SIGNALS}
        try:
            super().run(sockets)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def uvicorn_config(app: Starlette, config: ServerConfig, **overrides: Any) -> uvicorn.Config:
    """uvicorn's settings for `app` under `config`: the connection protocol with the
    header and send-stall limits, the concurrency limit, the listen backlog and the
    WebSocket message size. `serve` uses it, and so do the tests, so that they run the
    production settings; `overrides` replaces single settings (log level, say)."""
    settings: dict[str, Any] = {
        "host": config.host,
        "port": config.port,
        "log_level": config.log_level,
        "loop": "uvloop",
        "http": connection_protocol(config),
        "lifespan": "on",
        "limit_concurrency": config.limit_concurrency,
        "backlog": config.backlog,
        "ws_max_size": max(config.ws.max_message_bytes, config.realtime.max_message_bytes),
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_S,
        "access_log": False,
    }
    settings.update(overrides)
    return uvicorn.Config(app, **settings)


def serve(app: Starlette, config: ServerConfig, access_log: bool = False) -> bool:
    """Serve `app` until SIGINT or SIGTERM; returns once it has shut down, False if it
    never started (a port in use, a failed start-up)."""
    server = Server(uvicorn_config(app, config, access_log=access_log), app)
    server.run()
    return server.started
