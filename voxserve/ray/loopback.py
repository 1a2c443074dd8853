"""Keep a Serve replica's own gRPC listener on loopback when its Ray node is on loopback.

Ray Serve 2.60 starts an inter-deployment gRPC server in every replica, bound to
`[::]:0` (every interface) whatever the node's address. voxserve's handles do not use
it (Serve calls replicas through Ray actor calls unless `RAY_SERVE_USE_GRPC_BY_DEFAULT`
is set), but it listens all the same. On a node whose IP is 127.0.0.1 - a local
`voxserve serve --ray`, see `voxserve.ray.environment` - nothing outside the machine may
reach any Ray port, so each voxserve replica calls `bind_replica_grpc_to_node` in its
constructor, which Serve runs before it starts that server.

This touches one private name of the pinned Ray version
(`ray.serve._private.replica.add_port_to_grpc_server`); `tests/test_serve_ray.py` lists every
listening socket of a local instance and fails if the rebinding stops working. On any
other node it changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ray

from voxserve.ray.environment import LOOPBACK

__all__ = ["bind_replica_grpc_to_node"]

ALL_INTERFACES = "[::]:"


def bind_replica_grpc_to_node() -> bool:
    """In this replica process, bind Serve's gRPC server to 127.0.0.1 if the node is on
    loopback. Returns whether it did."""
    if ray.util.get_node_ip_address() != LOOPBACK:
        return False
    from ray.serve._private import replica as serve_replica

    # Not re-exported: replica.py imports it from ray._common.tls_utils, and the replica
    # calls it through its own module's name, so that is the one to read and replace.
    original: Callable[[Any, str], int] = serve_replica.add_port_to_grpc_server  # type: ignore[attr-defined]
    if getattr(original, "voxserve_loopback", False):
        return True

    def add_port(server: Any, address: str) -> int:
        if address.startswith(ALL_INTERFACES):
            address = f"{LOOPBACK}:{address[len(ALL_INTERFACES):]}"
        return original(server, address)

    add_port.voxserve_loopback = True  # type: ignore[attr-defined]  # marks it: wrap only once
    serve_replica.add_port_to_grpc_server = add_port  # type: ignore[attr-defined]
    return True
