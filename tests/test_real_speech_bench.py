"""The real-speech bench's pure parts: text normalisation, error counting, noise at an SNR."""

from __future__ import annotations

import numpy as np
import pytest

from voxserve.bench.real_speech_mix import (
    active_level,
    babble,
    errors,
    mix_at_snr,
    normalize,
    number_words,
    pink_noise,
    snr_db,
    telephone_line,
)

RATE = 16000


def _speech_like(seconds: float, rng: np.random.Generator) -> np.ndarray:
    """Bursts of tone with pauses between them: half the clip is silent."""
    t = np.arange(int(seconds * RATE)) / RATE
    gate = (np.floor(t * 2) % 2 == 0).astype(np.float64)
    tone: np.ndarray = 0.3 * gate * np.sin(2 * np.pi * 220 * t)
    return (tone + 1e-4 * rng.standard_normal(len(t))).astype(np.float32)


def test_normalize_english() -> None:
    assert normalize("Go forward 10 meters.", "en") == "go forward ten meters"
    assert normalize("And Mr. Dashwood, uh, said 1,961 [noise] things!", "en") == \
        "and mister dashwood said one thousand nine hundred sixty one things"
    assert normalize("We're just y'know, self-substantial", "en") == \
        "were just you know self substantial"
    assert normalize("Alright", "en") == "all right"


def test_normalize_other_languages() -> None:
    assert normalize("Testar en, 2, tre!", "sv") == "testar en två tre"
    assert normalize("Il y a 3 chats.", "fr") == "il y a trois chats"
    assert normalize("今日は、いい天気ですね。", "ja") == "今日はいい天気ですね"
    assert number_words(21, "es") is None
    assert number_words(42, "en") == "forty two"


def test_errors_count_words_and_characters() -> None:
    assert errors("go forward ten meters", "Go forward 10 meters.", "en").edits == 0
    counted = errors("the cat sat", "the hat sat down", "en")
    assert (counted.edits, counted.units) == (2, 3)
    assert errors("a b c", "", "en").rate == 1.0
    chars = errors("今日はいい天気", "今日は天気", "ja")
    assert (chars.edits, chars.units) == (2, 7)


def test_pink_noise_is_seeded_and_falls_with_frequency() -> None:
    a = pink_noise(RATE * 4, np.random.default_rng(3))
    b = pink_noise(RATE * 4, np.random.default_rng(3))
    assert np.array_equal(a, b)
    assert float(np.sqrt(np.mean(a.astype(np.float64) ** 2))) == pytest.approx(1.0, rel=1e-3)
    power = np.abs(np.fft.rfft(a)) ** 2
    freqs = np.fft.rfftfreq(len(a), 1 / RATE)
    low = power[(freqs > 100) & (freqs < 200)].mean()
    high = power[(freqs > 3200) & (freqs < 6400)].mean()
    # 1/f: five octaves apart, about 15 dB.
    assert 10 * np.log10(low / high) == pytest.approx(15.0, abs=2.0)


@pytest.mark.parametrize("snr", [5.0, 10.0, 20.0])
def test_mix_hits_the_snr_on_active_speech(snr: float) -> None:
    rng = np.random.default_rng(0)
    speech = _speech_like(4.0, rng)
    noise = pink_noise(len(speech), rng)
    mixed = mix_at_snr(speech, noise, snr, RATE)
    added = mixed.astype(np.float64) - speech
    assert snr_db(speech, added, RATE) == pytest.approx(snr, abs=0.01)
    # The pauses do not count: the level is the bursts' RMS, not the whole clip's.
    assert active_level(speech, RATE) == pytest.approx(0.3 / np.sqrt(2), rel=0.02)


def test_mix_scales_down_together_when_it_would_clip() -> None:
    rng = np.random.default_rng(1)
    speech = _speech_like(2.0, rng) * 3.0
    mixed = mix_at_snr(speech, pink_noise(len(speech), rng), 0.0, RATE)
    assert float(np.max(np.abs(mixed))) == pytest.approx(0.99, abs=1e-6)


def test_babble_sums_talkers_at_equal_level() -> None:
    rng = np.random.default_rng(2)
    talkers = [_speech_like(1.0 + i * 0.3, rng) * (i + 1) for i in range(6)]
    out = babble(talkers, RATE * 3, RATE, np.random.default_rng(5))
    again = babble(talkers, RATE * 3, RATE, np.random.default_rng(5))
    assert len(out) == RATE * 3 and np.array_equal(out, again)
    assert float(np.sqrt(np.mean(out.astype(np.float64) ** 2))) == pytest.approx(1.0, rel=1e-3)


def test_telephone_line_keeps_the_band_and_drops_the_rest() -> None:
    t = np.arange(RATE) / RATE
    inside = 0.3 * np.sin(2 * np.pi * 1000 * t).astype(np.float32)
    outside = 0.3 * np.sin(2 * np.pi * 6000 * t).astype(np.float32)
    assert len(telephone_line(inside, RATE)) == RATE
    kept = active_level(telephone_line(inside, RATE), RATE)
    removed = active_level(telephone_line(outside, RATE), RATE)
    assert kept == pytest.approx(active_level(inside, RATE), rel=0.1)
    assert removed < 0.01 * kept
