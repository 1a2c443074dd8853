"""One cap on WebSocket sessions across front ends: `--ws-max-sessions` counts every
session of the cluster, whichever front end holds it.

Each front end counts its own sessions (`Service.ws_open`) and never goes past the cap
alone. Where several front ends serve (Ray, `--ray-frontend-replicas N`), each also takes a
lease per session from one keeper (`voxserve.ray.leases`), which grants at most
`max_sessions` leases in all:

- `LeaseTable` is the keeper's book: pure, the time passed in.
- `SessionLeases` is a front end's side: it takes a lease when a session opens, gives it
  back when the session ends, and renews every `RENEW_S` by sending the whole set it
  holds. A holder the keeper has not heard from for `LEASE_TTL_S` (its front end died,
  or cannot reach the keeper) loses its leases, so a vanished front end frees its share
  of the cap within seconds. A renewal also drops what its holder no longer holds (a
  give-back that never arrived) and restores what the keeper lost (a restarted keeper
  learns every front end's sessions within `RENEW_S`).
- Every call to the keeper waits at most `CALL_S`. A keeper that does not answer in
  time leaves each front end to its own count: the session is admitted if this front
  end is under the cap, a degraded mode that ends with the keeper's next answer.

Nothing here imports Ray or HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from voxserve.config import ServerConfig

__all__ = [
    "CALL_S",
    "GRACE_S",
    "LEASE_TTL_S",
    "RENEW_S",
    "LeaseKeeper",
    "LeaseTable",
    "SessionLeases",
    "session_place",
]

log = logging.getLogger(__name__)

RENEW_S = 1.0
"""How often a front end renews its leases."""
LEASE_TTL_S = 5.0
"""A holder not heard from for this long loses its leases: several renewals missed, so a
slow call is not mistaken for a dead front end."""
CALL_S = 1.0
"""The longest a front end waits on the keeper, per call."""
GRACE_S = 2 * CALL_S
"""A lease granted this recently survives a renewal that does not list it: the renewal
may have been sent before the grant was asked for."""


@dataclass
class _Holder:
    heard: float
    leases: dict[str, float] = field(default_factory=dict)
    """Lease id -> when granted."""


class LeaseTable:
    """The keeper's book of session leases, by holder (a front end): at most `limit` in all."""

    def __init__(self, limit: int):
        self.limit = limit
        self._holders: dict[str, _Holder] = {}

    @property
    def held(self) -> int:
        return sum(len(h.leases) for h in self._holders.values())

    def by_holder(self) -> dict[str, int]:
        return {name: len(h.leases) for name, h in self._holders.items()}

    def grant(self, holder: str, lease: str, now: float) -> bool:
        """Grant `lease` to `holder`; False at the cap. Granting a lease already held is a no-op."""
        self.expire(now)
        entry = self._holders.setdefault(holder, _Holder(now))
        entry.heard = now
        if lease in entry.leases:
            return True
        if self.held >= self.limit:
            return False
        entry.leases[lease] = now
        return True

    def release(self, holder: str, lease: str) -> None:
        entry = self._holders.get(holder)
        if entry is not None:
            entry.leases.pop(lease, None)

    def renew(self, holder: str, leases: Iterable[str], now: float) -> None:
        """`holder` holds exactly `leases` (at most `limit` of them are read), and any it was
        granted within `GRACE_S`."""
        self.expire(now)
        listed: list[str] = []
        for lease in leases:
            if len(listed) >= self.limit:
                break
            listed.append(lease)
        entry = self._holders.setdefault(holder, _Holder(now))
        entry.heard = now
        kept = {lease: at for lease, at in entry.leases.items() if now - at < GRACE_S}
        for lease in listed:
            kept.setdefault(lease, entry.leases.get(lease, now - GRACE_S))
        entry.leases = kept

    def expire(self, now: float) -> list[str]:
        """Drop the holders not heard from for `LEASE_TTL_S`; their names."""
        gone = [name for name, h in self._holders.items() if now - h.heard >= LEASE_TTL_S]
        for name in gone:
            del self._holders[name]
        return gone


class LeaseKeeper(Protocol):
    """The keeper, as a front end calls it (`voxserve.ray.frontend` implements it on Ray)."""

    async def grant(self, holder: str, lease: str) -> bool: ...

    async def release(self, holder: str, lease: str) -> None: ...

    async def renew(self, holder: str, leases: tuple[str, ...]) -> None: ...


class SessionLeases:
    """A front end's leases from the keeper, renewed until `close`."""

    def __init__(self, keeper: LeaseKeeper):
        self.holder = f"fe_{uuid.uuid4().hex[:16]}"
        self._keeper = keeper
        self._held: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._renewal: asyncio.Task[None] | None = None
        self._degraded = False

    @property
    def held(self) -> int:
        return len(self._held)

    async def take(self) -> str | None:
        """A new lease's id, or None when the cluster is at its cap."""
        lease = f"wsl_{uuid.uuid4().hex[:20]}"
        self._held.add(lease)  # before the call: a renewal sent meanwhile lists it
        try:
            async with asyncio.timeout(CALL_S):
                granted = await self._keeper.grant(self.holder, lease)
            self._answered()
        except asyncio.CancelledError:
            self._held.discard(lease)
            self._spawn(self._release(lease))
            raise
        except Exception as exc:  # noqa: BLE001 - the front end's own count still holds
            self._unanswered("granting a session lease", exc)
            granted = True
        if self._renewal is None:
            self._renewal = asyncio.get_running_loop().create_task(self._renew_forever())
        if not granted:
            self._held.discard(lease)
            return None
        return lease

    def give_back(self, lease: str) -> None:
        """The session ended: the lease goes back now, in a task of its own (Serve cancels
        a WebSocket's handler once its client has gone, and the call must go out all the same)."""
        if lease in self._held:
            self._held.discard(lease)
            self._spawn(self._release(lease))

    async def close(self) -> None:
        """Stop renewing and give every lease back (the front end is stopping)."""
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None
        self._held.clear()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CALL_S):
                await self._keeper.renew(self.holder, ())
        for task in list(self._tasks):
            task.cancel()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _release(self, lease: str) -> None:
        try:
            async with asyncio.timeout(CALL_S):
                await self._keeper.release(self.holder, lease)
        except Exception as exc:  # noqa: BLE001 - the next renewal drops it
            self._unanswered("giving a session lease back", exc)

    async def _renew_forever(self) -> None:
        while True:
            await asyncio.sleep(RENEW_S)
            try:
                async with asyncio.timeout(CALL_S):
                    await self._keeper.renew(self.holder, tuple(self._held))
                self._answered()
            except Exception as exc:  # noqa: BLE001 - tried again in RENEW_S
                self._unanswered("renewing session leases", exc)

    def _answered(self) -> None:
        if self._degraded:
            self._degraded = False
            log.warning("the session keeper answers again: the session cap holds across front ends")

    def _unanswered(self, doing: str, exc: Exception) -> None:
        if not self._degraded:
            self._degraded = True
            log.warning(
                "%s: the session keeper did not answer (%s); this front end admits sessions "
                "under its own count until it does", doing, type(exc).__name__,
            )


class _Counted(Protocol):
    config: ServerConfig
    ws_open: int


@contextlib.asynccontextmanager
async def session_place(state: _Counted, leases: SessionLeases | None) -> AsyncIterator[bool]:
    """A place for one WebSocket session under `config.ws.max_sessions`, held until the
    block ends: True when admitted, False at the cap. Counted in `state.ws_open` before the
    first await, so that two sessions opening at once cannot both take the last place;
    with `leases`, the cluster's keeper must grant it too."""
    if state.ws_open >= state.config.ws.max_sessions:
        yield False
        return
    state.ws_open += 1
    lease: str | None = None
    try:
        if leases is not None:
            lease = await leases.take()
    except BaseException:
        state.ws_open -= 1
        raise
    if leases is not None and lease is None:
        state.ws_open -= 1  # refused: the place goes back before the refusal is sent
        yield False
        return
    try:
        yield True
    finally:
        state.ws_open -= 1
        if lease is not None and leases is not None:
            leases.give_back(lease)
