"""Turn detection on Silero probabilities (`voxserve.engine.turns`): pure, frame by frame."""

from __future__ import annotations

import numpy as np

from voxserve.engine.turns import Pause, Resume, Start, Stop, TurnDetector


def _feed(detector: TurnDetector, probs: list[float], first: int = 0) -> list[object]:
    return list(detector.feed(np.asarray(probs, dtype=np.float32), first))


def test_a_turn_starts_pauses_and_stops() -> None:
    d = TurnDetector(threshold=0.5, silence_ms=96)  # 3 frames of silence end a turn
    events = _feed(d, [0.1, 0.9, 0.9, 0.9, 0.1, 0.1, 0.1, 0.1])
    assert events == [Start(1), Pause(4), Stop(4)]
    assert not d.speaking


def test_one_loud_frame_is_not_speech() -> None:
    d = TurnDetector(threshold=0.5, silence_ms=96)
    assert _feed(d, [0.9, 0.1, 0.9, 0.2, 0.1]) == []


def test_speech_that_resumes_forgets_the_pause() -> None:
    d = TurnDetector(threshold=0.5, silence_ms=96)
    events = _feed(d, [0.9, 0.9, 0.1, 0.1, 0.9, 0.1, 0.1, 0.1])
    assert events == [Start(0), Pause(2), Resume(4), Pause(5), Stop(5)]


def test_frames_between_the_thresholds_keep_the_state() -> None:
    d = TurnDetector(threshold=0.5, silence_ms=64)
    # 0.4 is neither speech (>= 0.5) nor silence (< 0.35): it neither starts a pause nor ends one.
    events = _feed(d, [0.9, 0.9, 0.4, 0.4, 0.4, 0.2, 0.4, 0.4])
    assert events == [Start(0), Pause(5), Stop(5)]


def test_events_span_calls_and_count_frames_from_the_session_start() -> None:
    d = TurnDetector(threshold=0.5, silence_ms=96)
    assert _feed(d, [0.9], first=10) == []
    assert _feed(d, [0.9, 0.1], first=11) == [Start(10), Pause(12)]
    assert _feed(d, [0.1, 0.1], first=13) == [Stop(12)]
    d.reset()
    assert _feed(d, [0.1], first=15) == [] and not d.speaking
