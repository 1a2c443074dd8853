"""The one mapping of an engine's stream failure (`StreamFailed`) to the `VoxError` a
client is told: the engine's own typed error when it gave one (503 while the server
shuts down), else a 500 that names the failure."""

from __future__ import annotations

from typing import NoReturn

from voxserve.engine.stream import StreamFailed
from voxserve.errors import ServerError, VoxError

__all__ = ["raise_failure"]


def raise_failure(exc: StreamFailed) -> NoReturn:
    """Raise the `VoxError` for `exc`; call it in the `except StreamFailed` block."""
    cause = exc.__cause__
    if isinstance(cause, VoxError):
        raise cause from None
    raise ServerError(str(exc)) from exc
