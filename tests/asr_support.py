"""Test audio for the ASR tests, made offline by voxserve's own TTS, and WER scoring."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import httpx
import numpy as np
from openai import AsyncOpenAI

from voxserve.audio.encode import wav_file
from voxserve.bench.asr_offline import LONG
from voxserve.bench.metrics import normalize_text as normalize
from voxserve.bench.metrics import word_errors

__all__ = [
    "LONG", "RATE", "SHORT", "normalize", "sdk_live_turn", "speak", "speak_all", "speak_pcm",
    "wav_bytes", "wer", "with_gaps",
]

SHORT = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "A rainbow is a division of white light into many beautiful colors.",
    "The museum opens early on weekends, so we should arrive before the crowds.",
]


RATE = 24000
"""Rate the test audio is made at (the server resamples it to 16 kHz)."""


def speak(client: httpx.Client, text: str, fmt: str = "wav", rate: int = RATE) -> bytes:
    r = client.post(
        "/v1/audio/speech",
        json={"model": "tts-1", "input": text, "voice": "alloy", "response_format": fmt, "sample_rate": rate},
    )
    assert r.status_code == 200, r.text
    return r.content


def speak_pcm(client: httpx.Client, text: str, rate: int = RATE) -> np.ndarray:
    return np.frombuffer(speak(client, text, "pcm", rate), dtype=np.int16)


def speak_all(base_url: str, texts: list[str], rate: int = RATE) -> list[np.ndarray]:
    """Each text spoken by the server at `base_url`, all asked for at once (16-bit PCM)."""

    async def run() -> list[bytes]:
        async with httpx.AsyncClient(base_url=base_url, timeout=120) as c:

            async def one(text: str) -> bytes:
                r = await c.post(
                    "/v1/audio/speech",
                    json={"model": "tts-1", "input": text, "voice": "alloy", "response_format": "pcm",
                          "sample_rate": rate},
                )
                assert r.status_code == 200, r.text
                return r.content

            return list(await asyncio.gather(*(one(t) for t in texts)))

    return [np.frombuffer(b, dtype=np.int16) for b in asyncio.run(run())]


def wav_bytes(samples: np.ndarray, rate: int = RATE) -> bytes:
    return wav_file(samples, rate)


def with_gaps(pieces: list[np.ndarray], gap_s: float = 1.0, rate: int = RATE) -> tuple[np.ndarray, list[float]]:
    """Concatenate with `gap_s` of silence between pieces; also return each piece's onset."""
    gap = np.zeros(int(gap_s * rate), dtype=np.int16)
    out: list[np.ndarray] = []
    onsets: list[float] = []
    at = 0
    for i, piece in enumerate(pieces):
        if i:
            out.append(gap)
            at += len(gap)
        onsets.append(at / rate)
        out.append(piece)
        at += len(piece)
    return np.concatenate(out), onsets


def wer(reference: str, hypothesis: str) -> float:
    """WER as `voxserve bench` defines it (`voxserve/bench/metrics.py`)."""
    return word_errors(reference, hypothesis).wer


def sdk_live_turn(base_url: str, speech: np.ndarray, timeout_s: float, model: str = "whisper-1") -> list[Any]:
    """`speech` (16-bit at `RATE`) after 0.3 s of silence and before 1 s of it, sent to
    `/v1/realtime` through the official SDK's realtime client, in 0.1 s appends with
    server VAD, transcribed by `model`: the events until the turn's transcript is
    complete, that one last."""

    async def run() -> list[Any]:
        client = AsyncOpenAI(
            api_key="unused", base_url=base_url + "/v1", websocket_base_url=base_url.replace("http", "ws") + "/v1"
        )
        seen: list[Any] = []
        async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
            await conn.session.update(session={
                "type": "transcription",
                "audio": {"input": {
                    "format": {"type": "audio/pcm", "rate": 24000},  # RATE; the SDK types it as a literal
                    "transcription": {"model": model, "language": "en"},
                    "turn_detection": {"type": "server_vad", "silence_duration_ms": 500},
                }},
            })
            silence = np.zeros(RATE, dtype=np.int16)
            audio = np.concatenate([silence[: RATE * 3 // 10], speech, silence])
            step = RATE // 10
            for i in range(0, len(audio), step):
                await conn.input_audio_buffer.append(audio=base64.b64encode(audio[i : i + step].tobytes()).decode())
            async with asyncio.timeout(timeout_s):
                async for event in conn:
                    seen.append(event)
                    if event.type == "conversation.item.input_audio_transcription.completed":
                        break
        await client.close()
        return seen

    return asyncio.run(run())
