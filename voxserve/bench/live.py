"""A live transcription session as the benches drive it: a `RealtimeClient` fed by an
`AudioPacer`, one user speaking clips into it at real time.

`LiveSession.say` queues a clip on the microphone and registers it with the client;
`end_of_speech` waits until the frame holding the clip's last loud sample has been sent
and stamps that time; `wait` waits for the server's `completed`, at most the options'
timeout from the end of speech. Nothing here decides what to say or when: the benches do.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import numpy as np

from voxserve.bench.liveclips import LIVE_RATE, LiveClip, first_loud_sample
from voxserve.bench.metrics import summarize
from voxserve.bench.pacer import AudioPacer
from voxserve.bench.rtclient import LiveOptions, RealtimeClient, SessionFailed, Utterance

__all__ = ["LEAD_S", "LiveSession"]

LEAD_S = 0.3
"""Silence every session starts with, so the first clip has room for its prefix padding."""


class LiveSession:
    """An open session and the microphone that feeds it."""

    def __init__(self, client: RealtimeClient, pacer: AudioPacer):
        self.client = client
        self.pacer = pacer
        self._done: dict[int, asyncio.Event] = {}
        self._speech_end: dict[int, int] = {}
        self._stamping: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(cls, http: aiohttp.ClientSession, options: LiveOptions,
                   origin: float) -> LiveSession:
        """Connect, configure, and start the microphone with LEAD_S of silence."""
        client = await RealtimeClient.connect(http, options, origin)
        pacer = AudioPacer(client.append_audio, LIVE_RATE, options.frame_s)
        pacer.enqueue(np.zeros(round(LEAD_S * LIVE_RATE), dtype=np.int16))
        pacer.start()
        return cls(client, pacer)

    def say(self, utterance: Utterance, clip: LiveClip) -> None:
        """Queue the clip after what is queued and tell the client where it lies."""
        start = self.pacer.enqueue(clip.samples)
        utterance.start_ms = start * 1000 / LIVE_RATE
        utterance.speech_end_ms = (start + clip.last_loud) * 1000 / LIVE_RATE
        self._speech_end[id(utterance)] = start + clip.last_loud
        self._done[id(utterance)] = self.client.expect(utterance)
        first = first_loud_sample(clip.samples)
        if first is not None:
            task = asyncio.get_running_loop().create_task(self._onset(utterance, start + first))
            self._stamping.add(task)
            task.add_done_callback(self._stamping.discard)

    async def _onset(self, utterance: Utterance, index: int) -> None:
        """Stamp when the frame holding the clip's first loud sample was sent."""
        try:
            utterance.onset_at_s = await self.pacer.sent(index) - self.client.origin
        except (OSError, RuntimeError):
            pass

    def pause(self, seconds: float) -> None:
        """Queue silence (the microphone sends silence anyway once the queue is empty)."""
        self.pacer.enqueue(np.zeros(round(seconds * LIVE_RATE), dtype=np.int16))

    async def end_of_speech(self, utterance: Utterance) -> float:
        """Wait until the clip's last loud sample has been sent; returns that perf_counter."""
        try:
            at = await self.pacer.sent(self._speech_end[id(utterance)])
        except (OSError, RuntimeError) as exc:
            raise SessionFailed(f"sending audio failed: {type(exc).__name__}: {exc}") from exc
        utterance.end_of_speech_at_s = at - self.client.origin
        return at

    async def wait(self, utterance: Utterance) -> bool:
        """Wait for the utterance to finish, at most `timeout_s` past its end of speech.

        Call after `end_of_speech`. True when it finished (completed, failed, or the
        session ended); the record's failure says which.
        """
        assert utterance.end_of_speech_at_s is not None
        if self._done[id(utterance)].is_set():
            return True  # finished already: a late wait (after others) must not time out
        deadline = self.client.origin + utterance.end_of_speech_at_s + self.client.timeout_s
        try:
            await asyncio.wait_for(self._done[id(utterance)].wait(),
                                   max(0.0, deadline - time.perf_counter()))
        except TimeoutError:
            utterance.fail("timeout", f"no completed within {self.client.timeout_s:g} s of the "
                           f"end of speech (items {utterance.items}, events so far: "
                           f"{self.client.events[-8:]})")
            return False
        return True

    def pacing(self) -> dict[str, float]:
        """How late the frames left, against their fixed schedule (seconds)."""
        return summarize(self.pacer.lateness())

    async def close(self) -> None:
        await self.pacer.stop()
        await self.client.close()
