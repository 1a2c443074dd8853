"""The measures of `bench kokoro-prosody`, on made-up timings and signals."""

from __future__ import annotations

import numpy as np

from voxserve.bench.kokoro_prosody import join_quality, mid_phrase_pauses


def test_a_pause_counts_only_where_the_text_has_no_punctuation() -> None:
    text = "The quick brown, fox jumps."
    words = [("The", 0.0, 0.2), ("quick", 0.2, 0.5), ("brown", 0.9, 1.2), ("fox", 1.8, 2.0), ("jumps", 2.0, 2.4)]
    # quick -> brown: 0.4 s with nothing written between: counted; brown, -> fox: a comma.
    assert mid_phrase_pauses(text, words) == 1
    assert mid_phrase_pauses(text, [("The", 0.0, 0.2), ("quick", 0.3, 0.5)]) == 0


def test_a_join_that_cancels_sounding_speech_is_a_dip_and_one_in_a_gap_is_not() -> None:
    t = np.arange(24000) / 24000
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    hole = tone.copy()
    hole[11900:12100] *= 0.05  # a 8 ms hole at 0.5 s
    dip, click, sounding = join_quality(tone, hole, [12000])
    assert sounding == 1 and dip > 10 and click < 0
    gap = tone.copy()
    gap[11000:13000] = 0  # the reference itself is silent there: no join in sound
    dip, _, sounding = join_quality(gap, gap * 0.5, [12000])
    assert sounding == 0 and dip == 0.0
    assert join_quality(tone, tone, [12000])[:2] == (0.0, 0.0)
