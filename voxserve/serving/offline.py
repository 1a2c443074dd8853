"""The CLI's offline commands as serving use cases: one speech stream, one transcription
or the voice catalog, in this process, with no server.

`voxserve speak`, `voxserve transcribe` and `voxserve voices` (`voxserve.cli`) call these.
They open the same streams the HTTP handlers do (`open_speech`, `Transcriber.open`), with
an admission slot, pools and metrics sized for one request, and without the server's
warm-up. Flags, files and printing stay in the CLI; no HTTP here.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Self

from voxserve.config import ASRConfig, ServerConfig, TTSConfig
from voxserve.engine.admission import Admission
from voxserve.engine.asr import ASREngine
from voxserve.engine.lifecycle import WorkerEngine
from voxserve.engine.pool import BoundedPool
from voxserve.engine.transcribe import Transcript
from voxserve.engine.tts import TTSEngine
from voxserve.engine.tts_models import claiming
from voxserve.serving.catalog import ASR_MODELS, SPEECH_MODELS, speech_model, voice_list
from voxserve.serving.metrics import Metrics
from voxserve.serving.saved_voices import SavedVoices
from voxserve.serving.speech import SpeechParams, open_speech
from voxserve.serving.state import new_request_id
from voxserve.serving.transcription import Transcriber, TranscriptionParams

__all__ = ["OfflineASR", "OfflineTTS", "Spoken", "VoiceCatalog", "voice_catalog"]

_ONE_REQUEST_WAIT_S = 60.0
"""How long the one request waits for its slot; it never has to, being alone."""


@dataclass(frozen=True)
class Spoken:
    pcm: bytes
    """Mono 16-bit little-endian samples."""
    sample_rate: int


@dataclass
class _OneStream:
    """What `open_speech` uses of a server (`SpeechResources`), for one stream."""

    config: ServerConfig
    engine: TTSEngine
    admission: Admission
    metrics: Metrics
    text_pool: BoundedPool
    audio_pool: BoundedPool
    saved_voices: SavedVoices | None = None
    """None: a command speaks the built-in voices only."""


class _Running:
    """An engine run for one command: it starts on entry (no warm-up) and stops on exit."""

    engine: WorkerEngine

    def __enter__(self) -> Self:
        self.engine.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.engine.stop()


class OfflineTTS(_Running):
    """A TTS engine run for one command: `with OfflineTTS(config) as tts: tts.speak(...)`."""

    def __init__(self, config: TTSConfig, model: str = SPEECH_MODELS[0]):
        # One utterance loads only the configured family that claims its model id (the
        # others would load for nothing); an id none of them claims loads them all and
        # means the default, as a request's `model` does. No fixed-length prior copies
        # (a background build that pays off over many requests, not one;
        # the command's exit would wait for it).
        models = claiming(model, config.models)[:1] or config.models
        self.model = model
        self.engine: TTSEngine = TTSEngine(replace(config, models=models, fixed_prior=False))

    def speak(self, text: str, voice: str, speed: float = 1.0, sample_rate: int | None = None) -> Spoken:
        """The whole utterance as raw PCM, at `sample_rate` (default: the voice's own).
        Raises the `VoxError` a client would get (unknown voice, nothing to speak), and
        ValueError for a rate out of the encoder's range."""
        rate = sample_rate or speech_model(self.engine, self.model).profile.sample_rate
        params = SpeechParams(self.model, text, voice, "pcm", speed, rate)
        return Spoken(asyncio.run(self._speak(params)), rate)

    async def _speak(self, params: SpeechParams) -> bytes:
        resources = _OneStream(
            config=ServerConfig(tts=self.engine.config),
            engine=self.engine,
            admission=Admission(1, 0, _ONE_REQUEST_WAIT_S),
            metrics=Metrics(None),
            text_pool=BoundedPool(1, 1, "text"),
            audio_pool=BoundedPool(1, 1, "audio"),
        )
        try:
            stream = await open_speech(resources, params, new_request_id(), time.perf_counter())
            completed = False
            try:
                parts = [chunk.data async for chunk in stream.chunks()]
                completed = True
            finally:
                stream.close(completed)
            return b"".join(parts)
        finally:
            resources.text_pool.shutdown()
            resources.audio_pool.shutdown()


class OfflineASR(_Running):
    """An ASR engine run for one command: `with OfflineASR(config) as asr: asr.transcribe(...)`."""

    def __init__(self, config: ASRConfig):
        self.engine: ASREngine = ASREngine(config)

    def transcribe(
        self,
        data: bytes,
        task: str = "transcribe",
        language: str | None = None,
        prompt: str | None = None,
        temperature: float = 0.0,
        timings: bool = False,
    ) -> Transcript:
        """The whole transcript of the audio file `data`. Raises the `VoxError` a client
        would get (audio that cannot be decoded, a language the model lacks)."""
        params = TranscriptionParams(ASR_MODELS[0], task, "json", language, prompt, temperature, timings)
        return asyncio.run(self._transcribe(params, data))

    async def _transcribe(self, params: TranscriptionParams, data: bytes) -> Transcript:
        with self.engine.audio_pool() as pool:
            transcriber = Transcriber(self.engine, pool, Admission(1, 0, _ONE_REQUEST_WAIT_S), Metrics(None))
            stream = await transcriber.open(params, data, new_request_id(), time.perf_counter())
            try:
                return await stream.transcript()
            finally:
                stream.close(True)


@dataclass(frozen=True)
class VoiceCatalog:
    model: str
    sample_rate: int
    voices: list[dict[str, str | None]]
    """As `GET /v1/audio/voices` lists them: the model's own, then OpenAI's names."""


def voice_catalog(voice_dir: Path | None, cache_dir: Path | None) -> VoiceCatalog:
    """The voices of every loaded voice model (`voice_list`), the default first, with
    Piper's voice from `voice_dir` where one is given; no engine is started, and the
    fixed prior, which only speeds synthesis, is not built."""
    engine = TTSEngine(TTSConfig(voice_dir=voice_dir, cache_dir=cache_dir, fixed_prior=False))
    return VoiceCatalog(engine.default_model.name, engine.sample_rate, voice_list(engine))
