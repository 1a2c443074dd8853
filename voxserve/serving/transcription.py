"""Open a transcription: wait for a transcription slot, decode and cut the upload, feed
the engine, and hand back a `TranscriptionStream` that owns the request's life cycle.

`POST /v1/audio/transcriptions` (and translations) and each ASR replica of a Ray
deployment call `Transcriber.open`. The upload arrives as bytes: reading it, under the
upload budget, is the channel's part. No HTTP here.

A request for speaker labels gets a `DiarizedStream`: its whole transcript clusters the
whole file (the diarization runs in the audio pool beside the transcription, over the
same decoded audio, and the words are given to its turns at the end,
`engine/speakers.py`); its streamed form labels each piece online as the piece is
transcribed (`engine/diarize.py: OnlineSpeakers`), so a label once sent never changes,
and the two forms may differ. `SpeakersOnly` answers who spoke when without the words.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass

from voxserve.audio.chunks import Chunking
from voxserve.engine.admission import Admission
from voxserve.engine.asr import ASREngine, TranscribeOptions
from voxserve.engine.denoise import DenoiseEngine, FileFilter
from voxserve.engine.diarize import Diarization, KnownSpeaker, OnlineSpeakers, diarize
from voxserve.engine.speakers import DiarizedTranscript, SegmentDone, speaker_segments
from voxserve.engine.stream import StreamFailed
from voxserve.engine.transcribe import (
    TextDelta,
    TextDone,
    Transcript,
    Transcription,
    logprobs_of,
    start_transcription,
)
from voxserve.errors import InvalidRequest, NotFound
from voxserve.serving.catalog import asr_model
from voxserve.serving.diarization import REFERENCE_RATE, known_speakers
from voxserve.serving.failures import raise_failure
from voxserve.serving.metrics import Metrics
from voxserve.serving.waiting import unless_gone

__all__ = [
    "DiarizedStream",
    "Held",
    "SpeakersOnly",
    "Transcriber",
    "TranscriptionParams",
    "TranscriptionStream",
    "asr_disabled",
    "observe",
    "transcribe_options",
]

log = logging.getLogger(__name__)


def asr_disabled() -> NotFound:
    return NotFound("speech-to-text is off on this server; start it without --no-asr", code="asr_disabled")


def observe(m: Metrics, task: str, fmt: str, duration: float, started: float) -> None:
    """Count one answered transcription in the ASR metrics."""
    elapsed = time.perf_counter() - started
    m.asr_requests.labels(task, fmt).inc()
    m.asr_audio_seconds.inc(duration)
    m.asr_latency.observe(elapsed)
    if elapsed > 0:
        m.asr_rtfx.observe(duration / elapsed)


@dataclass(frozen=True)
class Held:
    """An admitted request's slot, and what its answer records when it ends."""

    request_id: str
    params: TranscriptionParams
    release: Callable[[], None]
    """Gives the slot back (`Transcriber.open`)."""
    metrics: Metrics
    started: float


@dataclass(frozen=True)
class TranscriptionParams:
    """A validated transcription or translation request, whatever channel it came by."""

    model: str
    task: str
    """transcribe or translate"""
    response_format: str = "json"
    """Only labels the metrics; the channel renders the transcript."""
    language: str | None = None
    prompt: str | None = None
    temperature: float = 0.0
    timings: bool = False
    """Segment and word times are wanted."""
    words: bool = False
    """Word times are wanted (`timestamp_granularities[]=word`)."""
    logprobs: bool = False
    """The text tokens' log-probabilities are wanted (`include: ["logprobs"]`)."""
    chunking: Chunking | None = None
    """Where long audio may be cut (`chunking_strategy`); None: the default rule."""
    noise_reduction: str | None = None
    """`near_field` or `far_field`: the VAD that cuts the audio hears it through the noise
    filter (`engine/denoise.py`); the recognizer hears the audio as sent."""
    diarize: bool = False
    """The words are to be given to speakers (`serving/diarization.py`)."""
    known_speakers: tuple[tuple[str, bytes], ...] = ()
    """Known speakers' names and reference audio, for `diarize`."""
    speakers_only: bool = False
    """Only who spoke when, no words (`POST /v1/audio/diarization`)."""


def transcribe_options(params: TranscriptionParams) -> TranscribeOptions:
    """What the engine is asked for; the model is chosen from `params.model` after."""
    return TranscribeOptions(
        task=params.task,
        language=params.language or None,
        prompt=params.prompt or None,
        temperature=params.temperature,
        timings=params.timings or params.diarize,
        words=params.words or params.diarize,
        logprobs=params.logprobs,
        chunking=params.chunking,
    )


class TranscriptionStream:
    """One admitted transcription. Read it once, as text deltas (`deltas()`) or as the
    whole transcript (`transcript()`); either records the metrics when it ends. `close()`
    ends it, exactly once whatever calls it: the engine drops the request's queued
    pieces, its audio's share of the budget goes back, and so does its slot."""

    def __init__(self, transcription: Transcription, held: Held):
        self._transcription = transcription
        self._take(held)

    def _take(self, held: Held) -> None:
        """Keep the slot and what the answer records."""
        self.request_id = held.request_id
        self.replica: str | None = None
        """Where the work runs, when that is another process (a Ray replica)."""
        self._params = held.params
        self._release = held.release
        self._metrics = held.metrics
        self._started = held.started
        self._closed = False

    @property
    def duration(self) -> float:
        return self._transcription.duration

    async def deltas(self) -> AsyncGenerator[TextDelta | TextDone, None]:
        """The text of each piece as it finishes, in order (the first one without its
        leading space; empty pieces skipped), then the whole text with the audio's
        length and the languages heard."""
        first = True
        parts: list[TextDelta] = []
        try:
            async for window in self._transcription.windows():
                text = "".join(s.text for s in window.segments)
                if first:
                    text = text.lstrip()
                if text:
                    first = False
                    delta = TextDelta(text, logprobs_of(window.segments))
                    parts.append(delta)
                    yield delta
        except StreamFailed as exc:
            log.error("transcription %s failed after start: %s", self.request_id, exc)
            raise_failure(exc)
        observe(self._metrics, "transcribe", "stream", self.duration, self._started)
        logprobs = None if not self._params.logprobs else tuple(lp for p in parts for lp in p.logprobs or ())
        text = "".join(p.text for p in parts).strip()
        yield TextDone(text, round(self.duration, 3), self._transcription.languages, logprobs)

    async def transcript(self, gone: Callable[[], Awaitable[None]] | None = None) -> Transcript:
        """The whole transcript. `gone` resolves when the client leaves, which cancels the
        work; without it (a Ray ASR replica), cancelling the caller does."""
        try:
            transcript = await unless_gone(
                self._transcription.collect(),
                gone() if gone is not None else None,
                "client disconnected while its audio was transcribed",
            )
        except StreamFailed as exc:
            raise_failure(exc)
        finally:
            self._transcription.cancel()  # nothing left to drop after success; frees the stream
        params = self._params
        observe(self._metrics, params.task, params.response_format, transcript.duration, self._started)
        return transcript

    def close(self, completed: bool = False) -> None:
        """End the request and give its slot back. Later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        self._transcription.cancel()
        self._release()


@dataclass
class Transcriber:
    """An ASR engine with its audio pool, its admission and the metrics it records in."""

    engine: ASREngine
    pool: Executor
    admission: Admission
    metrics: Metrics
    denoise: DenoiseEngine | None = None
    """The noise filter (`noise_reduction`); None refuses it."""

    async def open(
        self,
        params: TranscriptionParams,
        data: bytes,
        request_id: str,
        started: float,
        gone: Callable[[], Awaitable[None]] | None = None,
    ) -> TranscriptionStream:
        """Choose the model (404, 400), wait for a slot weighed by that model's cost
        (`gone` ends the wait with 499), then decode and cut the audio and start feeding
        the engine. Returns holding the slot; the caller closes the stream once."""
        engine = self.engine
        through = self._hearing(params.noise_reduction)
        options = engine.choose(transcribe_options(params), asr_model(params.model, engine.models))
        model = options.model
        assert model is not None
        await unless_gone(
            self.admission.acquire(model), gone() if gone is not None else None, "client disconnected while queued"
        )
        engine.hold(model)

        def release() -> None:
            engine.hold(model, -1)
            self.admission.release()

        held = Held(request_id, params, release, self.metrics, started)
        if params.speakers_only:
            return speakers_only(engine, self.pool, data, params.known_speakers, held)
        try:
            if params.diarize:
                loop = asyncio.get_running_loop()
                known = await loop.run_in_executor(self.pool, known_speakers, params.known_speakers)
            transcription = await start_transcription(engine, data, options, self.pool, request_id, through)
        except BaseException:
            release()
            raise
        if params.diarize:
            return DiarizedStream(transcription, held, self.pool, known)
        return TranscriptionStream(transcription, held)

    def _hearing(self, noise_reduction: str | None) -> FileFilter | None:
        """The noise filter that the VAD cutting the upload hears it through; 400 for a
        filter this server cannot apply."""
        if noise_reduction is None:
            return None
        (self.denoise or DenoiseEngine()).check(noise_reduction, "noise_reduction")
        assert self.denoise is not None
        return self.denoise.for_file(noise_reduction)


class DiarizedStream(TranscriptionStream):
    """A transcription whose words are given to speakers (see the module docstring)."""

    def __init__(self, transcription: Transcription, held: Held, pool: Executor, known: list[KnownSpeaker]):
        super().__init__(transcription, held)
        self._pool = pool
        self._known = known
        self._audio = transcription.audio

    async def transcript(self, gone: Callable[[], Awaitable[None]] | None = None) -> Transcript:
        """The whole transcript, its words given to the speakers of the whole file: the
        diarization runs in the audio pool while the pieces are transcribed."""
        loop = asyncio.get_running_loop()
        whole: asyncio.Future[Diarization] = loop.run_in_executor(self._pool, diarize, self._audio, self._known)
        transcript = await super().transcript(gone)
        result = await whole
        segments = speaker_segments(transcript.segments, result.turns)
        speakers = list(dict.fromkeys(s.speaker for s in segments))
        self._metrics.asr_diarized_seconds.inc(transcript.duration)
        return DiarizedTranscript(transcript.text, transcript.language, transcript.duration, transcript.segments,
                                  segments, speakers, result.turns)

    async def deltas(self) -> AsyncGenerator[TextDelta | TextDone | SegmentDone, None]:  # type: ignore[override]
        """Each piece's speaker segments as the piece finishes, labelled online, then the
        whole text."""
        loop = asyncio.get_running_loop()
        online = OnlineSpeakers(self._known)
        texts: list[str] = []
        count = 0
        first = 0
        try:
            async for window in self._transcription.windows():
                turns = await loop.run_in_executor(self._pool, online.turns, self._audio, window.start, window.end)
                for segment in speaker_segments(window.segments, turns, first):
                    texts.append(segment.text)
                    yield SegmentDone(count, segment)
                    count += 1
                first += len(window.segments)
        except StreamFailed as exc:
            raise_failure(exc)
        observe(self._metrics, "transcribe", "stream", self.duration, self._started)
        self._metrics.asr_diarized_seconds.inc(self.duration)
        yield TextDone(" ".join(texts).strip(), round(self.duration, 3), self._transcription.languages)


class SpeakersOnly(TranscriptionStream):
    """Who spoke when, without the words (`POST /v1/audio/diarization`): the upload is
    decoded under the engine's buffered-audio budget and diarized in the audio pool,
    holding a transcription slot meanwhile. `transcript()` answers a `DiarizedTranscript`
    with no text and the turns; `deltas()` is not offered (the route never streams).
    It shares the stream's interface, not its engine work: nothing is transcribed."""

    def __init__(self, work: asyncio.Future[tuple[float, Diarization]], held: Held):
        self._take(held)
        self._work = work
        self._seconds = 0.0

    @property
    def duration(self) -> float:
        return self._seconds

    async def deltas(self) -> AsyncGenerator[TextDelta | TextDone, None]:
        raise InvalidRequest("the diarization route does not stream", param="stream")
        yield TextDone("", 0.0, ())  # never reached: makes this a generator

    async def transcript(self, gone: Callable[[], Awaitable[None]] | None = None) -> Transcript:
        duration, result = await unless_gone(asyncio.shield(self._work), gone() if gone is not None else None,
                                             "client disconnected while its audio was diarized")
        self._seconds = duration
        observe(self._metrics, "diarize", "json", duration, self._started)
        self._metrics.asr_diarized_seconds.inc(duration)
        return DiarizedTranscript("", "", duration, [], [], result.speakers, result.turns)

    def close(self, completed: bool = False) -> None:
        if not self._closed:
            self._closed = True
            self._release()


def speakers_only(
    engine: ASREngine, pool: Executor, data: bytes, known: Sequence[tuple[str, bytes]], held: Held
) -> SpeakersOnly:
    """Start diarizing `data` in `pool`; the stream holds the slot that `held` gives back."""

    def work() -> tuple[float, Diarization]:
        from voxserve.audio.decode import decode_blocks

        lease = engine.budget.lease()
        try:
            audio = decode_blocks(data, engine.config.max_audio_seconds, reserve=lease.take)
            return len(audio) / REFERENCE_RATE, diarize(audio, known_speakers(known))
        finally:
            lease.release()

    return SpeakersOnly(asyncio.get_running_loop().run_in_executor(pool, work), held)
