"""Server-sent events: the one place an event becomes `data: ...` bytes, and an error in
the middle of a stream becomes an `error` event with the same `error` object as an HTTP
error body."""

from __future__ import annotations

import json
from collections.abc import Mapping

from voxserve.api.errors import error_event
from voxserve.errors import VoxError

__all__ = ["sse", "sse_error"]


def sse(event: Mapping[str, object]) -> bytes:
    return f"data: {json.dumps(event, separators=(',', ':'), ensure_ascii=False)}\n\n".encode()


def sse_error(exc: VoxError) -> bytes:
    """`{"type": "error", "error": {...}}`, the error in OpenAI's shape."""
    return sse(error_event(exc))
