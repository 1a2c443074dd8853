"""`bench speech --api piper`: the adapter for Piper's own server, `python -m piper.http_server`.

Piper's Flask server (piper-tts 1.8) takes `POST /synthesize` with JSON `{"text": ...}`
(and an optional `"voice"`) and answers only when synthesis is done, with one whole WAV. So
the body is recorded as one chunk, timed when it has fully arrived: its TTFP is its full
synthesis time, and a single chunk can never underrun. The sample rate is read from the
WAV header. The server has no health endpoint (`/` renders an HTML page), so the run does
not probe liveness. Speaks HTTP only; the timing and the metrics are `speech.py`'s.
"""

from __future__ import annotations

import io
import json
import time
import wave
from dataclasses import dataclass
from typing import Any

import aiohttp

from voxserve.bench.speech import SpeechRecord

__all__ = ["PiperTarget", "wav_pcm_size"]


def wav_pcm_size(body: bytes) -> tuple[int, int]:
    """(sample rate, bytes of PCM) of a whole 16-bit mono WAV file.

    Raises ValueError for anything else, since the metrics count s16 mono samples.
    """
    try:
        with wave.open(io.BytesIO(body), "rb") as wav:
            rate, width, channels = wav.getframerate(), wav.getsampwidth(), wav.getnchannels()
            pcm = wav.readframes(wav.getnframes())
    except (wave.Error, EOFError) as exc:
        reason = str(exc) or "it ends too soon"
        raise ValueError(f"the response is not a WAV file ({reason}): {body[:60]!r}") from None
    if width != 2 or channels != 1:
        raise ValueError(f"expected a 16-bit mono WAV, got {8 * width}-bit samples "
                         f"in {channels} channels")
    return rate, len(pcm)


@dataclass(frozen=True)
class PiperTarget:
    """Where and how to ask Piper's server for speech."""

    base_url: str
    voice: str | None = None
    """Sent as `voice` when set. None speaks the voice the server was started with; Piper
    itself falls back to that voice, with a logged warning, for a name it cannot find."""
    timeout_s: float = 600.0

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/synthesize"

    @property
    def health_path(self) -> str | None:
        return None

    def body(self, text: str) -> bytes:
        payload: dict[str, Any] = {"text": text}
        if self.voice is not None:
            payload["voice"] = self.voice
        return json.dumps(payload).encode()

    async def receive(self, resp: aiohttp.ClientResponse, sent: float,
                      record: SpeechRecord) -> None:
        """One whole WAV: one chunk, timed when the last byte is in."""
        body = await resp.read()
        arrived = time.perf_counter() - sent
        record.sample_rate, size = wav_pcm_size(body)
        if size:
            record.chunk_times_s.append(arrived)
            record.chunk_bytes.append(size)
