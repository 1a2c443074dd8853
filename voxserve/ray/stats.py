"""The routing stats that this process's request routers hold, for the front end's /metrics.

Serve's controller polls each replica's `record_routing_stats` every
`ROUTING_STATS_PERIOD_S` (`ray/launcher.py`) and pushes the reports to the routers of every handle to the
deployment; `HeadroomRouter` registers itself here when Serve makes it. The registry is
its own module because Serve ships the router's module by value (a copy of its globals
in each process), while this one is imported as usual: one registry per process.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["register_router", "replica_stats"]


class _Replica(Protocol):
    @property
    def replica_id(self) -> Any: ...

    @property
    def routing_stats(self) -> dict[str, Any]: ...


class _Router(Protocol):
    @property
    def curr_replicas(self) -> Mapping[Any, _Replica]: ...


_ROUTERS: weakref.WeakValueDictionary[tuple[str, str], Any] = weakref.WeakValueDictionary()
"""This process's newest router for each (application, deployment)."""


def register_router(app: str, deployment: str, router: _Router) -> None:
    _ROUTERS[(app, deployment)] = router


def replica_stats(app: str, deployment: str) -> dict[str, Mapping[str, Any]]:
    """Each running replica of the deployment, by name, and the routing stats it last
    reported, as this process's router holds them. Nothing is asked of the replicas, so a
    slow or dead one cannot hold up the caller. Empty until this process has routed a
    request to the deployment."""
    router: _Router | None = _ROUTERS.get((app, deployment))
    if router is None:
        return {}
    replicas = list(router.curr_replicas.values())  # replaced, never mutated, by Serve's loop
    return {r.replica_id.to_full_id_str(): dict(r.routing_stats or {}) for r in replicas}
