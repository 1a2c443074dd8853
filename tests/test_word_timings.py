"""Word timings (issue 14): from per-phoneme durations to seconds of a stream's audio.

The pure mapping is checked on hand-made durations; the engine is checked with the real
Kokoro model over several segments (offsets added, output resampled).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from voxserve.config import TTSConfig
from voxserve.engine.tts import TTSEngine
from voxserve.engine.words import WordFrames, WordTime, word_frames, word_times

pytestmark = pytest.mark.timeout(120)

TEXT = "Hello there, my friend. This is a longer second sentence, to check the offsets."


def test_word_frames_follow_the_durations_after_the_lead() -> None:
    durations = np.array([2, 3, 1, 4, 5], dtype=np.int64)
    words = [("a", 0, 2), ("gone", 2, 2), ("b", 3, 5)]
    assert word_frames(words, durations, lead=7) == (
        WordFrames("a", 7, 12),
        WordFrames("b", 13, 22),
    )


def test_word_times_add_the_segment_offset() -> None:
    times = word_times([WordFrames("a", 10, 20)], offset_s=1.5, frame_s=0.025)
    assert times == (WordTime("a", 1.75, 2.0),)


def check_timings(words: list[WordTime], seconds: float, expected: list[str]) -> None:
    """Monotonic, inside the audio, covering it to within 0.5 s of its end."""
    assert [w.word for w in words] == expected
    for w in words:
        assert 0 <= w.start < w.end <= seconds + 1e-3
    for a, b in itertools.pairwise(words):
        assert a.end <= b.start + 1e-3
    assert words[0].start < 0.5
    assert seconds - words[-1].end < 0.5


@pytest.fixture(scope="module")
def kokoro_engine() -> Iterator[TTSEngine]:
    engine = TTSEngine(replace(TTSConfig(), models=("kokoro",), workers=1))
    engine.start()
    yield engine
    engine.stop()


def _stream(engine: TTSEngine, text: str, rate: int, speed: float = 1.0) -> tuple[list[WordTime], float]:
    voice = next(iter(engine.models.values())).resolve_voice("af_heart")
    prepared = engine.prepare(text, voice, speed)
    assert len(prepared.segments) >= 2, "the test wants several segments"
    handle = engine.submit(prepared, rate)
    words: list[WordTime] = []
    samples = 0
    try:
        while True:
            item = handle.stream.get_blocking(60)
            engine.taken(handle.id)
            words.extend(item.words)
            samples += len(item.pcm)
            if item.last:
                return words, samples / rate
    finally:
        engine.abort(handle.id)


@pytest.mark.parametrize("rate", [24000, 16000])
def test_kokoro_words_cover_a_stream_of_several_segments(kokoro_engine: TTSEngine, rate: int) -> None:
    words, seconds = _stream(kokoro_engine, TEXT, rate)
    check_timings(words, seconds, re.findall(r"\w+", TEXT))


def test_kokoro_speed_is_in_the_timings(kokoro_engine: TTSEngine) -> None:
    slow, slow_s = _stream(kokoro_engine, TEXT, 24000, speed=0.8)
    fast, fast_s = _stream(kokoro_engine, TEXT, 24000, speed=1.25)
    assert slow[-1].end > fast[-1].end * 1.3
    assert seconds_close(slow[-1].end, slow_s) and seconds_close(fast[-1].end, fast_s)


def seconds_close(end: float, seconds: float) -> bool:
    return 0 <= seconds - end < 0.5
