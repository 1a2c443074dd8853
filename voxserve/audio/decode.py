"""Decode an uploaded file into 16 kHz mono float32 samples.

Any container and codec that PyAV reads is accepted (wav, mp3, flac, ogg/opus, m4a, webm,
mp4...). Channels are downmixed by FFmpeg's resampler at the source rate, then soxr
resamples to the target rate. Pure: bytes in, numpy out, no globals. It never calls
`gc.collect()` (faster-whisper's `decode_audio` does, on every call).

Anything PyAV cannot read becomes `InvalidRequest("could not decode audio: ...")`, never a
server error. Audio past `max_seconds` is refused as soon as decoding passes the limit,
so a small, highly compressed upload cannot expand without bound.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable

import av
import numpy as np
import soxr

from voxserve.errors import InvalidRequest, VoxError

__all__ = ["MAX_PEAK", "MIN_SOURCE_RATE", "SAMPLE_RATE", "decode_audio"]

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
"""Whisper's input rate."""

MIN_SOURCE_RATE = 1000
"""Lowest sample rate accepted. A few bytes of WAV that claim 1 Hz would otherwise
expand to hours of audio to transcribe."""

MAX_PEAK = 1000.0
"""Largest sample magnitude accepted (full scale is 1.0). Far larger values overflow the
log-mel features, and the decoder then runs to its length limit on noise."""


def _undecodable(reason: str) -> InvalidRequest:
    return InvalidRequest(
        f"could not decode audio: {reason}; send a file in a format such as wav, mp3, flac, "
        "ogg/opus, m4a or webm",
        param="file",
        code="invalid_audio",
    )


Reserve = Callable[[int], None]
"""Called with the count of each batch of new samples before it is kept; raises to stop."""


def _no_reserve(n: int) -> None:
    pass


def decode_audio(
    data: bytes, max_seconds: float, rate: int = SAMPLE_RATE, reserve: Reserve = _no_reserve
) -> np.ndarray:
    """Samples of the first audio stream, downmixed and resampled to `rate`, as float32.

    `reserve(n)` is called before every `n` new samples are kept, so a memory budget can
    refuse the file while it decodes (its exception passes through)."""
    if not data:
        raise _undecodable("the file is empty")
    try:
        container = av.open(io.BytesIO(data), mode="r", metadata_errors="ignore")
    except Exception as exc:  # PyAV raises many types for garbage input
        raise _undecodable("the file is not a known audio or video format") from exc
    with container:
        if not container.streams.audio:
            raise _undecodable("the file has no audio stream")
        return _decode_stream(container, container.streams.audio[0], max_seconds, rate, reserve)


def _decode_stream(
    container: av.container.InputContainer,
    stream: av.audio.stream.AudioStream,
    max_seconds: float,
    rate: int,
    reserve: Reserve,
) -> np.ndarray:
    limit = int(max_seconds * rate)
    parts: list[np.ndarray] = []
    total = 0
    mixer: av.AudioResampler | None = None
    resampler: soxr.ResampleStream | None = None
    source_rate = 0
    try:
        for frame in container.decode(stream):
            if mixer is None:
                source_rate = frame.sample_rate or stream.rate or rate
                if source_rate < MIN_SOURCE_RATE:
                    raise _undecodable(f"the sample rate of {source_rate} Hz is too low for sound")
                # FFmpeg's mixer downmixes with the channel layout's proper weights.
                mixer = av.AudioResampler(format="flt", layout="mono", rate=source_rate)
                if source_rate != rate:
                    resampler = soxr.ResampleStream(source_rate, rate, 1, dtype="float32", quality="HQ")
            for mono in mixer.resample(frame):
                total += _append(parts, mono.to_ndarray().reshape(-1), resampler, False, reserve)
            if total > limit:
                raise InvalidRequest(
                    f"audio is longer than the {max_seconds:g} s limit; send a shorter file",
                    param="file",
                    code="audio_too_long",
                )
        if mixer is not None:
            for mono in mixer.resample(None):
                total += _append(parts, mono.to_ndarray().reshape(-1), resampler, False, reserve)
    except VoxError:
        raise
    except Exception as exc:
        if not total:
            raise _undecodable("the audio data is corrupt") from exc
        # Keep what decoded before a damaged tail, as players do.
        log.warning("audio decoding stopped after %.1f s: %s", total / rate, exc)
    if resampler is not None:
        total += _append(parts, np.zeros(0, dtype=np.float32), resampler, True, reserve)
    if not total:
        raise _undecodable("the file holds no audio samples")
    audio = np.concatenate(parts) if len(parts) > 1 else parts[0]
    if total > limit:
        audio = audio[:limit]
    peak = float(np.max(np.abs(audio)))
    if not np.isfinite(peak):
        raise _undecodable("the audio holds invalid samples")
    if peak > MAX_PEAK:
        raise _undecodable(f"the samples are out of range (over {MAX_PEAK:g} times full scale)")
    return np.ascontiguousarray(audio, dtype=np.float32)


def _append(
    parts: list[np.ndarray],
    samples: np.ndarray,
    resampler: soxr.ResampleStream | None,
    last: bool,
    reserve: Reserve,
) -> int:
    out = samples.astype(np.float32, copy=False)
    if resampler is not None:
        out = resampler.resample_chunk(out, last=last)
    if len(out):
        reserve(len(out))
        parts.append(out)
    return len(out)
