"""`HeadroomRouter`: Ray Serve's request router for the TTS deployment.

Each front end's handle runs one. For every request it ranks the TTS replicas by
headroom (`voxserve.ray.headroom`), from the stats that replicas report through
`record_routing_stats` and the router's own count of requests in flight at each.
Serve then sends the request to the first rank that accepts it (the shorter queue
within a rank). A stream stays on the replica that took it, start to end; when that
replica dies, only its streams fail.
"""

from __future__ import annotations

import random

from ray.serve.request_router import FIFOMixin, PendingRequest, RequestRouter, RunningReplica

from voxserve.ray.headroom import headroom, rank_by_headroom

__all__ = ["HeadroomRouter"]


class HeadroomRouter(FIFOMixin, RequestRouter):
    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        cache = self.replica_queue_len_cache
        rooms = [
            headroom(r.routing_stats, cache.get(r.replica_id), float(r.max_ongoing_requests))
            for r in candidate_replicas
        ]
        ranks = rank_by_headroom(candidate_replicas, rooms)
        for rank in ranks:
            random.shuffle(rank)  # equal queues within a rank: do not always pick the first
        return ranks
