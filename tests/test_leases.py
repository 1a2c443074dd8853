"""The cluster-wide WebSocket session cap without a cluster: the keeper's book
(`LeaseTable`, a fake clock) and a front end's side (`SessionLeases`, `session_place`)
against an in-process keeper, a slow one and a dead one. `tests/test_ray_ws.py` runs the
real keeper between two front ends."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import pytest

from voxserve.config import ServerConfig, WSConfig
from voxserve.errors import ReplicaLost
from voxserve.serving import leases
from voxserve.serving.leases import GRACE_S, LEASE_TTL_S, LeaseTable, SessionLeases, session_place

# Waits are timed to a tenth of a second: run alone.
pytestmark = [pytest.mark.serial, pytest.mark.timeout(30)]


def test_the_cap_counts_every_holder_and_a_release_frees_a_place_at_once() -> None:
    table = LeaseTable(3)
    assert table.grant("a", "a1", 0.0) and table.grant("b", "b1", 0.0) and table.grant("a", "a2", 0.1)
    assert not table.grant("b", "b2", 0.2)
    assert table.grant("a", "a1", 0.2)  # already held: granting it again is a no-op
    assert table.by_holder() == {"a": 2, "b": 1}
    table.release("a", "a1")
    assert table.grant("b", "b2", 0.3) and table.held == 3
    table.release("nobody", "x")  # unknown holder or lease: nothing happens
    assert table.held == 3


def test_a_holder_that_stops_renewing_loses_its_leases() -> None:
    table = LeaseTable(2)
    assert table.grant("dead", "d1", 0.0) and table.grant("dead", "d2", 0.0)
    now = 0.0
    while now < LEASE_TTL_S - 0.5:  # the live holder renews; the dead one stays silent
        now += 1.0
        table.renew("live", (), now)
        assert not table.grant("live", "l1", now) or now >= LEASE_TTL_S
    now = LEASE_TTL_S + 0.01
    assert table.grant("live", "l1", now)
    assert table.by_holder() == {"live": 1}


def test_a_renewal_is_the_holders_whole_set() -> None:
    table = LeaseTable(4)
    assert table.grant("a", "a1", 0.0) and table.grant("a", "a2", 0.0)
    # a2's give-back never arrived: the renewal that no longer lists it drops it...
    table.renew("a", ("a1",), GRACE_S + 0.1)
    assert table.by_holder() == {"a": 1}
    # ...but not a lease granted after that renewal was sent.
    assert table.grant("a", "a3", 10.0)
    table.renew("a", ("a1",), 10.5)
    assert table.by_holder() == {"a": 2}
    # A keeper that lost its book (restarted) learns the sessions from the renewals,
    # at most `limit` of them from one renewal.
    fresh = LeaseTable(2)
    fresh.renew("a", ("a1", "a3", "x", "y"), 0.0)
    assert fresh.by_holder() == {"a": 2} and not fresh.grant("b", "b1", 0.0)


@dataclass
class _Keeper:
    """An in-process keeper; `delay` makes every call slow, `dead` makes it fail."""

    table: LeaseTable
    delay: float = 0.0
    dead: bool = False

    async def _call(self) -> None:
        if self.dead:
            raise ReplicaLost("the keeper's replica died")
        await asyncio.sleep(self.delay)

    async def grant(self, holder: str, lease: str) -> bool:
        await self._call()
        return self.table.grant(holder, lease, time.monotonic())

    async def release(self, holder: str, lease: str) -> None:
        await self._call()
        self.table.release(holder, lease)

    async def renew(self, holder: str, leases: tuple[str, ...]) -> None:
        await self._call()
        self.table.renew(holder, leases, time.monotonic())


@dataclass
class _FrontEnd:
    config: ServerConfig
    ws_open: int = 0


def test_two_front_ends_share_one_cap() -> None:
    async def run() -> None:
        keeper = _Keeper(LeaseTable(3))
        config = ServerConfig(ws=WSConfig(max_sessions=3))
        a, b = _FrontEnd(config), _FrontEnd(config)
        la, lb = SessionLeases(keeper), SessionLeases(keeper)
        async with session_place(a, la) as one, session_place(b, lb) as two, session_place(a, la) as three:
            assert one and two and three
            async with session_place(b, lb) as four:
                assert not four and b.ws_open == 1  # refused: its count went back
            assert keeper.table.held == 3
        # Each session's lease goes back when it ends, at once.
        await asyncio.sleep(0.01)
        assert keeper.table.held == 0 and a.ws_open == b.ws_open == 0
        async with session_place(b, lb) as again:
            assert again
        # A front end at its own count never asks the keeper.
        keeper.dead = True
        full = _FrontEnd(ServerConfig(ws=WSConfig(max_sessions=1)), ws_open=1)
        async with session_place(full, SessionLeases(keeper)) as refused:
            assert not refused
        await la.close()
        await lb.close()

    asyncio.run(run())


def test_a_keeper_that_does_not_answer_leaves_each_front_end_to_its_own_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(leases, "CALL_S", 0.05)
    monkeypatch.setattr(leases, "RENEW_S", 0.05)

    async def run() -> None:
        keeper = _Keeper(LeaseTable(1), delay=1.0)
        front = _FrontEnd(ServerConfig(ws=WSConfig(max_sessions=2)))
        held = SessionLeases(keeper)
        started = time.monotonic()
        async with session_place(front, held) as one, session_place(front, held) as two:
            assert one and two  # both admitted, each after one bounded wait
            assert time.monotonic() - started < 4 * 0.05 + 0.5
            async with session_place(front, held) as three:
                assert not three  # its own cap still holds
            # The keeper comes back: the renewals tell it both sessions, over its cap.
            keeper.delay = 0.0
            await asyncio.sleep(0.3)
            assert keeper.table.held == 1  # at most `limit` from one renewal
        await held.close()
        assert keeper.table.held == 0

    asyncio.run(run())
