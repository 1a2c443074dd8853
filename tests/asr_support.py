"""Test audio for the ASR tests, made offline by voxserve's own TTS, and WER scoring."""

from __future__ import annotations

import httpx
import numpy as np

from voxserve.audio.encode import wav_file
from voxserve.bench.asr_offline import LONG
from voxserve.bench.metrics import normalize_text as normalize
from voxserve.bench.metrics import word_errors

__all__ = ["LONG", "RATE", "SHORT", "normalize", "speak", "speak_pcm", "wav_bytes", "wer", "with_gaps"]

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
