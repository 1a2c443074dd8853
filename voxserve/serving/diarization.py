"""Diarized transcriptions and known speakers, whatever channel they came by.

`DiarizedStream` is a `TranscriptionStream` whose words are given to speakers. Its
whole transcript clusters the whole file: the diarization runs in the audio pool beside
the transcription, over the same decoded audio, and the words are given to its turns at
the end (`engine/speakers.py`). Its streamed form labels each piece online as the piece
is transcribed (`engine/diarize.py: OnlineSpeakers`), so a label once sent never
changes, and the two forms may differ. Known speakers' references are decoded, bounded
(2-10 s) and embedded once per request, in the audio pool; they are never logged or
stored. No HTTP here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from concurrent.futures import Executor

from voxserve.audio.decode import decode_audio
from voxserve.engine.asr import ASREngine
from voxserve.engine.diarize import (
    Diarization,
    KnownSpeaker,
    OnlineSpeakers,
    diarize,
    reference_embedding,
)
from voxserve.engine.speakers import DiarizedTranscript, SegmentDone, speaker_segments
from voxserve.engine.stream import StreamFailed
from voxserve.engine.transcribe import TextDelta, TextDone, Transcript, Transcription
from voxserve.errors import InvalidRequest
from voxserve.serving.failures import raise_failure
from voxserve.serving.metrics import Metrics
from voxserve.serving.transcription import TranscriptionParams, TranscriptionStream, observe
from voxserve.serving.waiting import unless_gone

__all__ = [
    "MAX_KNOWN_SPEAKERS",
    "MAX_REFERENCE_S",
    "MIN_REFERENCE_S",
    "DiarizedStream",
    "SpeakersOnly",
    "known_speakers",
    "speakers_only",
]

MAX_KNOWN_SPEAKERS = 4
MIN_REFERENCE_S = 2.0
MAX_REFERENCE_S = 10.0
REFERENCE_RATE = 16000


def known_speakers(references: Sequence[tuple[str, bytes]]) -> list[KnownSpeaker]:
    """Each (name, audio bytes) reference decoded and embedded; 400
    `param: known_speaker_references` for one that is not audio or not 2-10 s long.
    CPU work: run it in the audio pool."""
    known = []
    for i, (name, data) in enumerate(references):
        where = f"known_speaker_references[{i}] ({name[:64]!r})"
        try:
            audio = decode_audio(data, MAX_REFERENCE_S + 0.05, REFERENCE_RATE)
        except InvalidRequest as exc:
            raise InvalidRequest(f"{where}: {exc.message}; send {MIN_REFERENCE_S:g}-{MAX_REFERENCE_S:g} s of "
                                 "the speaker's voice as a data URL (data:audio/wav;base64,...)",
                                 param="known_speaker_references") from None
        seconds = len(audio) / REFERENCE_RATE
        if seconds < MIN_REFERENCE_S:
            raise InvalidRequest(f"{where} is {seconds:.2f} s long; send {MIN_REFERENCE_S:g}-{MAX_REFERENCE_S:g} s "
                                 "of the speaker's voice", param="known_speaker_references")
        known.append(KnownSpeaker(name, reference_embedding(audio)))
    return known


class DiarizedStream(TranscriptionStream):
    """A transcription whose words are given to speakers (see the module docstring)."""

    def __init__(
        self,
        transcription: Transcription,
        params: TranscriptionParams,
        release: Callable[[], None],
        metrics: Metrics,
        started: float,
        pool: Executor,
        known: list[KnownSpeaker],
    ):
        super().__init__(transcription, params, release, metrics, started)
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

    def __init__(self, work: asyncio.Future[tuple[float, Diarization]], release: Callable[[], None],
                 metrics: Metrics, started: float, request_id: str):
        self.request_id = request_id
        self.replica = None
        self._work = work
        self._release = release
        self._metrics = metrics
        self._started = started
        self._closed = False
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


def speakers_only(engine: ASREngine, pool: Executor, data: bytes, known: Sequence[tuple[str, bytes]],
                  release: Callable[[], None], metrics: Metrics, started: float, request_id: str) -> SpeakersOnly:
    """Start diarizing `data` in `pool`; the stream holds the slot that `release` gives back."""

    def work() -> tuple[float, Diarization]:
        from voxserve.audio.decode import decode_blocks

        lease = engine.budget.lease()
        try:
            audio = decode_blocks(data, engine.config.max_audio_seconds, reserve=lease.take)
            return len(audio) / REFERENCE_RATE, diarize(audio, known_speakers(known))
        finally:
            lease.release()

    return SpeakersOnly(asyncio.get_running_loop().run_in_executor(pool, work), release, metrics, started,
                        request_id)
