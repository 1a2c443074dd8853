"""`HeadroomRouter`: Ray Serve's request router for the TTS and ASR deployments.

Each front end's handle runs one. A request that belongs to a session already held by a
replica (its job names the replica, `voxserve.serving.jobs`) goes to that replica, and
only there. Any other request is ranked by headroom (`voxserve.ray.headroom`), from the
stats that replicas report through `record_routing_stats` (TTS) and the router's own
count of requests in flight at each (both; an ASR replica's live sessions count there
for their whole life). Serve then sends the request to the first rank that accepts it
(the shorter queue within a rank). A stream stays on the replica that took it, start to
end; when that replica dies, only its streams fail. When a session's replica is no
longer among the candidates, its request is routed as any other, and the replica that
gets it answers `ReplicaLost`.
"""

from __future__ import annotations

import random
from typing import Any

from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica

from voxserve.ray.headroom import headroom, rank_by_headroom
from voxserve.ray.stats import register_router

__all__ = ["HeadroomRouter", "pinned_replica"]

def pinned_replica(request: PendingRequest | None) -> str | None:
    """The replica a request's session is pinned to, if any (its job's `replica`)."""
    if request is None or not request.args:
        return None
    replica = getattr(request.args[0], "replica", None)
    return replica if isinstance(replica, str) else None


class HeadroomRouter(FIFOMixin, RequestRouter):
    def initialize_state(self, **kwargs: Any) -> None:
        super().initialize_state(**kwargs)  # type: ignore[no-untyped-call]  # Ray leaves it untyped
        register_router(self.app_name, self._deployment_id.name, self)  # for /metrics

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        pin = pinned_replica(pending_request)
        if pin is not None:
            held = [r for r in candidate_replicas if r.replica_id.to_full_id_str() == pin]
            if held:
                return [held]
        cache = self.replica_queue_len_cache
        rooms = [
            headroom(r.routing_stats, cache.get(r.replica_id), float(r.max_ongoing_requests))
            for r in candidate_replicas
        ]
        ranks = rank_by_headroom(candidate_replicas, rooms)
        for rank in ranks:
            random.shuffle(rank)  # equal queues within a rank: do not always pick the first
        return ranks
