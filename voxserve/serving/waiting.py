"""`unless_gone`: await work, unless the party that asked for it leaves first.

A channel passes what "gone" means for it (an HTTP disconnect, a closed WebSocket); a
Ray replica passes nothing, and its caller cancels the call instead. Pure asyncio.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from voxserve.errors import ClientClosed

__all__ = ["Gone", "unless_gone"]

T = TypeVar("T")

Gone = Callable[[], Awaitable[None]]
"""Makes an awaitable that resolves when the client leaves."""


async def unless_gone(work: Awaitable[T], gone: Awaitable[None] | None, message: str) -> T:
    """Await `work`; if `gone` resolves first (the client left), cancel `work` and raise
    ClientClosed(message). A caller that is cancelled cancels `work` too."""
    task = asyncio.ensure_future(work)
    if gone is None:
        return await task
    left = asyncio.ensure_future(gone)
    try:
        await asyncio.wait({task, left}, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        task.cancel()
        raise
    finally:
        left.cancel()
    if not task.done():
        task.cancel()
        raise ClientClosed(message)
    return task.result()
