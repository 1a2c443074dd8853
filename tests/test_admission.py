"""Admission control on its own: limit, bounded queue, 429, the capacity gate, and
cancellation of queued waiters."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from voxserve.engine.admission import Admission
from voxserve.errors import Overloaded, Unavailable


def test_limit_queue_and_429() -> None:
    async def run() -> None:
        adm = Admission(limit=1, max_queue=1, timeout_s=5)
        await adm.acquire()
        waiting = asyncio.create_task(adm.acquire())
        await asyncio.sleep(0)
        assert adm.queued == 1
        with pytest.raises(Overloaded) as info:
            await adm.acquire()
        assert info.value.status == 429 and info.value.retry_after >= 1
        adm.release()
        await asyncio.wait_for(waiting, 1)
        assert adm.active == 1 and adm.queued == 0
        adm.release()
        assert adm.active == 0

    asyncio.run(run())


def test_queue_timeout_is_a_429() -> None:
    async def run() -> None:
        adm = Admission(limit=1, max_queue=4, timeout_s=0.05)
        await adm.acquire()
        with pytest.raises(Overloaded):
            await adm.acquire()
        assert adm.queued == 0 and adm.rejected == 1

    asyncio.run(run())


def test_cancelled_waiter_leaves_the_line() -> None:
    async def run() -> None:
        adm = Admission(limit=1, max_queue=4, timeout_s=5)
        await adm.acquire()
        waiting = asyncio.create_task(adm.acquire())
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert adm.queued == 0
        adm.release()
        assert adm.active == 0

    asyncio.run(run())


def test_gate_holds_newcomers_until_the_engine_keeps_up() -> None:
    async def run() -> None:
        keeping_up = False
        adm = Admission(limit=10, max_queue=4, timeout_s=5, gate=lambda active, kind: keeping_up, recheck_s=0.01)
        await adm.acquire()  # nothing active: the gate is not asked
        second = asyncio.create_task(adm.acquire())
        await asyncio.sleep(0.05)
        assert not second.done() and adm.queued == 1 and adm.gated > 0
        keeping_up = True
        await asyncio.wait_for(second, 1)  # the timer re-asked the gate
        assert adm.active == 2
        adm.close()

    asyncio.run(run())


def test_the_gate_is_asked_about_the_waiter_at_the_head_with_its_kind() -> None:
    async def run() -> None:
        asked: list[tuple[int, str | None]] = []
        room = {"heavy": False, "light": True}

        def gate(active: int, kind: str | None) -> bool:
            asked.append((active, kind))
            return room[kind or "heavy"]

        adm = Admission(limit=10, max_queue=4, timeout_s=5, gate=gate, recheck_s=0.01)
        await adm.acquire("heavy")  # nothing active: the gate is not asked
        heavy = asyncio.create_task(adm.acquire("heavy"))
        await asyncio.sleep(0)
        light = asyncio.create_task(adm.acquire("light"))
        await asyncio.sleep(0.05)
        # The light stream would fit, but it waits behind the heavy one: first come,
        # first served, so a costly stream is never starved by cheap ones.
        assert not heavy.done() and not light.done()
        assert set(asked) == {(1, "heavy")}
        room["heavy"] = True
        await asyncio.wait_for(asyncio.gather(heavy, light), 1)
        assert adm.active == 3 and asked[-1] == (2, "light")
        adm.close()

    asyncio.run(run())


def test_close_refuses_waiters_and_newcomers_with_503() -> None:
    async def run() -> None:
        adm = Admission(limit=1, max_queue=4, timeout_s=5)
        await adm.acquire()
        waiting = [asyncio.create_task(adm.acquire()) for _ in range(2)]
        await asyncio.sleep(0.01)
        assert adm.queued == 2
        adm.close()
        for task in waiting:
            with pytest.raises(Unavailable):
                await task
        with pytest.raises(Unavailable):
            await adm.acquire()
        assert adm.active == 1 and adm.queued == 0  # refused waiters took no slot
        adm.release()
        assert adm.active == 0

    asyncio.run(run())


def test_refuse_if_full_answers_early_and_takes_nothing() -> None:
    async def run() -> None:
        adm = Admission(limit=1, max_queue=1, timeout_s=5)
        adm.refuse_if_full()  # room: nothing raised
        await adm.acquire()
        adm.refuse_if_full()  # full, but one may still queue
        waiting = asyncio.create_task(adm.acquire())
        await asyncio.sleep(0)
        with pytest.raises(Overloaded):
            adm.refuse_if_full()
        assert (adm.active, adm.queued, adm.rejected) == (1, 1, 1)
        adm.release()
        await asyncio.wait_for(waiting, 1)
        adm.refuse_if_full()  # the queue is empty again
        adm.close()
        with pytest.raises(Unavailable):
            adm.refuse_if_full()

    asyncio.run(run())


def test_past_its_queue_the_line_holds_what_the_device_carries() -> None:
    """On a batched device (`carry`), newcomers wait past `max_queue` while the device
    carries everyone active and queued; once it does not, they get 429 at once, with the
    `Retry-After` the device's drain time gives. Without `carry` (a CPU) the line stops at
    `max_queue` as before."""
    carried: list[tuple[int, dict[str | None, int], str | None]] = []

    def carry(active: int, queued: Mapping[str | None, int], kind: str | None) -> bool:
        carried.append((active, dict(queued), kind))
        return active + sum(queued.values()) < 6  # the device carries six streams

    busy = True  # the gate holds newcomers while set

    async def run() -> None:
        nonlocal busy
        adm = Admission(
            limit=8, max_queue=1, timeout_s=5, gate=lambda active, kind: not busy, carry=carry,
            drain=lambda active, queued: 7.2,
        )  # fmt: skip
        await adm.acquire("piper")
        waiting = [asyncio.create_task(adm.acquire("piper" if i % 2 else "kokoro")) for i in range(5)]
        await asyncio.sleep(0)
        assert adm.queued == 5 and adm.rejected == 0  # one under max_queue, four carried
        assert carried[-1] == (1, {"kokoro": 2, "piper": 2}, "kokoro")  # the fifth waiter, asked with its kind
        with pytest.raises(Overloaded) as info:
            await adm.acquire("piper")
        assert info.value.retry_after == 8  # the drain time, rounded up
        with pytest.raises(Overloaded):
            adm.refuse_if_full()
        busy = False
        await asyncio.wait_for(asyncio.gather(*waiting), 1)
        assert adm.active == 6
        assert adm.queued == 0 and adm._queued == {}

        cpu = Admission(limit=1, max_queue=1, timeout_s=5)
        await cpu.acquire()
        queued = asyncio.create_task(cpu.acquire())
        await asyncio.sleep(0)
        with pytest.raises(Overloaded) as info:
            await cpu.acquire()
        assert info.value.retry_after == 2  # one more than the line over the limit
        cpu.release()
        await asyncio.wait_for(queued, 1)

    asyncio.run(run())


def test_the_carried_line_is_bounded_by_limit_and_queue_together() -> None:
    async def run() -> None:
        adm = Admission(limit=2, max_queue=1, timeout_s=5, carry=lambda active, queued, kind: True)
        await adm.acquire()
        await adm.acquire()
        waiting = [asyncio.create_task(adm.acquire()) for _ in range(2)]
        await asyncio.sleep(0)
        assert adm.queued == 1 and adm.rejected == 1  # 2 active + 1 queued = limit + max_queue
        with pytest.raises(Overloaded):
            await waiting[1]
        waiting[0].cancel()

    asyncio.run(run())
