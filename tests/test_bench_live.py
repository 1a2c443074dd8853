"""The live benches' own pieces, without a server: the paced microphone, the playback
model, clip loading, item-to-utterance matching and the simulated LLM's tokens."""

from __future__ import annotations

import asyncio
import math
import wave
from pathlib import Path

import numpy as np
import pytest

from voxserve.bench.levels import BenchError
from voxserve.bench.liveclips import (
    LIVE_RATE,
    LiveClip,
    joined_wav,
    last_loud_sample,
    load_live_clips,
    spread,
)
from voxserve.bench.metrics import playback_stalls
from voxserve.bench.pacer import AudioPacer
from voxserve.bench.rtclient import Utterance, nearest_span
from voxserve.bench.transcribe import Clip
from voxserve.bench.voice_loop import llm_tokens

pytestmark = pytest.mark.timeout(20)


def test_playback_stalls_wait_and_move_the_clock() -> None:
    # 100 samples at 1 kHz = 0.1 s per chunk.
    smooth = playback_stalls([0.0, 0.05, 0.1], [100, 100, 100], 1000)
    assert smooth.count == 0 and smooth.total_s == 0.0 and smooth.end_s == pytest.approx(0.3)
    # The second chunk is 0.15 s late; the third, due 0.1 s after it resumes, is on time.
    late = playback_stalls([0.0, 0.25, 0.3], [100, 100, 100], 1000)
    assert late.count == 1 and late.total_s == pytest.approx(0.15)
    assert late.end_s == pytest.approx(0.45)
    # Waits at or under the threshold are not stalls, but still move the clock.
    small = playback_stalls([0.0, 0.11, 0.2], [100, 100, 100], 1000, threshold_s=0.02)
    assert small.count == 0 and small.total_s == 0.0 and small.end_s == pytest.approx(0.31)
    empty = playback_stalls([], [], 1000)
    assert empty.count == 0 and math.isnan(empty.end_s)
    with pytest.raises(ValueError):
        playback_stalls([0.0], [1, 2], 1000)


def test_last_loud_sample_is_the_last_at_minus_45_dbfs() -> None:
    quiet = 184  # 32768 * 10 ** (-45 / 20) = 184.3
    samples = np.array([0, 2000, -185, quiet, -quiet, 3, 0], dtype=np.int16)
    assert last_loud_sample(samples) == 2
    assert last_loud_sample(np.full(10, quiet, dtype=np.int16)) is None
    assert last_loud_sample(np.array([-32768], dtype=np.int16)) == 0


def _wav(path: Path, samples: np.ndarray, rate: int) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())
    return path


def test_clips_are_resampled_to_24k_and_keep_their_end_of_speech(tmp_path: Path) -> None:
    t = np.arange(16000) / 16000
    tone = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    tone[12000:] = 0  # speech ends at 0.75 s
    path = _wav(tmp_path / "a.wav", tone, 16000)
    (clip,) = load_live_clips([Clip(path, 1.0, "a tone")])
    assert len(clip.samples) == LIVE_RATE and clip.samples.dtype == np.int16
    assert clip.last_loud / LIVE_RATE == pytest.approx(0.75, abs=0.002)
    silent = _wav(tmp_path / "s.wav", np.zeros(100, dtype=np.int16), 16000)
    with pytest.raises(BenchError, match="no sample above"):
        load_live_clips([Clip(silent, 0.01, None)])
    wav, reference, seconds = joined_wav([clip, clip], gap_s=1.0, min_s=5.0)
    # Whole rounds of the clips until 5 s: clip, gap, clip (3 s), then gap, clip, gap, clip.
    assert reference == "a tone a tone a tone a tone" and seconds == pytest.approx(7.0)
    assert wav[:4] == b"RIFF"


def test_pacer_sends_queued_audio_on_a_fixed_clock() -> None:
    async def run() -> tuple[AudioPacer, list[bytes], float, float]:
        frames: list[bytes] = []

        async def send(frame: bytes) -> None:
            frames.append(frame)
            if len(frames) == 3:
                await asyncio.sleep(0.05)  # one slow send: the frames after it catch up

        pacer = AudioPacer(send, 1000, frame_s=0.01)  # 10 samples a frame
        first = pacer.enqueue(np.arange(1, 26, dtype=np.int16))  # 25 samples: frames 0-2
        pacer.start()
        at = await pacer.sent(24)
        await asyncio.sleep(0.03)
        later = pacer.enqueue(np.full(5, 7, dtype=np.int16))
        assert first == 0 and later % 10 == 0 and later >= 30
        await pacer.sent(later + 4)
        await pacer.stop()
        return pacer, frames, at, later

    pacer, frames, at, later = asyncio.run(run())
    assert all(len(f) == 20 for f in frames)
    stream = np.frombuffer(b"".join(frames), dtype="<i2")
    assert list(stream[:25]) == list(range(1, 26)) and not stream[25:30].any()
    assert list(stream[later : later + 5]) == [7] * 5 and not stream[30:later].any()
    assert at == pacer.sent_at[2]
    assert pacer.started_at is not None
    late = pacer.lateness()
    assert len(late) == len(pacer.sent_at) and min(late) >= 0
    # Frame k is due at t0 + k * 10 ms whatever happened before it: no drift.
    assert late[3] >= 0.04 and late[-1] < 0.04
    assert pacer.sent_at[-1] - pacer.started_at == pytest.approx((len(late) - 1) * 0.01, abs=0.03)


def test_pacer_reports_a_failed_send_to_its_waiters() -> None:
    async def run() -> None:
        async def send(frame: bytes) -> None:
            raise ConnectionResetError("gone")

        pacer = AudioPacer(send, 1000, frame_s=0.01)
        pacer.start()
        with pytest.raises(ConnectionResetError):
            await pacer.sent(100)
        await pacer.stop()

    asyncio.run(run())
    with pytest.raises(ValueError, match="whole number"):
        AudioPacer(lambda b: asyncio.sleep(0), 24000, frame_s=0.00001)


def test_items_map_to_the_nearest_utterance() -> None:
    spans = [(300.0, 1100.0), (2600.0, 4000.0)]
    assert nearest_span(500.0, spans) == 0
    assert nearest_span(1500.0, spans) == 0  # 400 ms after the first, 1100 before the second
    assert nearest_span(2000.0, spans) == 1
    assert nearest_span(9000.0, spans) == 1
    assert nearest_span(0.0, []) is None


def test_an_utterance_without_events_fails_as_not_detected() -> None:
    u = Utterance(0, 0, "a.wav", "hello there", 1.0, 300.0, 900.0, end_of_speech_at_s=1.0)
    u.finish()
    assert u.failure == "not_detected" and u.word_errors == 2 and u.reference_words == 2
    v = Utterance(0, 1, "b.wav", "hello there", 1.0, 300.0, 900.0, end_of_speech_at_s=1.0)
    v.items = ["item_1", "item_2"]
    v.item_transcripts = {"item_1": "Hello", "item_2": " there."}
    v.speech_stopped_ms, v.speech_stopped_at_s, v.completed_at_s = [880], 1.6, 2.1
    v.finish()
    assert v.failure is None and v.transcript == "Hello there." and v.word_errors == 0
    assert v.completed_latency_s == pytest.approx(1.1)
    assert v.speech_stopped_latency_s == pytest.approx(0.6)
    assert v.vad_end_offset_ms == pytest.approx(-20.0)


def test_llm_tokens_are_fixed_size_pieces() -> None:
    assert llm_tokens("Hello there.", 4) == ["Hell", "o th", "ere."]
    assert "".join(llm_tokens("Turn left at the next corner.", 4)) == "Turn left at the next corner."
    assert llm_tokens("", 4) == []
    with pytest.raises(ValueError):
        llm_tokens("x", 0)


def test_spread_picks_short_and_long_clips_alike() -> None:
    clips = [LiveClip(f"{i:02d}.wav", np.zeros(24000 * (i + 1), dtype=np.int16), None, 0)
             for i in (5, 0, 9, 3, 7, 1, 8, 2, 6, 4)]  # 1 s to 10 s, out of order
    four = spread(clips, 4, seed=0)
    assert sorted(c.audio_s for c in four) == [1.0, 3.0, 6.0, 8.0]
    assert spread(clips, 4, seed=0) == four  # seeded
    assert sorted(c.audio_s for c in spread(clips, 10, seed=1)) == [float(s) for s in range(1, 11)]
    twelve = spread(clips, 12, seed=2)
    assert len(twelve) == 12 and {c.name for c in twelve} == {c.name for c in clips}
