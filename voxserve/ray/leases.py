"""`SessionKeeper`: the one replica that grants WebSocket session leases to the front ends
of a Ray deployment, so that `--ws-max-sessions` caps the cluster's sessions, not each
front end's (`voxserve.serving.leases` has the rules).

Its state is soft: every front end renews the whole set it holds every second, so a
keeper that Serve restarts knows the cluster's sessions again within a renewal, and a
front end that dies loses its leases `LEASE_TTL_S` after its last renewal. Its methods
are coroutines on the replica's one event loop: no two run at once. No HTTP here.
"""

from __future__ import annotations

import time
from typing import Any

from voxserve.ray.loopback import bind_replica_grpc_to_node
from voxserve.serving.leases import LeaseTable

__all__ = ["SessionKeeper"]


class SessionKeeper:
    """The cluster's book of WebSocket session leases: at most `limit` in all."""

    def __init__(self, limit: int):
        bind_replica_grpc_to_node()
        self._table = LeaseTable(limit)

    async def grant(self, holder: str, lease: str) -> bool:
        return self._table.grant(holder, lease, time.monotonic())

    async def release(self, holder: str, lease: str) -> None:
        self._table.release(holder, lease)

    async def renew(self, holder: str, leases: tuple[str, ...]) -> None:
        self._table.renew(holder, leases, time.monotonic())

    async def describe(self) -> dict[str, Any]:
        """Leases by holder and in all (for tests and operators)."""
        self._table.expire(time.monotonic())
        return {"limit": self._table.limit, "held": self._table.held, "holders": self._table.by_holder()}
