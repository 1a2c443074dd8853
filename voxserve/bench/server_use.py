"""What a server spent across a run, read from its `/metrics`: the process's CPU seconds
and its ASR decoder batches (how many, and the pieces they held).

Speaks HTTP only. A server without `/metrics` (a peer) gives None.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import aiohttp

__all__ = ["ServerUse", "parse_server_use", "server_use"]

_CPU = "process_cpu_seconds_total"
_BATCHES = "voxserve_asr_batch_size_count"
_PIECES = "voxserve_asr_batch_size_sum"


@dataclass(frozen=True)
class ServerUse:
    """Running totals of one server process."""

    cpu_s: float
    """User and system CPU seconds of the server's process."""
    asr_batches: float
    """Decoder batches run, every model summed."""
    asr_pieces: float
    """Pieces those batches held."""


def parse_server_use(text: str) -> ServerUse | None:
    """The totals from a Prometheus text page; None without the process's CPU."""
    totals = {_CPU: 0.0, _BATCHES: 0.0, _PIECES: 0.0}
    seen = False
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in totals:
            with contextlib.suppress(ValueError, IndexError):
                totals[name] += float(line.rsplit(" ", 1)[1])
                seen = seen or name == _CPU
    return ServerUse(totals[_CPU], totals[_BATCHES], totals[_PIECES]) if seen else None


async def server_use(session: aiohttp.ClientSession, base_url: str) -> ServerUse | None:
    """The server's totals now, or None where it has no `/metrics`."""
    try:
        async with session.get(base_url.rstrip("/") + "/metrics") as resp:
            if resp.status != 200:
                return None
            return parse_server_use(await resp.text())
    except (aiohttp.ClientError, TimeoutError):
        return None
