"""Tests for the live-transcription audio path: the Realtime API's input formats
(voxserve.audio.pcm) and Silero VAD (voxserve.runners.vad, voxserve.engine.vad), on real
speech from the bundled Piper voice."""

from __future__ import annotations

import asyncio
import itertools
import warnings
from collections.abc import Iterator

import numpy as np
import pytest
import soxr

from voxserve.audio.pcm import FORMATS, LEGACY_FORMATS, InputDecoder, alaw_table, ulaw_table
from voxserve.config import TTSConfig
from voxserve.engine.vad import FRAME_SAMPLES, SAMPLE_RATE, SileroVAD, VADEngine, VADStream
from voxserve.errors import Unavailable
from voxserve.serving.offline import OfflineTTS

SENTENCE = "The museum opens early on weekends, so we should arrive before the crowds."


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


# -- VAD -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spoken() -> tuple[np.ndarray, int, int]:
    """The sentence at 16 kHz with 1 s of silence before and after, and the first and
    last sample of the speech in it."""
    with OfflineTTS(TTSConfig(models=("piper",), noise_w=0.0, noise_scale=0.0)) as tts:  # no Kokoro load
        voice = tts.speak(SENTENCE, "alloy")
    assert voice.sample_rate == 22050
    pcm = np.frombuffer(voice.pcm, "<i2").astype(np.float32) / 32768
    speech = soxr.resample(pcm, 22050, SAMPLE_RATE)
    second = np.zeros(SAMPLE_RATE, dtype=np.float32)
    audio = np.concatenate([second, speech, second]).astype(np.float32)
    audible = np.flatnonzero(np.abs(audio) > 1e-3)
    return audio, int(audible[0]), int(audible[-1])


@pytest.fixture(scope="module")
def vad() -> SileroVAD:
    return SileroVAD()


@pytest.fixture(scope="module")
def whole(spoken: tuple[np.ndarray, int, int], vad: SileroVAD) -> np.ndarray:
    """The probabilities of the audio scored in one call."""
    return vad.score(VADStream(), spoken[0])


@pytest.fixture()
def engine(vad: SileroVAD) -> Iterator[VADEngine]:
    running = VADEngine(vad)
    running.start()
    yield running
    running.stop()


def test_vad_finds_the_speech_and_the_silence(
    spoken: tuple[np.ndarray, int, int], whole: np.ndarray
) -> None:
    audio, first, last = spoken
    assert len(whole) == len(audio) // FRAME_SAMPLES
    starts = np.arange(len(whole)) * FRAME_SAMPLES
    before = whole[starts + FRAME_SAMPLES <= first]
    # One frame of hangover: the model's state decays over the frame after the speech.
    after = whole[starts >= last + FRAME_SAMPLES]
    during = whole[(starts >= first) & (starts + FRAME_SAMPLES <= last)]
    assert len(before) >= 30 and len(after) >= 28 and len(during) > 100
    assert before.max() < 0.2
    assert after.max() < 0.2
    assert (during > 0.5).mean() > 0.85


def test_vad_in_random_pieces_equals_one_piece(
    spoken: tuple[np.ndarray, int, int], vad: SileroVAD, whole: np.ndarray
) -> None:
    audio = spoken[0]
    stream = VADStream()
    parts = []
    for a, b in random_cuts(len(audio), 37, np.random.default_rng(3)):
        parts.append(vad.score(stream, audio[a:b]))
        assert stream.frames_done == b // FRAME_SAMPLES
        assert stream.samples_seen == b
    assert np.abs(np.concatenate(parts) - whole).max() < 1e-5


def test_vad_reset_starts_the_model_afresh_and_keeps_the_frame_count(
    spoken: tuple[np.ndarray, int, int], vad: SileroVAD
) -> None:
    audio = spoken[0]
    stream = VADStream()
    vad.score(stream, audio[:20000])
    stream.reset()
    assert stream.frames_done == 20000 // FRAME_SAMPLES
    after = vad.score(stream, audio[20000:40000])
    assert stream.frames_done == 40000 // FRAME_SAMPLES
    # From a fresh stream fed the same frames (the held 32 samples first), the same scores.
    held = 20000 % FRAME_SAMPLES
    fresh = vad.score(VADStream(), audio[20000 - held : 40000])
    assert np.abs(after - fresh).max() < 1e-5


def test_vad_refuses_more_than_one_channel(vad: SileroVAD) -> None:
    with pytest.raises(ValueError, match="mono"):
        vad.score(VADStream(), np.zeros((2, 1024), dtype=np.float32))


def test_vad_engine_scores_off_the_loop_the_same(
    spoken: tuple[np.ndarray, int, int], engine: VADEngine, whole: np.ndarray
) -> None:
    audio = spoken[0]

    async def run() -> list[np.ndarray]:
        stream = VADStream()
        spans = random_cuts(len(audio), 37, np.random.default_rng(5))
        return [await engine.score(stream, audio[a:b]) for a, b in spans]

    parts = asyncio.run(run())
    assert np.abs(np.concatenate(parts) - whole).max() < 1e-5
    snapshot = engine.snapshot()
    assert snapshot["frames"] >= len(whole)  # and start's warm-up frame
    assert 0 < snapshot["calls"] <= 38 and snapshot["busy_s"] > 0 and snapshot["pending"] == 0


def test_a_cancelled_waiter_leaves_the_stream_whole(
    spoken: tuple[np.ndarray, int, int], engine: VADEngine, whole: np.ndarray
) -> None:
    audio = spoken[0]
    spans = random_cuts(len(audio), 12, np.random.default_rng(11))
    cancelled = 5

    async def run() -> tuple[VADStream, list[np.ndarray]]:
        stream = VADStream()
        kept = []
        for i, (a, b) in enumerate(spans):
            if i != cancelled:
                kept.append(await engine.score(stream, audio[a:b]))
                continue
            # Another session's long call keeps the thread busy, so this call's work is
            # still queued when its waiter goes.
            other = asyncio.create_task(engine.score(VADStream(), np.tile(audio, 4)))
            waiter = asyncio.create_task(engine.score(stream, audio[a:b]))
            await asyncio.sleep(0)  # both calls are made and their work queued
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            await other
        return stream, kept

    stream, kept = asyncio.run(run())
    assert stream.frames_done == len(whole)
    a, b = spans[cancelled]
    lost = slice(a // FRAME_SAMPLES, b // FRAME_SAMPLES)
    assert lost.stop > lost.start
    expected = np.concatenate([whole[: lost.start], whole[lost.stop :]])
    assert np.abs(np.concatenate(kept) - expected).max() < 1e-5


def test_vad_engine_stops_once_and_then_refuses(vad: SileroVAD) -> None:
    engine = VADEngine(vad)

    async def one_frame() -> np.ndarray:
        return await engine.score(VADStream(), np.zeros(FRAME_SAMPLES, dtype=np.float32))

    with pytest.raises(Unavailable):
        asyncio.run(one_frame())
    engine.start()
    assert len(asyncio.run(one_frame())) == 1
    engine.stop()
    engine.stop()
    with pytest.raises(Unavailable):
        asyncio.run(one_frame())
