"""One transcription request from upload bytes to an ordered transcript, on asyncio.

Decoding and cutting run in the audio pool; a feeder task then prepares each piece in
the pool (its log-mel on a CPU; on a batched device only its raw samples, whose log-mel
the runner makes for the whole batch on the device) and submits it to the engine, staying at most
`SEGMENTS_AHEAD` pieces ahead of the results so a long file never holds all its features
at once. The HTTP handler and `voxserve transcribe` share this path. No HTTP here.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

import numpy as np

from voxserve.audio.blocks import Samples
from voxserve.engine.asr import (
    SEGMENTS_AHEAD,
    ASREngine,
    ASRHandle,
    PreparedAudio,
    TranscribeOptions,
    WindowResult,
)
from voxserve.engine.chunking import Hearing
from voxserve.engine.segments import TimedSegment, TokenLogprob
from voxserve.errors import ServerError

__all__ = [
    "TextDelta",
    "TextDone",
    "Transcript",
    "Transcription",
    "build_transcript",
    "start_live",
    "start_transcription",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Transcript:
    """A whole transcription: its text, language, audio length and timed segments."""

    text: str
    language: str
    """ISO-639-1 code: the one asked for, or the one detected in most pieces."""
    duration: float
    segments: list[TimedSegment]


@dataclass(frozen=True)
class TextDelta:
    """The text of one finished piece, in order, for a streamed transcription."""

    text: str
    logprobs: tuple[TokenLogprob, ...] | None = None
    """Its text tokens' log-probabilities, when the request asks for them."""


@dataclass(frozen=True)
class TextDone:
    """The end of a streamed transcription: the whole text, the audio's length and the
    languages heard, most pieces first."""

    text: str
    duration: float
    languages: tuple[str, ...]
    logprobs: tuple[TokenLogprob, ...] | None = None


def logprobs_of(segments: list[TimedSegment]) -> tuple[TokenLogprob, ...] | None:
    """Every segment's token log-probabilities in order; None when none carries them."""
    if all(s.logprobs is None for s in segments):
        return None
    return tuple(lp for s in segments for lp in s.logprobs or ())


def build_transcript(windows: list[WindowResult], duration: float, language: str) -> Transcript:
    segments = [s for w in windows for s in w.segments]
    return Transcript("".join(s.text for s in segments).strip(), language, duration, segments)


class Transcription:
    """A request in progress. Read its pieces in order, or cancel it."""

    def __init__(
        self,
        engine: ASREngine,
        handle: ASRHandle,
        feeder: asyncio.Future[None],
        language: str | None,
        prepared: PreparedAudio | None = None,
    ):
        self.engine = engine
        self.handle = handle
        self._prepared = prepared
        self._feeder = feeder
        self._language = language
        self._detected: Counter[str] = Counter()

    @property
    def duration(self) -> float:
        return self.handle.duration

    @property
    def audio(self) -> Samples:
        """The decoded 16 kHz audio, for work beside the transcription (diarization)."""
        assert self._prepared is not None
        return self._prepared.audio

    async def windows(self) -> AsyncIterator[WindowResult]:
        """Decoded pieces in order; raises StreamFailed if the engine failed the request."""
        while True:
            window = await self.handle.results.get()
            if window is None:
                if self._prepared is not None:
                    self._prepared.release()  # every piece is decoded: the audio is done with
                return
            if window.language and window.segments:
                self._detected[window.language] += 1
            yield window

    @property
    def languages(self) -> tuple[str, ...]:
        """The language asked for, or those detected, most pieces first."""
        if self._language:
            return (self._language,)
        if self._detected:
            return tuple(code for code, _ in self._detected.most_common())
        return (self.language,)

    @property
    def language(self) -> str:
        if self._language:
            return self._language
        if self._detected:
            return self._detected.most_common(1)[0][0]
        detects = self.engine.model(self.handle.model).abilities.detects_language
        return "unknown" if detects else "en"

    async def collect(self) -> Transcript:
        windows = [w async for w in self.windows()]
        return build_transcript(windows, self.duration, self.language)

    def cancel(self) -> None:
        """Stop feeding, drop everything queued for this request and give its audio's
        share of the memory budget back. Every caller calls it when the request ends."""
        self._feeder.cancel()
        self.engine.abort(self.handle)
        if self._prepared is not None:
            self._prepared.release()


async def start_transcription(
    engine: ASREngine,
    data: bytes,
    options: TranscribeOptions,
    pool: Executor,
    request_id: str = "",
    through: Hearing | None = None,
) -> Transcription:
    """Decode and cut `data` in `pool` (where `options.chunking` allows; the VAD that cuts
    hears the audio `through` a noise filter when one is given), then start feeding its
    pieces to the engine.

    Raises InvalidRequest for options the model cannot serve or audio it cannot decode.
    """
    # Times never change the cuts: a request that shows word times decodes the pieces a
    # plain one does, so it gets the same words (`engine/asr_audio.py: cut`).
    options = engine.choose(options, options.model)  # the model decides how it is cut

    def prepare() -> PreparedAudio:
        return engine.prepare(data, options.chunking, options.model, options.timings, through)

    return await _start(engine, prepare, options, pool, request_id)


async def start_live(
    engine: ASREngine,
    samples: np.ndarray,
    options: TranscribeOptions,
    pool: Executor,
    deadline: float,
    request_id: str = "",
) -> Transcription:
    """Transcribe a live utterance (16 kHz float32 samples) as deadline work: its pieces
    go before file pieces, earliest `deadline` (on `engine.clock()`) first."""
    return await _start(engine, lambda: engine.prepare_samples(samples), options, pool, request_id, deadline)


async def _start(
    engine: ASREngine,
    prepare: Callable[[], PreparedAudio],
    options: TranscribeOptions,
    pool: Executor,
    request_id: str,
    deadline: float | None = None,
) -> Transcription:
    loop = asyncio.get_running_loop()
    decoding = loop.run_in_executor(pool, prepare)
    try:
        prepared = await asyncio.shield(decoding)
    except asyncio.CancelledError:
        # The caller is gone (disconnect, timeout); the decode still finishes in its thread.
        decoding.add_done_callback(_release_result)
        raise
    try:
        handle = engine.open(options, prepared, loop, request_id, deadline)
    except BaseException:
        prepared.release()
        raise
    feeder = asyncio.ensure_future(_feed(engine, handle, prepared, pool))
    return Transcription(engine, handle, feeder, options.language, prepared)


def _release_result(decoding: asyncio.Future[PreparedAudio]) -> None:
    if not decoding.cancelled() and decoding.exception() is None:
        decoding.result().release()


async def _feed(engine: ASREngine, handle: ASRHandle, prepared: PreparedAudio, pool: Executor) -> None:
    loop = asyncio.get_running_loop()
    ahead = SEGMENTS_AHEAD
    pieces = len(prepared.spans)
    width = engine.config.audio_workers

    def features(index: int) -> asyncio.Future[Any]:
        return loop.run_in_executor(pool, engine.piece, prepared, index, handle.model)

    try:
        # The first `ahead` pieces are featurized first (`width` at a time, so other
        # requests' audio work is not queued behind a whole file) and queued together:
        # a long file's first batches then fill, instead of its first pieces starting
        # alone at batch 1 while the rest are still being featurized.
        first = min(pieces, ahead)
        ready: list[Any] = []
        for start in range(0, first, width):
            ready += await asyncio.gather(*(features(i) for i in range(start, min(first, start + width))))
        if not engine.submit_all(handle, prepared, list(enumerate(ready))):
            return  # aborted
        for index in range(first, pieces):
            await handle.results.wait_room(index, ahead)
            if not engine.submit(handle, prepared, index, await features(index)):
                return  # aborted
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        log.exception("feeding request %s failed", handle.request_id)
        handle.results.fail(ServerError(f"could not prepare audio features: {exc}"))
