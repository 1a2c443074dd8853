"""The pieces of semantic_vad and of the manual-commit buffer that need no server: the
end-of-turn model's features, the VAD engine without the model, the transcript's
trailing-off rule, and the session's audio with holes cut out of it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from voxserve.audio.mel import TURN_FRAMES, TURN_SAMPLES, TurnFeatures
from voxserve.engine.live_audio import SessionAudio
from voxserve.engine.semantic import EAGERNESS_WAIT_S, ends_turn, probes, trails_off
from voxserve.engine.vad import VADEngine
from voxserve.errors import InvalidRequest, Unavailable
from voxserve.runners.turn import SmartTurn, default_model_path

pytestmark = pytest.mark.timeout(60)


def _tone(seconds: float, rate: int = 16000) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)


def test_the_features_hear_the_newest_8_s_left_padded() -> None:
    features = TurnFeatures()
    long = np.concatenate([np.random.default_rng(0).standard_normal(3 * 16000).astype(np.float32), _tone(8.0)])
    out = features(long)
    assert out.shape == (80, TURN_FRAMES) and out.dtype == np.float32
    np.testing.assert_array_equal(out, features(long[-TURN_SAMPLES:]))  # only the last 8 s count
    short = features(_tone(2.0))
    # Six seconds of zeros come first: their frames are all at the floor, 8 below the peak.
    assert np.allclose(short[:, : 550], short.min()) and short.max() - short.min() == pytest.approx(2.0, abs=1e-5)


def test_the_model_is_installed_and_answers_a_probability() -> None:
    model = SmartTurn()
    p = model.complete(_tone(2.0))
    assert 0.0 <= p <= 1.0
    assert default_model_path().name == "smart-turn-v3.2-cpu.onnx"


def test_without_the_model_semantic_vad_is_refused(tmp_path: Path) -> None:
    engine = VADEngine(turn_model=tmp_path / "missing.onnx")
    engine.start()
    try:
        assert not engine.semantic
        with pytest.raises(InvalidRequest) as info:
            engine.check_semantic()
        assert info.value.code == "unsupported_turn_detection"
        with pytest.raises(Unavailable):
            asyncio.run(engine.complete(_tone(1.0)))
    finally:
        engine.stop()


@pytest.mark.parametrize(
    ("text", "trails"),
    [
        ("I would like to book a table for four people.", False),
        ("Can you tell me the weather in Paris?", False),
        ("Stop!", False),
        ("", False),
        ("I would like to book a table for", True),
        ("Please send the report to-", True),
        ("Set a timer for...", True),
        ("We are looking for a hotel near the…", True),
        ("My order number is 456,", True),
        ("Set a timer for.", True),
        ("My order number is.", True),
        ("Could you book a table for?", True),
        ("I’m looking for the.", True),
        ("Thank you.", False),
        ("Turn the lights on.", False),
        ("Yes, I do.", False),
    ],
)
def test_a_transcript_trails_off_without_a_final_mark(text: str, trails: bool) -> None:
    assert trails_off(text) is trails


def test_function_words_count_only_in_english() -> None:
    assert trails_off("Set a timer for.", english=True)
    assert not trails_off("Set a timer for.", english=False)
    assert trails_off("Je voudrais une table pour", english=False)  # no final mark


@pytest.mark.parametrize(("eagerness", "first"), [("high", 250.0), ("medium", 700.0), ("auto", 700.0), ("low", 1000.0)])
def test_the_model_is_first_asked_at_the_eagerness_s_silence(eagerness: str, first: float) -> None:
    due = probes(eagerness)
    assert due[0] == first and list(due) == sorted(due)
    assert due[-1] < EAGERNESS_WAIT_S[eagerness] * 1000


@pytest.mark.parametrize(
    ("silence_ms", "p", "text", "ends"),
    [
        (700, 0.9, "Please send the report to my manager.", True),
        (700, 0.9, "Please send the report to my", False),  # the words go on
        (700, 0.9, None, True),  # no transcript in time: the model's word stands
        (700, 0.3, "Please send the report to my manager.", False),
        (1000, 0.3, "Please send the report to my manager.", True),  # doubtful is enough after 1 s
        (1000, 0.1, "Please send the report to my manager.", False),
        (1500, 0.0, "Please send the report to my manager.", True),  # the words alone
        (3000, 0.99, "Set a timer for.", False),  # trailing words wait for the longest silence
    ],
)
def test_the_rule_at_one_question(silence_ms: float, p: float, text: str | None, ends: bool) -> None:
    assert ends_turn(silence_ms, p, text) is ends


def test_audio_with_holes_keeps_stream_indices() -> None:
    audio = SessionAudio()
    for k in range(4):
        audio.add(np.full(100, k, dtype=np.float32))
    assert (audio.start, audio.end, len(audio)) == (0, 400, 400)
    assert audio.cut(150, 250) == 100
    assert len(audio) == 300 and audio.count(0, 400) == 300 and audio.count(100, 300) == 100
    np.testing.assert_array_equal(audio.take(140, 260), [1] * 10 + [2] * 10)
    assert audio.cut(150, 250) == 0  # nothing held there any more
    audio.cut(0, 50)
    assert audio.start == 50 and len(audio) == 250
    audio.drop_before(300)
    assert audio.start == 300 and audio.take(0, 1000).tolist() == [3.0] * 100
