"""A Ray front end's side of a live session (`voxserve.serving.remote`), against a fake ASR
backend at the process boundary: appends are forwarded together, at most every
`FORWARD_EVERY_S`, in order, and a commit waits at most for the appends before it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from voxserve.engine.transcribe import Transcript
from voxserve.serving.jobs import (
    Append,
    Commit,
    LiveInput,
    LiveOpen,
    LiveReply,
    Opened,
    TranscriptionJob,
)
from voxserve.serving.remote import FORWARD_EVERY_S, LIVE_INPUTS, RemoteStream, _RemoteLive

# Forwarding is timed to a few hundredths of a second: run alone.
pytestmark = [pytest.mark.serial, pytest.mark.timeout(30)]


class _ASR:
    """Records each `live_input` call: when, and what it carried."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, LiveInput]] = []

    async def models(self) -> dict[str, dict[str, Any]]:
        return {"fake": {"default": True}}

    async def transcribe(self, job: TranscriptionJob) -> tuple[str, Transcript]:
        raise NotImplementedError

    async def stream(self, job: TranscriptionJob) -> RemoteStream:
        raise NotImplementedError

    async def live(self, job: LiveOpen) -> RemoteStream:
        raise NotImplementedError

    async def live_input(self, batch: LiveInput) -> LiveReply:
        self.calls.append((time.monotonic(), batch))
        await asyncio.sleep(0.001)
        return tuple(None for _ in batch.actions)

    def replica_stats(self) -> dict[str, Any]:
        return {}


async def _silent() -> AsyncIterator[Any]:
    await asyncio.Event().wait()
    yield None


def test_appends_go_together_at_most_every_forward_interval() -> None:
    async def run() -> None:
        asr = _ASR()
        stream = RemoteStream("ASR#a", Opened(), _silent())
        live = _RemoteLive(asr, "live_x", stream, lambda event: None)
        started = time.monotonic()
        sent = 0
        while time.monotonic() - started < 0.5:  # a client sending 5 ms appends
            await live.append(bytes([sent % 256]) * 4, f"a{sent}")
            sent += 1
            await asyncio.sleep(0.005)
        await live.commit("c")
        committed = time.monotonic()
        while not asr.calls or not isinstance(asr.calls[-1][1].actions[-1], Commit):
            await asyncio.sleep(0.001)
        assert time.monotonic() - committed < FORWARD_EVERY_S + 0.03
        await live.close()

        actions = [a for _, call in asr.calls for a in call.actions]
        assert [a.ref for a in actions if isinstance(a, Append)] == [f"a{i}" for i in range(sent)]
        assert all(len(call.actions) <= LIVE_INPUTS for _, call in asr.calls)
        # At most one call per interval (and the first at once), instead of one per append.
        assert len(asr.calls) <= 0.5 / FORWARD_EVERY_S + 3 < sent / 3, (len(asr.calls), sent)
        gaps = [b - a for (a, _), (b, _) in zip(asr.calls, asr.calls[1:], strict=False)]
        assert min(gaps[:-1]) >= FORWARD_EVERY_S - 0.005, gaps

    asyncio.run(run())
