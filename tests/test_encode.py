"""Tests for voxserve.audio.encode: every format round-trips through PyAV's decoders."""

from __future__ import annotations

import gc
import io
import struct
from concurrent.futures import ThreadPoolExecutor

import av
import numpy as np
import pytest

from voxserve.audio.encode import FORMATS, content_type, make_encoder

COMPRESSED = ("mp3", "opus", "aac", "flac")
CHUNK_SIZES = (317, 4000, 1, 9000, 2048, 13, 480)

# Decoded length minus input length, in samples at the codec's rate. ADTS and a header-less
# MP3 stream cannot signal encoder priming, so decoders play it: AAC primes 1024 samples
# and pads to its 1024-sample frame; LAME primes 1105 and pads to a 576-sample frame
# (MPEG-2/2.5, rates <= 24 kHz). Ogg Opus trims both ends through pre-skip and granule
# position; the tolerance there only covers resampler rounding.
EXTRA_SAMPLES: dict[str, tuple[int, int]] = {
    "mp3": (1105, 1105 + 575),
    "aac": (1024, 1024 + 1023),
    "opus": (-2, 2),
    "flac": (0, 0),
    "wav": (0, 0),
    "pcm": (0, 0),
}
MAX_EXTRA_S = 0.120
# How far the audio decodable from feed() output alone (priming included) may fall short of
# the input: codec lookahead, one partly filled frame and, for Ogg, the page the muxer keeps
# back. Measured worst case is ~97 ms (LAME at 22050 Hz).
MAX_HELD_S = 0.150


def speech_like(rate: int, seconds: float = 2.5, seed: int = 0) -> np.ndarray:
    """Harmonics of a gliding pitch under a syllable-rate envelope, plus a little noise."""
    t = np.arange(int(rate * seconds)) / rate
    pitch = 140 + 30 * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(pitch) / rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 8))
    envelope = np.clip(np.sin(2 * np.pi * 4 * t), 0, None) ** 0.5
    noise = np.random.default_rng(seed).standard_normal(t.size)
    x = 0.25 * voice * envelope + 0.005 * noise
    return np.round(np.clip(x, -1, 1) * 32767).astype(np.int16)


def encode(fmt: str, rate: int, pcm: np.ndarray) -> tuple[bytes, bytes]:
    """Feed ``pcm`` in irregular chunks; return (bytes from feed calls, bytes from flush)."""
    encoder = make_encoder(fmt, rate)
    fed = []
    start, i = 0, 0
    while start < pcm.size:
        size = CHUNK_SIZES[i % len(CHUNK_SIZES)]
        fed.append(encoder.feed(pcm[start : start + size]))
        start += size
        i += 1
    return b"".join(fed), encoder.flush()


def decode(data: bytes, fmt: str, rate: int) -> tuple[np.ndarray, int]:
    """Decode with PyAV; return (mono samples, sample rate)."""
    if fmt == "pcm":
        options = {"sample_rate": str(rate), "ch_layout": "mono"}
        container = av.open(io.BytesIO(data), "r", format="s16le", options=options)
    else:
        container = av.open(io.BytesIO(data), "r")
    with container:
        frames = list(container.decode(audio=0))
    assert frames, f"no audio decoded from {len(data)} bytes of {fmt}"
    assert all(f.layout.nb_channels == 1 for f in frames)
    samples = np.concatenate([f.to_ndarray().reshape(-1) for f in frames])
    return samples, frames[0].sample_rate


def duration_cases() -> list[tuple[str, int]]:
    cases = [(fmt, rate) for fmt in FORMATS for rate in (24000, 22050)]
    # AAC is left out at 16 kHz: its priming plus padding can reach 128 ms there.
    return cases + [(fmt, 16000) for fmt in ("mp3", "opus", "flac", "wav")]


@pytest.mark.parametrize(("fmt", "rate"), duration_cases())
def test_round_trip_duration(fmt: str, rate: int) -> None:
    pcm = speech_like(rate)
    fed, tail = encode(fmt, rate, pcm)
    decoded, out_rate = decode(fed + tail, fmt, rate)

    expected = pcm.size * out_rate / rate
    low, high = EXTRA_SAMPLES[fmt]
    assert low <= decoded.size - expected <= high
    assert abs(decoded.size / out_rate - pcm.size / rate) <= MAX_EXTRA_S


@pytest.mark.parametrize(
    ("fmt", "rate", "codec_rate"),
    [("mp3", 20000, 22050), ("aac", 20000, 22050), ("opus", 22050, 24000), ("opus", 44100, 48000)],
)
def test_unsupported_rates_are_resampled_up(fmt: str, rate: int, codec_rate: int) -> None:
    pcm = speech_like(rate)
    fed, tail = encode(fmt, rate, pcm)
    decoded, out_rate = decode(fed + tail, fmt, rate)

    if fmt != "opus":  # Ogg Opus always decodes at 48 kHz
        assert out_rate == codec_rate
    low, high = EXTRA_SAMPLES[fmt]
    slack = 2  # resampler rounding
    assert low - slack <= decoded.size - pcm.size * out_rate / rate <= high + slack
    assert abs(decoded.size / out_rate - pcm.size / rate) <= MAX_EXTRA_S


@pytest.mark.parametrize("fmt", ["pcm", "wav"])
@pytest.mark.parametrize("rate", [24000, 22050])
def test_uncompressed_is_exact(fmt: str, rate: int) -> None:
    pcm = speech_like(rate)
    fed, tail = encode(fmt, rate, pcm)
    decoded, out_rate = decode(fed + tail, fmt, rate)

    assert out_rate == rate
    np.testing.assert_array_equal(decoded, pcm)


@pytest.mark.parametrize("fmt", COMPRESSED)
@pytest.mark.parametrize("rate", [24000, 22050])
def test_compressed_output_arrives_before_flush(fmt: str, rate: int) -> None:
    pcm = speech_like(rate)
    fed, _ = encode(fmt, rate, pcm)
    decoded, out_rate = decode(fed, fmt, rate)

    assert decoded.size / out_rate >= pcm.size / rate - MAX_HELD_S


@pytest.mark.parametrize("fmt", COMPRESSED)
def test_encoders_on_threads_match_sequential(fmt: str) -> None:
    def round_trip(pcm: np.ndarray) -> np.ndarray:
        # Decoded, not raw, bytes: each Ogg stream gets a random serial number.
        return decode(b"".join(encode(fmt, 24000, pcm)), fmt, 24000)[0]

    pcms = [speech_like(24000, 1.0, seed=s) for s in range(4)]
    sequential = [round_trip(pcm) for pcm in pcms]
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(round_trip, pcms))
    for got, want in zip(threaded, sequential, strict=True):
        np.testing.assert_array_equal(got, want)


def test_wav_header_is_streaming() -> None:
    header = make_encoder("wav", 22050).feed(np.zeros(0, np.int16))
    assert len(header) == 44
    riff, riff_size, wave, fmt_id, fmt_size = struct.unpack("<4sI4s4sI", header[:20])
    tag, channels, rate, byte_rate, align, bits = struct.unpack("<HHIIHH", header[20:36])
    data_id, data_size = struct.unpack("<4sI", header[36:])
    assert (riff, wave, fmt_id, fmt_size, data_id) == (b"RIFF", b"WAVE", b"fmt ", 16, b"data")
    assert (riff_size, data_size) == (0xFFFFFFFF, 0xFFFFFFFF)
    assert (tag, channels, rate, byte_rate, align, bits) == (1, 1, 22050, 44100, 2, 16)


@pytest.mark.parametrize("fmt", FORMATS)
def test_flush_without_audio(fmt: str) -> None:
    out = make_encoder(fmt, 24000).flush()
    if fmt in ("pcm", "mp3", "aac"):  # headerless streams: no frames, no bytes
        assert out == b""
    elif fmt == "opus":
        # Header pages only: FFmpeg cannot open an Ogg stream with no audio page.
        assert out.startswith(b"OggS") and b"OpusHead" in out and b"OpusTags" in out
    else:
        with av.open(io.BytesIO(out), "r") as container:
            stream = container.streams.audio[0]
            assert stream.sample_rate == 24000
            assert not list(container.decode(stream))
        assert out[:4] == {"wav": b"RIFF", "flac": b"fLaC"}[fmt]


@pytest.mark.parametrize("fmt", FORMATS)
def test_unflushed_encoder_is_collected_quietly(fmt: str) -> None:
    encoder = make_encoder(fmt, 24000)
    encoder.feed(speech_like(24000, 0.3))
    del encoder
    gc.collect()


@pytest.mark.parametrize("fmt", FORMATS)
def test_use_after_flush_raises(fmt: str) -> None:
    encoder = make_encoder(fmt, 24000)
    encoder.flush()
    with pytest.raises(RuntimeError):
        encoder.feed(np.zeros(10, np.int16))
    with pytest.raises(RuntimeError):
        encoder.flush()


@pytest.mark.parametrize(
    "bad", [np.zeros(10, np.float32), np.zeros((2, 10), np.int16), np.zeros(10, np.int32)]
)
def test_feed_rejects_non_mono_int16(bad: np.ndarray) -> None:
    with pytest.raises(ValueError, match="1-D int16"):
        make_encoder("mp3", 24000).feed(bad)


def test_unknown_format_and_rate_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown audio format"):
        make_encoder("ogg", 24000)
    with pytest.raises(ValueError, match="unknown audio format"):
        content_type("vorbis")
    with pytest.raises(ValueError, match="out of range"):
        make_encoder("wav", 96000)


def test_content_types() -> None:
    assert {fmt: content_type(fmt) for fmt in FORMATS} == {
        "mp3": "audio/mpeg",
        "opus": "audio/ogg",
        "aac": "audio/aac",
        "flac": "audio/flac",
        "wav": "audio/wav",
        "pcm": "audio/pcm",
    }
