"""Speech clips for the live benches (`bench realtime`, `bench voice-loop`).

A live clip is 16-bit mono PCM at 24 kHz, the rate `/v1/realtime` takes, with its
reference text and the index of its last sample above -45 dBFS: where its speech ends.
Clips come from a folder made by `bench make-asr-set` (WAV), or are spoken on the spot by
the server's own TTS. Reads files and resamples; speaks HTTP only to make the default set.
"""

from __future__ import annotations

import math
import random
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import numpy as np
import soxr

from voxserve.audio.encode import wav_file
from voxserve.bench.asrset import make_asr_set
from voxserve.bench.levels import BenchError
from voxserve.bench.prompts import BUILTIN_PROMPTS
from voxserve.bench.speech import SpeechTarget
from voxserve.bench.transcribe import Clip, load_audio_dir, load_manifest

__all__ = [
    "LIVE_PROMPT_MAX_CHARS",
    "LIVE_RATE",
    "SPEECH_DBFS",
    "LiveClip",
    "first_loud_sample",
    "joined_wav",
    "last_loud_sample",
    "live_prompts",
    "load_live_clips",
    "read_wav",
    "spoken_clips",
    "spread",
]

LIVE_RATE = 24000
SPEECH_DBFS = -45.0
"""A sample at or above this level is speech; the last such sample ends the utterance."""
LIVE_PROMPT_MAX_CHARS = 200
"""The built-in prompts up to this length (one clause to three sentences, 1-12 s spoken)
make the default set: the length of a turn said to a voice agent."""


@dataclass(frozen=True)
class LiveClip:
    name: str
    samples: np.ndarray
    """int16 at LIVE_RATE."""
    reference: str | None
    last_loud: int
    """Index of the last sample at or above SPEECH_DBFS."""

    @property
    def audio_s(self) -> float:
        return len(self.samples) / LIVE_RATE

    def wav(self) -> bytes:
        return wav_file(self.samples, LIVE_RATE)


def first_loud_sample(samples: np.ndarray, dbfs: float = SPEECH_DBFS) -> int | None:
    """Index of the first int16 sample whose magnitude is at least `dbfs`; None if none is."""
    threshold = 32768.0 * 10.0 ** (dbfs / 20.0)
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) >= math.ceil(threshold))
    return int(loud[0]) if loud.size else None


def last_loud_sample(samples: np.ndarray, dbfs: float = SPEECH_DBFS) -> int | None:
    """Index of the last int16 sample whose magnitude is at least `dbfs`; None if none is."""
    threshold = 32768.0 * 10.0 ** (dbfs / 20.0)
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) >= math.ceil(threshold))
    return int(loud[-1]) if loud.size else None


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    """A 16-bit PCM WAV as mono int16 samples (channels averaged) and its rate."""
    try:
        with wave.open(str(path), "rb") as w:
            if w.getsampwidth() != 2:
                raise BenchError(f"{path}: {8 * w.getsampwidth()}-bit WAV; the live benches "
                                 f"read 16-bit PCM WAV (as `bench make-asr-set` writes)")
            channels, rate = w.getnchannels(), w.getframerate()
            raw = w.readframes(w.getnframes())
    except (wave.Error, EOFError) as exc:
        raise BenchError(f"{path} is not a PCM WAV file ({exc}); the live benches read "
                         f"16-bit PCM WAV (as `bench make-asr-set` writes)") from exc
    samples = np.frombuffer(raw, dtype="<i2")
    if channels > 1:
        samples = samples[: len(samples) // channels * channels].reshape(-1, channels)
        samples = samples.astype(np.int32).mean(axis=1).astype(np.int16)
    return samples, rate


def _to_live_rate(samples: np.ndarray, rate: int) -> np.ndarray:
    if rate == LIVE_RATE:
        return samples.astype(np.int16, copy=False)
    out: np.ndarray = soxr.resample(samples.astype(np.float32) / 32768.0, rate, LIVE_RATE)
    return np.clip(np.round(out * 32768.0), -32768, 32767).astype(np.int16)


def load_live_clips(clips: list[Clip]) -> list[LiveClip]:
    """Read and resample every clip; a clip with no sample above SPEECH_DBFS is refused."""
    out = []
    for clip in clips:
        if clip.path.suffix.lower() != ".wav":
            raise BenchError(f"{clip.path}: the live benches read 16-bit PCM WAV "
                             f"(as `bench make-asr-set` writes)")
        samples, rate = read_wav(clip.path)
        samples = _to_live_rate(samples, rate)
        last = last_loud_sample(samples)
        if last is None:
            raise BenchError(f"{clip.path} holds no sample above {SPEECH_DBFS:g} dBFS: "
                             f"there is no speech to stream")
        out.append(LiveClip(clip.path.name, samples, clip.reference, last))
    if not out:
        raise BenchError("no clips to stream")
    return out


def spread(clips: list[LiveClip], count: int, seed: int) -> list[LiveClip]:
    """`count` clips spread evenly over the set sorted by length (the whole set, cycled,
    when more are asked than it holds), in a seeded random order.

    A level that speaks few clips then gets short and long ones alike, as a level that
    speaks many does, so that levels differ in load and not in what is said.
    """
    ordered = sorted(clips, key=lambda c: (c.audio_s, c.name))
    m = len(ordered)
    picked = [ordered[k * m // count] if count <= m else ordered[k % m] for k in range(count)]
    random.Random(seed).shuffle(picked)
    return picked


def live_prompts() -> list[str]:
    """The built-in prompts short enough to be one spoken turn."""
    return [p for p in BUILTIN_PROMPTS if len(p) <= LIVE_PROMPT_MAX_CHARS]


async def spoken_clips(base_url: str, api_key: str | None, audio_dir: Path | None,
                       manifest: Path | None, num_clips: int | None,
                       timeout_s: float = 600.0) -> list[LiveClip]:
    """The clips of `audio_dir` or `manifest`, or, with neither, the live prompts spoken
    by the server's TTS at 24 kHz (into a folder that is removed afterwards)."""
    if manifest is not None:
        clips = load_manifest(manifest)
    elif audio_dir is not None:
        clips = load_audio_dir(audio_dir)
    else:
        prompts = live_prompts()[:num_clips] if num_clips else live_prompts()
        target = SpeechTarget(base_url, request_sample_rate=LIVE_RATE, timeout_s=timeout_s)
        with tempfile.TemporaryDirectory(prefix="voxserve-live-") as tmp:
            try:
                await make_asr_set(target, prompts, Path(tmp), api_key=api_key)
            except (aiohttp.ClientError, TimeoutError) as exc:
                raise BenchError(f"speaking the clips with {target.url} failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
            return load_live_clips(load_manifest(Path(tmp) / "manifest.jsonl"))
    if num_clips:
        clips = clips[:num_clips]
    return load_live_clips(clips)


def joined_wav(clips: list[LiveClip], gap_s: float,
               min_s: float) -> tuple[bytes, str | None, float]:
    """The clips one after another with `gap_s` of silence between them, repeated until the
    whole is at least `min_s` long: (WAV bytes at 24 kHz, reference text or None when a
    clip has none, seconds)."""
    gap = np.zeros(round(gap_s * LIVE_RATE), dtype=np.int16)
    pieces: list[np.ndarray] = []
    texts: list[str | None] = []
    total = 0
    while not pieces or total < min_s * LIVE_RATE:
        for clip in clips:
            if pieces:
                pieces.append(gap)
                total += len(gap)
            pieces.append(clip.samples)
            total += len(clip.samples)
            texts.append(clip.reference)
    joined = np.concatenate(pieces)
    reference = None if None in texts else " ".join(t or "" for t in texts)
    return wav_file(joined, LIVE_RATE), reference, len(joined) / LIVE_RATE
