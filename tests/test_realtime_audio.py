"""Tests for the live-transcription audio path: the Realtime API's input formats
(voxserve.audio.pcm) and Silero VAD (voxserve.runners.vad, voxserve.engine.vad), on real
speech from the bundled Piper voice."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

from voxserve.audio.pcm import FORMATS, LEGACY_FORMATS, InputDecoder, alaw_table, ulaw_table


def random_cuts(length: int, pieces: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """`pieces` spans that tile [0, length), cut at random places."""
    cuts = np.sort(rng.choice(np.arange(1, length), size=pieces - 1, replace=False))
    edges = [0, *cuts.tolist(), length]
    return list(itertools.pairwise(edges))


def peak_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(len(samples))))
    return float(np.fft.rfftfreq(len(samples), 1 / rate)[np.argmax(spectrum)])


# -- input formats -------------------------------------------------------------------------


def test_g711_tables_hold_the_standard_values() -> None:
    ulaw, alaw = ulaw_table(), alaw_table()
    assert (ulaw[0xFF], ulaw[0x7F], ulaw[0x00], ulaw[0x80]) == (0, 0, -32124, 32124)
    assert (alaw[0xD5], alaw[0x55], alaw[0x2A], alaw[0xAA]) == (8, -8, -32256, 32256)
    # Each table is odd-symmetric: flipping the sign bit negates the value.
    assert np.array_equal(ulaw[:128], -ulaw[128:])
    assert np.array_equal(alaw[:128], -alaw[128:])


def test_g711_tables_match_audioop() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop
    every_byte = bytes(range(256))
    assert np.array_equal(ulaw_table(), np.frombuffer(audioop.ulaw2lin(every_byte, 2), "<i2"))
    assert np.array_equal(alaw_table(), np.frombuffer(audioop.alaw2lin(every_byte, 2), "<i2"))


def test_format_names() -> None:
    assert FORMATS == {"audio/pcm": 24000, "audio/pcmu": 8000, "audio/pcma": 8000}
    assert set(LEGACY_FORMATS.values()) == set(FORMATS)
    with pytest.raises(ValueError, match="audio/pcm"):
        InputDecoder("pcm16")


@pytest.mark.parametrize(
    ("fmt", "table"), [("audio/pcmu", ulaw_table()), ("audio/pcma", alaw_table())]
)
def test_g711_bytes_decode_through_the_table(fmt: str, table: np.ndarray) -> None:
    pattern = bytes([0x00, 0x7F, 0x80, 0xFF, 0x55, 0xD5, 0x2A, 0xAA, 0x13, 0xE7])
    out = InputDecoder(fmt, rate=8000).feed(pattern)  # at its own rate: no resampler
    assert out.dtype == np.float32
    assert np.array_equal(out, table[list(pattern)].astype(np.float32) / 32768)


@pytest.mark.parametrize("fmt", ["audio/pcmu", "audio/pcma"])
def test_g711_tone_is_upsampled_to_16k(fmt: str) -> None:
    table = ulaw_table() if fmt == "audio/pcmu" else alaw_table()
    tone = 12000 * np.sin(2 * np.pi * 1000 * np.arange(8000) / 8000)
    # The nearest code of each sample: enough of an encoder for a test tone.
    codes = np.argmin(np.abs(table[None, :].astype(np.float64) - tone[:, None]), axis=1)
    decoder = InputDecoder(fmt)
    out = np.concatenate([decoder.feed(codes.astype(np.uint8).tobytes()), decoder.flush()])
    assert abs(len(out) - 16000) <= 1
    assert peak_hz(out, 16000) == pytest.approx(1000, abs=2)
    assert np.abs(out).max() == pytest.approx(12000 / 32768, rel=0.05)


def sine_pcm(seconds: float = 2.0, hz: float = 440.0) -> bytes:
    t = np.arange(int(seconds * 24000)) / 24000
    return (16000 * np.sin(2 * np.pi * hz * t)).astype("<i2").tobytes()


def test_pcm16_in_random_pieces_equals_one_piece() -> None:
    data = sine_pcm()
    whole = InputDecoder("audio/pcm")
    expected = np.concatenate([whole.feed(data), whole.flush()])
    assert abs(len(expected) - len(data) // 2 * 2 // 3) <= 1
    assert peak_hz(expected, 16000) == pytest.approx(440, abs=1)
    assert np.abs(expected).max() == pytest.approx(16000 / 32768, rel=0.01)

    rng = np.random.default_rng(7)
    decoder = InputDecoder("audio/pcm")
    spans = random_cuts(len(data), 200, rng)
    assert any((b - a) % 2 for a, b in spans)  # some pieces split a sample in two
    got = [decoder.feed(data[a:b]) for a, b in spans]
    fed = np.concatenate(got)
    # Without a flush the resampler still holds its window: at most ~37 ms here.
    assert len(expected) - 0.040 * 16000 <= len(fed) <= len(expected)
    assert np.abs(fed - expected[: len(fed)]).max() < 1e-4
    rest = decoder.flush()
    assert np.abs(np.concatenate([fed, rest]) - expected).max() < 1e-4


def test_pcm16_byte_by_byte() -> None:
    data = sine_pcm(0.1)
    decoder = InputDecoder("audio/pcm", rate=24000)  # no resampler: the samples themselves
    out = np.concatenate([decoder.feed(data[i : i + 1]) for i in range(len(data))])
    assert np.array_equal(out, np.frombuffer(data, "<i2").astype(np.float32) / 32768)


def test_flush_gives_out_what_is_held_and_decoding_goes_on() -> None:
    data = sine_pcm(1.0)
    decoder = InputDecoder("audio/pcm")
    first = np.concatenate([decoder.feed(data[:24001]), decoder.flush()])  # half a sample kept
    assert abs(len(first) - 12000 * 2 // 3) <= 1
    second = np.concatenate([decoder.feed(data[24001:]), decoder.flush()])
    assert abs(len(first) + len(second) - 16000) <= 1
    assert peak_hz(second, 16000) == pytest.approx(440, abs=2)
