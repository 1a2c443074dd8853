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
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from types import FrameType

import uvicorn
from starlette.applications import Starlette

from voxserve.config import ServerConfig

__all__ = ["GRACEFUL_SHUTDOWN_S", "Server", "serve"]

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


def serve(app: Starlette, config: ServerConfig, access_log: bool = False) -> bool:
    """Serve `app` until SIGINT or SIGTERM; returns once it has shut down, False if it
    never started (a port in use, a failed start-up)."""
    server = Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_level=config.log_level,
            loop="uvloop",
            http="httptools",
            timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
            access_log=access_log,
        ),
        app,
    )
    server.run()
    return server.started
