"""Incremental encoders that turn mono int16 PCM into bytes for a streaming HTTP body.

Owns the wire formats of synthesized audio: raw PCM, streaming WAV, and MP3 / Ogg Opus /
AAC (ADTS) / FLAC through PyAV. PyAV is imported when a compressed stream is first
made, so PCM and WAV need only numpy (a GPU machine's image may lack PyAV). Each encoder is a small stateful object: ``feed()`` returns
whatever bytes are ready now and ``flush()`` ends the stream. Encoders share no mutable
state, so one encoder per stream may live on any worker thread. This module does no I/O,
knows nothing of HTTP, and never touches FFmpeg's global log settings.
"""

from __future__ import annotations

import io
import struct
import wave
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

import numpy as np
import soxr

__all__ = ["FORMATS", "StreamEncoder", "content_type", "make_encoder", "wav_file"]

FORMATS: tuple[str, ...] = ("mp3", "opus", "aac", "flac", "wav", "pcm")

_CONTENT_TYPES: dict[str, str] = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}

_MIN_RATE = 8000
_MAX_RATE = 48000

# WAV RIFF and data chunk sizes while streaming: the length is not known yet.
_UNKNOWN_SIZE = 0xFFFFFFFF

# Sample rates each codec accepts, within _MIN_RATE.._MAX_RATE.
_MPEG_RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)
_OPUS_RATES = (8000, 12000, 16000, 24000, 48000)

# One Opus packet (20 ms) per Ogg page: ~28 bytes of page header per packet (about +11 kbps
# at 32 kbps) buys the lowest latency; the default page of 1 s would hold audio back.
_OGG_PAGE_US = "20000"


@dataclass(frozen=True)
class _Codec:
    """How one compressed format is produced: PyAV muxer, codec and their settings."""

    muxer: str
    codec: str
    sample_fmt: str
    rates: tuple[int, ...] | None  # None: any rate
    bit_rate: int | None
    mux_options: tuple[tuple[str, str], ...] = ()
    block_ms: int | None = None  # None: the codec's own frame size
    max_bits_per_sample: int | None = None  # caps bit_rate at low sample rates


_CODECS: dict[str, _Codec] = {
    # No ID3v2 tag: the body is bare MPEG frames, so streams can be cut and joined.
    "mp3": _Codec("mp3", "libmp3lame", "s16p", _MPEG_RATES, 64_000, (("id3v2_version", "0"),)),
    "opus": _Codec(
        "ogg", "libopus", "s16", _OPUS_RATES, 32_000, (("page_duration", _OGG_PAGE_US),)
    ),
    # AAC-LC allows at most 6144 bits per 1024-sample frame per channel.
    "aac": _Codec("adts", "aac", "fltp", _MPEG_RATES, 64_000, max_bits_per_sample=6),
    # 40 ms blocks instead of ~100 ms halve the latency for ~0.3% more bytes. The muxer
    # would reserve 8 KiB of padding for a header rewrite it cannot do here.
    "flac": _Codec("flac", "flac", "s16", None, None, (("metadata_header_padding", "0"),), 40),
}


class StreamEncoder(Protocol):
    """Encodes one stream. ``feed`` returns the bytes ready so far; ``flush`` ends it."""

    def feed(self, pcm: np.ndarray) -> bytes: ...

    def flush(self) -> bytes: ...


def wav_file(pcm: np.ndarray, sample_rate: int, channels: int = 1) -> bytes:
    """A complete 16-bit WAV file (real sizes in its header) holding `pcm`, interleaved
    when `channels` > 1. For files on disk and test clips, not for streaming."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(np.asarray(pcm).astype("<i2").tobytes())
    return buf.getvalue()


def content_type(fmt: str) -> str:
    """Return the HTTP Content-Type for an output format."""
    try:
        return _CONTENT_TYPES[fmt]
    except KeyError:
        raise ValueError(f"unknown audio format {fmt!r}; use one of {', '.join(FORMATS)}") from None


def make_encoder(fmt: str, sample_rate: int) -> StreamEncoder:
    """Create an encoder for mono int16 PCM at ``sample_rate`` Hz (8000..48000)."""
    content_type(fmt)
    if not _MIN_RATE <= sample_rate <= _MAX_RATE:
        raise ValueError(
            f"sample rate {sample_rate} Hz is out of range; use {_MIN_RATE}..{_MAX_RATE} Hz"
        )
    if fmt == "pcm":
        return _RawEncoder(b"")
    if fmt == "wav":
        return _RawEncoder(_wav_header(sample_rate))
    return _AvEncoder(_CODECS[fmt], sample_rate)


def _wav_header(sample_rate: int) -> bytes:
    riff = struct.pack("<4sI4s", b"RIFF", _UNKNOWN_SIZE, b"WAVE")
    # PCM, mono, rate, byte rate, block align, bits per sample
    fmt = struct.pack("<4sIHHIIHH", b"fmt ", 16, 1, 1, sample_rate, 2 * sample_rate, 2, 16)
    return riff + fmt + struct.pack("<4sI", b"data", _UNKNOWN_SIZE)


def _check_pcm(pcm: np.ndarray) -> None:
    if not isinstance(pcm, np.ndarray) or pcm.dtype != np.int16 or pcm.ndim != 1:
        got = (
            f"{pcm.dtype} array of shape {pcm.shape}"
            if isinstance(pcm, np.ndarray)
            else type(pcm).__name__
        )
        raise ValueError(f"expected a 1-D int16 numpy array of mono samples, got {got}")


class _RawEncoder:
    """Little-endian s16 samples, after an optional fixed header."""

    def __init__(self, header: bytes) -> None:
        self._pending = header
        self._done = False

    def feed(self, pcm: np.ndarray) -> bytes:
        _check_pcm(pcm)
        if self._done:
            raise RuntimeError("feed() after flush()")
        out = self._pending + pcm.astype("<i2", copy=False).tobytes()
        self._pending = b""
        return out

    def flush(self) -> bytes:
        if self._done:
            raise RuntimeError("flush() called twice")
        self._done = True
        out, self._pending = self._pending, b""
        return out


class _Sink:
    """Write-only byte buffer. It has no seek/tell, so PyAV treats it as non-seekable and
    muxers skip their end-of-stream header rewrites instead of failing."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def write(self, data: bytes) -> int:
        self._buf += data
        return len(data)

    def drain(self) -> bytes:
        out = bytes(self._buf)
        self._buf.clear()
        return out


class _AvEncoder:
    """Codec + muxer through PyAV. PyAV re-chunks frames to the codec's fixed frame size
    (holding back less than one frame) and converts s16 to the codec's sample format."""

    def __init__(self, spec: _Codec, sample_rate: int) -> None:
        import av
        from av.audio.stream import AudioStream

        rate = _codec_rate(sample_rate, spec.rates)
        self._rate = rate
        self._time_base = Fraction(1, rate)
        # soxr's LQ holds ~1 ms; HQ/MQ process ~1000-sample blocks and would add up to
        # ~40 ms. 16-bit precision is plenty ahead of a lossy codec, and upsampling cannot alias.
        self._resampler = (
            None
            if rate == sample_rate
            else soxr.ResampleStream(sample_rate, rate, 1, dtype="int16", quality="LQ")
        )
        self._sink = _Sink()
        options = {"flush_packets": "1", **dict(spec.mux_options)}
        self._container = av.open(
            self._sink, mode="w", format=spec.muxer, container_options=options
        )
        codec_options = {}
        if spec.block_ms is not None:
            codec_options["frame_size"] = str(rate * spec.block_ms // 1000)
        stream = self._container.add_stream(
            spec.codec, rate=rate, layout="mono", options=codec_options
        )
        assert isinstance(stream, AudioStream)
        stream.format = spec.sample_fmt
        if spec.bit_rate is not None:
            stream.bit_rate = spec.bit_rate
            if spec.max_bits_per_sample is not None:
                stream.bit_rate = min(spec.bit_rate, rate * spec.max_bits_per_sample)
        self._stream = stream
        self._frame = av.AudioFrame.from_ndarray
        # Write the container header now, so even an empty stream is well formed.
        self._container.start_encoding()
        self._pts = 0
        self._done = False

    def feed(self, pcm: np.ndarray) -> bytes:
        _check_pcm(pcm)
        if self._done:
            raise RuntimeError("feed() after flush()")
        if self._resampler is not None:
            pcm = self._resampler.resample_chunk(pcm)
        self._encode(pcm)
        return self._sink.drain()

    def flush(self) -> bytes:
        if self._done:
            raise RuntimeError("flush() called twice")
        self._done = True
        if self._resampler is not None:
            self._encode(self._resampler.resample_chunk(np.zeros(0, np.int16), last=True))
        self._container.mux(self._stream.encode(None))
        self._container.close()
        return self._sink.drain()

    def _encode(self, pcm: np.ndarray) -> None:
        if pcm.size == 0:
            return
        frame = self._frame(
            np.ascontiguousarray(pcm).reshape(1, -1), format="s16", layout="mono"
        )
        frame.sample_rate = self._rate
        frame.time_base = self._time_base
        frame.pts = self._pts
        self._pts += pcm.size
        self._container.mux(self._stream.encode(frame))


def _codec_rate(rate: int, supported: tuple[int, ...] | None) -> int:
    """The rate to encode at: ``rate`` itself, else the nearest supported rate above it."""
    if supported is None or rate in supported:
        return rate
    return min((r for r in supported if r >= rate), default=max(supported))
